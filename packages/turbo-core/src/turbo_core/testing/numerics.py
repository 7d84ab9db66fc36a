"""Tolerances and accuracy metrics: the one place the pass/fail gates live.

Against a float64-accumulated reference: bf16/fp16 ``rtol = atol = 1e-2``, fp32 ``1e-4``.
Quantized paths are judged by SNR: FP8 E4M3 >= 25 dB, E5M2 (and HYBRID) >= 20 dB, FP4 >= 10 dB.
FP8/FP4 GEMM results computed on an accelerator: :func:`assert_close_fp8_gemm` (the tensor cores'
own summation error, ``FP8_MMA_ATOL``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["FP8_MMA_ATOL", "SNR_DB", "TOLERANCES", "Gate", "assert_close_fp8_gemm", "assert_close_normwise",
           "assert_close_to_reference", "assert_snr", "error_stats", "fp8_gemm_tolerance", "normwise_gate", "snr_db",
           "snr_gate", "tolerance", "tolerance_gate", "within_normwise", "within_tolerance"]

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (1e-2, 1e-2),
    torch.float64: (1e-10, 1e-10),
}

#: The absolute allowance, relative to the largest reference magnitude, for an FP8/FP4 GEMM's result
#: computed on an accelerator against float64 math on the same dequantized operands. Hopper's FP8
#: tensor cores add the products of one MMA at reduced precision, not as an fp32 sum: on sm90,
#: cuBLASLt (``torch._scaled_mm``, promoted sums) and TRITON's kernels land a few 1e-4 of max |result|
#: from exact math, with bit-identical errors, at K from 96 to 8192 (``tests/test_ops_gemm_fp8_gpu.py``
#: checks cuBLASLt's results against this allowance). 2^-9 (1.95e-3) leaves a margin of several times
#: above that floor and stays far below the errors of a wrong scale or block (order 1).
FP8_MMA_ATOL = 2.0 ** -9

#: Minimum signal-to-noise ratio in dB, by format.
SNR_DB: dict[str, float] = {"E4M3": 25.0, "E5M2": 20.0, "HYBRID": 20.0, "E2M1": 10.0, "FP4": 10.0}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """``(rtol, atol)`` for results of ``dtype``."""
    try:
        return TOLERANCES[dtype]
    except KeyError:
        raise ValueError(f"dtype: no tolerance defined for {dtype}") from None


def snr_db(reference: torch.Tensor, actual: torch.Tensor) -> float:
    """``10 log10(|ref|^2 / |ref - actual|^2)`` in dB, computed in float64 (inf when exact)."""
    ref = reference.detach().to(torch.float64)
    err = (ref - actual.detach().to(torch.float64)).pow(2).sum().item()
    sig = ref.pow(2).sum().item()
    if err == 0.0:
        return math.inf
    if sig == 0.0:
        return -math.inf
    return 10.0 * math.log10(sig / err)


def assert_snr(reference: torch.Tensor, actual: torch.Tensor, fmt: str, *, what: str = "result") -> float:
    """Fail unless ``snr_db(reference, actual) >= SNR_DB[fmt]``; return the SNR."""
    if actual.shape != reference.shape:
        raise AssertionError(f"{what}: shape {tuple(actual.shape)} != reference {tuple(reference.shape)}")
    got = snr_db(reference, actual)
    floor = SNR_DB[fmt]
    if not got >= floor:
        raise AssertionError(f"{what}: SNR {got:.1f} dB < {floor} dB required for {fmt}")
    return got


def assert_close_to_reference(actual: torch.Tensor, reference: torch.Tensor, *, dtype: torch.dtype | None = None,
                              what: str = "result") -> None:
    """``torch.testing.assert_close`` with the tolerance of ``dtype`` (default: actual's dtype),
    comparing in float64 against a float64 reference."""
    rtol, atol = tolerance(dtype or actual.dtype)
    torch.testing.assert_close(actual.detach().to(torch.float64), reference.detach().to(torch.float64),
                               rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def assert_close_normwise(actual: torch.Tensor, reference: torch.Tensor, *, dtype: torch.dtype | None = None,
                          what: str = "result") -> None:
    """Like :func:`assert_close_to_reference` with an absolute tolerance that follows the reference's
    largest magnitude: ``max(atol, 2 ulp) * max(1, max |ref|)`` (``ulp`` = the dtype's machine epsilon,
    2^-7 for bf16). The gate for results that are sums of products rounded to ``dtype`` on purpose,
    such as flash-attention gradients (P and dS are rounded to the input dtype before their matmuls
    in every flash-attention kernel: FA2, FA3, cuDNN), where the error of a small element follows the
    size of the large ones: two units in the last place of the largest element."""
    dtype = dtype or actual.dtype
    ref = reference.detach().to(torch.float64)
    amax = ref.abs().max().item() if ref.numel() else 0.0
    rtol, atol = normwise_tolerance(dtype, amax)
    torch.testing.assert_close(actual.detach().to(torch.float64), ref, rtol=rtol, atol=atol,
                               msg=lambda m: f"{what} (normwise gate, max|ref| = {amax:.3g}): {m}")


def fp8_gemm_tolerance(dtype: torch.dtype, amax: float, device: torch.device | str) -> tuple[float, float]:
    """``(rtol, atol)`` for an FP8/FP4 GEMM's result of ``dtype`` computed on ``device``, whose
    reference's largest magnitude is ``amax``: the dtype's tolerance on the CPU (exact fp32 sums);
    elsewhere ``atol`` raised to ``FP8_MMA_ATOL * max(1, amax)``."""
    rtol, atol = tolerance(dtype)
    if torch.device(device).type == "cpu":
        return rtol, atol
    return rtol, max(atol, FP8_MMA_ATOL * max(1.0, amax))


def assert_close_fp8_gemm(actual: torch.Tensor, reference: torch.Tensor, *, dtype: torch.dtype | None = None,
                          what: str = "result") -> None:
    """The exactness gate of an FP8/FP4 GEMM: ``actual`` (on the device that computed it) against the
    float64 math on its dequantized operands, with :func:`fp8_gemm_tolerance` for ``actual``'s device."""
    ref = reference.detach().to(torch.float64).cpu()
    amax = ref.abs().max().item() if ref.numel() else 0.0
    rtol, atol = fp8_gemm_tolerance(dtype or actual.dtype, amax, actual.device)
    torch.testing.assert_close(actual.detach().cpu().to(torch.float64), ref, rtol=rtol, atol=atol,
                               msg=lambda m: f"{what} (rtol {rtol:.3g}, atol {atol:.3g} on {actual.device.type}): {m}")


def normwise_tolerance(dtype: torch.dtype, amax: float) -> tuple[float, float]:
    """``(rtol, atol)`` of the normwise gate for results of ``dtype`` whose reference's largest
    magnitude is ``amax`` (see :func:`assert_close_normwise`)."""
    rtol, atol = tolerance(dtype)
    return rtol, max(atol, 2.0 * torch.finfo(dtype).eps) * max(1.0, amax)


# -- non-raising forms of the gates above (``turbo accuracy`` reports them row by row) ---------------------


def within_tolerance(actual: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether ``assert_close_to_reference(actual, reference, dtype=dtype)`` would pass: same shape,
    every element ``|actual - ref| <= atol + rtol * |ref|`` in float64 (NaN/inf only where ref has
    the same value)."""
    return _within(actual, reference, lambda r: tolerance(dtype))


def within_normwise(actual: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether ``assert_close_normwise(actual, reference, dtype=dtype)`` would pass."""
    return _within(actual, reference, lambda r: normwise_tolerance(dtype, r.abs().max().item() if r.numel() else 0.0))


def _within(actual: torch.Tensor, reference: torch.Tensor, tolerances) -> bool:
    """Same shape and every element ``|actual - ref| <= atol + rtol * |ref|`` in float64, ``(rtol,
    atol) = tolerances(ref)`` (NaN only where ref has NaN)."""
    if actual.shape != reference.shape:
        return False
    a, r = actual.detach().to(torch.float64), reference.detach().to(torch.float64)
    rtol, atol = tolerances(r)
    return bool(torch.isclose(a, r, rtol=rtol, atol=atol, equal_nan=True).all().item())


def error_stats(reference: torch.Tensor, actual: torch.Tensor) -> dict[str, float]:
    """``{"snr_db", "max_abs", "max_rel"}`` of ``actual`` against ``reference``, in float64:
    ``max_abs = max |ref - actual|``; ``max_rel = max_abs / max |ref|`` (relative to the largest
    reference magnitude, so near-zero elements do not dominate); NaN anywhere gives NaN errors."""
    ref = reference.detach().to(torch.float64)
    act = actual.detach().to(torch.float64).to(ref.device)
    if act.shape != ref.shape:
        raise ValueError(f"actual: shape {tuple(act.shape)} != reference {tuple(ref.shape)}")
    if ref.numel() == 0:
        return {"snr_db": math.inf, "max_abs": 0.0, "max_rel": 0.0}
    max_abs = (ref - act).abs().max().item()
    scale = ref.abs().max().item()
    if math.isnan(max_abs):
        max_rel = math.nan
    elif scale > 0:
        max_rel = max_abs / scale
    else:
        max_rel = 0.0 if max_abs == 0 else math.inf
    snr = snr_db(ref, act)
    return {"snr_db": math.nan if math.isnan(max_abs) else snr, "max_abs": max_abs, "max_rel": max_rel}


@dataclass(frozen=True)
class Gate:
    """One pass/fail criterion of the tests: ``kind`` ``"tolerance"`` (``assert_close_to_reference``
    at ``dtype``'s rtol/atol), ``"normwise"`` (``assert_close_normwise``: the absolute tolerance
    scaled by ``max |ref|``, for sums of many products) or ``"snr"`` (``assert_snr`` at the ``fmt``
    floor)."""

    kind: str
    dtype: torch.dtype | None = None
    fmt: str | None = None

    def describe(self) -> str:
        if self.kind in ("tolerance", "normwise"):
            rtol, atol = tolerance(self.dtype)
            name = str(self.dtype).removeprefix("torch.")
            if self.kind == "normwise":
                return f"rtol={rtol:g} atol={atol:g}*max(1,max|ref|) ({name}, normwise)"
            return f"rtol={rtol:g} atol={atol:g} ({name})"
        return f"SNR>={SNR_DB[self.fmt]:g}dB ({self.fmt})"

    def check(self, reference: torch.Tensor, actual: torch.Tensor) -> bool:
        if self.kind in ("tolerance", "normwise"):
            within = within_tolerance if self.kind == "tolerance" else within_normwise
            return within(actual, reference.to(actual.device) if reference.device != actual.device else reference,
                          self.dtype)
        if actual.shape != reference.shape:
            return False
        return snr_db(reference, actual.to(reference.device)) >= SNR_DB[self.fmt]


def tolerance_gate(dtype: torch.dtype) -> Gate:
    """The gate of results of ``dtype`` against a float64 reference (``TOLERANCES``)."""
    tolerance(dtype)  # unknown dtypes fail here, naming the argument
    return Gate("tolerance", dtype=dtype)


def normwise_gate(dtype: torch.dtype) -> Gate:
    """The normwise gate of results of ``dtype`` (:func:`assert_close_normwise`)."""
    tolerance(dtype)
    return Gate("normwise", dtype=dtype)


def snr_gate(fmt: str) -> Gate:
    """The SNR gate of format ``fmt`` (``SNR_DB``: E4M3, E5M2, HYBRID, E2M1, FP4)."""
    if fmt not in SNR_DB:
        raise ValueError(f"fmt: no SNR floor defined for {fmt!r}; known: {', '.join(SNR_DB)}")
    return Gate("snr", fmt=fmt)
