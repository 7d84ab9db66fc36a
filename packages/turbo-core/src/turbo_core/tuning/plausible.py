"""Sanity bounds for ``turbo tune``: a measured time that implies more work per second than the
device can do is a timing fault (a clock that did not wait for the GPU, a kernel that did not run),
never a result, and the row that holds it is not stored.

Two bounds, the lower one applies:

* the datasheet dense tensor-core peak of the key's arch (:data:`PEAK_16BIT`, scaled by
  :data:`PRECISION_SCALE` for the operand dtype); unknown arches (the CPU, the Triton interpreter)
  have none;
* :data:`RELATIVE` times the best throughput that any backend reached with its own heuristics (the
  baselines) in the same run, on operands of the same dtype.

Throughput is ``flops / time``: for a GEMM of ``M x N x K``, ``2 * M * N * K`` floating-point
operations (multiply and add), in TFLOP/s (1e12 per second).
"""

from __future__ import annotations

__all__ = ["PEAK_16BIT", "PRECISION_SCALE", "RELATIVE", "fault", "peak_tflops", "tflops"]

#: Datasheet dense (no sparsity) bf16/fp16 tensor-core TFLOP/s by arch: the fastest part of each
#: arch, so an upper bound for all of them (sm90 is the H100 SXM / H200 at 989; the H100 PCIe and
#: the H20 are slower).
PEAK_16BIT: dict[str, float] = {
    "sm80": 312.0,    # A100
    "sm86": 160.0,    # A40, A10, RTX 30xx
    "sm89": 370.0,    # L40S, RTX 4090
    "sm90": 989.0,    # H100 SXM, H200
    "sm100": 2500.0,  # B200, GB200
    "sm103": 2500.0,  # B300
    "gfx942": 1307.0,  # MI300X, MI325X
    "gfx950": 2500.0,  # MI355X
}

#: Peak of an operand dtype relative to the 16-bit peak: FP8 runs at twice the rate; fp32 at most
#: at the tf32/xf32 rate (half; IEEE fp32 and tf32x3 are slower still).
PRECISION_SCALE: dict[str, float] = {"bf16": 1.0, "fp16": 1.0, "fp32": 0.5, "float8": 2.0}

#: A time implying more than this many times the run's best baseline throughput is a fault.
RELATIVE = 2.0


def tflops(flops: int, time_us: float) -> float:
    """TFLOP/s of ``flops`` operations in ``time_us`` microseconds (``inf`` for a zero time)."""
    if time_us <= 0:
        return float("inf")
    return flops / (time_us * 1e-6) / 1e12


def peak_tflops(arch: str, dtype: str) -> float | None:
    """The datasheet dense peak of ``arch`` for operands of ``dtype`` (a tuning-key dtype name:
    ``"bf16"``, ``"fp16"``, ``"fp32"``, ``"float8_e4m3fn"``...), or ``None`` when unknown."""
    base = PEAK_16BIT.get(arch)
    if base is None:
        return None
    scale = PRECISION_SCALE.get("float8" if dtype.startswith("float8") else dtype)
    return None if scale is None else base * scale


def fault(flops: int, time_us: float, *, arch: str, dtype: str, best_baseline_tflops: float | None,
          what: str) -> str | None:
    """Why ``what`` measured at ``time_us`` for ``flops`` operations cannot be right, or ``None``.

    ``best_baseline_tflops``: the best baseline throughput of the run (``None``: no relative bound).
    """
    if flops <= 0:
        return None
    achieved = tflops(flops, time_us)
    peak = peak_tflops(arch, dtype)
    if peak is not None and achieved > peak:
        return (f"{what} measured {time_us:.4g} us = {achieved:,.0f} TFLOP/s, above the {arch} {dtype} "
                f"peak of {peak:,.0f} TFLOP/s: a timing fault, not stored")
    if best_baseline_tflops and achieved > RELATIVE * best_baseline_tflops:
        return (f"{what} measured {time_us:.4g} us = {achieved:,.0f} TFLOP/s, more than {RELATIVE:g}x the "
                f"best baseline of this run ({best_baseline_tflops:,.0f} TFLOP/s): a timing fault, not stored")
    return None
