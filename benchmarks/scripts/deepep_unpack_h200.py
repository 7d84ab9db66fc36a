"""turbo-deepep's worst-mode unpack on the symmetric transport, timed on one GPU: two ranks
simulated in one process (their buffers are ordinary device memory on the same GPU), DeepSeek-V3
size (4096 tokens a rank, hidden 7168, top-8 of 256 experts), bf16 and FP8 rows; GPU time of rank
0's unpack from 20 calls replayed in a CUDA graph. ``--old-kernels FILE`` also times a copy of an
earlier ``fused_kernels.py`` in the same process, and checks both give the same results.

  PYTHONPATH=packages/turbo-deepep/src python3 benchmarks/scripts/deepep_unpack_h200.py --out unpack.json \\
      [--old-kernels old_fused_kernels.py]
"""

from __future__ import annotations

import argparse
import importlib.util
import json

import torch
from graph_timing import graph_us

from turbo_deepep.all_to_all import fused, fused_kernels, symm
from turbo_deepep.all_to_all.dispatch import _format

T, H, K, E, W = 4096, 7168, 8, 256, 2


def _setup(dtype, dev):
    e_l, slot, nw = E // W, T, W * T
    data = []
    for r in range(W):
        g = torch.Generator().manual_seed(r)
        idx = torch.rand((T, E), generator=g).topk(K, dim=1).indices
        x = torch.randn((T, H), generator=g)
        x = x.to(dtype) if dtype != "fp8" else x.clamp(-448, 448).to(torch.float8_e4m3fn)
        scales = torch.rand((T, H // 128), generator=g) if dtype == "fp8" else None
        data.append({"x": x.to(dev), "scales": None if scales is None else scales.to(dev),
                     "probs": torch.rand((T, K), generator=g).to(dev), "idx": idx.to(dev)})
    fmt = _format(data[0]["x"], data[0]["scales"], K)
    hdr = symm.header_bytes(W)
    bufs = [torch.zeros((hdr + W * slot * fmt.row_bytes,), dtype=torch.uint8, device=dev) for _ in range(W)]
    peers = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.int64, device=dev)
    slots = [fused.route(data[r]["idx"], E, W, slot, put_counts=(peers, r))[0] for r in range(W)]
    put = fused.Put(peers, torch.zeros(W, dtype=torch.int64, device=dev), hdr // 4)
    got = [fused.pack_compacted(fmt, data[r], slots[r], T, E, put, r, nw, e_l) for r in range(W)]
    rows = bufs[0][hdr:].view(W * slot, fmt.row_bytes)
    return fmt, rows, got[0], nw, e_l


def _time(fn) -> float:
    return graph_us(fn)[7]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--old-kernels", default="")
    ap.add_argument("--blocks", default="", help="also time the current kernels at these word blocks (fused._BLOCK)")
    args = ap.parse_args()
    dev = torch.device("cuda")
    kernels = {"now": fused_kernels}
    if args.old_kernels:
        spec = importlib.util.spec_from_file_location("old_fused_kernels", args.old_kernels)
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        kernels["old"] = old
    rows_out = []
    for dtype in (torch.bfloat16, "fp8"):
        fmt, rows, into, nw, e_l = _setup(dtype, dev)
        results = {}
        for name, mod in kernels.items():
            fused._k = lambda mod=mod: mod  # noqa: E731 - the kernel module unpack launches from
            out = fused.unpack(rows, fmt, nw, None, rank=0, num_local=e_l, into=into)
            results[name] = [None if v is None else v.clone() for v in out[:4]]
            us = _time(lambda: fused.unpack(rows, fmt, nw, None, rank=0, num_local=e_l, into=into))
            row = {"dtype": str(dtype), "kernels": name, "unpack_us": round(us, 2), "rows": nw,
                   "row_bytes": fmt.row_bytes}
            rows_out.append(row)
            print(row, flush=True)
        for blk in [int(v) for v in args.blocks.split(",") if v]:
            fused._k, saved = (lambda: fused_kernels), fused._BLOCK
            fused._BLOCK = blk
            out = fused.unpack(rows, fmt, nw, None, rank=0, num_local=e_l, into=into)
            same = all((a is None and b is None) or torch.equal(a.view(torch.uint8), b.view(torch.uint8))
                       for a, b in zip([None if v is None else v.clone() for v in out[:4]], results["now"],
                                       strict=True))
            us = _time(lambda: fused.unpack(rows, fmt, nw, None, rank=0, num_local=e_l, into=into))
            fused._BLOCK = saved
            row = {"dtype": str(dtype), "kernels": f"now, block {blk}", "unpack_us": round(us, 2), "same": same}
            rows_out.append(row)
            print(row, flush=True)
        if "old" in results:
            same = all((a is None and b is None) or torch.equal(a.view(torch.uint8), b.view(torch.uint8))
                       for a, b in zip(results["now"], results["old"], strict=True))
            rows_out.append({"dtype": str(dtype), "same_results_old_and_now": same})
            print({"dtype": str(dtype), "same_results_old_and_now": same}, flush=True)
    import triton

    meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows_out}, f, indent=1)


if __name__ == "__main__":
    main()
