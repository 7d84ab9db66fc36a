"""GPU check and benchmark of the TRITON grouped quantization kernels (run on the GPU machine).

Parts (``--parts``, default all, in this order):

* ``check``: ``grouped_quantize_fp8`` (BLOCKWISE 128/32 row-wise and col-wise, MX row/col),
  ``grouped_quantize_fp8_with_trans`` (BLOCKWISE 128, MX), ``grouped_dequantize_fp8`` (every
  layout, bf16/fp32 out), ``grouped_quantize_fp4`` (row, col), ``grouped_quantize_fp4_with_trans``
  and ``grouped_dequantize_fp4`` against the TORCH reference kernels on the same CUDA tensors, bit
  for bit (NaN positions must match), at MoE shapes (16384 tokens over 8 and 32 skewed groups, one
  of them empty; hidden 4096 and 7168) and an odd one (rows past ``group_offs[-1]``, fp32 input),
  E4M3 and E5M2. Every output the Triton launchers allocate is poisoned first (0xA5), so an
  element or scale that is never written shows up.
* ``graph``: MX col-wise, BLOCKWISE with_trans and FP4 with_trans captured in a CUDA graph (which
  fails on any host sync) and replayed on new data and new group sizes, compared with the reference.
* ``bench``: GB/s (x read once, q and scales written once; dequantization: q and scales read, the
  output written) of each Triton launcher and of the TORCH reference (eager), median of
  ``triton.testing.do_bench``, the ratio to the reference and the fraction of the measured
  device-to-device copy bandwidth.

Prints tables and writes everything to ``--out`` (JSON, rewritten after every part).

Usage (repository root, no install needed; torch 2.11 + triton 3.6 there):
  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
  python3 benchmarks/scripts/grouped_quant_gpu_check.py --out grouped_quant.json [--parts check,graph,bench]

Budget: ``--parts check,graph`` about 3-4 minutes (each Triton variant compiles once, ~1-2 s),
``--parts bench`` about 3 minutes. ``--smoke`` runs every part at tiny sizes on the CPU
interpreter to check the script itself.
"""

from __future__ import annotations

import argparse
import json
import os
import traceback


def _parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--parts", default="check,graph,bench")
    p.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU interpreter")
    return p.parse_args()


ARGS = _parse()
if ARGS.smoke:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
from _bitcheck import compare  # noqa: E402  (benchmarks/scripts, the script's own folder)

from turbo_core.dispatch.specs.quantization import (  # noqa: E402
    GroupedDequantizeFp4Args,
    GroupedDequantizeFp8Args,
    GroupedQuantizeFp4Args,
    GroupedQuantizeFp4WithTransArgs,
    GroupedQuantizeFp8Args,
    GroupedQuantizeFp8WithTransArgs,
)
from turbo_core.low_precision import FLOAT4_E2M1FN_X2  # noqa: E402
from turbo_core.reference import quantization as ref  # noqa: E402
from turbo_triton.quantization import grouped  # noqa: E402

DEV = "cpu" if ARGS.smoke else "cuda"
E4M3, E5M2, FP4 = torch.float8_e4m3fn, torch.float8_e5m2, FLOAT4_E2M1FN_X2
RESULTS: dict = {"check": [], "graph": [], "bench": []}
#: (label, M, N, G, rows past the groups, input dtype)
SHAPES = ([("m16384-n4096-g8", 16384, 4096, 8, 0, torch.bfloat16),
           ("m16384-n7168-g32", 16384, 7168, 32, 0, torch.bfloat16),
           ("odd-m4099-n1000-g5", 4099, 1000, 5, 37, torch.float32)]
          if not ARGS.smoke else
          [("smoke-m150-n70-g4", 150, 70, 4, 5, torch.bfloat16)])
#: (id, granularity, axis, block size)
FP8_CASES = [("bw128-row", "BLOCKWISE", 1, 128), ("bw128-col", "BLOCKWISE", 0, 128),
             ("bw32-col", "BLOCKWISE", 0, 32), ("mx-row", "MX_BLOCKWISE", 1, 32), ("mx-col", "MX_BLOCKWISE", 0, 32)]


def log(*a):
    print(*a, flush=True)


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


class Poisoned:
    """Within the block, ``torch.empty``/``torch.empty_like`` return tensors whose bytes are all ``byte``."""

    def __init__(self, byte: int):
        self.byte = byte

    def __enter__(self):
        self.orig, self.orig_like = torch.empty, torch.empty_like

        def poison(t):
            if t.numel():
                t.view(-1).view(torch.uint8).fill_(self.byte)
            return t

        torch.empty = lambda *a, **k: poison(self.orig(*a, **k))
        torch.empty_like = lambda *a, **k: poison(self.orig_like(*a, **k))

    def __exit__(self, *exc):
        torch.empty, torch.empty_like = self.orig, self.orig_like


def groups(m: int, g: int, tail: int, seed: int):
    """Skewed group sizes (weights ~ U(0,1)**3, group 1 empty) summing to ``m - tail``."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.rand(g, generator=gen) ** 3
    w[min(1, g - 1)] = 0
    lens = (w / w.sum() * (m - tail)).floor().to(torch.int64)
    lens[0] += (m - tail) - int(lens.sum())
    offs = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)])
    return lens.to(DEV), offs.to(DEV)


def rand(m, n, dtype, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = torch.randn(m, n, device=DEV, generator=g) * 3
    x[:, : min(n, 64)] *= 1e-3
    return x.to(dtype)


def record(kind, case, label, outs, refs):
    errors = {str(i): e for i, (a, b) in enumerate(zip(outs, refs, strict=True)) if (e := compare(a, b))}
    if len(outs) != len(refs):
        errors["count"] = f"{len(outs)} outputs vs {len(refs)}"
    row = {"what": kind, "case": case, "shape": label, "ok": not errors, "errors": errors}
    RESULTS["check"].append(row)
    log(("ok  " if not errors else "FAIL"), kind, case, label, errors or "")
    return not errors


def run_checked(kind, case, label, fn, ref_fn, args):
    try:
        with Poisoned(0xA5):
            out = fn(args)
        sync()
        out = out if isinstance(out, tuple) else (out,)
        want = ref_fn(args)
        want = want if isinstance(want, tuple) else (want,)
        return record(kind, case, label, out, want), out
    except Exception:  # noqa: BLE001 -- record and go on
        RESULTS["check"].append({"what": kind, "case": case, "shape": label, "ok": False,
                                 "errors": {"exception": traceback.format_exc()}})
        log("FAIL", kind, case, label, traceback.format_exc())
        return False, None


def part_check():
    ok = True
    for label, m, n, g, tail, in_dtype in SHAPES:
        x = rand(m, n, in_dtype, seed=m + n)
        lens, offs = groups(m, g, tail, seed=g)
        total = int(offs[-1])
        for fp8 in (E4M3, E5M2):
            for cid, gran, axis, bs in FP8_CASES:
                args = GroupedQuantizeFp8Args(x, fp8, gran, lens, offs, axis, bs)
                good, out = run_checked("grouped_quantize_fp8", f"{cid}-{fp8}", label, grouped.grouped_quantize_fp8,
                                        ref.grouped_quantize_fp8, args)
                ok &= good
                if fp8 != E4M3 or out is None:
                    continue
                q, s, _, op = ref.grouped_quantize_fp8(args)
                for od in (torch.bfloat16, torch.float32):
                    t = m if (gran == "BLOCKWISE" and axis == 1) else total
                    dargs = GroupedDequantizeFp8Args(q, s, od, gran, offs, op, t, axis, bs)
                    ok &= run_checked("grouped_dequantize_fp8", f"{cid}-{od}", label, grouped.grouped_dequantize_fp8,
                                      ref.grouped_dequantize_fp8, dargs)[0]
            for cid, gran, bs in (("wt-bw128", "BLOCKWISE", 128), ("wt-mx", "MX_BLOCKWISE", 32)):
                args = GroupedQuantizeFp8WithTransArgs(x, fp8, gran, lens, offs, bs)
                ok &= run_checked("grouped_quantize_fp8_with_trans", f"{cid}-{fp8}", label,
                                  grouped.grouped_quantize_fp8_with_trans, ref.grouped_quantize_fp8_with_trans, args)[0]
        for axis in (1, 0):
            args = GroupedQuantizeFp4Args(x, FP4, lens, offs, axis)
            ok &= run_checked("grouped_quantize_fp4", f"axis{axis}", label, grouped.grouped_quantize_fp4,
                              ref.grouped_quantize_fp4, args)[0]
            q, s, _, op = ref.grouped_quantize_fp4(args)
            dargs = GroupedDequantizeFp4Args(q, s, torch.bfloat16, axis, group_offs=offs, group_offs_padded=op,
                                             total_m=None if axis == 1 else total)
            ok &= run_checked("grouped_dequantize_fp4", f"axis{axis}", label, grouped.grouped_dequantize_fp4,
                              ref.grouped_dequantize_fp4, dargs)[0]
        args = GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs)
        ok &= run_checked("grouped_quantize_fp4_with_trans", "wt", label, grouped.grouped_quantize_fp4_with_trans,
                          ref.grouped_quantize_fp4_with_trans, args)[0]
    return ok


def part_graph():
    """Capture with one set of groups, replay with another (static shapes, new contents)."""
    if DEV != "cuda":
        log("graph: skipped on the CPU")
        return True
    label, m, n, g, tail, in_dtype = SHAPES[0]
    x = rand(m, n, in_dtype, seed=1)
    lens, offs = groups(m, g, tail, seed=1)
    cases = [
        ("mx-col", lambda: grouped.grouped_quantize_fp8(GroupedQuantizeFp8Args(x, E4M3, "MX_BLOCKWISE", lens, offs, 0, 32)),
         lambda: ref.grouped_quantize_fp8(GroupedQuantizeFp8Args(x, E4M3, "MX_BLOCKWISE", lens, offs, 0, 32))),
        ("wt-bw128", lambda: grouped.grouped_quantize_fp8_with_trans(
            GroupedQuantizeFp8WithTransArgs(x, E4M3, "BLOCKWISE", lens, offs, 128)),
         lambda: ref.grouped_quantize_fp8_with_trans(GroupedQuantizeFp8WithTransArgs(x, E4M3, "BLOCKWISE", lens, offs,
                                                                                     128))),
        ("fp4-wt", lambda: grouped.grouped_quantize_fp4_with_trans(GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs)),
         lambda: ref.grouped_quantize_fp4_with_trans(GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs))),
    ]
    ok = True
    for cid, fn, ref_fn in cases:
        try:
            fn()  # compile outside the capture
            sync()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = fn()
            x.copy_(rand(m, n, in_dtype, seed=2))
            new_lens, new_offs = groups(m, g, tail, seed=7)
            lens.copy_(new_lens)
            offs.copy_(new_offs)
            graph.replay()
            sync()
            errors = {str(i): e for i, (a, b) in enumerate(zip(out, ref_fn(), strict=True)) if (e := compare(a, b))}
        except Exception:  # noqa: BLE001
            errors = {"exception": traceback.format_exc()}
        RESULTS["graph"].append({"case": cid, "shape": label, "ok": not errors, "errors": errors})
        log(("ok  " if not errors else "FAIL"), "graph", cid, errors or "")
        ok &= not errors
    return ok


def _nbytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


def _time_ms(fn):
    if DEV != "cuda":
        fn()
        return float("nan")
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def part_bench():
    copy_gbs = None
    if DEV == "cuda":
        big = torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
        dst = torch.empty_like(big)
        copy_gbs = 2 * big.numel() / _time_ms(lambda: dst.copy_(big)) / 1e6
        del big, dst
    RESULTS["copy_GBps"] = copy_gbs
    log(f"copy bandwidth (read + write): {copy_gbs} GB/s")
    log(f"{'case':28s} {'shape':22s} {'triton GB/s':>12s} {'ref GB/s':>10s} {'x ref':>7s} {'of copy':>8s}")
    for label, m, n, g, tail, in_dtype in SHAPES[:2] if DEV == "cuda" else SHAPES:
        x = rand(m, n, in_dtype, seed=3)
        lens, offs = groups(m, g, tail, seed=g)
        cases = []
        for cid, gran, axis, bs in FP8_CASES:
            cases.append((f"q8-{cid}", grouped.grouped_quantize_fp8, ref.grouped_quantize_fp8,
                          GroupedQuantizeFp8Args(x, E4M3, gran, lens, offs, axis, bs), "quant"))
        for cid, gran, bs in (("wt-bw128", "BLOCKWISE", 128), ("wt-mx", "MX_BLOCKWISE", 32)):
            cases.append((f"q8-{cid}", grouped.grouped_quantize_fp8_with_trans, ref.grouped_quantize_fp8_with_trans,
                          GroupedQuantizeFp8WithTransArgs(x, E4M3, gran, lens, offs, bs), "quant"))
        for axis in (1, 0):
            cases.append((f"q4-axis{axis}", grouped.grouped_quantize_fp4, ref.grouped_quantize_fp4,
                          GroupedQuantizeFp4Args(x, FP4, lens, offs, axis), "quant"))
        cases.append(("q4-wt", grouped.grouped_quantize_fp4_with_trans, ref.grouped_quantize_fp4_with_trans,
                      GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs), "quant"))
        for cid, gran, axis, bs in (("bw128-col", "BLOCKWISE", 0, 128), ("mx-row", "MX_BLOCKWISE", 1, 32),
                                    ("mx-col", "MX_BLOCKWISE", 0, 32)):
            q, s, _, op = ref.grouped_quantize_fp8(GroupedQuantizeFp8Args(x, E4M3, gran, lens, offs, axis, bs))
            cases.append((f"dq8-{cid}", grouped.grouped_dequantize_fp8, ref.grouped_dequantize_fp8,
                          GroupedDequantizeFp8Args(q, s, torch.bfloat16, gran, offs, op, int(offs[-1]), axis, bs),
                          "dequant"))
        for cid, fn, ref_fn, args, mode in cases:
            try:
                out = fn(args)
                out = out if isinstance(out, tuple) else (out,)
                data = [t for t in out if t.dtype not in (torch.int32, torch.int64)]
                moved = _nbytes(x, *data) if mode == "quant" else _nbytes(args.x, args.scale_inv, *data)
                t_tri = _time_ms(lambda fn=fn, args=args: fn(args))
                t_ref = _time_ms(lambda ref_fn=ref_fn, args=args: ref_fn(args))
                row = {"case": cid, "shape": label, "bytes": moved, "triton_ms": t_tri, "ref_ms": t_ref,
                       "triton_GBps": moved / t_tri / 1e6, "ref_GBps": moved / t_ref / 1e6,
                       "x_ref": t_ref / t_tri,
                       "of_copy": (moved / t_tri / 1e6 / copy_gbs) if copy_gbs else None}
                log(f"{cid:28s} {label:22s} {row['triton_GBps']:12.0f} {row['ref_GBps']:10.0f} {row['x_ref']:7.2f} "
                    f"{row['of_copy'] or float('nan'):8.2f}")
            except Exception:  # noqa: BLE001
                row = {"case": cid, "shape": label, "error": traceback.format_exc()}
                log("ERROR", cid, label, row["error"])
            RESULTS["bench"].append(row)
            del row
    return True


def main():
    RESULTS["env"] = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu"}
    ok = True
    for part in ARGS.parts.split(","):
        log(f"== {part}")
        ok &= {"check": part_check, "graph": part_graph, "bench": part_bench}[part]()
        with open(ARGS.out, "w") as f:
            json.dump(RESULTS, f, indent=1, default=str)
    log("ALL OK" if ok else "FAILURES (see above)")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
