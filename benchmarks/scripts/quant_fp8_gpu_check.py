"""GPU check and benchmark of the TRITON FP8 quantization kernels (run on the GPU machine).

Parts (``--parts``, default all, in this order):

* ``check``: ``quantize_fp8`` (TENSORWISE; ROWWISE axis -1/0; BLOCKWISE 1x128, 128x1, 1x32, 2-D
  128 and 32; MX row/col/2-D), ``quantize_fp8_with_trans`` (BLOCKWISE 128 and 32, MX with every
  recipe pair) and ``dequantize_fp8`` (fp32/bf16/fp16 out) against the TORCH reference kernels on
  the same CUDA tensors, bit for bit (NaN positions must match; payloads are free), at model
  shapes (tokens x hidden, weights) and odd ones, E4M3 and E5M2, bf16/fp32 inputs. Every output
  the Triton launchers allocate is poisoned first (``torch.empty`` filled with 0xA5 or 0x5A), so
  an element or scale that is never written shows up. A special-values input (zero blocks, NaN,
  +-Inf, saturation, fp32 subnormals) runs through every granularity.
* ``graph``: TENSORWISE (atomics + zeroed buffer), ROWWISE two-pass, MX and with_trans captured
  each in a CUDA graph and replayed on new data, compared with the reference.
* ``sweep``: tile configurations of each kernel family at one model shape, GB/s each (outputs
  checked against the heuristic's), to tune ``common.pick``.
* ``bench``: GB/s (bytes read + written: x once, q and scales once) of each Triton launcher, of the
  TORCH reference backend (eager) and of ``torch.compile`` of the same reference math, at model
  shapes; fraction of the measured copy bandwidth; ratio to eager and to compile.

Prints tables and writes everything to ``--out`` (JSON, rewritten after every part).

Usage (repository root, no install needed; torch 2.11 + triton 3.6 there):
  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \\
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \\
  python3 benchmarks/scripts/quant_fp8_gpu_check.py --out quant_fp8.json [--parts check,graph,sweep,bench]

Budget (each Triton variant compiles once, ~1-2 s; torch.compile ~5-15 s a case and shape): run
the parts as separate commands of at most 10 minutes each, e.g. ``--parts check,graph`` (~5 min),
``--parts sweep`` (~4 min), then ``--parts bench --shapes 16384x8192`` and ``--parts bench --shapes
8192x28672`` (add 16384x4096, 8192x16384, 4096x53248 as time allows; ``--cases`` narrows the
cases, ``--no-compile`` drops the compile provider), each with its own ``--out``. ``--smoke`` runs
every part at tiny sizes on the CPU interpreter to check the script itself.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback


def _parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--parts", default="check,graph,sweep,bench")
    p.add_argument("--shapes", default="16384x8192,8192x28672",
                   help="bench shapes MxN (tokens x hidden), comma separated")
    p.add_argument("--cases", default="", help="bench only these case ids (comma separated; default all)")
    p.add_argument("--no-compile", action="store_true", help="bench without the torch.compile provider")
    p.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU interpreter")
    p.add_argument("--shard", default="0/1",
                   help="check part: K/N runs every N-th input (from the K-th) and the graph part only in shard 0, "
                        "so that N processes share the (compile-bound) check")
    p.add_argument("--families", default="", help="sweep only these families (comma separated; default all)")
    p.add_argument("--check-cases", default="",
                   help="check only these case ids (comma separated; default all): a quantize or with_trans id checks "
                        "it (and the dequantize of a quantize case), dq-<id> only the dequantize of that case")
    p.add_argument("--check-shapes", default="", help="check only the random inputs of these shapes MxN "
                                                      "(comma separated; the special, 3-D and transposed inputs stay)")
    p.add_argument("--no-ref", action="store_true", help="bench the TRITON launchers only (no eager reference)")
    return p.parse_args()


ARGS = _parse()
if ARGS.smoke:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
from _bitcheck import bits, compare  # noqa: E402  (benchmarks/scripts, the script's own folder)

from turbo_core.dispatch.specs.quantization import (  # noqa: E402
    DequantizeFp8Args,
    QuantizeFp8Args,
    QuantizeFp8WithTransArgs,
)
from turbo_core.low_precision import ScalingRecipe  # noqa: E402
from turbo_core.reference import quantization as ref  # noqa: E402
from turbo_triton.quantization import dequantize, quantize, quantize_with_trans  # noqa: E402
from turbo_triton.quantization.common import Tile  # noqa: E402

DEV = "cpu" if ARGS.smoke else "cuda"
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
R0, R2D = ScalingRecipe(), ScalingRecipe(use_2d_block=True)
RESULTS: dict = {"check": [], "graph": [], "sweep": [], "bench": []}

#: (id, granularity, axis, block size, recipe)
QUANT = [
    ("tensorwise", "TENSORWISE", None, None, R0),
    ("rowwise-last", "ROWWISE", -1, None, R0),
    ("rowwise-first", "ROWWISE", 0, None, R0),
    ("block1x128", "BLOCKWISE", -1, 128, R0),
    ("block128x1", "BLOCKWISE", 0, 128, R0),
    ("block1x32", "BLOCKWISE", -1, 32, R0),
    ("block2d-128", "BLOCKWISE", None, 128, R2D),
    ("block2d-32", "BLOCKWISE", None, 32, R2D),
    ("mx-row", "MX_BLOCKWISE", -1, 32, R0),
    ("mx-col", "MX_BLOCKWISE", -2, 32, R0),
    ("mx-2d", "MX_BLOCKWISE", -1, 32, R2D),
]
#: (id, granularity, block size, recipe, recipe_for_trans)
WITH_TRANS = [
    ("wt-block128", "BLOCKWISE", 128, R0, R0),
    ("wt-block32", "BLOCKWISE", 32, R0, R0),
    ("wt-mx", "MX_BLOCKWISE", 32, R0, R0),
    ("wt-mx-2d-row", "MX_BLOCKWISE", 32, R2D, R0),
    ("wt-mx-2d-both", "MX_BLOCKWISE", 32, R2D, R2D),
]


def log(*a):
    print(*a, flush=True)


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


class Poisoned:
    """Within the block, ``torch.empty`` returns tensors whose bytes are all ``byte``."""

    def __init__(self, byte: int):
        self.byte = byte

    def __enter__(self):
        self.orig = torch.empty

        def empty(*a, **k):
            t = self.orig(*a, **k)
            if t.numel():
                t.view(-1).view(torch.uint8).fill_(self.byte)
            return t

        torch.empty = empty

    def __exit__(self, *exc):
        torch.empty = self.orig


def _record(kind, what, shape, dtype, outs, refs, names, **extra):
    errors = {n: e for n, a, b in zip(names, outs, refs, strict=True) if (e := compare(a, b))}
    row = {"what": kind, "case": what, "shape": list(shape), "dtype": str(dtype), "ok": not errors,
           "errors": errors, **extra}
    RESULTS["check"].append(row)
    if errors:
        log("FAIL", row)
    return not errors


def _rand(shape, dtype, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return (torch.randn(shape, device=DEV, generator=g) * 3).to(dtype)


def _special(shape, dtype):
    """Zero blocks, NaN, +-Inf, values that saturate under MX scales, fp32 subnormals."""
    x = _rand(shape, torch.float32, 99)
    m, n = shape
    x[: min(m, 130)] = 0  # whole zero rows, zero 128-row blocks and tiles
    x[:, :128] = 0
    x[min(m - 1, 200), min(n - 1, 300)] = math.nan
    x[min(m - 1, 300), min(n - 1, 700)] = math.inf
    x[min(m - 1, 400), min(n - 1, 1000)] = -math.inf
    x[min(m - 1, 500), min(n - 1, 1100)] = 500.0
    r = min(m - 1, 600)
    x[r] = x[r] * 1e-40  # a row of fp32 subnormals
    return x.to(dtype)


_SHARD_K, _SHARD_N = (int(v) for v in ARGS.shard.split("/"))
_CALLS = [0]


def _mine() -> bool:
    """Whether this process (``--shard K/N``) checks the next input."""
    _CALLS[0] += 1
    return (_CALLS[0] - 1) % _SHARD_N == _SHARD_K


_CHECK = {c.strip() for c in ARGS.check_cases.split(",") if c.strip()}


def _want(cid: str) -> bool:
    return not _CHECK or cid in _CHECK


def check_quant(x, dtype, label, poison):
    if not _mine():
        return True
    ok = True
    for cid, gran, axis, bs, recipe in QUANT:
        if not (_want(cid) or _want(f"dq-{cid}")):
            continue
        args = QuantizeFp8Args(x, dtype, gran, axis, bs, recipe)
        rq = ref.quantize_fp8(args)
        if _want(cid):
            with Poisoned(poison):
                out = quantize.quantize_fp8(args)
            sync()
            ok &= _record("quantize_fp8", f"{cid}{label}", x.shape, dtype, out, rq, ("q", "scale_inv"))
            del out
        for od in (torch.float32, torch.bfloat16, torch.float16):
            dargs = DequantizeFp8Args(rq[0], rq[1], od, gran, axis, bs, recipe)
            with Poisoned(poison):
                d = dequantize.dequantize_fp8(dargs)
            sync()
            ok &= _record("dequantize_fp8", f"{cid}{label}", x.shape, dtype, (d,), (ref.dequantize_fp8(dargs),),
                          ("out",), out_dtype=str(od))
        del rq
    if x.dim() == 2:
        for cid, gran, bs, r, rt in WITH_TRANS:
            if not _want(cid):
                continue
            args = QuantizeFp8WithTransArgs(x, dtype, gran, bs, r, rt)
            with Poisoned(poison):
                out = quantize_with_trans.quantize_fp8_with_trans(args)
            sync()
            ok &= _record("quantize_fp8_with_trans", f"{cid}{label}", x.shape, dtype, out,
                          ref.quantize_fp8_with_trans(args), ("q_row", "s_row", "q_col", "s_col"))
            del out
    return ok


def part_check():
    if ARGS.smoke:
        shapes = [(37, 45), (1, 130)]
    else:
        # tokens x hidden (activations), weights N x K, odd sizes, a long row (the two-pass
        # ROWWISE path) and a 3-D batch of weights.
        shapes = [(16384, 4096), (4095, 14337), (2048, 53248), (300, 18432), (1, 8192), (37, 45)]
    if ARGS.check_shapes:
        keep = {tuple(int(v) for v in c.split("x")) for c in ARGS.check_shapes.split(",") if c.strip()}
        shapes = [sh for sh in shapes if sh in keep]
    poison = 0xA5
    for i, shape in enumerate(shapes):
        t0 = time.time()
        for dtype, in_dtype in ((E4M3, torch.bfloat16), (E5M2, torch.bfloat16), (E4M3, torch.float32)):
            if (dtype, in_dtype) != (E4M3, torch.bfloat16) and i % 2:
                continue  # E5M2 and fp32 input on every other shape
            check_quant(_rand(shape, in_dtype, i), dtype, "", poison)
            poison ^= 0xFF  # alternate 0xA5 / 0x5A
        log(f"check {shape}: {time.time() - t0:.1f}s, failures so far "
            f"{sum(not r['ok'] for r in RESULTS['check'])}")
    special_shapes = [(37, 45)] if ARGS.smoke else [(4096, 4096)]
    for shape in special_shapes:
        for in_dtype in (torch.float32, torch.bfloat16):
            for dtype in (E4M3, E5M2):
                check_quant(_special(shape, in_dtype), dtype, "-special", 0xA5)
    b = _rand((3, 300, 700) if not ARGS.smoke else (2, 37, 45), torch.bfloat16, 5)
    check_quant(b, E4M3, "-3d", 0x5A)
    check_quant(_rand((8192, 4096) if not ARGS.smoke else (45, 37), torch.bfloat16, 6).t(), E4M3, "-transposed", 0xA5)
    bad = [r for r in RESULTS["check"] if not r["ok"]]
    log(f"check: {len(RESULTS['check']) - len(bad)} of {len(RESULTS['check'])} ok")


def part_graph():
    if DEV != "cuda" or _SHARD_K:
        log("graph: skipped off the GPU" if DEV != "cuda" else "graph: shard 0 runs it")
        return
    shape = (4096, 7168)
    x = _rand(shape, torch.bfloat16, 1)
    calls = [
        ("tensorwise", lambda t: quantize.quantize_fp8(QuantizeFp8Args(t, E4M3, "TENSORWISE")),
         lambda t: ref.quantize_fp8(QuantizeFp8Args(t, E4M3, "TENSORWISE"))),
        ("rowwise-first", lambda t: quantize.quantize_fp8(QuantizeFp8Args(t, E4M3, "ROWWISE", 0)),
         lambda t: ref.quantize_fp8(QuantizeFp8Args(t, E4M3, "ROWWISE", 0))),
        ("mx-col", lambda t: quantize.quantize_fp8(QuantizeFp8Args(t, E4M3, "MX_BLOCKWISE", -2, 32)),
         lambda t: ref.quantize_fp8(QuantizeFp8Args(t, E4M3, "MX_BLOCKWISE", -2, 32))),
        ("wt-block128", lambda t: quantize_with_trans.quantize_fp8_with_trans(QuantizeFp8WithTransArgs(t, E4M3, "BLOCKWISE", 128)),
         lambda t: ref.quantize_fp8_with_trans(QuantizeFp8WithTransArgs(t, E4M3, "BLOCKWISE", 128))),
        ("wt-mx", lambda t: quantize_with_trans.quantize_fp8_with_trans(QuantizeFp8WithTransArgs(t, E4M3, "MX_BLOCKWISE", 32)),
         lambda t: ref.quantize_fp8_with_trans(QuantizeFp8WithTransArgs(t, E4M3, "MX_BLOCKWISE", 32))),
    ]
    for name, fn, ref_fn in calls:
        if not (_want(name) or _want(f"graph-{name}")):
            continue
        try:
            static = x.clone()
            fn(static)  # compile outside the capture
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = fn(static)
            static.copy_(_rand(shape, torch.bfloat16, 2))
            g.replay()
            torch.cuda.synchronize()
            want = ref_fn(static)
            errors = {str(i): e for i, (a, b) in enumerate(zip(out, want, strict=True)) if (e := compare(a, b))}
            RESULTS["graph"].append({"case": name, "ok": not errors, "errors": errors})
            log(f"graph {name}: {'ok' if not errors else errors}")
        except Exception as exc:  # noqa: BLE001
            RESULTS["graph"].append({"case": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
            log(f"graph {name} FAILED: {exc}")


# ---- timing -------------------------------------------------------------------------------------

def _nbytes(*ts) -> int:
    total = 0
    for t in ts:
        if isinstance(t, (tuple, list)):
            total += _nbytes(*t)
        elif isinstance(t, torch.Tensor):
            total += t.numel() * t.element_size()
    return total


def _sets(x, bytes_per_set):
    from turbo_core.bench.timing import copies_needed

    n = 1 if ARGS.smoke else copies_needed(bytes_per_set)
    return [(x,)] + [(x.clone(),) for _ in range(n - 1)]


def _time(fn, sets):
    from turbo_core.bench.timing import measure

    t = measure(fn, sets, warmup=2 if ARGS.smoke else 10, iters=3 if ARGS.smoke else 50)
    return t


def _copy_gbps():
    from turbo_core.bench.suites.norm import copy_bandwidth

    if "copy_gbps" not in RESULTS:
        RESULTS["copy_gbps"] = copy_bandwidth(DEV)
        log(f"copy bandwidth {RESULTS['copy_gbps']:.0f} GB/s")
    return RESULTS["copy_gbps"]


def _cases(dtype=E4M3):
    """(id, kind, triton fn, reference fn) of x."""
    out = []
    for cid, gran, axis, bs, recipe in QUANT:
        spec = (dtype, gran, axis, bs, recipe)
        out.append((cid, "quantize", lambda x, s=spec: quantize.quantize_fp8(QuantizeFp8Args(x, *s)),
                    lambda x, s=spec: ref._quantize_fp8(x, *s)))
    for cid, gran, bs, r, rt in WITH_TRANS[:3]:
        spec = (dtype, gran, bs, r, rt)
        out.append((cid, "with_trans",
                    lambda x, s=spec: quantize_with_trans.quantize_fp8_with_trans(QuantizeFp8WithTransArgs(x, *s)),
                    lambda x, s=spec: ref.quantize_fp8_with_trans(QuantizeFp8WithTransArgs(x, *s))))
    return out


def _dequant_cases(dtype=E4M3):
    out = []
    for cid, gran, axis, bs, recipe in (QUANT[0], QUANT[1], QUANT[2], QUANT[3], QUANT[6], QUANT[8], QUANT[9]):
        out.append((f"dq-{cid}", gran, axis, bs, recipe))
    return out


def _sweep_family(name, args, launcher, configs, sets, nbytes, copy):
    """Time each config (``(label, call(args) -> outputs)``) and the heuristic; outputs checked
    against the heuristic's, bit for bit."""
    base = launcher(args)
    best = None
    for label, call in configs[:1] if ARGS.smoke else configs:
        try:
            got = call(args)
            errs = [e for a, b in zip(got, base, strict=True) if (e := compare(a, b))]
            t = _time(lambda t, a=args, c=call: c(type(a)(t, *_fields(a)[1:])), sets)
            gbps = nbytes / t.median_ms / 1e6
            row = {"family": name, "tile": label, "gbps": gbps, "copy_fraction": gbps / copy, "ok": not errs,
                   "p10_ms": t.p10_ms, "p90_ms": t.p90_ms}
            if errs:
                row["errors"] = errs
        except Exception as exc:  # noqa: BLE001
            row = {"family": name, "tile": label, "ok": False, "error": str(exc)[:300]}
        RESULTS["sweep"].append(row)
        log(f"  {name} {label}: " + (f"{row['gbps']:.0f} GB/s ({row['copy_fraction']:.0%}){'' if row['ok'] else ' MISMATCH'}"
                                     if "gbps" in row else row["error"][:200]))
        if row.get("ok") and (best is None or row["gbps"] > best["gbps"]):
            best = row
    t = _time(lambda t, a=args: launcher(type(a)(t, *_fields(a)[1:])), sets)
    heur = nbytes / t.median_ms / 1e6
    RESULTS["sweep"].append({"family": name, "tile": "heuristic", "gbps": heur, "copy_fraction": heur / copy, "ok": True})
    log(f"sweep {name}: heuristic {heur:.0f} GB/s ({heur / copy:.0%}); best {best['gbps']:.0f} GB/s at {best['tile']}"
        if best else f"sweep {name}: heuristic {heur:.0f} GB/s; no valid config")


def _tile_configs(launcher, tiles, gm, gn, warps=(4, 8)):
    out = []
    for bm, bn in tiles:
        for w in warps:
            if bm < gm or bn < gn or bm * bn > 65536 or bm * bn < w * 32:
                continue
            tile = Tile(bm, bn, w)
            out.append(([bm, bn, w], lambda a, t=tile: launcher(a, t)))
    return out


def _amax_cast_configs(launcher, pairs):
    """Configs of the two-pass path: ``common.pick_amax_cast`` patched to give (amax tile with
    its iters, cast tile)."""
    from turbo_triton.quantization import common

    def call(a, at, ct):
        orig = common.pick_amax_cast
        common.pick_amax_cast = lambda *_a, **_k: (at, ct)
        try:
            return launcher(a)
        finally:
            common.pick_amax_cast = orig

    return [([list(at.__dict__.values()), list(ct.__dict__.values())[:3]], lambda a, at=at, ct=ct: call(a, at, ct))
            for at, ct in pairs]


def part_sweep():
    shape = (128, 256) if ARGS.smoke else (16384, 8192)
    x = _rand(shape, torch.bfloat16, 3)
    copy = _copy_gbps()
    qz, wt = quantize.quantize_fp8, quantize_with_trans.quantize_fp8_with_trans
    T = Tile
    c8, c32 = T(8, 1024, 8), T(32, 256, 8)
    families = [
        ("block128x1", QuantizeFp8Args(x, E4M3, "BLOCKWISE", 0, 128),
         _tile_configs(qz, [(128, 32), (128, 64), (128, 128)], 128, 1, (2, 4, 8))),
        ("mx-col", QuantizeFp8Args(x, E4M3, "MX_BLOCKWISE", -2, 32),
         _tile_configs(qz, [(32, 128), (64, 64), (64, 128), (128, 64)], 32, 1)),
        ("wt-block128", QuantizeFp8WithTransArgs(x, E4M3, "BLOCKWISE", 128),
         _tile_configs(wt, [(128, 128)], 128, 128, (4, 8, 16))),
        ("wt-mx", QuantizeFp8WithTransArgs(x, E4M3, "MX_BLOCKWISE", 32),
         _tile_configs(wt, [(32, 128), (64, 64), (64, 128)], 32, 32)),
        ("rowwise-first", QuantizeFp8Args(x, E4M3, "ROWWISE", 0),
         _amax_cast_configs(qz, [(T(8, 1024, 8, 16), c32), (T(8, 1024, 8, 32), c32), (T(8, 1024, 8, 8), c32),
                                 (T(16, 512, 8, 16), c32), (T(8, 1024, 8, 16), c8), (T(8, 1024, 8, 16), T(64, 128, 4))])),
        ("tensorwise", QuantizeFp8Args(x, E4M3, "TENSORWISE"),
         _amax_cast_configs(qz, [(T(8, 1024, 8, 64), c8), (T(16, 1024, 8, 32), c8), (T(8, 1024, 8, 16), T(16, 1024, 8)),
                                 (T(8, 1024, 8, 128), c8)])),
        ("block1x128", QuantizeFp8Args(x, E4M3, "BLOCKWISE", -1, 128),
         _tile_configs(qz, [(8, 1024), (16, 512), (32, 256)], 1, 128)),
    ]
    wanted = {f.strip() for f in ARGS.families.split(",") if f.strip()}
    for name, args, configs in families:
        if wanted and name not in wanted:
            continue
        launcher = wt if isinstance(args, QuantizeFp8WithTransArgs) else qz
        nbytes = _nbytes(x, launcher(args))
        _sweep_family(name, args, launcher, configs, _sets(x, nbytes), nbytes, copy)
    if not wanted or "dq-mx-col" in wanted:
        q, s = ref._quantize_fp8(x, E4M3, "MX_BLOCKWISE", -2, 32, R0)
        dargs = DequantizeFp8Args(q, s, torch.bfloat16, "MX_BLOCKWISE", -2, 32, R0)
        nbytes = _nbytes(q, s) + q.numel() * 2
        dq = dequantize.dequantize_fp8
        _sweep_family("dq-mx-col", dargs, dq,
                      _tile_configs(dq, [(64, 128), (32, 128), (128, 64), (64, 256)], 1, 1),
                      _sets(q, nbytes), nbytes, copy)
    del x


def _fields(a):
    from dataclasses import fields

    return [getattr(a, f.name) for f in fields(a)]


def part_bench():
    copy = _copy_gbps()
    shapes = [(64, 256), (33, 130)] if ARGS.smoke else [tuple(int(v) for v in s.split("x")) for s in ARGS.shapes.split(",")]
    use_compile = not ARGS.no_compile and DEV == "cuda"
    wanted = {c.strip() for c in ARGS.cases.split(",") if c.strip()}
    if use_compile:
        import torch._dynamo as dynamo

        dynamo.config.cache_size_limit = 256
    rows = []
    for shape in shapes:
        x = _rand(shape, torch.bfloat16, 7)
        for cid, kind, tri, ref_fn in _cases():
            if wanted and cid not in wanted:
                continue
            base = tri(x)
            nbytes = _nbytes(x, base)
            sets = _sets(x, nbytes)
            providers = [("triton", tri)] + ([] if ARGS.no_ref else [("torch-ref", ref_fn)])
            if use_compile:
                providers.append(("compile", torch.compile(ref_fn, dynamic=False)))
            row = {"case": cid, "kind": kind, "shape": list(shape), "bytes": nbytes}
            for pname, fn in providers:
                # Inductor has no float8_e8m0fnu codegen on some versions: the compiled reference
                # writes the same scale bytes as uint8 instead.
                e8m0 = ref.E8M0_DTYPE
                if pname == "compile":
                    ref.E8M0_DTYPE = torch.uint8
                try:
                    t = _time(fn, sets)
                    row[pname] = {"gbps": nbytes / t.median_ms / 1e6, "median_ms": t.median_ms,
                                  "p10_ms": t.p10_ms, "p90_ms": t.p90_ms}
                    if pname == "compile":
                        row["compile_bit_identical"] = all(
                            compare(bits(a), bits(b)) is None for a, b in zip(fn(x), base, strict=True))
                except Exception as exc:  # noqa: BLE001
                    row[pname] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
                finally:
                    ref.E8M0_DTYPE = e8m0
            rows.append(row)
            _print_row(row, copy)
        for cid, gran, axis, bs, recipe in _dequant_cases():
            if wanted and cid not in wanted:
                continue
            q, s = ref._quantize_fp8(x, E4M3, gran, axis, bs, recipe)
            nbytes = _nbytes(q, s) + q.numel() * 2  # read q and the scales, write bf16
            args = DequantizeFp8Args(q, s, torch.bfloat16, gran, axis, bs, recipe)

            def tri_fn(qq, a=args):
                return dequantize.dequantize_fp8(DequantizeFp8Args(qq, *_fields(a)[1:]))

            def ref_d(qq, a=args):
                return ref._dequantize_fp8(qq, a.scale_inv, a.out_dtype, a.granularity, a.axis, a.block_size, a.recipe)

            sets = _sets(q, nbytes)
            providers = [("triton", tri_fn)] + ([] if ARGS.no_ref else [("torch-ref", ref_d)])
            if use_compile:
                providers.append(("compile", torch.compile(ref_d, dynamic=False)))
            row = {"case": cid, "kind": "dequantize", "shape": list(shape), "bytes": nbytes}
            for pname, fn in providers:
                try:
                    t = _time(fn, sets)
                    row[pname] = {"gbps": nbytes / t.median_ms / 1e6, "median_ms": t.median_ms,
                                  "p10_ms": t.p10_ms, "p90_ms": t.p90_ms}
                except Exception as exc:  # noqa: BLE001
                    row[pname] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            rows.append(row)
            _print_row(row, copy)
        del x
        if DEV == "cuda":
            torch.cuda.empty_cache()
    RESULTS["bench"] += rows
    _summary(rows)


def _gb(row, p):
    return row.get(p, {}).get("gbps")


def _print_row(row, copy):
    t, e, c = _gb(row, "triton"), _gb(row, "torch-ref"), _gb(row, "compile")
    parts = [f"{row['case']:<14} {'x'.join(map(str, row['shape'])):<12}"]
    parts.append(f"triton {t:7.0f} GB/s ({t / copy:4.0%})" if t else "triton failed")
    parts.append(f"eager {e:7.0f} ({t / e:5.2f}x)" if e and t else "eager -")
    parts.append(f"compile {c:7.0f} ({t / c:5.2f}x)" if c and t else "compile -")
    log("  ".join(parts))


def _summary(rows):
    by = {}
    for r in rows:
        t, e, c = _gb(r, "triton"), _gb(r, "torch-ref"), _gb(r, "compile")
        if t:
            d = by.setdefault(r["case"], {"vs_eager": [], "vs_compile": [], "gbps": []})
            d["gbps"].append(t)
            if e:
                d["vs_eager"].append(t / e)
            if c:
                d["vs_compile"].append(t / c)

    def geo(v):
        return math.exp(sum(math.log(u) for u in v) / len(v)) if v else float("nan")

    RESULTS["summary"] = {k: {m: geo(v) for m, v in d.items()} for k, d in by.items()}
    log("geomean per case: " + "; ".join(f"{k} {v['gbps']:.0f} GB/s, x{v['vs_eager']:.2f} eager, "
                                          f"x{v['vs_compile']:.2f} compile" for k, v in RESULTS["summary"].items()))


def main():
    from turbo_core.bench.runner import environment

    RESULTS["environment"] = environment(DEV)
    RESULTS["environment"]["argv"] = sys.argv
    parts = [p.strip() for p in ARGS.parts.split(",") if p.strip()]
    for part in parts:
        t0 = time.time()
        log(f"== {part}")
        try:
            {"check": part_check, "graph": part_graph, "sweep": part_sweep, "bench": part_bench}[part]()
        except Exception:
            RESULTS.setdefault("errors", []).append({"part": part, "traceback": traceback.format_exc()})
            log(traceback.format_exc())
        log(f"== {part} took {time.time() - t0:.0f}s")
        with open(ARGS.out, "w") as fh:
            json.dump(RESULTS, fh, indent=1, default=str)
    log(f"wrote {ARGS.out}")
    failed = [r for r in RESULTS["check"] + RESULTS["graph"] if not r.get("ok")]
    sys.exit(1 if failed or RESULTS.get("errors") else 0)


if __name__ == "__main__":
    main()
