"""GPU check and first measurement of the TRITON gemm (run on the GPU machine).

1. correctness of both kernel paths (TMA, pointer) on odd and aligned shapes, every layout,
   trans_c and accumulate-into-out, fp32/fp16/bf16, against float64 math on the GPU;
2. a config sweep at 8192^3 bf16 (NT and NN) to check the sm90 table;
3. Llama-3.1 8B/70B layer GEMMs (M=8192), forward NT, dgrad NN, wgrad TN: TRITON vs
   torch.matmul (cuBLAS) side by side, medians of triton.testing.do_bench on random inputs.

Usage (repository root, no install needed):
  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \
  python3 benchmarks/scripts/gemm_h200_session1.py --out results.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import statistics
import sys

import torch
import triton
import triton.testing

from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_triton.gemm import configs
from turbo_triton.gemm.launch import gemm, kernel_path


def check(rows):
    torch.manual_seed(0)
    # every layout/trans_c/accumulate combination on one odd (pointer path) and one aligned (TMA path)
    # shape; the Linear layout (NT) on the rest
    full = [(37, 29, 45), (520, 264, 1032)]
    nt_only = [(1, 17, 33), (513, 257, 1031), (1024, 2048, 512), (8, 4096, 4096)]
    cases = [(s, c) for s in full for c in itertools.product([False, True], repeat=4)]
    cases += [(s, (False, True, False, False)) for s in nt_only]
    worst = {}
    for ((m, n, k), (ta, tb, tc, acc)), dt in itertools.product(cases, [torch.float32, torch.float16, torch.bfloat16]):
        if True:
            a = torch.randn(*((k, m) if ta else (m, k)), device="cuda").to(dt)
            b = torch.randn(*((n, k) if tb else (k, n)), device="cuda").to(dt)
            ref = (a.double().t() if ta else a.double()) @ (b.double().t() if tb else b.double())
            ref = ref.t() if tc else ref
            out = None
            if acc:
                out = torch.randn(ref.shape, device="cuda").to(dt)
                ref = ref + out.double()
            args = GemmArgs(a, b, ta, tb, None, tc, out)
            path = kernel_path(args)
            try:
                c = gemm(args)
                torch.cuda.synchronize()
            except Exception as exc:
                rows.append({"check": "FAIL", "m": m, "n": n, "k": k, "dtype": str(dt), "ta": ta, "tb": tb,
                             "tc": tc, "acc": acc, "path": path, "err": f"{type(exc).__name__}: {str(exc)[:300]}"})
                print("FAIL", rows[-1])
                continue
            err = ((c.double() - ref).abs() / (ref.abs() + 1)).max().item()
            ok = bool(torch.isfinite(c).all()) and err < (1e-4 if dt == torch.float32 else 1e-2)
            key = (str(dt), path)
            worst[key] = max(worst.get(key, 0.0), err)
            if not ok:
                rows.append({"check": "FAIL", "m": m, "n": n, "k": k, "dtype": str(dt), "ta": ta, "tb": tb,
                             "tc": tc, "acc": acc, "path": path, "err": err})
    for (dt, path), err in sorted(worst.items()):
        print(f"check {dt:15s} {path:8s} worst rel err {err:.2e}")
    return worst


def bench(fn):
    ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="all")
    return statistics.median(ms), min(ms), max(ms)


def operands(m, n, k, layout, dt=torch.bfloat16):
    ta, tb = layout[0] == "T", layout[1] == "T"
    a = torch.randn(*((k, m) if ta else (m, k)), device="cuda", dtype=dt)
    b = torch.randn(*((n, k) if tb else (k, n)), device="cuda", dtype=dt)
    return a, b, ta, tb


def torch_fn(a, b, ta, tb):
    x, y = (a.t() if ta else a), (b.t() if tb else b)
    return lambda: torch.matmul(x, y)


def sweep(results):
    cands = [
        configs.GemmConfig(128, 256, 64, 8, 8, 3), configs.GemmConfig(128, 256, 64, 8, 8, 4),
        configs.GemmConfig(256, 128, 64, 8, 8, 3), configs.GemmConfig(128, 128, 64, 8, 4, 4),
        configs.GemmConfig(128, 128, 64, 8, 8, 4), configs.GemmConfig(128, 256, 32, 8, 8, 5),
        configs.GemmConfig(128, 128, 128, 8, 8, 3), configs.GemmConfig(64, 256, 64, 8, 4, 4),
    ]
    m = n = k = 8192
    for layout in ("NT", "NN"):
        a, b, ta, tb = operands(m, n, k, layout)
        flops = 2 * m * n * k
        med, lo, hi = bench(torch_fn(a, b, ta, tb))
        results.append({"suite": "sweep", "provider": "torch", "layout": layout, "m": m, "n": n, "k": k,
                        "ms": med, "tflops": flops / med / 1e9})
        print(f"sweep {layout} torch {flops / med / 1e9:.0f} TFLOP/s")
        for cfg in cands:
            args = GemmArgs(a, b, ta, tb)
            try:
                med, lo, hi = bench(lambda args=args, cfg=cfg: gemm(args, cfg))
            except Exception as exc:  # a config that does not fit (shared memory) is reported, not fatal
                print(f"sweep {layout} {cfg} failed: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            tf = flops / med / 1e9
            results.append({"suite": "sweep", "provider": "turbo:triton", "layout": layout, "m": m, "n": n, "k": k,
                            "config": cfg.__dict__, "ms": med, "tflops": tf})
            print(f"sweep {layout} {cfg} {tf:.0f} TFLOP/s")


MODELS = {
    "llama3.1-8b": [("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336)],
    "llama3.1-70b": [("qkv", 10240, 8192), ("o", 8192, 8192), ("gate_up", 57344, 8192), ("down", 8192, 28672)],
}


def models(results):
    tokens = 8192
    for model, layers in MODELS.items():
        for name, out_f, in_f in layers:
            # forward y = x W^T (NT, M=tokens N=out K=in); dgrad dx = dy W (NN, M=tokens N=in K=out);
            # wgrad dW = dy^T x (TN, M=out N=in K=tokens)
            for layout, (m, n, k) in (("NT", (tokens, out_f, in_f)), ("NN", (tokens, in_f, out_f)),
                                      ("TN", (out_f, in_f, tokens))):
                a, b, ta, tb = operands(m, n, k, layout)
                flops = 2 * m * n * k
                t_med, _, _ = bench(torch_fn(a, b, ta, tb))
                args = GemmArgs(a, b, ta, tb)
                o_med, o_lo, o_hi = bench(lambda args=args: gemm(args))
                row = {"suite": "models", "model": model, "layer": name, "layout": layout, "m": m, "n": n, "k": k,
                       "torch_tflops": flops / t_med / 1e9, "triton_tflops": flops / o_med / 1e9,
                       "triton_ms": [o_med, o_lo, o_hi], "ratio": t_med / o_med, "path": kernel_path(args)}
                results.append(row)
                print(f"{model:13s} {name:8s} {layout} {m}x{n}x{k}: torch {row['torch_tflops']:.0f}  "
                      f"triton {row['triton_tflops']:.0f} TFLOP/s  ratio {row['ratio']:.2f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--skip-sweep", action="store_true")
    p.add_argument("--check-only", action="store_true", help="only the correctness check")
    args = p.parse_args()
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "cuda": torch.version.cuda, "python": platform.python_version(), "argv": sys.argv}
    print(env)
    results: list = []
    worst = check(results)
    if not args.check_only:
        if not args.skip_sweep:
            sweep(results)
        models(results)
    with open(args.out, "w") as fh:
        json.dump({"env": env, "check_worst": {f"{k[0]}/{k[1]}": v for k, v in worst.items()},
                   "results": results}, fh, indent=1)
    fails = [r for r in results if r.get("check") == "FAIL"]
    print(f"{len(fails)} check failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
