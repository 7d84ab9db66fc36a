"""How far an FP8 GEMM's fp32 result is from float64 math on its dequantized operands, on this GPU:
TRITON's kernels against torch._scaled_mm (cuBLASLt) on the same quantized operands, and the
conformance cases' own errors (TRITON, grouped Gluon kernels on and off).

Why: Hopper's FP8 tensor cores add the products of one MMA at reduced precision (not an fp32
sum), so an fp32 result can be ~1e-3 of its size away from exact math whatever the kernel. This
script measures that floor with cuBLASLt as the witness, so the conformance gate for fp32 results
of FP8 GEMMs can be set from data, not from the CPU interpreter's exact sums.

    python3 benchmarks/scripts/fp8_accumulation_gpu.py --out fp8_accumulation.json
Rows: ``{"what", "shape", "gran", "provider", "max_abs", "max_ref", "rel_to_max"}`` (rel_to_max =
max |result - exact| / max |exact|).
"""

from __future__ import annotations

import argparse
import json
import os

import torch

DEVICE = os.environ.get("FP8_ACC_DEVICE", "cuda")


def _stats(actual: torch.Tensor, exact: torch.Tensor) -> dict:
    a, r = actual.detach().cpu().double(), exact.detach().cpu().double()
    err = (a - r).abs().max().item()
    ref = r.abs().max().item()
    return {"max_abs": err, "max_ref": ref, "rel_to_max": err / ref if ref else float("nan")}


def dense_rows(shapes, grans) -> list[dict]:
    """NT problems, inputs ~ N(0, K^-1/2) (results of size ~1, as the conformance cases draw them)."""
    from turbo_core.dispatch import use_backend
    from turbo_core.low_precision import Float8QuantConfig
    from turbo_core.low_precision import ScalingGranularity as G
    from turbo_core.ops.gemm_fp8 import gemm_fp8
    from turbo_core.ops.quantization import quantize_fp8

    rows = []
    gen = torch.Generator().manual_seed(0)
    e4 = torch.float8_e4m3fn
    for m, n, k in shapes:
        a = (torch.randn(m, k, generator=gen) * k ** -0.25).to(DEVICE)
        b = (torch.randn(n, k, generator=gen) * k ** -0.25).to(DEVICE)
        for gran in grans:
            g = G(gran)
            qa, sa = quantize_fp8(a, e4, g, axis=-1) if g == G.ROWWISE else quantize_fp8(a, e4, g)
            qb, sb = quantize_fp8(b, e4, g, axis=-1) if g == G.ROWWISE else quantize_fp8(b, e4, g)
            exact = (qa.double() * sa.double().reshape(-1, 1 if g == G.ROWWISE else 1)) @ \
                    (qb.double() * sb.double().reshape(-1, 1 if g == G.ROWWISE else 1)).t()
            with use_backend("TRITON"):
                ours = gemm_fp8(a, b, False, True, config=Float8QuantConfig(format="E4M3", granularity=g))
            rows.append({"what": "dense", "shape": [m, n, k], "gran": gran, "provider": "triton",
                         **_stats(ours, exact)})
            sa2 = sa.reshape(-1, 1).float() if g == G.ROWWISE else sa.float().reshape(())
            sb2 = sb.reshape(1, -1).float() if g == G.ROWWISE else sb.float().reshape(())
            for fast in (False, True):
                try:
                    ref = torch._scaled_mm(qa, qb.t(), scale_a=sa2, scale_b=sb2, out_dtype=torch.float32,
                                           use_fast_accum=fast)
                except Exception as exc:  # noqa: BLE001 - a shape cuBLASLt refuses: recorded
                    rows.append({"what": "dense", "shape": [m, n, k], "gran": gran,
                                 "provider": f"_scaled_mm fast={fast}", "error": repr(exc)[:200]})
                    continue
                rows.append({"what": "dense", "shape": [m, n, k], "gran": gran,
                             "provider": f"_scaled_mm fast={fast}", **_stats(ref, exact)})
    return rows


def case_rows(ids) -> list[dict]:
    """The conformance cases named, with their exactness gate recorded instead of asserted, once with
    the grouped Gluon kernels on and once off."""
    import turbo_core.testing.cases.gemm_fp8 as cases
    from turbo_core.dispatch import use_backend

    seen: list[dict] = []

    def record(actual, reference, *, dtype=None, what="result"):
        seen.append({"check": what, **_stats(actual, reference)})

    cases.assert_close_to_reference = record
    cases.assert_snr = lambda *a, **k: None
    by_id = {c.id: c for c in cases.CASES}
    rows = []
    for gluon in ("1", "0"):
        os.environ["TURBO_TRITON_GG8_GLUON"] = gluon
        for cid in ids:
            seen.clear()
            with use_backend("TRITON"):
                by_id[cid].run(device=torch.device(DEVICE))
            for s in seen:
                rows.append({"what": "case", "shape": cid, "gran": cid.split("-")[1], "provider": f"gluon={gluon}", **s})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    rows = dense_rows([(64, 48, 96), (128, 256, 384), (256, 256, 1024), (256, 256, 4096), (1024, 1024, 8192)],
                      ["TENSORWISE", "ROWWISE"])
    rows += case_rows(["gemm_fp8-TENSORWISE-E4M3-67x45x96-NT-float32", "gemm_fp8-ROWWISE-E4M3-67x45x96-NT-float32",
                       "gemm_fp8-BLOCKWISE-E4M3-128x256x384-NT-float32",
                       "grouped_gemm_fp8-TENSORWISE-E4M3-tail7-G3-K45-N33-NT-float32",
                       "grouped_gemm_fp8-BLOCKWISE-E4M3-tail7-G4-K256-N128-NT-float32"])
    for r in rows:
        if "error" in r:
            print(f"{r['what']:6} {str(r['shape']):58} {r['gran']:10} {r['provider']:22} ERROR {r['error']}")
        else:
            print(f"{r['what']:6} {str(r['shape']):58} {r['gran']:10} {r['provider']:22} {r.get('check', ''):28} "
                  f"max_abs {r['max_abs']:.3e} max_ref {r['max_ref']:.3e} rel {r['rel_to_max']:.2e}")
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name()}
    with open(args.out, "w") as f:
        json.dump({"environment": env, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
