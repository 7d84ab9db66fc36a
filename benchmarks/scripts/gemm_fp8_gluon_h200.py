"""The Gluon FP8 GEMM (``turbo_triton.gemm_fp8.gluon_sm90``) on an H200: which kernels cuBLAS runs,
correctness through the op's launcher, then timing side by side with cuBLASLt and the Triton kernel.

Parts (``--parts names,check,time``):

* ``names``: the CUDA kernels ``torch._scaled_mm`` (tensorwise, rowwise, fast accumulation) and
  ``F.scaled_mm`` (blockwise) launch, from ``torch.profiler``: their names carry cuBLAS's tile shape.
* ``check``: TENSORWISE, ROWWISE and BLOCKWISE (1x128 x 128x128), E4M3 / E5M2 / HYBRID, bf16 / fp16 /
  fp32 output, odd and model shapes, through ``turbo_triton.gemm_fp8.launch.gemm_fp8`` (the Gluon
  kernel where it applies, the path recorded per row), outputs poisoned with NaN before each call;
  error against the reference's dequantized math (fp32 sums on the GPU) next to cuBLAS's error.
* ``time``: NT, E4M3, bf16 out, Llama-3.1 shapes at 8192 tokens: cuBLASLt (``torch._scaled_mm``,
  ``F.scaled_mm``), the Triton kernel (``TURBO_TRITON_FP8_GLUON=0``), the op's launcher (Gluon) and
  explicit Gluon variants, same quantized inputs rotated beyond L2 (``turbo_core.bench.timing``).

  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \
  python3 benchmarks/scripts/gemm_fp8_gluon_h200.py --out gluon.json [--parts names,check,time]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import torch

from turbo_core.bench import timing
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args
from turbo_core.low_precision import ScalingGranularity as G
from turbo_core.reference.gemm_fp8 import gemm_fp8 as reference
from turbo_triton._runtime import num_sms
from turbo_triton.gemm_fp8 import gluon_sm90, launch
from turbo_triton.gemm_fp8.launch import gemm_fp8, kernel_path

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
PAIRS = {"e4m3": (E4, E4), "e5m2": (E5, E5), "hybrid": (E4, E5)}
DEV = "cuda"
SHAPES = [(8192, 8192, 8192), (8192, 4096, 14336), (8192, 28672, 4096), (8192, 4096, 4096),
          (8192, 14336, 4096), (8192, 8192, 28672)]
VARIANTS = [dict(block_n=256, group_m=8), dict(block_n=128, group_m=16)]


def operands(gran, m, n, k, pair="e4m3"):
    """NT operands and scales as the ``gemm_fp8`` op takes them (ROWWISE ``[M, 1]`` / ``[N, 1]``;
    BLOCKWISE ``[M, K/128]`` activations, ``[N/128, K/128]`` weight tiles)."""
    da, db = PAIRS[pair]
    a = (torch.randn(m, k, device=DEV) * 2).to(da)
    b = (torch.randn(n, k, device=DEV) * 2).to(db)
    r = lambda *s: torch.rand(*s, device=DEV) + 0.5  # noqa: E731
    if gran == "ROWWISE":
        return a, r(m, 1), b, r(n, 1)
    if gran == "BLOCKWISE":
        return a, r(m, -(-k // 128)), b, r(-(-n // 128), -(-k // 128))
    return a, r(()).squeeze(), b, r(()).squeeze()


def op_args(gran, a, sa, b, sb, out_dtype=torch.bfloat16):
    return GemmFp8Args(a, sa, b, sb, False, True, out_dtype, G[gran], 128 if gran == "BLOCKWISE" else None)


def op_call(gran, a, sa, b, sb, out_dtype=torch.bfloat16, gluon=True):
    """The op's TRITON launcher: the Gluon kernel where it applies, else (``gluon=False``) the Triton one."""
    os.environ["TURBO_TRITON_FP8_GLUON"] = "1" if gluon else "0"
    try:
        return gemm_fp8(op_args(gran, a, sa, b, sb, out_dtype))
    finally:
        os.environ.pop("TURBO_TRITON_FP8_GLUON")


def gluon_call(gran, a, sa, b, sb, out_dtype=torch.bfloat16, **kw):
    """The Gluon kernel with explicit options (TENSORWISE / ROWWISE)."""
    c = torch.empty(a.shape[0], b.shape[0], device=DEV, dtype=out_dtype)
    gluon_sm90.gemm_fp8_nt(a, b, sa, sb, c, gran, num_sms(0), **kw)
    return c


def cublas(gran, a, sa, b, sb, out_dtype=torch.bfloat16, fast=False):
    """cuBLASLt through torch for the same operands (BLOCKWISE: ``F.scaled_mm`` with BlockWise1x128 x
    BlockWise128x128; its scale layouts made outside the timed region by :func:`cublas_prep`)."""
    if gran == "BLOCKWISE":
        import torch.nn.functional as F

        return F.scaled_mm(a, b.t(), sa, F.ScalingType.BlockWise1x128, sb, F.ScalingType.BlockWise128x128,
                           output_dtype=out_dtype)
    return torch._scaled_mm(a, b.t(), sa, sb.t() if gran == "ROWWISE" else sb, out_dtype=out_dtype,
                            use_fast_accum=fast)


def cublas_prep(gran, a, sa, b, sb):
    if gran == "BLOCKWISE":  # cuBLASLt wants the 1x128 scales K-outer and the 128x128 ones transposed
        return a, sa.t().contiguous().t(), b, sb.t()
    return a, sa, b, sb


def want(gran, a, sa, b, sb):
    return reference(op_args(gran, a, sa, b, sb, torch.float32)).double()


def rel(got, ref):
    return ((got.double() - ref).abs().max() / ref.abs().max()).item()


def names(rows):
    from torch.profiler import ProfilerActivity, profile

    for gran, fast in (("TENSORWISE", False), ("TENSORWISE", True), ("ROWWISE", False), ("BLOCKWISE", False)):
        ops = cublas_prep(gran, *operands(gran, 8192, 8192, 8192))
        fn = lambda: cublas(gran, *ops, fast=fast)  # noqa: E731
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        kernels = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
        label = gran + (" fast_accum" if fast else "")
        print(f"names {label}: {kernels}", flush=True)
        rows.append({"part": "names", "call": label, "kernels": kernels})


def check(rows):
    """Through the op's launcher (the Gluon path where it applies; the path is recorded per row)."""
    cases = [(g, m, n, k, pair, od) for g in ("TENSORWISE", "ROWWISE", "BLOCKWISE")
             for (m, n, k) in ((1, 8, 16), (97, 200, 272), (1000, 1000, 1024), (300, 5000, 4096), (4096, 4096, 8192),
                               (4000, 8200, 1040))
             for pair in ("e4m3", "hybrid", "e5m2") for od in (torch.bfloat16, torch.float32, torch.float16)
             if (pair == "e4m3" or od == torch.bfloat16)]
    fails = 0
    for gran, m, n, k, pair, od in cases:
        a, sa, b, sb = operands(gran, m, n, k, pair)
        ref = want(gran, a, sa, b, sb)
        try:
            base = rel(cublas(gran, *cublas_prep(gran, a, sa, b, sb), out_dtype=od), ref)
        except Exception:  # shapes / types cuBLAS declines
            base = float("nan")
        path = kernel_path(op_args(gran, a, sa, b, sb, od))
        torch.full((m, n), float("nan"), device=DEV, dtype=od)  # leave NaN in the allocator's free block
        got = op_call(gran, a, sa, b, sb, od)
        err = rel(got, ref)
        tol = max(1.5 * base + 1e-3 if base == base else 1e-2, 2e-3 if od == torch.float16 else 0)
        ok = bool(torch.isfinite(got).all()) and err <= tol
        fails += not ok
        rows.append({"part": "check", "gran": gran, "m": m, "n": n, "k": k, "pair": pair, "out": str(od),
                     "path": path, "err": err, "cublas_err": base, "ok": ok})
        print(f"check {gran} {m}x{n}x{k} {pair} {od} [{path}]: err {err:.2e} (cuBLAS {base:.2e}) "
              f"{'ok' if ok else 'FAIL'}", flush=True)
    print(f"check: {len(cases)} cases, {fails} failures, broken: {launch._GLUON_BROKEN}", flush=True)
    return fails + len(launch._GLUON_BROKEN)


def time_part(rows, max_s, grans):
    t_end = time.time() + max_s
    for m, n, k in SHAPES:
        flops = 2 * m * n * k
        for gran in grans:
            if time.time() > t_end:
                print("time budget reached", flush=True)
                return
            sets = [operands(gran, m, n, k) for _ in range(timing.copies_needed(m * k + n * k))]
            bsets = [cublas_prep(gran, *s) for s in sets]
            label = f"{m}x{n}x{k} {gran}"
            ref = cublas(gran, *bsets[0]).double()
            provs = {"cublas": (lambda *s: cublas(gran, *s), bsets),
                     "triton kernel": (lambda *s: op_call(gran, *s, gluon=False), sets),
                     "gluon (op path)": (lambda *s: op_call(gran, *s), sets)}
            if gran != "BLOCKWISE":
                provs["cublas fast_accum"] = (lambda *s: cublas(gran, *s, fast=True), bsets)
                for kw in VARIANTS:
                    provs[f"gluon {kw}"] = (lambda *s, kw=kw: gluon_call(gran, *s, **kw), sets)
            res = {}
            for name, (fn, ss) in provs.items():
                try:
                    diff = rel(fn(*ss[0]), ref)
                    res[name] = timing.measure(fn, ss).median_ms
                except Exception as exc:
                    print(f"  {name}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", flush=True)
                    continue
                rows.append({"part": "time", "m": m, "n": n, "k": k, "gran": gran, "provider": name,
                             "ms": res[name], "ratio": res["cublas"] / res[name], "diff_vs_cublas": diff})
            print(label + ": " + ", ".join(f"{p} {flops / t / 1e9:.0f} TFLOP/s ({res['cublas'] / t:.3f}x)"
                                           for p, t in res.items()), flush=True)
            del sets, bsets


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="names,check,time")
    ap.add_argument("--max-time-s", type=float, default=240)
    ap.add_argument("--grans", default="TENSORWISE,ROWWISE,BLOCKWISE")
    args = ap.parse_args()
    parts = args.parts.split(",")
    print(f"torch {torch.__version__}, triton {__import__('triton').__version__}, "
          f"{torch.cuda.get_device_name(0)}", flush=True)
    rows: list[dict] = []
    fails = 0
    for name, fn in (("names", lambda: names(rows)), ("check", lambda: check(rows)),
                     ("time", lambda: time_part(rows, args.max_time_s, args.grans.split(",")))):
        if name not in parts:
            continue
        try:
            fails += fn() or 0
        except Exception:
            traceback.print_exc()
            fails += 1
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1, default=str)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
