"""The FP8 operand re-layout behind HIPBLASLT's dgrad/wgrad on Hopper: a transposed ``[R, C]`` 1-byte
tensor made contiguous by torch's ``.contiguous()`` (its generic strided copy, what turbo-hipblaslt
used before), by cuBLASLt's int8 matrix transform (``turbo_hipblaslt.relayout``, what it uses now)
and by turbo-triton's tiled transpose (``turbo_triton.transpose.transpose_last2``), in interleaved
rounds, with the device-to-device copy of the same bytes as the ceiling. GB/s count the bytes read
once and written once (2 x R x C); every result is checked bit-exact against torch's.

    PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src:packages/turbo-hipblaslt/src \\
    TURBO_HIPBLASLT_JIT=1 python3 benchmarks/scripts/hipblaslt_relayout_h200.py --out relayout.json
"""

from __future__ import annotations

import argparse
import json

import torch

#: Operands the Llama-3.1 backward re-lays at 8192 tokens: activations/gradients [8192, d] and weights.
SHAPES = [(8192, 4096), (8192, 14336), (8192, 28672), (4096, 14336), (14336, 4096), (8192, 53248)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    from turbo_core.bench import timing
    from turbo_hipblaslt import relayout
    from turbo_triton.transpose import transpose_last2

    providers = {
        "torch .contiguous()": lambda x: x.contiguous(),
        "HIPBLASLT relayout (cuBLASLt transform)": relayout.contiguous,
        "TRITON transpose_last2": lambda x: transpose_last2(x.t()),
    }
    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for r, c in SHAPES:
        sets = []
        for _ in range(timing.copies_needed(2 * r * c)):
            src = torch.randint(0, 256, (c, r), dtype=torch.uint8, device="cuda", generator=g)
            sets.append((src.view(torch.float8_e4m3fn).t(),))  # [r, c], strides (1, r): a transposed operand
        want = sets[0][0].contiguous().view(torch.uint8)
        res = {"shape": [r, c], "rounds": [], "exact": {}}
        for name, fn in providers.items():
            res["exact"][name] = bool(torch.equal(fn(sets[0][0]).view(torch.uint8), want))
        flat = [(s[0].t().contiguous().view(-1), torch.empty(r * c, dtype=torch.uint8, device="cuda")) for s in sets]
        nbytes = 2 * r * c
        for _ in range(args.rounds):
            rnd = {}
            t = timing.measure(lambda x, y: y.copy_(x.view(torch.uint8)), flat)
            rnd["copy (ceiling)"] = round(nbytes / t.median_ms / 1e6, 1)
            for name, fn in providers.items():
                t = timing.measure(fn, sets)
                rnd[name] = round(nbytes / t.median_ms / 1e6, 1)
            res["rounds"].append(rnd)
            print(r, c, "GB/s", rnd, flush=True)
        res["fallback"] = relayout.fallback_reasons()
        print(r, c, "exact", res["exact"], "fallback", res["fallback"], flush=True)
        rows.append(res)
        with open(args.out, "w") as fh:
            json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
