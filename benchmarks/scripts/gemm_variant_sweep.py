"""Sweep the TRITON gemm's TMA-kernel options on the GPU: tile shape x stages x (flatten,
warp_specialize, subtile), for the forward (NT), dgrad (NN) and wgrad (TN) layouts, side by side with
torch.matmul. Prints one line per variant and writes JSON.

  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \
  python3 benchmarks/scripts/gemm_variant_sweep.py --out sweep.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

import torch
import triton

from turbo_core.bench import timing
from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_triton.gemm import configs
from turbo_triton.gemm.launch import gemm

SHAPES = [("NT", 8192, 8192, 8192), ("NN", 8192, 8192, 8192), ("TN", 8192, 8192, 8192),
          ("NT", 8192, 6144, 4096), ("TN", 28672, 4096, 8192)]
TILES = [(128, 256, 64, 8, 8, 3), (256, 128, 64, 8, 8, 3), (128, 256, 64, 8, 8, 4)]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    args = p.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for layout, m, n, k in SHAPES:
        ta, tb = layout[0] == "T", layout[1] == "T"

        def make():
            a = torch.randn(*((k, m) if ta else (m, k)), device="cuda", generator=g).bfloat16()
            b = torch.randn(*((n, k) if tb else (k, n)), device="cuda", generator=g).bfloat16()
            return a, b

        sets = [make() for _ in range(timing.copies_needed(2 * (m * k + k * n)))]
        flops = 2 * m * n * k
        t = timing.measure(lambda a, b: torch.matmul(a.t() if ta else a, b.t() if tb else b), sets)
        base = t.median_ms
        print(f"{layout} {m}x{n}x{k} torch {flops / base / 1e9:.0f} TFLOP/s", flush=True)
        rows.append({"layout": layout, "m": m, "n": n, "k": k, "provider": "torch", "ms": base})
        for tile, (fl, ws, st) in itertools.product(TILES, itertools.product([False, True], repeat=3)):
            cfg = configs.GemmConfig(*tile, flatten=fl, warp_specialize=ws, subtile=st)
            try:
                ref = torch.matmul(sets[0][0].t() if ta else sets[0][0], sets[0][1].t() if tb else sets[0][1])
                out = gemm(GemmArgs(sets[0][0], sets[0][1], ta, tb), cfg)
                err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                t = timing.measure(lambda a, b, cfg=cfg: gemm(GemmArgs(a, b, ta, tb), cfg), sets)
            except Exception as exc:
                print(f"  {cfg}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}", flush=True)
                continue
            tf = flops / t.median_ms / 1e9
            rows.append({"layout": layout, "m": m, "n": n, "k": k, "provider": "turbo:TRITON", "config": cfg.__dict__,
                         "ms": t.median_ms, "p10": t.p10_ms, "p90": t.p90_ms, "ratio": base / t.median_ms, "err": err})
            print(f"  {tile} fl={fl:d} ws={ws:d} st={st:d}: {tf:.0f} TFLOP/s ratio {base / t.median_ms:.3f} "
                  f"err {err:.1e}", flush=True)
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "argv": sys.argv}
    with open(args.out, "w") as fh:
        json.dump({"environment": env, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
