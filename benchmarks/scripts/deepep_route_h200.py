"""turbo-deepep's routing kernel alone on one GPU: the scan every dispatch starts with (it lies on
the critical path: route -> barrier -> pack -> barrier -> unpack), timed for several tokens-a-step /
warps choices at the model sizes of ``turbo bench moe-dispatch`` (2 ranks), checked equal to the
first choice's outputs; GPU time per call from 20 calls replayed from a CUDA graph.

  PYTHONPATH=packages/turbo-deepep/src python3 benchmarks/scripts/deepep_route_h200.py --out route.json
"""

from __future__ import annotations

import argparse
import json

import torch
from graph_timing import graph_us

from turbo_deepep.all_to_all import fused, fused_kernels

MODELS = {"deepseek-v3": (256, 8), "qwen3-235b-a22b": (128, 8), "mixtral-8x7b": (8, 2)}
CHOICES = [(1024, 4), (2048, 16), (2048, 8), (4096, 16), (1024, 8)]  # (tokens a step, warps); the first: before


def _run(idx, e, world, slot, block_t, warps):
    t, k = idx.shape
    slot_tok = torch.empty((world, slot), dtype=torch.int64, device=idx.device)
    pos = torch.empty((t, world), dtype=torch.int32, device=idx.device)
    counts = torch.empty((world,), dtype=torch.int64, device=idx.device)
    fused_kernels.route_kernel[(world,)](idx, slot_tok, pos, counts, counts, t, k, e // world, world, slot, 0,
                                         BLOCK_T=min(block_t, fused._pow2(t)), BLOCK_K=fused._pow2(k),
                                         PUT_COUNTS=False, num_warps=warps)
    return slot_tok, pos, counts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", default="1024,4096,16384")
    args = ap.parse_args()
    dev = torch.device("cuda")
    rows = []
    for name, (e, k) in MODELS.items():
        for t in map(int, args.tokens.split(",")):
            idx = torch.rand((t, e), device=dev).topk(k, dim=1).indices
            ref = None
            for block_t, warps in CHOICES:
                out = _run(idx, e, 2, t, block_t, warps)
                same = ref is None or all(torch.equal(a, b) for a, b in zip(out, ref, strict=True))
                if ref is None:
                    ref = out
                # GPU time alone (a Python launch takes longer than the kernel: eager timing would measure it)
                times = graph_us(lambda: _run(idx, e, 2, t, block_t, warps))
                row = {"model": name, "tokens": t, "block_t": block_t, "warps": warps, "us": round(times[7], 2),
                       "min": round(times[0], 2), "same_as_first": bool(same)}
                rows.append(row)
                print(row, flush=True)
    meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    import triton

    meta["triton"] = triton.__version__
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
