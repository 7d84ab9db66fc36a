"""ROWWISE ``quantize_fp8_with_trans`` on the H200: launch variants of its first kernel
(``rowwise_with_trans_kernel``: rows a tile, warps, row tiles a program, pipeline stages) against the
two single-direction ``quantize_fp8`` calls it replaces, all in one process on the same input. Every
variant's four outputs are bit-compared with the two single calls first; device time from
``turbo_core.bench.timing.measure`` (inputs rotated past L2, GPU held while calls queue).

    PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
    python3 benchmarks/scripts/quant_rowwise_with_trans_sweep.py --out sweep.json [--shapes 16384x7168 ...]

Bytes (the issue's accounting): x read once, both FP8 copies and both scale vectors written once.
Rows: ``{"shape", "variant", "ms", "GBps", "of_copy", "x_two_calls"}``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

if "--smoke" in sys.argv:  # before triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

from turbo_core.bench import timing  # noqa: E402
from turbo_core.bench.suites.norm import copy_bandwidth  # noqa: E402
from turbo_core.dispatch.specs.quantization import QuantizeFp8Args, QuantizeFp8WithTransArgs  # noqa: E402
from turbo_triton.quantization import quantize, quantize_with_trans  # noqa: E402
from turbo_triton.quantization.common import Tile  # noqa: E402

E4M3 = torch.float8_e4m3fn


def _variants(smoke: bool):
    """(row tile with iters, stages, partial): the column amax by per-program partials at 4 to 64 rows a
    program, and by atomics at 32 to 128 (session 15's first sweep: atomics lose below 64 rows)."""
    if smoke:
        return [(Tile(1, 256, 4, 2), 1, False), (Tile(2, 256, 4, 4), 2, True)]
    out = [(Tile(bm, 0, w, it), st, True)
           for bm, w, it, st in itertools.product((1, 2), (8, 16), (4, 8, 16, 32), (1, 3))]
    out += [(Tile(bm, 0, w, it), 3, False) for bm, w, it in itertools.product((2, 4), (16,), (16, 32))]
    return out


def _same(a, b) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == E4M3:
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    return bool(torch.equal(a, b))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--shapes", nargs="*", default=["16384x7168"])
    p.add_argument("--smoke", action="store_true", help="the CPU interpreter at a tiny shape: checks the script")
    args = p.parse_args()
    if args.smoke:
        args.shapes = ["64x200"]
    dev = "cpu" if args.smoke else "cuda"
    copy = 0.0 if args.smoke else copy_bandwidth(dev)
    rows = []
    result = {"command": "python3 " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
              "torch": torch.__version__, "copy_GBps": copy, "rows": rows}
    if not args.smoke:
        import triton

        result.update(gpu=torch.cuda.get_device_name(), triton=triton.__version__)
    print(f"copy {copy:.0f} GB/s", flush=True)
    for shape in args.shapes:
        m, n = map(int, shape.split("x"))
        gen = torch.Generator(device=dev).manual_seed(0)
        xs = [(torch.randn(m, n, device=dev, generator=gen) * 2).to(torch.bfloat16) for _ in range(1 if args.smoke else 3)]
        nbytes = m * n * (2 + 1 + 1) + (m + n) * 4

        def two_calls(x):
            a = quantize.quantize_fp8(QuantizeFp8Args(x, E4M3, "ROWWISE", -1))
            b = quantize.quantize_fp8(QuantizeFp8Args(x, E4M3, "ROWWISE", 0))
            return (*a, *b)

        want = two_calls(xs[0])
        cases = [("two quantize_fp8 calls", two_calls),
                 ("row call alone", lambda x: quantize.quantize_fp8(QuantizeFp8Args(x, E4M3, "ROWWISE", -1))),
                 ("col call alone", lambda x: quantize.quantize_fp8(QuantizeFp8Args(x, E4M3, "ROWWISE", 0))),
                 ("with_trans default", lambda x: quantize_with_trans.quantize_fp8_with_trans(
                     QuantizeFp8WithTransArgs(x, E4M3, "ROWWISE")))]
        bn = 1 << (n - 1).bit_length()
        for t, stages, partial in _variants(args.smoke):
            tile = Tile(t.block_m, max(bn, t.block_n), t.num_warps, t.iters)
            cases.append((f"bm{tile.block_m} w{tile.num_warps} it{tile.iters} st{stages} "
                          f"{'partial' if partial else 'atomic'}",
                          lambda x, tile=tile, stages=stages, partial=partial: quantize_with_trans._rowwise(
                              x, E4M3, None, tile, stages, partial)))
        base = None
        for name, fn in cases:
            row = {"shape": shape, "variant": name}
            try:
                got = fn(xs[0])
                if name not in ("row call alone", "col call alone") and not all(
                        _same(a, b) for a, b in zip(got, want, strict=True)):
                    row["error"] = "output differs from the two quantize_fp8 calls"
                else:
                    ms = float("nan") if args.smoke else timing.measure(
                        fn, [(x,) for x in xs], warmup=10, iters=50).median_ms
                    row.update(ms=ms, GBps=nbytes / ms / 1e6 if ms == ms else None,
                               of_copy=(nbytes / ms / 1e6 / copy) if copy else None)
                    if name == "two quantize_fp8 calls":
                        base = ms
                    if base:
                        row["x_two_calls"] = base / ms
            except Exception as exc:  # noqa: BLE001 -- a variant that cannot launch (shared memory, registers)
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rows.append(row)
            if "error" in row:
                print(f"{shape:12s} {name:28s} {row['error']}", flush=True)
            else:
                print(f"{shape:12s} {name:28s} {row['ms'] * 1e3:9.1f} us {row.get('of_copy') or 0:7.1%} "
                      f"x{row.get('x_two_calls') or 0:.3f}", flush=True)
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
