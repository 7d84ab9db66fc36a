"""GPU check and timing of the grouped quantization fast paths (``fast=True``) beside the
GPU-checked kernels (``fast=False``) and the TORCH reference (run on the GPU machine).

The fast paths (``turbo_triton.quantization.grouped``, the default through ``FAST_DEFAULT`` since
this script passed on the H200 in Session 17):

* ``q4-col``: ``grouped_quantize_fp4`` col-wise, bf16, the pair kernel (PTX encoder on NVIDIA);
* ``q4-trans``: ``grouped_quantize_fp4_with_trans``, bf16, the pair kernel;
* ``q8-mx-col``: ``grouped_quantize_fp8`` MX col-wise with ``FAST`` (float amax, hardware saturation);
* ``dq8-mx-col``: ``grouped_dequantize_fp8`` MX col-wise, tiles of the padded data stored transposed;
* ``dq8-mx-row``: ``grouped_dequantize_fp8`` MX row-wise, scale bytes loaded once a tile;
* ``q8-bw128-col`` / ``q8-bw32-col``: ``grouped_quantize_fp8`` BLOCKWISE col-wise with ``HW_SAT``;
* ``q8-wt-bw128`` / ``q8-wt-mx``: ``grouped_quantize_fp8_with_trans`` with the dense arithmetic (``FAST``,
  ``HW_SAT``; the old tiles).

Parts (``--parts``, default ``check,graph,bench``):

* ``check``: both paths against the reference, bit for bit (NaN positions must match) on the
  same CUDA tensors: 16384 x 7168 over 32 skewed groups (one empty) with NaN/Inf/-0.0/zero rows and
  columns/subnormals, E4M3 and E5M2 (fp32 dequantize out), and odd shapes (3001 x 999, 7 groups,
  rows past the last group) in bf16, fp32 and fp16.
* ``graph``: each fast path captured in a CUDA graph (fails on a host sync), replayed on new data
  and new group sizes, compared with the reference.
* ``bench``: median ``triton.testing.do_bench`` of both paths and of the dense op on the same x;
  bytes: inputs read once, outputs written once; fraction of the measured copy bandwidth.
* ``wtbw`` (not in the default): BLOCKWISE 128 and 32 with_trans, the old kernel, the default and
  ``fast=True`` (and 128's fast path on 8 warps), round-robin six times in one process
  (bit-compared with ``fast=False`` first).
* ``tiles`` (not in the default): ``dq8-mx-col`` fast at other tiles (``block_m x block_n x warps``
  over the padded data), each bit-compared with the default tile's output, timed as ``bench``.

Usage (repository root): ``PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src
TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin python3
benchmarks/scripts/grouped_quant_fast_gpu.py --out fast.json``; ``--smoke`` runs every part at
tiny sizes on the CPU interpreter (checks the script). Budget on the H200: about 2 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import traceback

P = argparse.ArgumentParser(description=__doc__.split("\n")[0])
P.add_argument("--out", required=True)
P.add_argument("--parts", default="check,graph,bench")
P.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU interpreter")
ARGS = P.parse_args()
if ARGS.smoke:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
from _bitcheck import compare_all as mismatch  # noqa: E402  (benchmarks/scripts, the script's own folder)

from turbo_core.dispatch.specs import quantization as qs  # noqa: E402
from turbo_core.low_precision import FLOAT4_E2M1FN_X2 as FP4  # noqa: E402
from turbo_core.reference import quantization as ref  # noqa: E402
from turbo_triton.quantization import dequantize, fp4, grouped, quantize, quantize_with_trans  # noqa: E402

DEV = "cpu" if ARGS.smoke else "cuda"
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
BIG = (600, 96, 4) if ARGS.smoke else (16384, 7168, 32)
ODD = (301, 99, 7) if ARGS.smoke else (3001, 999, 7)
RESULTS: dict = {"check": [], "graph": [], "bench": []}


def log(*a):
    print(*a, flush=True)


def groups(m, g, seed):
    """Skewed group sizes over ~95% of m (rows past the last group), group 1 empty."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.rand(g, generator=gen) ** 3
    w[min(1, g - 1)] = 0
    lens = (w / w.sum() * (m - m // 20)).floor().to(torch.int64)
    offs = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)])
    return lens.to(DEV), offs.to(DEV)


def make_x(m, n, dtype, seed, special=True):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    x = torch.randn(m, n, device=DEV, generator=gen) * 3
    x[:, :64] *= 1e-3
    x.view(-1)[::11] *= 1e-38
    if special:
        x[:, 5] = 0
        x[3] = 0
        x[7, 9] = float("nan")
        x[100, n - 1] = float("inf")
        x[m - 3, 2] = -float("inf")
        x[11, 13] = -0.0
    return x.to(dtype)


def cases(x, lens, offs, fp8=E4M3, out=torch.bfloat16):
    a8 = qs.GroupedQuantizeFp8Args(x, fp8, "MX_BLOCKWISE", lens, offs, 0, 32)
    q, s, _, op = ref.grouped_quantize_fp8(a8)
    d8 = qs.GroupedDequantizeFp8Args(q, s, out, "MX_BLOCKWISE", offs, op, x.shape[0], 0, 32)
    qr, sr, _, opr = ref.grouped_quantize_fp8(qs.GroupedQuantizeFp8Args(x, fp8, "MX_BLOCKWISE", lens, offs, 1, 32))
    d8r = qs.GroupedDequantizeFp8Args(qr, sr, out, "MX_BLOCKWISE", offs, opr, x.shape[0], 1, 32)
    return [("q4-col", grouped.grouped_quantize_fp4, ref.grouped_quantize_fp4,
             qs.GroupedQuantizeFp4Args(x, FP4, lens, offs, 0)),
            ("q4-trans", grouped.grouped_quantize_fp4_with_trans, ref.grouped_quantize_fp4_with_trans,
             qs.GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs)),
            ("q8-mx-col", grouped.grouped_quantize_fp8, ref.grouped_quantize_fp8, a8),
            ("dq8-mx-col", grouped.grouped_dequantize_fp8, ref.grouped_dequantize_fp8, d8),
            ("dq8-mx-row", grouped.grouped_dequantize_fp8, ref.grouped_dequantize_fp8, d8r),
            ("q8-bw128-col", grouped.grouped_quantize_fp8, ref.grouped_quantize_fp8,
             qs.GroupedQuantizeFp8Args(x, fp8, "BLOCKWISE", lens, offs, 0, 128)),
            ("q8-bw32-col", grouped.grouped_quantize_fp8, ref.grouped_quantize_fp8,
             qs.GroupedQuantizeFp8Args(x, fp8, "BLOCKWISE", lens, offs, 0, 32)),
            ("q8-wt-bw128", grouped.grouped_quantize_fp8_with_trans, ref.grouped_quantize_fp8_with_trans,
             qs.GroupedQuantizeFp8WithTransArgs(x, fp8, "BLOCKWISE", lens, offs, 128)),
            ("q8-wt-mx", grouped.grouped_quantize_fp8_with_trans, ref.grouped_quantize_fp8_with_trans,
             qs.GroupedQuantizeFp8WithTransArgs(x, fp8, "MX_BLOCKWISE", lens, offs, 32))]


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def check_one(tag, x, lens, offs, **kw):
    ok = True
    for name, fn, ref_fn, args in cases(x, lens, offs, **kw):
        want = ref_fn(args)
        row = {"tag": tag, "op": name}
        for fast in (True, False):
            try:
                got = fn(args, fast=fast)
                sync()
                row[f"fast={fast}"] = mismatch(got, want) or "same bits"
            except Exception:  # noqa: BLE001 -- record and go on
                row[f"fast={fast}"] = traceback.format_exc()
            ok &= row[f"fast={fast}"] == "same bits"
        RESULTS["check"].append(row)
        log(row)
    return ok


def part_check():
    m, n, g = BIG
    lens, offs = groups(m, g, seed=g)
    ok = check_one(f"{m}x{n} bf16 special e4m3", make_x(m, n, torch.bfloat16, 1), lens, offs)
    ok &= check_one(f"{m}x{n} bf16 e5m2 fp32-out", make_x(m, n, torch.bfloat16, 2, special=False), lens, offs,
                    fp8=E5M2, out=torch.float32)
    m2, n2, g2 = ODD
    l2, o2 = groups(m2, g2, seed=5)
    ok &= check_one(f"{m2}x{n2} bf16 special", make_x(m2, n2, torch.bfloat16, 3), l2, o2)
    ok &= check_one(f"{m2}x{n2} fp32 special", make_x(m2, n2, torch.float32, 4), l2, o2, out=torch.float16)
    ok &= check_one(f"{m2}x{n2 + 1} fp16 special", make_x(m2, n2 + 1, torch.float16, 5), l2, o2)
    return ok


def part_graph():
    if DEV != "cuda":
        log("graph: skipped on the CPU")
        return True
    m, n, g = BIG
    ok = True
    for i, name in enumerate(("q4-col", "q4-trans", "q8-mx-col", "dq8-mx-col", "dq8-mx-row", "q8-bw128-col",
                              "q8-bw32-col", "q8-wt-bw128", "q8-wt-mx")):
        try:
            x = make_x(m, n, torch.bfloat16, 11)
            lens, offs = groups(m, g, seed=11)
            _, fn, ref_fn, args = cases(x, lens, offs)[i]
            fn(args, fast=True)  # compile outside the capture
            sync()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = fn(args, fast=True)
            new_x = make_x(m, n, torch.bfloat16, 12)
            new_lens, new_offs = groups(m, g, seed=12)
            if name.startswith("dq8"):  # new quantized data and scales for the same shapes
                q, s, _, op = ref.grouped_quantize_fp8(qs.GroupedQuantizeFp8Args(
                    new_x, E4M3, "MX_BLOCKWISE", new_lens, new_offs, 0 if name == "dq8-mx-col" else 1, 32))
                args.x.copy_(q)
                args.scale_inv.copy_(s)
                args.group_offs_padded.copy_(op)
            x.copy_(new_x)
            lens.copy_(new_lens)
            offs.copy_(new_offs)
            graph.replay()
            sync()
            err = mismatch(out, ref_fn(args))
        except Exception:  # noqa: BLE001
            err = traceback.format_exc()
        RESULTS["graph"].append({"op": name, "error": err})
        log("graph", name, err or "same bits after replay on new data and groups")
        ok &= err is None
    return ok


def _nbytes(ts):
    ts = ts if isinstance(ts, tuple) else (ts,)
    return sum(t.numel() * t.element_size() for t in ts if t.dtype not in (torch.int32, torch.int64))


def _ms(fn):
    if DEV != "cuda":
        fn()
        return float("nan")
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def _copy_gbps():
    """Device-to-device copy bandwidth (bytes read + written) of a 1 GiB buffer."""
    src = torch.empty(1 << (16 if ARGS.smoke else 30), dtype=torch.uint8, device=DEV)
    dst = torch.empty_like(src)
    return 2 * src.numel() / _ms(lambda: dst.copy_(src)) / 1e6


def part_bench():
    copy = _copy_gbps()
    RESULTS["copy_GBps"] = copy
    log(f"copy GB/s {copy:.0f}")
    m, n, g = BIG
    lens, offs = groups(m, g, seed=g)
    x = make_x(m, n, torch.bfloat16, 1, special=False)

    def row(name, fn, moved, **extra):
        ms = _ms(fn)
        r = {"op": name, **extra, "ms": ms, "GBps": moved / ms / 1e6, "of_copy": moved / ms / 1e6 / copy}
        RESULTS["bench"].append(r)
        log(f"{name:18s} {str(extra):16s} {ms * 1e3:9.1f} us {r['GBps']:7.0f} GB/s {100 * r['of_copy']:6.1f}% of copy")

    for name, fn, _, args in cases(x, lens, offs):
        for fast in (False, True):
            out = fn(args, fast=fast)
            data = out[:4] if name.startswith("q8-wt") else out  # the lens / offs are int and not counted
            moved = _nbytes(data) + (_nbytes(x) if name.startswith("q") else _nbytes((args.x, args.scale_inv)))
            row(name, lambda fn=fn, args=args, fast=fast: fn(args, fast=fast), moved, fast=fast)
    qd, sd = quantize.quantize_fp8(qs.QuantizeFp8Args(x, E4M3, "MX_BLOCKWISE", 0, 32))
    qdr, sdr = quantize.quantize_fp8(qs.QuantizeFp8Args(x, E4M3, "MX_BLOCKWISE", 1, 32))
    dense = [("dense q4-col", lambda: fp4.quantize_fp4(qs.QuantizeFp4Args(x, FP4, 0)), x),
             ("dense q4-trans", lambda: fp4.quantize_fp4_with_trans(qs.QuantizeFp4WithTransArgs(x, FP4)), x),
             ("dense q8-mx-col", lambda: quantize.quantize_fp8(qs.QuantizeFp8Args(x, E4M3, "MX_BLOCKWISE", 0, 32)), x),
             ("dense q8-bw128-col", lambda: quantize.quantize_fp8(qs.QuantizeFp8Args(x, E4M3, "BLOCKWISE", 0, 128)), x),
             ("dense q8-wt-bw128", lambda: quantize_with_trans.quantize_fp8_with_trans(
                 qs.QuantizeFp8WithTransArgs(x, E4M3, "BLOCKWISE", 128)), x),
             ("dense q8-wt-mx", lambda: quantize_with_trans.quantize_fp8_with_trans(
                 qs.QuantizeFp8WithTransArgs(x, E4M3, "MX_BLOCKWISE", 32)), x),
             ("dense dq8-mx-col", lambda: dequantize.dequantize_fp8(
                 qs.DequantizeFp8Args(qd, sd, torch.bfloat16, "MX_BLOCKWISE", 0, 32)), (qd, sd)),
             ("dense dq8-mx-row", lambda: dequantize.dequantize_fp8(
                 qs.DequantizeFp8Args(qdr, sdr, torch.bfloat16, "MX_BLOCKWISE", 1, 32)), (qdr, sdr))]
    for name, fn, inputs in dense:
        row(name, fn, _nbytes(fn()) + _nbytes(inputs))
    return True


def part_tiles():
    from turbo_triton.quantization.common import Tile

    copy = RESULTS.get("copy_GBps") or _copy_gbps()
    m, n, g = BIG
    lens, offs = groups(m, g, seed=g)
    x = make_x(m, n, torch.bfloat16, 1, special=False)
    d8 = [c for c in cases(x, lens, offs) if c[0] == "dq8-mx-col"][0][3]
    want = grouped.grouped_dequantize_fp8(d8, fast=True)
    moved = _nbytes(want) + _nbytes((d8.x, d8.scale_inv))
    tiles = [None, Tile(64, 64, 4), Tile(128, 128, 8), Tile(64, 128, 4), Tile(64, 128, 8), Tile(256, 64, 8),
             Tile(32, 128, 4), Tile(128, 32, 4), Tile(64, 256, 8), Tile(32, 256, 4)]
    ok = True
    for t in tiles[:3] if ARGS.smoke else tiles:
        err = mismatch(grouped.grouped_dequantize_fp8(d8, t, fast=True), want)
        ms = _ms(lambda t=t: grouped.grouped_dequantize_fp8(d8, t, fast=True))
        name = "default" if t is None else f"{t.block_m}x{t.block_n}x{t.num_warps}"
        r = {"op": "dq8-mx-col", "tile": name, "ms": ms, "GBps": moved / ms / 1e6, "of_copy": moved / ms / 1e6 / copy,
             "error": err}
        RESULTS["bench"].append(r)
        log(f"dq8-mx-col {name:12s} {ms * 1e3:9.1f} us {100 * r['of_copy']:6.1f}% of copy {err or 'same bits'}")
        ok &= err is None
    return ok


def part_wtbw():
    """``q8-wt-bw128`` / ``q8-wt-bw32`` (BLOCKWISE with_trans): the old kernel (``fast=False``), the
    default, and BLOCKWISE 128's fast path on the 8 warps that Session 17 timed at 222 vs 303-309 us,
    round-robin ``ROUNDS`` times in one process on the same x, each bit-compared with ``fast=False``:
    whether a gap is a run-to-run state or a variant's own."""
    from turbo_triton.quantization.common import Tile

    copy = RESULTS.get("copy_GBps") or _copy_gbps()
    m, n, g = BIG
    lens, offs = groups(m, g, seed=g)
    x = make_x(m, n, torch.bfloat16, 1, special=False)
    fn = grouped.grouped_quantize_fp8_with_trans
    ok, timed = True, []
    for bs in (128, 32):
        args = qs.GroupedQuantizeFp8WithTransArgs(x, E4M3, "BLOCKWISE", lens, offs, bs)
        want = fn(args, fast=False)
        moved = _nbytes(want[:4]) + _nbytes(x)
        variants = [("old (fast=False)", {"fast": False}), ("default", {}), ("fast=True", {"fast": True})]
        if bs == 128:
            variants.append(("fast, 8 warps", {"fast": True, "tile": Tile(128, 128, 8)}))
        for name, kw in variants:
            err = mismatch(fn(args, **kw), want)
            RESULTS["bench"].append({"op": f"q8-wt-bw{bs}", "variant": name, "error": err})
            log(f"q8-wt-bw{bs} {name:18s} {err or 'same bits'}")
            ok &= err is None
            timed.append((bs, name, kw, args, moved))
    for r in range(2 if ARGS.smoke else 6):
        for bs, name, kw, args, moved in timed:
            ms = _ms(lambda kw=kw, args=args: fn(args, **kw))
            RESULTS["bench"].append({"op": f"q8-wt-bw{bs}", "variant": name, "round": r, "ms": ms,
                                     "of_copy": moved / ms / 1e6 / copy})
            log(f"q8-wt-bw{bs} round {r} {name:18s} {ms * 1e3:9.1f} us {100 * moved / ms / 1e6 / copy:6.1f}% of copy")
    return ok


def main():
    RESULTS["env"] = {"torch": torch.__version__,
                      "device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu (interpreter)"}
    ok = True
    for part in ARGS.parts.split(","):
        log(f"== {part}")
        ok &= {"check": part_check, "graph": part_graph, "bench": part_bench, "tiles": part_tiles,
                "wtbw": part_wtbw}[part]()
        with open(ARGS.out, "w") as f:
            json.dump(RESULTS, f, indent=1, default=str)
    log("ALL OK" if ok else "FAILURES (see above)")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
