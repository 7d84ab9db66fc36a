"""Properties of the MoE primitives against float64 loops: the router (forward and backward), the
permutation (preprocess, permute, unpermute and its backward), the index conversions and the
single-process expert-parallel dispatch / combine. The oracles are the conformance kit's
(``turbo_core.testing.cases.moe``): token-by-token copies, segment layout and row map.

Drawn: T from 0 up, 1-16 experts, top-k 1 to E, expert groups and selected groups (every divisor),
sigmoid / softmax, scaling factors; routing maps and top-k index maps (int32 / int64) with -1 slots
and repeated ids; pad multiples (0, 1, 2, 8, 16), token caps (none, roomy, exact, tight, zero),
expert capacity (drop-and-pad), probs in routing-map and top-k layouts, FP8 tokens with per-token
scales, merging probs; dispatch with ``num_worst_tokens``, a cached re-dispatch and combine.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from turbo_core.dispatch.specs.moe import (
    IndicesToMultihotArgs,
    IndicesToMultihotBwdArgs,
    MoeCombineArgs,
    MoeDispatchArgs,
    MoePermuteArgs,
    MoePermutePreprocessArgs,
    MoeRoutingBwdArgs,
    MoeRoutingFwdArgs,
    MoeUnpermuteArgs,
    MoeUnpermuteBwdArgs,
    TokensPerExpertToMaskArgs,
)
from turbo_core.testing.cases.moe import (
    _copies,
    _layout,
    _permute_expect,
    _route_row,
    _routing_formula,
    _row_map,
    _unpermute_expect,
)
from turbo_core.testing.properties.harness import Property, Target, close, exact, same_bits
from turbo_core.testing.properties.strategies import FLOAT_DTYPES, OCP_FP8, dims, generator, seeds

__all__ = ["PROPERTIES"]

F64 = torch.float64


# -- routing maps ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class MapCase:
    t: int
    e: int
    k: int
    kind: str  # "mask" (bool [T, E]) or "index" (top-k ids [T, K])
    index_dtype: torch.dtype
    topk_layout: bool  # probs [T, K] (index maps only)
    pad: int
    cap: str  # none / roomy / exact / tight / zero
    capacity: int  # -1: off
    h: int
    dtype: torch.dtype
    seed: int


@st.composite
def _map_cases(draw, max_dim: int):
    e = draw(st.integers(1, 16))
    k = draw(st.integers(1, min(e, 8)))
    kind = draw(st.sampled_from(("mask", "index")))
    capacity = draw(st.sampled_from((-1, -1, -1, 0, 1, 3)))
    return MapCase(draw(dims(0, max_dim)), e, k, kind, draw(st.sampled_from((torch.int32, torch.int64))),
                   kind == "index" and draw(st.booleans()),
                   0 if capacity >= 0 else draw(st.sampled_from((0, 0, 1, 2, 8, 16))),
                   draw(st.sampled_from(("none", "none", "roomy", "exact", "tight", "zero"))), capacity,
                   draw(dims(1, max_dim)), draw(st.sampled_from(FLOAT_DTYPES + OCP_FP8)), draw(seeds()))


def _rows(c: MapCase, g) -> list[list[int]]:
    """Top-k ids per token: distinct experts, then some -1 slots and repeated ids."""
    rows = [torch.randperm(c.e, generator=g)[:c.k].tolist() for _ in range(c.t)]
    for row in rows:
        r = float(torch.rand((), generator=g))
        if r < 0.15:
            row[0] = -1
        elif r < 0.3 and c.k > 1:
            row[-1] = row[0]
    return rows


@dataclass
class Routed:
    """The oracle's view of one routing map."""

    expert_map: torch.Tensor
    copies: list
    dest: dict
    n_rows: int
    tpe: list
    overflow: int
    dispatched: int
    row_map: torch.Tensor
    width: int


def _routed(c: MapCase, g) -> Routed:
    rows = _rows(c, g)
    if c.kind == "index":
        expert_map = torch.tensor(rows, dtype=c.index_dtype).reshape(c.t, c.k)
        copies = _copies(rows, c.e, c.topk_layout)
    else:
        expert_map = torch.zeros((c.t, c.e), dtype=torch.bool)
        for i, row in enumerate(rows):
            for x in row:
                if x >= 0:
                    expert_map[i, x] = True
        copies = _copies([[x for x in range(c.e) if expert_map[i, x]] for i in range(c.t)], c.e, False)
    full = _layout(copies, c.e, c.pad, -1, c.capacity)[1]
    cap = {"none": -1, "roomy": full + 5, "exact": full, "tight": max(full - 3, 0), "zero": 0}[c.cap]
    dest, n_rows, tpe, overflow, dispatched = _layout(copies, c.e, c.pad, cap, c.capacity)
    return Routed(expert_map, copies, dest, n_rows, tpe, overflow, dispatched, _row_map(copies, dest, c.e),
                  c.k if c.topk_layout else c.e)


def _check_preprocess(c: MapCase, target: Target) -> None:
    r = _routed(c, generator(c.seed))
    cap = r.n_rows if c.cap != "none" else -1
    args = MoePermutePreprocessArgs(target.put(r.expert_map), c.e, c.pad, cap,
                                    "topk" if c.topk_layout else "routing_map", c.capacity)
    row_map, tpe, overflow, dispatched = target.call(args)
    exact(row_map, r.row_map, "row_id_map")
    exact(tpe, torch.tensor(r.tpe, dtype=torch.int64), "tokens_per_expert")
    exact(overflow, torch.tensor([r.overflow], dtype=torch.int32), "overflow_flag")
    exact(dispatched, torch.tensor([r.dispatched], dtype=torch.int32), "num_dispatched_tokens")
    for name, t, dt in (("row_id_map", row_map, torch.int32), ("tokens_per_expert", tpe, torch.int64),
                        ("overflow_flag", overflow, torch.int32), ("num_dispatched_tokens", dispatched, torch.int32)):
        if t.dtype != dt:
            raise AssertionError(f"{name}: dtype {t.dtype}, expected {dt}")


def _check_permute(c: MapCase, target: Target) -> None:
    g = generator(c.seed)
    r = _routed(c, g)
    fp8 = c.dtype in OCP_FP8
    tokens = (torch.randn(c.t, c.h, generator=g) * 3).to(c.dtype)
    scales = torch.rand(c.t, 3, generator=g) if fp8 else None
    probs = torch.rand(c.t, r.width, generator=g).to(FLOAT_DTYPES[c.seed % 3])
    put = target.put
    out, out_sf, out_p = target.call(MoePermuteArgs(put(tokens), put(r.row_map), r.n_rows, put(scales), put(probs)))
    want, want_p = _permute_expect(tokens.float(), probs, r.copies, r.dest, r.n_rows)
    if fp8:  # copied bit for bit
        want_q = torch.zeros(r.n_rows, c.h, dtype=c.dtype)
        for (t, _), row in r.dest.items():
            want_q[row] = tokens[t]
        same_bits(out, want_q.to(out.device), "permuted fp8 tokens")
        exact(out_sf, _permute_expect(scales, None, r.copies, r.dest, r.n_rows)[0].float(), "permuted scales")
    else:
        if out.dtype != c.dtype:
            raise AssertionError(f"permuted: dtype {out.dtype}, expected {c.dtype}")
        exact(out, want.to(c.dtype), "permuted tokens (copies)")
        if out_sf is not None:
            raise AssertionError("permuted_scaling_factor without scaling_factor")
    if out_p.dtype != probs.dtype:
        raise AssertionError(f"permuted_probs: dtype {out_p.dtype}, expected {probs.dtype}")
    exact(out_p, want_p.to(probs.dtype), "permuted_probs")


@st.composite
def _unpermute_cases(draw, max_dim: int):
    base = draw(_map_cases(max_dim))
    return base.__class__(**{**base.__dict__, "dtype": draw(st.sampled_from(FLOAT_DTYPES))}), draw(st.booleans()), \
        draw(st.booleans())


def _check_unpermute(case, target: Target) -> None:
    c, with_probs, merge = case
    g = generator(c.seed)
    r = _routed(c, g)
    permuted = torch.randn(r.n_rows, c.h, generator=g).to(c.dtype)
    pprobs = torch.rand(r.n_rows, generator=g).to(c.dtype) if with_probs else None
    merging = torch.rand(c.t, r.width, generator=g).to(c.dtype) if merge else None
    put = target.put
    out, up = target.call(MoeUnpermuteArgs(put(permuted), put(r.row_map), put(pprobs), r.width if with_probs else 0,
                                           put(merging)))
    want, want_up = _unpermute_expect(permuted, pprobs, r.copies, r.dest, c.t, r.width, merging)
    close(out, want, c.dtype, "unpermuted tokens")
    if with_probs:
        close(up, want_up, c.dtype, "unpermuted_probs")
    elif up is not None:
        raise AssertionError("unpermuted_probs without permuted_probs")


def _check_unpermute_bwd(case, target: Target) -> None:
    c, _, _ = case
    g = generator(c.seed)
    r = _routed(c, g)
    permuted = torch.randn(r.n_rows, c.h, generator=g).to(c.dtype)
    merging = torch.rand(c.t, r.width, generator=g).to(c.dtype)
    grad = torch.randn(c.t, c.h, generator=g).to(c.dtype)
    want_gx = torch.zeros(r.n_rows, c.h, dtype=F64)
    want_gm = torch.zeros(c.t, r.width, dtype=F64)
    for t, cs in enumerate(r.copies):
        for x, col in cs:
            if (t, x) in r.dest:
                row = r.dest[(t, x)]
                want_gx[row] = grad[t].double() * merging[t, col].double()
                want_gm[t, col] = (grad[t].double() * permuted[row].double()).sum()
    put = target.put
    gx, gm = target.call(MoeUnpermuteBwdArgs(put(grad), put(permuted), put(r.row_map), put(merging)))
    close(gx, want_gx, c.dtype, "grad permuted_tokens")
    close(gm, want_gm, c.dtype, "grad merging_probs")


# -- index conversions -----------------------------------------------------------------------------

def _multihot_cases(max_dim: int):
    return _map_cases(max_dim).map(lambda c: c.__class__(**{**c.__dict__, "kind": "index", "topk_layout": True,
                                                            "dtype": FLOAT_DTYPES[c.seed % 3]}))


def _first_slots(rows, e):
    """(routing map, dense probs selector, first-slot mask [T, K])."""
    t, k = len(rows), len(rows[0]) if rows else 0
    want_map = torch.zeros((t, e), dtype=torch.bool)
    first = torch.zeros((t, k), dtype=torch.bool)
    for i, row in enumerate(rows):
        for slot, x in enumerate(row):
            if 0 <= x < e and not want_map[i, x]:
                want_map[i, x] = True
                first[i, slot] = True
    return want_map, first


def _check_multihot(c: MapCase, target: Target) -> None:
    g = generator(c.seed)
    rows = _rows(c, g)
    idx = torch.tensor(rows, dtype=c.index_dtype).reshape(c.t, c.k)
    probs = torch.rand(c.t, c.k, generator=g).to(c.dtype)
    want_map, first = _first_slots(rows, c.e)
    want = torch.zeros(c.t, c.e, dtype=F64)
    for i, row in enumerate(rows):
        for slot, x in enumerate(row):
            if first[i, slot]:
                want[i, x] = probs[i, slot].double()
    rmap, dense = target.call(IndicesToMultihotArgs(target.put(idx), target.put(probs), c.e))
    exact(rmap, want_map, "routing_map")
    if dense.dtype != c.dtype:
        raise AssertionError(f"multihot_probs: dtype {dense.dtype}, expected {c.dtype}")
    exact(dense, want.to(c.dtype), "multihot_probs")


def _check_multihot_bwd(c: MapCase, target: Target) -> None:
    g = generator(c.seed)
    rows = _rows(c, g)
    idx = torch.tensor(rows, dtype=c.index_dtype).reshape(c.t, c.k)
    grad = torch.randn(c.t, c.e, generator=g).to(c.dtype)
    _, first = _first_slots(rows, c.e)
    want = torch.zeros(c.t, c.k, dtype=F64)
    for i, row in enumerate(rows):
        for slot, x in enumerate(row):
            if first[i, slot]:
                want[i, slot] = grad[i, x].double()
    got = target.call(IndicesToMultihotBwdArgs(target.put(grad), target.put(idx)))
    if got.dtype != c.dtype:
        raise AssertionError(f"grad probs: dtype {got.dtype}, expected {c.dtype}")
    exact(got, want.to(c.dtype), "grad probs")


@dataclass(frozen=True)
class MaskCase:
    counts: tuple[int, ...]
    num_tokens: int
    dtype: torch.dtype


def _mask_cases(max_dim: int):
    return st.builds(MaskCase, st.lists(dims(0, max_dim), min_size=1, max_size=8).map(tuple), dims(0, 4 * max_dim),
                     st.sampled_from((torch.int32, torch.int64)))


def _check_tpe_mask(c: MaskCase, target: Target) -> None:
    got = target.call(TokensPerExpertToMaskArgs(target.put(torch.tensor(c.counts, dtype=c.dtype)), c.num_tokens))
    if got.dtype != torch.int64:
        raise AssertionError(f"mask: dtype {got.dtype}, expected int64")
    total = sum(c.counts)
    exact(got, torch.tensor([1 if i < total else 0 for i in range(c.num_tokens)], dtype=torch.int64), "mask")


# -- router ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RouteCase:
    t: int
    e: int
    topk: int
    groups: int
    selected: int
    score_function: str
    scaling_factor: float
    dtype: torch.dtype
    grads: tuple[bool, bool]  # backward: grad_scores / grad_probs given
    seed: int


@st.composite
def _route_cases(draw, max_dim: int):
    e = draw(st.integers(1, 16))
    groups = draw(st.sampled_from([d for d in range(1, e + 1) if e % d == 0]))
    selected = draw(st.integers(1, groups))
    topk = draw(st.integers(selected, selected * (e // groups)))
    grads = draw(st.sampled_from(((True, True), (True, False), (False, True))))
    return RouteCase(draw(dims(0, max_dim)), e, topk, groups, selected, draw(st.sampled_from(("sigmoid", "softmax"))),
                     draw(st.sampled_from((1.0, 2.5, 0.5))), draw(st.sampled_from(FLOAT_DTYPES)), grads, draw(seeds()))


def _route_inputs(c: RouteCase):
    """Logits with distinct scores in every row (a permutation spaced 0.37 apart, a jitter far below
    it), so the top-k has no ties, in float64 or in the dtype's fp32 math."""
    g = generator(c.seed)
    base = torch.stack([torch.randperm(c.e, generator=g) for _ in range(c.t)]).double() if c.t else \
        torch.zeros((0, c.e), dtype=F64)
    logits = ((base - c.e / 2) * 0.37 + torch.rand(base.shape, generator=g, dtype=F64) * 0.05).to(c.dtype)
    mask = torch.zeros((c.t, c.e), dtype=torch.bool)
    for i in range(c.t):
        mask[i, _route_row(logits[i].double().tolist(), c.topk, c.groups, c.selected, c.score_function,
                           c.scaling_factor)] = True
    return logits, mask, g


def _check_routing_fwd(c: RouteCase, target: Target) -> None:
    logits, mask, _ = _route_inputs(c)
    scores, probs, rmap = target.call(MoeRoutingFwdArgs(target.put(logits), c.topk, c.groups, c.selected,
                                                        c.score_function, c.scaling_factor))
    exact(rmap, mask, "routing_map")
    want_s, want_p = _routing_formula(logits.double(), mask.double(), c.score_function, c.scaling_factor)
    close(scores, want_s, c.dtype, "scores")
    close(probs, want_p, c.dtype, "probs")


def _check_routing_bwd(c: RouteCase, target: Target) -> None:
    logits, mask, g = _route_inputs(c)
    gs = torch.randn(c.t, c.e, generator=g).to(c.dtype) if c.grads[0] else None
    gp = torch.randn(c.t, c.e, generator=g).to(c.dtype) if c.grads[1] else None
    l64 = logits.double().requires_grad_()
    ws, wp = _routing_formula(l64, mask.double(), c.score_function, c.scaling_factor)
    outs = [o for o, gr in ((ws, gs), (wp, gp)) if gr is not None]
    torch.autograd.backward(outs, [gr.double() for gr in (gs, gp) if gr is not None])
    want = l64.grad if l64.grad is not None else torch.zeros_like(l64)
    put = target.put
    got = target.call(MoeRoutingBwdArgs(put(logits), put(mask), put(gs), put(gp), c.score_function,
                                        c.scaling_factor))
    if got.dtype != c.dtype:
        raise AssertionError(f"grad_logits: dtype {got.dtype}, expected {c.dtype}")
    close(got, want, c.dtype, "grad_logits")


# -- dispatch / combine (one process) --------------------------------------------------------------

def _dispatch_cases(max_dim: int):
    return st.tuples(_map_cases(max_dim).map(lambda c: c.__class__(**{**c.__dict__, "kind": "index"})),
                     st.sampled_from((None, None, 0, 5)), st.booleans())  # num_worst_tokens - T (None: 0)


def _worst(case) -> int:
    c, extra, _ = case
    return 0 if extra is None else c.t + extra


def _dispatched(case, target: Target):
    c, _, _ = case
    worst = _worst(case)
    g = generator(c.seed)
    rows = _rows(c, g)
    idx = torch.tensor(rows, dtype=c.index_dtype).reshape(c.t, c.k)
    fp8 = c.dtype in OCP_FP8
    x = (torch.randn(c.t, c.h, generator=g) * 3).to(c.dtype)
    scales = torch.rand(c.t, 2, generator=g) if fp8 else None
    probs = torch.rand(c.t, c.k, generator=g)
    put = target.put
    args = MoeDispatchArgs(put(x), put(scales), put(idx), put(probs), c.e, num_worst_tokens=worst)
    return rows, x, scales, probs, args, target.call(args), g


def _check_dispatch(case, target: Target) -> None:
    c, worst = case[0], _worst(case)
    rows, x, scales, probs, args, (rx, rs, ridx, rp, tpe, handle), g = _dispatched(case, target)
    r = max(c.t, worst)
    want_x = torch.zeros(r, c.h, dtype=c.dtype)
    want_x[:c.t] = x
    want_idx = torch.full((r, c.k), -1, dtype=c.index_dtype)
    want_p = torch.zeros(r, c.k)
    counts = [0] * c.e
    for i, row in enumerate(rows):
        for slot, ex in enumerate(row):
            if ex >= 0:
                want_idx[i, slot] = ex
                want_p[i, slot] = probs[i, slot]
        for ex in {v for v in row if v >= 0}:
            counts[ex] += 1
    same_bits(rx, want_x.to(rx.device), "recv_x")
    if scales is not None:
        want_s = torch.zeros(r, 2)
        want_s[:c.t] = scales
        exact(rs, want_s, "recv_x_scales")
    exact(ridx, want_idx, "recv_token_indices")
    exact(rp, want_p, "recv_token_probs")
    exact(tpe, torch.tensor(counts, dtype=torch.int64), "tokens_per_expert")
    # the cached re-dispatch along the handle (the backward of combine)
    grad_dtype = torch.bfloat16 if c.dtype in OCP_FP8 else c.dtype
    y = torch.randn(c.t, c.h, generator=g).to(grad_dtype)
    cached = MoeDispatchArgs(target.put(y), None, None, None, c.e, handle=handle)
    ry, rys, *rest = target.call(cached)
    want_y = torch.zeros(r, c.h, dtype=grad_dtype)
    want_y[:c.t] = y
    same_bits(ry, want_y.to(ry.device), "cached dispatch")
    if rest[-1] is not handle or any(v is not None for v in (rys, *rest[:-1])):
        raise AssertionError("cached dispatch: expected (recv_x, None, None, None, None, the same handle)")


def _check_combine(case, target: Target) -> None:
    c, extra, with_probs = case
    if c.dtype in OCP_FP8:
        c = c.__class__(**{**c.__dict__, "dtype": torch.bfloat16})
        case = (c, extra, with_probs)
    *_, (_, _, _, _, _, handle), g = _dispatched(case, Target(target.backend, target.device, "moe_dispatch"))
    r = max(c.t, _worst(case))
    y = torch.randn(r, c.h, generator=g).to(c.dtype)
    p = torch.rand(r, c.k, generator=g) if with_probs else None
    combined, cp = target.call(MoeCombineArgs(target.put(y), handle, None, target.put(p)))
    close(combined, y[:c.t].double(), c.dtype, "combined")
    if with_probs:
        close(cp, p[:c.t].double(), torch.float32, "combined_probs")
    elif cp is not None:
        raise AssertionError("combined_probs without probs")


PROPERTIES = [
    Property("moe_routing_fwd", _route_cases, _check_routing_fwd),
    Property("moe_routing_bwd", _route_cases, _check_routing_bwd),
    Property("moe_permute_preprocess", _map_cases, _check_preprocess),
    Property("moe_permute", _map_cases, _check_permute),
    Property("moe_unpermute", _unpermute_cases, _check_unpermute),
    Property("moe_unpermute_bwd", _unpermute_cases, _check_unpermute_bwd),
    Property("indices_to_multihot", _multihot_cases, _check_multihot),
    Property("indices_to_multihot_bwd", _multihot_cases, _check_multihot_bwd),
    Property("tokens_per_expert_to_mask", _mask_cases, _check_tpe_mask),
    Property("moe_dispatch", _dispatch_cases, _check_dispatch),
    Property("moe_combine", _dispatch_cases, _check_combine),
]
