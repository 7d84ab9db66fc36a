"""GPU check and bandwidth of the TRITON MoE router (moe_routing_fwd/bwd) and MXFP4 quantize/dequantize.

What it does, each result one JSON row (``ok`` plus the numbers or the error):

1. ``router``: model shapes (DeepSeek-V3: E 256, top-8, 8 groups, 4 kept, sigmoid, scale 2.5;
   Qwen3-MoE: E 128, top-8, softmax; Mixtral: E 8, top-2, softmax) at T in 1..65536, bf16 (and fp32
   at one size), TRITON against the TORCH reference on the same GPU (fp32 math in both):
   ``routing_map`` row by row (a row that differs is counted, and counted again as a near tie when
   the reference's raw scores summed over the two selections agree to 1e-6: a different fp32 sum
   order in the softmax can swap two experts whose scores differ in the last bit), scores / probs
   / grad_logits within the bf16/fp32 tolerances (plus how many elements differ in any bit). Inputs:
   randn logits (bf16 has many exact ties inside a row) and a tie-heavy case (small integers).
   The TRITON calls run under ``torch.cuda.set_sync_debug_mode("error")`` (a host sync raises).
2. ``router_graph``: forward + backward captured in a CUDA graph and replayed.
3. ``fp4``: MXFP4 quantize (row-wise, col-wise, 32x32), quantize_with_trans and dequantize at
   model-like [M, N] (and odd sizes), against the reference bit for bit (NaN payloads aside).
4. ``bench``: median / p20 / p80 (``triton.testing.do_bench``, L2 flushed between reps; ``--timing held``: the
   same, the GPU held while the calls are enqueued, i.e. device time) and GB/s
   from an explicit byte count (inputs read once, outputs written once) for TRITON and the TORCH
   reference (eager); ``copy`` gives the device-to-device copy bandwidth for scale.

Usage (repository root, no install needed):
  PYTHONPATH=packages/turbo-core/src:packages/turbo-triton/src \
  TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin \
  python3 benchmarks/scripts/router_fp4_gpu_check.py --out router_fp4_gpu_check.json [--quick]
Exit status 0 when every correctness row is ok.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import traceback

import torch
import triton

from turbo_core.dispatch.specs.moe import MoeRoutingBwdArgs, MoeRoutingFwdArgs
from turbo_core.dispatch.specs.quantization import DequantizeFp4Args, QuantizeFp4Args, QuantizeFp4WithTransArgs
from turbo_core.low_precision import FLOAT4_E2M1FN_X2, ScalingRecipe
from turbo_core.reference import moe_routing as ref_routing
from turbo_core.reference import quantization as ref_quant
from turbo_core.testing.numerics import tolerance
from turbo_triton.moe import routing
from turbo_triton.quantization import fp4
from turbo_triton.quantization.common import Tile

DEV = torch.device("cuda")
# (name, E, topk, groups, selected_groups, score function)
ROUTERS = [
    ("dsv3", 256, 8, 8, 4, "sigmoid"),
    ("qwen3", 128, 8, 1, 1, "softmax"),
    ("mixtral", 8, 2, 1, 1, "softmax"),
]
TOKENS = [1, 7, 128, 1024, 4096, 16384, 65536]
SCALE = 2.5
# (name, M, N): activations/weights of DeepSeek-V3 (7168), Llama-70B (8192 / 28672), Qwen3 (4096), odd.
FP4_SHAPES = [("dsv3-act", 16384, 7168), ("llama70b-w", 8192, 28672), ("qwen3-act", 32768, 4096),
              ("odd", 777, 1000), ("tiny", 1, 32)]
ROWS: list[dict] = []


def _row(kind: str, **kw) -> dict:
    r = {"kind": kind, **kw}
    ROWS.append(r)
    print(json.dumps(r), flush=True)
    return r


def _strict(fn, *a, **kw):
    """``fn`` once to compile, then again with host syncs forbidden."""
    fn(*a, **kw)
    torch.cuda.set_sync_debug_mode("error")
    try:
        return fn(*a, **kw)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _bits_differ(a: torch.Tensor, b: torch.Tensor) -> int:
    return int((a.contiguous().view(torch.uint8) != b.contiguous().view(torch.uint8)).sum())


def _close(a: torch.Tensor, b: torch.Tensor, dtype) -> tuple[bool, float]:
    rtol, atol = tolerance(dtype)
    ok = bool(torch.isclose(a.float(), b.float(), rtol=rtol, atol=atol, equal_nan=True).all())
    diff = (a.float() - b.float()).abs().nan_to_num(0.0)
    return ok, float(diff.max()) if diff.numel() else 0.0


def _raw(logits: torch.Tensor, fn: str) -> torch.Tensor:
    x = logits.float()
    return torch.sigmoid(x) if fn == "sigmoid" else torch.softmax(x, -1)


# -- router -----------------------------------------------------------------------------------------

def _logits(t, e, dtype, kind, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    if kind == "ties":
        return torch.randint(-2, 3, (t, e), generator=g, device=DEV).to(dtype)
    return torch.randn((t, e), generator=g, device=DEV).to(dtype)


def check_router(name, e, topk, groups, sel, fn, t, dtype, kind) -> None:
    x = _logits(t, e, dtype, kind)
    a = MoeRoutingFwdArgs(x, topk, groups, sel, fn, SCALE)
    reason = routing.can_handle(a)
    if reason:
        _row("router", shape=name, T=t, ok=False, error=reason)
        return
    got = _strict(routing.moe_routing_fwd, a)
    want = ref_routing.moe_routing_fwd(a)
    diff_rows = (got[2] != want[2]).any(1)
    n_diff = int(diff_rows.sum())
    near = 0
    if n_diff:
        raw = _raw(x, fn)[diff_rows]
        s_got = (raw * got[2][diff_rows]).sum(1)
        s_want = (raw * want[2][diff_rows]).sum(1)
        near = int(((s_got - s_want).abs() <= 1e-6 * s_want.abs()).sum())
    exact_k = bool((got[2].sum(1) == topk).all())
    ok_s, d_s = _close(got[0], want[0], dtype)
    ok_p, d_p = _close(got[1], want[1], dtype)
    g = torch.Generator(device=DEV).manual_seed(1)
    gs = torch.randn((t, e), generator=g, device=DEV).to(dtype)
    gp = torch.randn((t, e), generator=g, device=DEV).to(dtype)
    b = MoeRoutingBwdArgs(x, want[2], gs, gp, fn, SCALE)
    gg = _strict(routing.moe_routing_bwd, b)
    gw = ref_routing.moe_routing_bwd(b)
    ok_g, d_g = _close(gg, gw, dtype)
    ok = n_diff == near and exact_k and ok_s and ok_p and ok_g
    _row("router", shape=name, T=t, E=e, topk=topk, groups=groups, selected_groups=sel, fn=fn, dtype=str(dtype),
         inputs=kind, ok=ok, map_rows_differ=n_diff, map_rows_near_tie=near, exactly_topk=exact_k,
         scores_ok=ok_s, scores_max_diff=d_s, scores_bits_differ=_bits_differ(got[0], want[0]),
         probs_ok=ok_p, probs_max_diff=d_p, probs_bits_differ=_bits_differ(got[1], want[1]),
         grad_ok=ok_g, grad_max_diff=d_g, grad_bits_differ=_bits_differ(gg, gw), numel=t * e)


def router_graph() -> None:
    name, e, topk, groups, sel, fn = ROUTERS[0]
    x = _logits(4096, e, torch.bfloat16, "randn")
    gs = torch.randn_like(x)
    gp = torch.randn_like(x)

    def step():
        s, p, m = routing.moe_routing_fwd(MoeRoutingFwdArgs(x, topk, groups, sel, fn, SCALE))
        return s, p, m, routing.moe_routing_bwd(MoeRoutingBwdArgs(x, m, gs, gp, fn, SCALE))

    eager = step()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = step()
    graph.replay()
    torch.cuda.synchronize()
    _row("router_graph", shape=name, T=4096, ok=all(_bits_differ(a, b) == 0 for a, b in zip(outs, eager, strict=True)))


# -- FP4 --------------------------------------------------------------------------------------------

def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    nan = torch.isnan(a)
    return bool(torch.equal(nan, torch.isnan(b))) and _bits_differ(a[~nan], b[~nan]) == 0


def _fp4_input(m, n, dtype, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = torch.randn((m, n), generator=g, device=DEV) * torch.logspace(-3, 3, n, device=DEV)
    x = x.to(dtype)
    if m * n > 64:
        x.view(-1)[5] = float("nan")  # one NaN block
        x.view(-1)[m * n // 2] = float("inf")
    return x


def _quant_dequant_fails(x, outs, detail: bool = False) -> list[str]:
    """quantize_fp4 both axes, 1-D and 2-D blocks, bit-compared with the reference, and each
    reference quantization dequantized to every dtype of ``outs``: the failing calls' names."""
    fails = []
    for axis in (-1, -2):
        for two_d in (False, True):
            a = QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, axis, recipe=ScalingRecipe(use_2d_block=two_d))
            got = _strict(fp4.quantize_fp4, a)
            want = ref_quant.quantize_fp4(a)
            differ = [_bits_differ(p, q) for p, q in zip(got, want, strict=True)]
            if any(differ):
                fails.append(f"quantize axis={axis} 2d={two_d}" + (f": {differ}" if detail else ""))
            for out in outs:
                d = DequantizeFp4Args(want[0], want[1], out, axis)
                if not _same_values(_strict(fp4.dequantize_fp4, d), ref_quant.dequantize_fp4(d)):
                    fails.append(f"dequantize axis={axis} 2d={two_d} {out}")
    return fails


def check_fp4(name, m, n, dtype) -> None:
    x = _fp4_input(m, n, dtype)
    fails = _quant_dequant_fails(x, (torch.bfloat16, torch.float32))
    t = QuantizeFp4WithTransArgs(x, FLOAT4_E2M1FN_X2, recipe_for_trans=ScalingRecipe(use_2d_block=True))
    got = _strict(fp4.quantize_fp4_with_trans, t)
    if any(_bits_differ(p, q) for p, q in zip(got, ref_quant.quantize_fp4_with_trans(t), strict=True)):
        fails.append("quantize_with_trans")
    _row("fp4", shape=name, M=m, N=n, dtype=str(dtype), ok=not fails, fails=fails)


def _special_input(dtype) -> torch.Tensor:
    """[64, 256] blocks of edge cases, one kind per 32-wide block of each row group: E2M1 midpoints
    and grid points at several scales, subnormal bf16 blocks (amax subnormal: X = -127), tiny
    values beside a large one (underflow on scaling), NaN (either sign) and +-Inf blocks with
    large finite neighbours, -0.0 and all-zero blocks; then the transpose's column blocks see the
    same values mixed."""
    g = torch.Generator(device=DEV).manual_seed(7)
    grid = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0],
                        device=DEV)
    x = torch.zeros(64, 256, device=DEV)
    sgn = torch.where(torch.rand(64, 32, generator=g, device=DEV) < 0.5, -1.0, 1.0)
    x[:, 0:32] = grid[torch.randint(0, 16, (64, 32), generator=g, device=DEV)] * sgn * 2.0 ** torch.randint(
        -8, 8, (64, 1), generator=g, device=DEV).float()
    x[:, 32:64] = torch.randint(1, 128, (64, 32), generator=g, device=DEV).float() * 2.0 ** -133 * sgn  # subnormal
    x[:, 64:96] = torch.randn(64, 32, generator=g, device=DEV) * 1e-30
    x[:, 64] = 1e10
    x[:, 96:128] = torch.randn(64, 32, generator=g, device=DEV) * 1e20
    x[::2, 97] = float("nan")
    x[1::2, 98] = -float("nan")
    x[::3, 99] = -float("inf")
    x[:, 128:160] = torch.where(sgn < 0, -0.0, 0.0)
    x[:, 160:192] = torch.randn(64, 32, generator=g, device=DEV) * 2.0 ** -120
    x[:, 192:224] = float("inf")
    x[:, 224:256] = (torch.rand(64, 32, generator=g, device=DEV) * 7.0) * sgn
    return x.to(dtype)


def _with_trans_fails(x) -> list[str]:
    """quantize_fp4_with_trans of ``x`` (1-D row blocks with 2-D column blocks and the reverse) against
    the reference, bit for bit: the names of the cases that differ."""
    fails = []
    for two_d in (False, True):
        t = QuantizeFp4WithTransArgs(x, FLOAT4_E2M1FN_X2, recipe=ScalingRecipe(use_2d_block=two_d),
                                     recipe_for_trans=ScalingRecipe(use_2d_block=not two_d))
        got = _strict(fp4.quantize_fp4_with_trans, t)
        if any(_bits_differ(p, q) for p, q in zip(got, ref_quant.quantize_fp4_with_trans(t), strict=True)):
            fails.append(f"quantize_with_trans 2d={two_d}")
    return fails


def check_fp4_special(f32mul: bool, row_pairs: bool = False) -> None:
    fp4.F32MUL = f32mul
    fp4.ROW_PAIRS = row_pairs
    try:
        x = _special_input(torch.bfloat16)
        fails = _quant_dequant_fails(x, (torch.bfloat16, torch.float32, torch.float16), detail=True)
        fails += _with_trans_fails(x)
        _row("fp4", shape="special 64x256", f32mul=f32mul, row_pairs=row_pairs, ok=not fails, fails=fails)
    finally:
        fp4.F32MUL = False
        fp4.ROW_PAIRS = False


def check_fp4_variant(name, m, n, **flags) -> None:
    """quantize_fp4 (both axes, 1-D and 2-D blocks) and with_trans run with the ``fp4`` module settings
    ``flags`` (e.g. ``ROW_PAIRS``), against the reference bit for bit."""
    old = {k: getattr(fp4, k) for k in flags}
    for k, v in flags.items():
        setattr(fp4, k, v)
    try:
        x = _fp4_input(m, n, torch.bfloat16)
        fails = []
        for axis in (-1, -2):
            for two_d in (False, True):
                a = QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, axis, recipe=ScalingRecipe(use_2d_block=two_d))
                got = _strict(fp4.quantize_fp4, a)
                if any(_bits_differ(p, q) for p, q in zip(got, ref_quant.quantize_fp4(a), strict=True)):
                    fails.append(f"quantize axis={axis} 2d={two_d}")
        fails += _with_trans_fails(x)
        _row("fp4", shape=name, M=m, N=n, variant=flags, ok=not fails, fails=fails)
    finally:
        for k, v in old.items():
            setattr(fp4, k, v)


def _flags(**kw):
    """``fn(tile)`` run with the ``fp4`` module settings ``kw`` (then restored)."""
    def wrap(fn):
        def run(t):
            old = {k: getattr(fp4, k) for k in kw}
            for k, v in kw.items():
                setattr(fp4, k, v)
            try:
                return fn(t)
            finally:
                for k, v in old.items():
                    setattr(fp4, k, v)
        return run
    return wrap


def sweep_fp4(m, n) -> None:
    """Tiles of the FAST and pair kernels at one shape: each output bit-compared with the first of its
    op (the default tile), timed."""
    x = _fp4_input(m, n, torch.bfloat16, seed=4)
    q_bytes = m * n // 2 + m * n // 32
    qb = m * n * 2 + q_bytes
    a1 = QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, -1)
    a2 = QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, -2)
    w = QuantizeFp4WithTransArgs(x, FLOAT4_E2M1FN_X2)
    q1 = lambda t: fp4.quantize_fp4(a1, t)  # noqa: E731
    q2 = lambda t: fp4.quantize_fp4(a2, t)  # noqa: E731
    qw = lambda t: fp4.quantize_fp4_with_trans(w, t)  # noqa: E731
    rp = _flags(ROW_PAIRS=True)
    wb = m * n * 2 + 2 * q_bytes
    cases = [("quantize_fp4 axis-1", qb, q1, t) for t in [(16, 256, 2), (32, 256, 4), (8, 256, 1)]]
    cases += [("quantize_fp4 axis-1 rowpairs", qb, rp(q1), t) for t in [(16, 256, 2), (8, 256, 1), (16, 512, 4)]]
    cases += [("quantize_fp4 axis-2", qb, q2, t) for t in [(64, 128, 2), (64, 64, 1), (64, 32, 1), (64, 128, 1),
                                                           (64, 64, 2)]]
    cases += [("quantize_fp4_with_trans", wb, qw, t) for t in [(32, 128, 2), (32, 64, 1), (32, 128, 1)]]
    for axis, tiles in ((-2, [(128, 32, 8), (128, 64, 8), (64, 32, 4)]), (-1, [(8, 256, 4), (16, 64, 2), (8, 128, 2)])):
        q, s = ref_quant.quantize_fp4(QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, axis))
        d = DequantizeFp4Args(q, s, torch.bfloat16, axis)
        cases += [(f"dequantize_fp4 axis{axis}", q_bytes + m * n * 2, lambda t, d=d: fp4.dequantize_fp4(d, t), t)
                  for t in tiles]
    refs = {}
    for op, nbytes, fn, (bm, bn, wp) in cases:
        try:
            tile = Tile(bm, bn, wp)
            out = fn(tile)
            outs = out if isinstance(out, tuple) else (out,)
            key = op.removesuffix(" f32mul").removesuffix(" rowpairs")
            if key not in refs:
                refs[key] = [o.clone() for o in outs]
            same = all(_bits_differ(p, q) == 0 for p, q in zip(outs, refs[key], strict=True))
            ms, lo, hi = _time(lambda fn=fn, tile=tile: fn(tile))
            _row("sweep", op=op, shape=f"{m}x{n}", tile=[bm, bn, wp], ms=ms, p20=lo, p80=hi,
                 gbps=nbytes / ms / 1e6, same_as_first=same, ok=same)
        except Exception as exc:  # noqa: BLE001
            _row("sweep", op=op, shape=f"{m}x{n}", tile=[bm, bn, wp], ok=False, error=repr(exc)[:300])


# -- timing -----------------------------------------------------------------------------------------

TIMING = "do_bench"  # --timing: "do_bench" (the figures of sessions 5-11) or "held" (device time)
_SLEEP_CYCLES = 300_000_000  # ~0.15 s at H200 clocks: longer than enqueueing the timed iterations


def _time(fn) -> tuple[float, float, float]:
    """Median, p20, p80 in ms. ``do_bench``: its events around each call, the L2 flushed before it; a
    call shorter than its Python launch path is timed at the host's pace (the session-12 grouped
    re-check). ``held``: the same flush-and-events loop, but enqueued behind a sleep kernel, so the GPU
    runs the calls back to back and the events hold device time only."""
    if TIMING == "do_bench":
        q = triton.testing.do_bench(fn, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8])
        return tuple(float(v) for v in q)
    cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")  # do_bench's flush size
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(60)]
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(_SLEEP_CYCLES)
    for start, end in events:
        cache.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    ms = sorted(start.elapsed_time(end) for start, end in events)
    return ms[len(ms) // 2], ms[len(ms) // 5], ms[(4 * len(ms)) // 5]


def _bench(op, shape, nbytes, impls) -> None:
    for impl, fn in impls.items():
        try:
            fn()
            ms, lo, hi = _time(fn)
            _row("bench", op=op, shape=shape, impl=impl, ms=ms, p20=lo, p80=hi, gbps=nbytes / ms / 1e6, ok=True)
        except Exception as exc:  # noqa: BLE001  (a failing provider is a row, not the end of the run)
            _row("bench", op=op, shape=shape, impl=impl, ok=False, error=repr(exc)[:300])


def bench_router(name, e, topk, groups, sel, fn, t) -> None:
    dtype = torch.bfloat16
    es = 2
    x = _logits(t, e, dtype, "randn", seed=3)
    fa = MoeRoutingFwdArgs(x, topk, groups, sel, fn, SCALE)
    rmap = ref_routing.moe_routing_fwd(fa)[2]
    gs, gp = torch.randn_like(x), torch.randn_like(x)
    ba = MoeRoutingBwdArgs(x, rmap, gs, gp, fn, SCALE)
    shape = f"{name} T{t} E{e} k{topk} g{groups}/{sel}"
    fwd_bytes = t * e * (es + 2 * es + 1)  # logits in; scores, probs, routing_map out
    bwd_bytes = t * e * (es + 1 + 2 * es + es)  # logits, map, two grads in; grad_logits out
    _bench("moe_routing_fwd", shape, fwd_bytes, {"triton": lambda: routing.moe_routing_fwd(fa),
                                                 "torch": lambda: ref_routing.moe_routing_fwd(fa)})
    _bench("moe_routing_bwd", shape, bwd_bytes, {"triton": lambda: routing.moe_routing_bwd(ba),
                                                 "torch": lambda: ref_routing.moe_routing_bwd(ba)})


def bench_fp4(name, m, n, with_torch: bool = True, generic: bool = False) -> None:
    """``generic``: also the fp32 kernels the FAST, pair and PTX-decode paths replaced
    (``fp4.FAST_ENABLED = False``), as impl ``triton-generic``."""
    x = _fp4_input(m, n, torch.bfloat16, seed=4)
    shape = f"{name} {m}x{n} bf16"

    def gen(fn):
        def run():
            fp4.FAST_ENABLED = False
            try:
                return fn()
            finally:
                fp4.FAST_ENABLED = True
        return run

    def impls(tri, ref):
        d = {"triton": tri}
        if generic:
            d["triton-generic"] = gen(tri)
        if with_torch:
            d["torch"] = ref
        return d
    q_bytes = m * n // 2 + m * n // 32  # packed data + one E8M0 byte per 32 (padding ignored)
    for axis in (-1, -2):
        a = QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, axis)
        _bench(f"quantize_fp4 axis{axis}", shape, m * n * 2 + q_bytes,
               impls(lambda a=a: fp4.quantize_fp4(a), lambda a=a: ref_quant.quantize_fp4(a)))
        q, s = ref_quant.quantize_fp4(a)
        d = DequantizeFp4Args(q, s, torch.bfloat16, axis)
        _bench(f"dequantize_fp4 axis{axis}", shape, q_bytes + m * n * 2,
               impls(lambda d=d: fp4.dequantize_fp4(d), lambda d=d: ref_quant.dequantize_fp4(d)))
    t = QuantizeFp4WithTransArgs(x, FLOAT4_E2M1FN_X2)
    _bench("quantize_fp4_with_trans", shape, m * n * 2 + 2 * q_bytes,
           impls(lambda: fp4.quantize_fp4_with_trans(t), lambda: ref_quant.quantize_fp4_with_trans(t)))


def copy_bandwidth() -> None:
    a = torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
    b = torch.empty_like(a)
    ms, lo, hi = _time(lambda: b.copy_(a))
    _row("copy", bytes=2 * a.numel(), ms=ms, gbps=2 * a.numel() / ms / 1e6, ok=True)


def _guard(kind, fn, *a, **kw) -> None:
    try:
        fn(*a, **kw)
    except Exception:  # noqa: BLE001
        _row(kind, args=repr(a)[:200], ok=False, error=traceback.format_exc()[-2000:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="correctness only (no timing)")
    ap.add_argument("--parts", default="router,fp4,bench",
                    help="comma list of router (router checks and bench), fp4 (FP4 checks, special blocks "
                         "for both encoder variants), bench (FP4 bench and copy), sweep (FAST and pair-kernel "
                         "tiles at 16384x7168), generic (the bench also times the generic fp32 FP4 kernels), notorch "
                         "(no torch reference rows in the FP4 bench)")
    ap.add_argument("--timing", default="do_bench", choices=["do_bench", "held"],
                    help="do_bench (the earlier sessions' figures) or held: the GPU held while the timed calls "
                         "are enqueued, so short calls are not timed at the host's pace")
    opts = ap.parse_args()
    global TIMING
    TIMING = opts.timing
    parts = set(opts.parts.split(","))
    _row("env", torch=torch.__version__, triton=triton.__version__, python=platform.python_version(),
         device=torch.cuda.get_device_name(), ok=True)
    if "router" in parts:
        for name, e, topk, groups, sel, fn in ROUTERS:
            for t in TOKENS:
                _guard("router", check_router, name, e, topk, groups, sel, fn, t, torch.bfloat16, "randn")
            _guard("router", check_router, name, e, topk, groups, sel, fn, 4096, torch.bfloat16, "ties")
            _guard("router", check_router, name, e, topk, groups, sel, fn, 4096, torch.float32, "randn")
        _guard("router", check_router, "odd", 96, 6, 3, 2, "sigmoid", 1000, torch.float16, "randn")
        _guard("router_graph", router_graph)
    if "fp4" in parts:
        for name, m, n in FP4_SHAPES:
            _guard("fp4", check_fp4, name, m, n, torch.bfloat16)
        _guard("fp4", check_fp4, "odd-fp32", 100, 300, torch.float32)
        _guard("fp4", check_fp4, "odd-fp16", 300, 100, torch.float16)
        for f32mul in (False, True):
            _guard("fp4", check_fp4_special, f32mul)
        _guard("fp4", check_fp4_special, False, True)
        for name, m, n in FP4_SHAPES:
            _guard("fp4", check_fp4_variant, name, m, n, ROW_PAIRS=True)
    if not opts.quick:
        copy_bandwidth()
        if "router" in parts:
            for name, e, topk, groups, sel, fn in ROUTERS:
                for t in (1024, 16384, 65536):
                    _guard("bench", bench_router, name, e, topk, groups, sel, fn, t)
        if "bench" in parts:
            for name, m, n in FP4_SHAPES[:3]:
                _guard("bench", bench_fp4, name, m, n, "notorch" not in parts, "generic" in parts)
        if "sweep" in parts:
            _guard("sweep", sweep_fp4, 16384, 7168)
    with open(opts.out, "w") as f:
        json.dump(ROWS, f, indent=1)
    print(f"\n{'op':<28} {'shape':<34} {'impl':<8} {'ms':>10} {'GB/s':>10}")
    for r in ROWS:
        if r["kind"] == "bench" and r.get("ok") and "gbps" in r:
            print(f"{r['op']:<28} {r['shape']:<34} {r['impl']:<8} {r['ms']:>10.4f} {r['gbps']:>10.1f}")
    for r in ROWS:
        if r["kind"] == "sweep" and "gbps" in r:
            print(f"sweep {r['op']:<28} {str(r['tile']):<16} {r['ms']:>10.4f} {r['gbps']:>10.1f} same={r['same_as_first']}")
    bad = [r for r in ROWS if r["kind"] in ("router", "router_graph", "fp4", "sweep") and not r["ok"]]
    print(f"\n{len(bad)} correctness rows failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
