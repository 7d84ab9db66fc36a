"""TRITON FP8 GEMM on the GPU: correctness sweep, then tile-config sweep side by side with cuBLAS.

Parts (``--parts check,sweep``):

* ``check``: every granularity (TENSORWISE, ROWWISE, BLOCKWISE 1x128 x 128x128, MX emulated) x
  pairing (E4M3, E5M2, HYBRID) x layout (NT, NN, TN) at odd and model shapes, outputs poisoned with
  NaN before each call (a freed NaN block the allocator hands back), against the reference's
  dequantized math (fp32 on the GPU). Prints the kernel path (tma / pointer) per call.
* ``sweep``: at 8192^3 and Llama shapes, NT, E4M3: each TRITON config against ``torch._scaled_mm``
  (tensorwise, rowwise), ``torch.nn.functional.scaled_mm`` (BlockWise1x128 x BlockWise128x128) and
  bf16 ``torch.matmul``, same quantized inputs, inputs rotated beyond L2 (turbo_core.bench.timing).

  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \
  python3 benchmarks/scripts/gemm_fp8_triton_h200.py --out fp8_triton.json [--parts check,sweep]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

import torch
import triton

from turbo_core.bench import timing
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args, cdiv
from turbo_core.low_precision import E8M0_DTYPE
from turbo_core.low_precision import ScalingGranularity as G
from turbo_core.reference.gemm_fp8 import dequant_fp8
from turbo_core.reference.gemm_fp8 import gemm_fp8 as reference
from turbo_triton._runtime import arch_of, num_sms
from turbo_triton.gemm.configs import GemmConfig
from turbo_triton.gemm_fp8 import configs
from turbo_triton.gemm_fp8.launch import gemm_fp8, kernel_path

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
PAIRS = {"e4m3": (E4, E4), "e5m2": (E5, E5), "hybrid": (E4, E5)}
DEV = "cuda"


def operands(gran, m, n, k, ta, tb, pair, bs=128):
    da, db = PAIRS[pair]
    a = (torch.randn(*((k, m) if ta else (m, k)), device=DEV) * 2).to(da)
    b = (torch.randn(*((n, k) if tb else (k, n)), device=DEV) * 2).to(db)
    r = lambda *s: torch.rand(*s, device=DEV) + 0.5  # noqa: E731
    if gran == "TENSORWISE":
        return a, r(()).squeeze(), b, r(()).squeeze()
    if gran == "ROWWISE":
        return a, r(*((1, m) if ta else (m, 1))), b, r(*((n, 1) if tb else (1, n)))
    if gran == "BLOCKWISE":  # activations 1 x bs along K, weights bs x bs tiles of the stored matrix
        sa = r(*((cdiv(k, bs), m) if ta else (m, cdiv(k, bs))))
        sb = r(cdiv(b.shape[0], bs), cdiv(b.shape[1], bs))
        return a, sa, b, sb
    sa = torch.randint(122, 132, (m, k // 32), device=DEV, dtype=torch.uint8).view(E8M0_DTYPE)
    sb = torch.randint(122, 132, (n, k // 32), device=DEV, dtype=torch.uint8).view(E8M0_DTYPE)
    return a, sa, b, sb


def poison(shape, dtype):
    torch.empty(shape, dtype=dtype, device=DEV).fill_(float("nan"))


def check(rows):
    shapes = [(37, 45, 160), (1, 4096, 4096), (8192, 4096, 4096), (4096, 14336, 4096), (777, 1000, 1024)]
    failures = 0
    for gran in ("TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE"):
        for pair in ("e4m3", "e5m2", "hybrid"):
            if gran == "MX_BLOCKWISE" and pair == "hybrid":
                continue
            for layout in (("NT",) if gran == "MX_BLOCKWISE" else ("NT", "NN", "TN")):
                ta, tb = layout[0] == "T", layout[1] == "T"
                for m, n, k in shapes:
                    if pair != "e4m3" and m * n > 1e7:
                        continue
                    row = {"part": "check", "gran": gran, "pair": pair, "layout": layout, "m": m, "n": n, "k": k}
                    try:
                        a, sa, b, sb = operands(gran, m, n, k, ta, tb, pair)
                        bs = 128 if gran == "BLOCKWISE" else None
                        args = GemmFp8Args(a, sa, b, sb, ta, tb, torch.bfloat16, gran, bs)
                        want = reference(GemmFp8Args(a, sa, b, sb, ta, tb, torch.float32, gran, bs))
                        poison((m, n), torch.bfloat16)
                        got = gemm_fp8(args)
                        err = ((got.float() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
                        row.update(path=kernel_path(args), err=err, ok=bool(err < 1e-2))
                    except Exception as exc:
                        row.update(ok=False, error=f"{type(exc).__name__}: {str(exc)[:300]}")
                        traceback.print_exc()
                    failures += not row["ok"]
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    # trans_c and accumulate-into-out (fused wgrad) at a model shape
    for gran in ("TENSORWISE", "BLOCKWISE"):
        a, sa, b, sb = operands(gran, 4096, 2048, 1024, True, False, "e4m3")
        bs = 128 if gran == "BLOCKWISE" else None
        base = torch.randn(2048, 4096, device=DEV)
        out = base.clone()
        gemm_fp8(GemmFp8Args(a, sa, b, sb, True, False, None, gran, bs, True, out))
        da = dequant_fp8(a, sa, G(gran), -2, bs, torch.float64)
        db = dequant_fp8(b, sb, G(gran), -2, bs, torch.float64)
        want = base.double() + (da.t() @ db).t()
        err = ((out.double() - want).abs().max() / want.abs().max()).item()
        row = {"part": "check", "gran": gran, "what": "trans_c+accumulate fp32 vs float64", "err": err,
               "ok": err < 1e-5}
        failures += not row["ok"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return failures


SWEEP_SHAPES = [(8192, 8192, 8192), (8192, 4096, 14336), (8192, 28672, 4096), (8192, 4096, 4096)]
_C = GemmConfig
CONFIGS = {
    "TENSORWISE": [None,  # the library's pick (configs.pick)
                   _C(128, 256, 128, 8, 8, 3, flatten=True, subtile=True),
                   _C(128, 256, 128, 8, 8, 4, warp_specialize=True, subtile=True, imprecise_acc=128),
                   _C(256, 128, 128, 8, 8, 3, warp_specialize=True, imprecise_acc=128),
                   _C(128, 128, 128, 8, 8, 5, warp_specialize=True, imprecise_acc=128),
                   _C(128, 256, 64, 8, 8, 4, warp_specialize=True, subtile=True, imprecise_acc=64),
                   # session 11: promoted tiles where each warpgroup's accumulator is 64 x 128 (64 fp32 registers a
                   # thread), so the running sum and two partial products fit and the promotion's add can overlap
                   # the next MMA (it does in the sm90 PTX of a plain loop, Triton 3.6: wgmma.wait_group 1)
                   _C(128, 128, 128, 8, 8, 4, flatten=True, imprecise_acc=128),
                   _C(128, 128, 128, 8, 8, 4, imprecise_acc=128),
                   _C(128, 256, 128, 8, 16, 3, flatten=True, subtile=True, imprecise_acc=128),
                   _C(256, 128, 128, 8, 16, 3, warp_specialize=True, imprecise_acc=128)],
    "BLOCKWISE": [None],
    "MX_BLOCKWISE": [None],
}
CONFIGS["ROWWISE"] = CONFIGS["TENSORWISE"]


def baseline(gran):
    """The cuBLAS call for the same quantized NT operands (a [M,K], b [N,K]); scale layouts
    converted outside the timed region by ``prep``."""
    import torch.nn.functional as F

    if gran == "TENSORWISE":
        return (lambda a, sa, b, sb: (a, sa, b, sb),
                lambda a, sa, b, sb: torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16))
    if gran == "ROWWISE":
        return (lambda a, sa, b, sb: (a, sa, b, sb.t()),
                lambda a, sa, b, sb: torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16))
    if gran == "BLOCKWISE":
        return (lambda a, sa, b, sb: (a, sa.t().contiguous().t(), b, sb.t()),
                lambda a, sa, b, sb: F.scaled_mm(a, b.t(), sa, F.ScalingType.BlockWise1x128, sb,
                                                 F.ScalingType.BlockWise128x128, output_dtype=torch.bfloat16))
    return None


def _rel(got, want):
    return ((got.float() - want).abs().max() / want.abs().max()).item()


def sweep(rows, max_s, layouts, grans=("TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE")):
    t_end = time.time() + max_s
    for m, n, k in SWEEP_SHAPES:
        flops = 2 * m * n * k
        bf = [(torch.randn(m, k, device=DEV).bfloat16(), torch.randn(n, k, device=DEV).bfloat16())
              for _ in range(timing.copies_needed(2 * (m * k + n * k)))]
        t_bf16 = timing.measure(lambda x, y: torch.matmul(x, y.t()), bf).median_ms
        del bf
        print(f"{m}x{n}x{k} bf16 torch.matmul {flops / t_bf16 / 1e9:.0f} TFLOP/s", flush=True)
        rows.append({"part": "sweep", "m": m, "n": n, "k": k, "provider": "torch.matmul bf16", "ms": t_bf16})
        for gran in grans:
            sets = [operands(gran, m, n, k, False, True, "e4m3") for _ in range(timing.copies_needed(m * k + n * k))]
            bs = 128 if gran == "BLOCKWISE" else None
            want = reference(GemmFp8Args(*sets[0], False, True, torch.float32, gran, bs))
            base_ms = None
            if baseline(gran) is not None:
                try:
                    prep, fn = baseline(gran)
                    bsets = [prep(*s) for s in sets]
                    berr = _rel(fn(*bsets[0]), want)
                    base_ms = timing.measure(fn, bsets).median_ms
                    print(f"  {gran} cuBLAS {flops / base_ms / 1e9:.0f} TFLOP/s err {berr:.1e}", flush=True)
                    if gran in ("TENSORWISE", "ROWWISE"):
                        fast = lambda a, sa, b, sb: torch._scaled_mm(  # noqa: E731
                            a, b.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)
                        ferr = _rel(fast(*bsets[0]), want)
                        fast_ms = timing.measure(fast, bsets).median_ms
                        print(f"  {gran} cuBLAS use_fast_accum {flops / fast_ms / 1e9:.0f} TFLOP/s err {ferr:.1e}",
                              flush=True)
                        rows.append({"part": "sweep", "m": m, "n": n, "k": k, "gran": gran,
                                     "provider": "cublas fast_accum", "ms": fast_ms, "err": ferr})
                    rows.append({"part": "sweep", "m": m, "n": n, "k": k, "gran": gran, "provider": "cublas",
                                 "ms": base_ms, "err": berr})
                except Exception as exc:
                    print(f"  {gran} cuBLAS failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            for cfg in CONFIGS[gran]:
                if time.time() > t_end:
                    print("time budget reached", flush=True)
                    return
                try:
                    if cfg is None:
                        cfg = configs.pick(arch_of(0), m, n, k, num_sms(0), 2, bs, True, gran == "BLOCKWISE")
                    err = _rel(gemm_fp8(GemmFp8Args(*sets[0], False, True, torch.bfloat16, gran, bs), cfg), want)
                    t = timing.measure(lambda x, sx, y, sy, cfg=cfg: gemm_fp8(
                        GemmFp8Args(x, sx, y, sy, False, True, torch.bfloat16, gran, bs), cfg), sets)
                except Exception as exc:
                    print(f"  {gran} {cfg}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}", flush=True)
                    continue
                ratio = base_ms / t.median_ms if base_ms else None
                vs_bf16 = t_bf16 / t.median_ms
                rows.append({"part": "sweep", "m": m, "n": n, "k": k, "gran": gran, "provider": "turbo:TRITON",
                             "config": cfg.__dict__, "ms": t.median_ms, "p10": t.p10_ms, "p90": t.p90_ms,
                             "ratio": ratio, "vs_bf16": vs_bf16, "err": err})
                rs = f"{ratio:.3f}" if ratio else "-"
                print(f"  {gran} {(cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_warps, cfg.num_stages)} "
                      f"fl={cfg.flatten:d} ws={cfg.warp_specialize:d} st={cfg.subtile:d} ia={cfg.imprecise_acc}: "
                      f"{flops / t.median_ms / 1e9:.0f} TFLOP/s ratio {rs} x bf16 {vs_bf16:.2f} err {err:.1e}",
                      flush=True)
            del sets
            if layouts and gran == "TENSORWISE":  # the dgrad (NN) and wgrad (TN) layouts, default config
                for lay in ("NN", "TN"):
                    ta, tb = lay[0] == "T", lay[1] == "T"
                    ls = [operands(gran, m, n, k, ta, tb, "e4m3") for _ in range(timing.copies_needed(m * k + n * k))]
                    t = timing.measure(lambda x, sx, y, sy: gemm_fp8(
                        GemmFp8Args(x, sx, y, sy, ta, tb, torch.bfloat16, gran)), ls)
                    rows.append({"part": "sweep", "m": m, "n": n, "k": k, "gran": gran, "layout": lay,
                                 "provider": "turbo:TRITON", "ms": t.median_ms,
                                 "ratio": base_ms / t.median_ms if base_ms else None})
                    print(f"  {gran} {lay} default config: {flops / t.median_ms / 1e9:.0f} TFLOP/s "
                          f"(NT cuBLAS ratio {base_ms / t.median_ms if base_ms else 0:.3f})", flush=True)
                    del ls


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--parts", default="check,sweep", help="check, sweep, layouts (NN/TN in the sweep)")
    p.add_argument("--max-sweep-s", type=float, default=300)
    p.add_argument("--grans", default="TENSORWISE,ROWWISE,BLOCKWISE,MX_BLOCKWISE")
    args = p.parse_args()
    rows: list[dict] = []
    failures = 0
    parts = args.parts.split(",")
    if "check" in parts:
        failures = check(rows)
    if "sweep" in parts:
        sweep(rows, args.max_sweep_s, "layouts" in parts, tuple(args.grans.split(",")))
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "triton": triton.__version__, "argv": sys.argv}
    with open(args.out, "w") as fh:
        json.dump({"environment": env, "rows": rows, "failures": failures}, fh, indent=1)
    print(f"failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
