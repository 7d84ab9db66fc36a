"""The Gluon FP8 GEMM (``turbo_triton.gemm_fp8.gluon_sm90``) on an H200: which kernel cuBLAS runs,
correctness against float64, then timing side by side with ``torch._scaled_mm`` and the Triton kernel.

Parts (``--parts names,check,time``):

* ``names``: the CUDA kernels ``torch._scaled_mm`` launches (tensorwise, rowwise, fast accumulation),
  from ``torch.profiler`` — their names carry cuBLAS's tile shape and schedule.
* ``check``: TENSORWISE and ROWWISE, E4M3 / E5M2 / HYBRID, bf16 / fp16 / fp32 output, odd and model
  shapes, outputs poisoned with NaN before each call; error against the float64 reference
  (``turbo_core.reference.gemm_fp8``) next to ``torch._scaled_mm``'s error on the same inputs.
* ``time``: NT, E4M3, bf16 out, the sweep shapes of ``gemm_fp8_triton_h200.py``; each Gluon
  variant (``block_n``, stages, ``group_m``), the library's Triton kernel and ``torch._scaled_mm``
  (tensorwise and rowwise) on the same quantized inputs, rotated beyond L2 (``turbo_core.bench.timing``).

  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \
  python3 benchmarks/scripts/gemm_fp8_gluon_h200.py --out gluon.json [--parts names,check,time]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

import torch

from turbo_core.bench import timing
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args
from turbo_core.low_precision import ScalingGranularity as G
from turbo_core.reference.gemm_fp8 import gemm_fp8 as reference
from turbo_triton._runtime import num_sms
from turbo_triton.gemm_fp8 import gluon_sm90
from turbo_triton.gemm_fp8.launch import gemm_fp8

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
PAIRS = {"e4m3": (E4, E4), "e5m2": (E5, E5), "hybrid": (E4, E5)}
DEV = "cuda"
SHAPES = [(8192, 8192, 8192), (8192, 4096, 14336), (8192, 28672, 4096), (8192, 4096, 4096),
          (8192, 14336, 4096), (8192, 8192, 28672)]
VARIANTS = [dict(block_n=256), dict(block_n=256, group_m=16), dict(block_n=256, group_m=16, decoupled=False),
            dict(block_n=256, group_m=4), dict(block_n=128)]


def operands(rowwise, m, n, k, pair="e4m3"):
    da, db = PAIRS[pair]
    a = (torch.randn(m, k, device=DEV) * 2).to(da)
    b = (torch.randn(n, k, device=DEV) * 2).to(db)
    if rowwise:
        return a, torch.rand(m, 1, device=DEV) + 0.5, b, torch.rand(n, 1, device=DEV) + 0.5
    return a, torch.rand((), device=DEV) + 0.5, b, torch.rand((), device=DEV) + 0.5


def gluon_call(a, sa, b, sb, rowwise, out_dtype=torch.bfloat16, **kw):
    c = torch.empty(a.shape[0], b.shape[0], device=DEV, dtype=out_dtype)
    gluon_sm90.gemm_fp8_nt(a, b, sa.reshape(-1) if not rowwise else sa, sb if rowwise else sb.reshape(-1), c,
                           rowwise, num_sms(0), **kw)
    return c


def cublas(a, sa, b, sb, rowwise, out_dtype=torch.bfloat16, fast=False):
    return torch._scaled_mm(a, b.t(), sa, sb.t() if rowwise else sb, out_dtype=out_dtype, use_fast_accum=fast)


def want(a, sa, b, sb, rowwise):
    gran = G.ROWWISE if rowwise else G.TENSORWISE
    return reference(GemmFp8Args(a, sa, b, sb, False, True, torch.float32, gran, None)).double()


def rel(got, ref):
    return ((got.double() - ref).abs().max() / ref.abs().max()).item()


def names(rows):
    from torch.profiler import ProfilerActivity, profile

    a, sa, b, sb = operands(False, 8192, 8192, 8192)
    _, ra, _, rb = operands(True, 8192, 8192, 8192)
    for label, fn in (("tensorwise", lambda: cublas(a, sa, b, sb, False)),
                      ("tensorwise fast_accum", lambda: cublas(a, sa, b, sb, False, fast=True)),
                      ("rowwise", lambda: cublas(a, ra, b, rb, True))):
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        kernels = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
        print(f"names {label}: {kernels}", flush=True)
        rows.append({"part": "names", "call": label, "kernels": kernels})


def check(rows):
    cases = [(r, m, n, k, pair, od) for r in (False, True)
             for (m, n, k) in ((1, 8, 16), (97, 200, 272), (1000, 1000, 1024), (300, 5000, 4096), (4096, 4096, 8192))
             for pair in ("e4m3", "hybrid", "e5m2") for od in (torch.bfloat16, torch.float32, torch.float16)
             if (pair == "e4m3" or od == torch.bfloat16)]
    fails = 0
    for rowwise, m, n, k, pair, od in cases:
        a, sa, b, sb = operands(rowwise, m, n, k, pair)
        ref = want(a, sa, b, sb, rowwise)
        try:
            base = rel(cublas(a, sa, b, sb, rowwise, od), ref)
        except Exception as exc:  # e.g. shapes cuBLAS declines
            base = float("nan")
            print(f"  cuBLAS declined {m}x{n}x{k}: {str(exc)[:80]}", flush=True)
        for kw in ({"block_n": 256}, {"block_n": 128}, {"block_n": 256, "decoupled": False},
                   {"block_n": 256, "a_regs": True}):
            if gluon_sm90.stages_for(kw["block_n"], torch.empty((), dtype=od).element_size()) < 2:
                continue
            torch.full((m, n), float("nan"), device=DEV, dtype=od)  # leave NaN in the allocator's free block
            got = gluon_call(a, sa, b, sb, rowwise, od, **kw)
            err = rel(got, ref)
            finite = bool(torch.isfinite(got).all())
            tol = 1.5 * base + 1e-3 if base == base else 1e-2
            if od == torch.float16:
                tol = max(tol, 2e-3)
            ok = finite and err <= tol
            fails += not ok
            rows.append({"part": "check", "rowwise": rowwise, "m": m, "n": n, "k": k, "pair": pair, "out": str(od),
                         **kw, "err": err, "cublas_err": base, "ok": ok})
            print(f"check {'ROWWISE' if rowwise else 'TENSORWISE'} {m}x{n}x{k} {pair} {od} {kw}: err {err:.2e} "
                  f"(cuBLAS {base:.2e}) {'ok' if ok else 'FAIL'}", flush=True)
    print(f"check: {len(rows)} rows, {fails} failures", flush=True)
    return fails


def time_part(rows, max_s):
    t_end = time.time() + max_s
    for m, n, k in SHAPES:
        flops = 2 * m * n * k
        for rowwise in (False, True):
            gran = G.ROWWISE if rowwise else G.TENSORWISE
            sets = [operands(rowwise, m, n, k) for _ in range(timing.copies_needed(m * k + n * k))]
            label = f"{m}x{n}x{k} {gran.name}"
            ref = cublas(*sets[0], rowwise).float()
            base = timing.measure(lambda a, sa, b, sb: cublas(a, sa, b, sb, rowwise), sets).median_ms
            fast = timing.measure(lambda a, sa, b, sb: cublas(a, sa, b, sb, rowwise, fast=True), sets).median_ms
            tri = timing.measure(lambda a, sa, b, sb: gemm_fp8(GemmFp8Args(
                a, sa, b, sb, False, True, torch.bfloat16, gran, None)), sets).median_ms
            print(f"{label}: cuBLAS {flops / base / 1e9:.0f} TFLOP/s, fast_accum {flops / fast / 1e9:.0f}, "
                  f"Triton default {flops / tri / 1e9:.0f} ({base / tri:.3f}x)", flush=True)
            rows += [{"part": "time", "m": m, "n": n, "k": k, "gran": gran.name, "provider": p, "ms": t,
                      "ratio": base / t} for p, t in (("cublas", base), ("cublas fast_accum", fast),
                                                      ("triton default", tri))]
            for kw in VARIANTS:
                if time.time() > t_end:
                    print("time budget reached", flush=True)
                    return
                try:
                    diff = rel(gluon_call(*sets[0], rowwise, **kw), ref.double())
                    t = timing.measure(lambda a, sa, b, sb, kw=kw: gluon_call(a, sa, b, sb, rowwise, **kw),
                                       sets).median_ms
                except Exception as exc:
                    print(f"  gluon {kw}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", flush=True)
                    continue
                rows.append({"part": "time", "m": m, "n": n, "k": k, "gran": gran.name, "provider": "gluon",
                             **kw, "ms": t, "ratio": base / t, "diff_vs_cublas": diff})
                print(f"  gluon {kw}: {flops / t / 1e9:.0f} TFLOP/s = {base / t:.3f}x cuBLAS "
                      f"({fast / t:.3f}x fast_accum), max diff vs cuBLAS {diff:.1e}", flush=True)
            del sets


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="names,check,time")
    ap.add_argument("--max-time-s", type=float, default=240)
    args = ap.parse_args()
    parts = args.parts.split(",")
    print(f"torch {torch.__version__}, triton {__import__('triton').__version__}, "
          f"{torch.cuda.get_device_name(0)}", flush=True)
    rows: list[dict] = []
    fails = 0
    for name, fn in (("names", lambda: names(rows)), ("check", lambda: check(rows)),
                     ("time", lambda: time_part(rows, args.max_time_s))):
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
