"""K-major column copies for the FP8 GEMM backward: what quantizing ``x.t()`` along its last dim costs
against the old column-direction copy, and what it saves the dense ``gemm_fp8`` op's training step.

* ``quant``: ROWWISE and BLOCKWISE 1x128 column copies of bf16 activations, the old way
  (``quantize_fp8(x, axis=0)``: data in x's layout) and the new way (``quantize_fp8(x.t(), axis=-1)``:
  the same values stored transposed), GB/s counting 2 bytes read and 1 written per element (scales
  left out), and a check that the new data and scales are the old ones transposed, bit for bit.
* ``op``: ``turbo_core.ops.gemm_fp8`` forward + backward (Llama-3.1-8B layers at 8192 tokens, bf16,
  ``trans_b=True`` weights) with ``gemm_fp8`` pinned to each available GEMM backend (the quantizers
  keep their default), with the K-major copies (the op now) and without them (``quantize(...,
  k_major=False)``, the op before), in alternating rounds; the gradients of the two must agree.

    PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src:packages/turbo-hipblaslt/src \\
    TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin,turbo_hipblaslt.plugin TURBO_HIPBLASLT_JIT=1 \\
    python3 benchmarks/scripts/fp8_kmajor_h200.py --out kmajor.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

SHAPES = [(8192, 4096), (8192, 14336), (16384, 8192)]
#: Llama-3.1-8B at 8192 tokens: (layer, K in, N out).
LAYERS = [("qkv", 4096, 6144), ("o", 4096, 4096), ("gate_up", 4096, 28672), ("down", 14336, 4096)]


def _ms(fn, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def part_quant(rows: list) -> None:
    from turbo_core.ops.quantization import quantize_fp8

    g = torch.Generator(device="cuda").manual_seed(0)
    for m, k in SHAPES:
        x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
        for gran, bs in (("ROWWISE", None), ("BLOCKWISE", 128)):
            def old():
                return quantize_fp8(x, torch.float8_e4m3fn, gran, axis=0, block_size=bs)

            def new():
                return quantize_fp8(x.t(), torch.float8_e4m3fn, gran, axis=-1, block_size=bs)

            qo, so = old()
            qn, sn = new()
            same = bool(torch.equal(qn.view(torch.uint8), qo.t().contiguous().view(torch.uint8))
                        and torch.equal(sn, so.t().contiguous()) and qn.is_contiguous())
            nbytes = 3 * m * k
            rnd = []
            for _ in range(3):
                rnd.append({"old": nbytes / _ms(old) / 1e6, "new": nbytes / _ms(new) / 1e6})
            row = {"part": "quant", "shape": [m, k], "granularity": gran, "same_as_old_transposed": same,
                   "old_gbps": round(statistics.median(r["old"] for r in rnd), 1),
                   "new_gbps": round(statistics.median(r["new"] for r in rnd), 1)}
            rows.append(row)
            print(row, flush=True)


def part_op(rows: list, backends: list[str]) -> None:
    import importlib

    from turbo_core.dispatch.manager import use_backend
    from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity

    op = importlib.import_module("turbo_core.ops.gemm_fp8")  # the module (turbo_core.ops.gemm_fp8 is the op)

    real = op.quantize

    def without_k_major(*a, **kw):
        kw["k_major"] = False
        return real(*a, **kw)

    g = torch.Generator(device="cuda").manual_seed(1)
    torch.autograd.set_multithreading_enabled(False)  # the backward on this thread: the pin holds
    for name, k, n in LAYERS:
        x = torch.randn(8192, k, device="cuda", generator=g).bfloat16().requires_grad_()
        w = (torch.randn(n, k, device="cuda", generator=g) / k ** 0.5).bfloat16().requires_grad_()
        dy = torch.randn(8192, n, device="cuda", generator=g).bfloat16()
        for gran in ("ROWWISE", "BLOCKWISE"):
            cfg = Float8QuantConfig(granularity=ScalingGranularity(gran), block_size=128 if gran == "BLOCKWISE" else None)
            for backend in backends:
                def step():
                    x.grad = w.grad = None
                    with use_backend(backend, ["gemm_fp8"]):
                        op.gemm_fp8(x, w, trans_b=True, config=cfg).backward(dy)
                    return x.grad, w.grad

                row = {"part": "op", "layer": name, "m": 8192, "k": k, "n": n, "granularity": gran, "backend": backend}
                try:
                    gx, gw = (t.clone() for t in step())
                    op.quantize = without_k_major
                    try:
                        ox, ow = (t.clone() for t in step())
                    finally:
                        op.quantize = real
                    row["grads_bit_identical"] = bool(torch.equal(gx, ox) and torch.equal(gw, ow))
                    row["grad_max_rel_diff"] = float(max(((gx - ox).abs().max() / ox.abs().max()).item(),
                                                         ((gw - ow).abs().max() / ow.abs().max()).item()))
                    times = {"k_major": [], "before": []}
                    for _ in range(3):
                        times["k_major"].append(_ms(step, 10))
                        op.quantize = without_k_major
                        try:
                            times["before"].append(_ms(step, 10))
                        finally:
                            op.quantize = real
                    row["k_major_ms"] = round(statistics.median(times["k_major"]), 4)
                    row["before_ms"] = round(statistics.median(times["before"]), 4)
                    row["speedup"] = round(row["before_ms"] / row["k_major_ms"], 3)
                except Exception as exc:  # noqa: BLE001 - a backend that declines: report and go on
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                rows.append(row)
                print(row, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="quant,op")
    ap.add_argument("--backends", nargs="*", default=["HIPBLASLT", "TRITON"])
    args = ap.parse_args()
    rows: list = []
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        pass
    parts = args.parts.split(",")
    try:
        if "quant" in parts:
            part_quant(rows)
        if "op" in parts:
            part_op(rows, args.backends)
    finally:
        with open(args.out, "w") as fh:
            json.dump({"environment": env, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
