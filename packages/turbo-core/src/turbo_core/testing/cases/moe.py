"""Conformance cases for the MoE ops: router, moe_permute/unpermute, token_permute/unpermute,
indices_to_multihot, tokens_per_expert_to_mask, single-process moe_dispatch/combine.

Every expectation comes from float64 math written here with plain Python loops over tokens and
experts (never from a backend). Grids: T in {0, 1, 7, 33} (empty, single, odd), E in {4, 8}
(alternating across the other axes to keep the grid small), top-k in {1, 2, 3}; index maps carry
-1 slots and a repeated id; pad_multiple 0 / 8; no cap, a roomy static cap and a tight one that
overflows; Megatron's drop-and-pad; fp32 everywhere plus bf16/fp16/fp8 spot cases.
"""

from __future__ import annotations

import functools
import itertools
import math
import zlib

import torch

from turbo_core.ops import (
    fused_group_topk_routing_with_aux_score,
    indices_to_multihot,
    moe_combine,
    moe_dispatch,
    moe_permute,
    moe_unpermute,
    token_permute,
    token_unpermute,
    tokens_per_expert_to_mask,
)
from turbo_core.testing.case import Case
from turbo_core.testing.numerics import assert_close_to_reference

F64 = torch.float64
TOKENS = (0, 1, 7, 33)
EXPERTS = (4, 8)
TOPKS = (1, 2, 3)
H = 5


def _gen(*key) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def _exact(actual: torch.Tensor, expected, what: str) -> None:
    """``actual`` (any device) equals ``expected`` (CPU tensor or nested lists) exactly."""
    actual = actual.cpu()
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    if actual.shape != expected.shape or not torch.equal(actual, expected):
        raise AssertionError(f"{what}: got {actual.tolist()}, expected {expected.tolist()}")


def _close(actual, ref, dtype, what) -> None:
    """``actual`` (any device) against the CPU float64 ``ref``."""
    if actual.shape != ref.shape:
        raise AssertionError(f"{what}: shape {tuple(actual.shape)} != expected {tuple(ref.shape)}")
    assert_close_to_reference(actual.cpu(), ref, dtype=dtype, what=what)


# -- routing inputs -------------------------------------------------------------------------------

def _index_map(t: int, e: int, k: int, g: torch.Generator) -> list[list[int]]:
    """Top-k ids per token: distinct experts, with a -1 slot on token 1 and a repeated id on token 2."""
    rows = [torch.randperm(e, generator=g)[:k].tolist() for _ in range(t)]
    if t > 1:
        rows[1][0] = -1
    if t > 2 and k > 1:
        rows[2][-1] = rows[2][0]
    return rows


def _copies(rows: list[list[int]], e: int, topk_layout: bool) -> list[list[tuple[int, int]]]:
    """Per token, its (expert, probs column) pairs in expert order (an id repeated counts once)."""
    out = []
    for row in rows:
        seen: dict[int, int] = {}
        for k, x in enumerate(row):
            if 0 <= x < e and x not in seen:
                seen[x] = k
        out.append(sorted((x, k if topk_layout else x) for x, k in seen.items()))
    return out


def _mask_rows(mask: torch.Tensor) -> list[list[int]]:
    return [[x for x in range(mask.shape[1]) if mask[t, x]] for t in range(mask.shape[0])]


# -- the permutation oracle -----------------------------------------------------------------------

def _layout(copies, e: int, pad: int, cap: int, capacity: int = -1):
    """``(dest {(t, x): row}, n_rows, tokens_per_expert, overflow, dispatched)`` by loops."""
    routed = [[t for t, cs in enumerate(copies) if any(x == ex for ex, _ in cs)] for x in range(e)]
    sizes = []
    for x in range(e):
        if capacity >= 0:
            routed[x] = routed[x][:capacity]
            sizes.append(capacity)
        else:
            n = len(routed[x])
            sizes.append(math.ceil(n / pad) * pad if pad else n)
    offsets = [sum(sizes[:x]) for x in range(e)]
    total = sum(sizes)
    n_rows = cap if cap >= 0 else total
    dest = {}
    for x in range(e):
        for i, t in enumerate(routed[x]):
            if offsets[x] + i < n_rows:
                dest[(t, x)] = offsets[x] + i
    tpe = [min(sizes[x], max(0, n_rows - offsets[x])) if cap >= 0 else sizes[x] for x in range(e)]
    overflow = int(cap >= 0 and total > cap)
    dispatched = sum(1 for cs in copies if cs)
    return dest, n_rows, tpe, overflow, dispatched


def _row_map(copies, dest, e: int) -> torch.Tensor:
    rows = []
    for t, cs in enumerate(copies):
        kept = [(dest[(t, x)], col) for x, col in cs if (t, x) in dest]
        pad = [-1] * (e - len(kept))
        rows.append([d for d, _ in kept] + pad + [c for _, c in kept] + pad + [len(kept)])
    return torch.tensor(rows, dtype=torch.int32).reshape(len(copies), 2 * e + 1)


def _permute_expect(tokens, probs, copies, dest, n_rows):
    out = torch.zeros((n_rows, tokens.shape[1]), dtype=F64)
    pp = torch.zeros((n_rows,), dtype=F64)
    for t, cs in enumerate(copies):
        for x, col in cs:
            if (t, x) in dest:
                out[dest[(t, x)]] = tokens[t].double()
                if probs is not None:
                    pp[dest[(t, x)]] = probs[t, col].double()
    return out, pp


def _unpermute_expect(permuted, pprobs, copies, dest, t_count, width, merging=None):
    out = torch.zeros((t_count, permuted.shape[1]), dtype=F64)
    up = torch.zeros((t_count, width), dtype=F64)
    for t, cs in enumerate(copies):
        for x, col in cs:
            if (t, x) in dest:
                w = merging[t, col].double() if merging is not None else 1.0
                out[t] += w * permuted[dest[(t, x)]].double()
                if pprobs is not None:
                    up[t, col] = pprobs[dest[(t, x)]].double()
    return out, up


# -- moe_permute / moe_unpermute ------------------------------------------------------------------

def _run_moe_permute(t, e, k, pad, cap_mode, kind, dtype, *, device="cpu"):
    """Inputs drawn on the CPU, the ops on ``device``, expectations and comparisons on the CPU."""
    g = _gen("permute", t, e, k, pad, cap_mode, kind, str(dtype))
    rows = _index_map(t, e, k, g)
    topk_layout = kind == "index"
    if topk_layout:
        expert_map = torch.tensor(rows, dtype=torch.int32).reshape(t, k)
        probs = torch.rand((t, k), generator=g)
    else:
        mask = torch.zeros((t, e), dtype=torch.bool)
        for i, row in enumerate(rows):
            for x in row:
                if x >= 0:
                    mask[i, x] = True
        expert_map, rows = mask, _mask_rows(mask)
        probs = torch.rand((t, e), generator=g)
    copies = _copies(rows, e, topk_layout)
    full = _layout(copies, e, pad, -1)[1]
    cap = {"none": -1, "roomy": full + 5, "tight": max(full - 3, 0)}[cap_mode]
    dest, n_rows, tpe, overflow, dispatched = _layout(copies, e, pad, cap)

    tokens = torch.randn((t, H), generator=g).to(dtype)
    tokens_d, probs_d = tokens.to(device).requires_grad_(), probs.to(device).requires_grad_()
    res = moe_permute(tokens_d, expert_map.to(device), num_local_experts=e, num_topk=k if topk_layout else 0,
                      pad_multiple=pad, num_permuted_tokens=cap, probs=probs_d,
                      probs_layout="topk" if topk_layout else "routing_map")
    want_out, want_pp = _permute_expect(tokens.detach(), probs.detach(), copies, dest, n_rows)
    _close(res.permuted_tokens, want_out, dtype, "permuted_tokens")
    _close(res.permuted_probs, want_pp, torch.float32, "permuted_probs")
    _exact(res.row_id_map, _row_map(copies, dest, e), "row_id_map")
    _exact(res.tokens_per_expert, tpe, "tokens_per_expert")
    _exact(res.overflow_flag, [overflow], "overflow_flag")
    _exact(res.num_dispatched_tokens, [dispatched], "num_dispatched_tokens")
    assert res.permuted_scaling_factor is None

    g_out = torch.randn((n_rows, H), generator=g).to(dtype)
    g_pp = torch.randn((n_rows,), generator=g)
    torch.autograd.backward([res.permuted_tokens, res.permuted_probs], [g_out.to(device), g_pp.to(device)])
    width = k if topk_layout else e
    want_gt, want_gp = _unpermute_expect(g_out, g_pp, copies, dest, t, width)
    _close(tokens_d.grad, want_gt, dtype, "grad tokens")
    _close(probs_d.grad, want_gp, torch.float32, "grad probs")

    # moe_unpermute on the row map just checked: forward and backward.
    permuted = torch.randn((n_rows, H), generator=g).to(dtype)
    pprobs = torch.rand((n_rows,), generator=g)
    permuted_d, pprobs_d = permuted.to(device).requires_grad_(), pprobs.to(device).requires_grad_()
    out, up = moe_unpermute(permuted_d, res.row_id_map, res.num_dispatched_tokens, restore_shape=(t, H),
                            num_local_experts=e, permuted_probs=pprobs_d, probs_topk_stride=k if topk_layout else 0,
                            pad_multiple=pad)
    want_o, want_up = _unpermute_expect(permuted.detach(), pprobs.detach(), copies, dest, t, width)
    _close(out, want_o, dtype, "unpermuted tokens")
    _close(up, want_up, torch.float32, "unpermuted_probs")
    g_o = torch.randn((t, H), generator=g).to(dtype)
    g_up = torch.randn((t, width), generator=g)
    torch.autograd.backward([out, up], [g_o.to(device), g_up.to(device)])
    want_gx, want_gpp = _permute_expect(g_o, g_up, copies, dest, n_rows)
    _close(permuted_d.grad, want_gx, dtype, "grad permuted_tokens")
    _close(pprobs_d.grad, want_gpp, torch.float32, "grad permuted_probs")


def _run_moe_permute_fp8(t, e, k, *, device="cpu"):
    """Inputs drawn on the CPU, the op on ``device``, expectations and comparisons on the CPU."""
    fp8 = getattr(torch, "float8_e4m3fn", None)
    if fp8 is None:
        return
    g = _gen("fp8", t, e, k)
    rows = _index_map(t, e, k, g)
    idx = torch.tensor(rows, dtype=torch.int64).reshape(t, k)
    tokens = torch.randn((t, H), generator=g).to(fp8)
    scales = torch.rand((t, 3), generator=g)
    probs = torch.rand((t, k), generator=g)
    probs_d = probs.to(device).requires_grad_()
    copies = _copies(rows, e, True)
    dest, n_rows, *_ = _layout(copies, e, 8, -1)
    res = moe_permute(tokens.to(device), idx.to(device), num_local_experts=e, num_topk=k, pad_multiple=8,
                      scaling_factor=scales.to(device), probs=probs_d, scales_per_token=3, use_fp8=True)
    want_out, want_pp = _permute_expect(tokens.float(), probs.detach(), copies, dest, n_rows)
    want_sc, _ = _permute_expect(scales, None, copies, dest, n_rows)
    assert res.permuted_tokens.dtype == fp8
    _exact(res.permuted_tokens.float(), want_out.float(), "permuted fp8 tokens (bit-exact)")
    _exact(res.permuted_scaling_factor, want_sc.float(), "permuted_scaling_factor")
    _close(res.permuted_probs, want_pp, torch.float32, "permuted_probs")
    g_pp = torch.randn((n_rows,), generator=g)
    res.permuted_probs.backward(g_pp.to(device))
    _, want_gp = _unpermute_expect(torch.zeros((n_rows, 1)), g_pp, copies, dest, t, k)
    _close(probs_d.grad, want_gp, torch.float32, "grad probs (fp8 tokens)")


# -- token_permute / token_unpermute --------------------------------------------------------------

def _run_token_permute(t, e, k, mode, merge, dtype, *, device="cpu"):
    """Inputs drawn on the CPU, the ops on ``device``, expectations and comparisons on the CPU."""
    g = _gen("token", t, e, k, mode, merge, str(dtype))
    rows = [torch.randperm(e, generator=g)[:k].tolist() for _ in range(t)]
    mask = torch.zeros((t, e), dtype=torch.bool)
    for i, row in enumerate(rows):
        mask[i, row] = True
    copies = _copies(_mask_rows(mask), e, False)
    total = t * k
    capacity = -1
    if mode == "drop_and_pad":
        num_out = max(total // 2, 1) if t else 0
        capacity = num_out // e
        dest, n_rows, tpe, _, _ = _layout(copies, e, 0, capacity * e, capacity)
    else:
        num_out = {"sync": -1, "exact": total, "tight": max(total - 2, 0)}[mode]
        dest, n_rows, tpe, _, _ = _layout(copies, e, 0, num_out)
    inp_h = torch.randn((t, H), generator=g).to(dtype)
    probs_h = torch.rand((t, e), generator=g)
    inp, probs, mask_d = inp_h.to(device).requires_grad_(), probs_h.to(device).requires_grad_(), mask.to(device)
    res = token_permute(inp, num_out, probs=probs, routing_map=mask_d, drop_and_pad=mode == "drop_and_pad",
                        fused=True, return_tokens_per_expert=True)
    want_out, want_pp = _permute_expect(inp_h.detach(), probs_h.detach(), copies, dest, n_rows)
    _close(res.permuted_tokens, want_out, dtype, "permuted_tokens")
    _close(res.permuted_probs, want_pp, torch.float32, "permuted_probs")
    _exact(res.tokens_per_expert, tpe, "tokens_per_expert")
    g_out = torch.randn((n_rows, H), generator=g).to(dtype)
    g_pp = torch.randn((n_rows,), generator=g)
    torch.autograd.backward([res.permuted_tokens, res.permuted_probs], [g_out.to(device), g_pp.to(device)])
    want_gt, want_gp = _unpermute_expect(g_out, g_pp, copies, dest, t, e)
    _close(inp.grad, want_gt, dtype, "grad inp")
    _close(probs.grad, want_gp, torch.float32, "grad probs")

    x_h = torch.randn((n_rows, H), generator=g).to(dtype)
    merging_h = torch.rand((t, e), generator=g) if merge else None
    x = x_h.to(device).requires_grad_()
    merging = merging_h.to(device).requires_grad_() if merge else None
    out = token_unpermute(x, res.row_id_map, merging_probs=merging, restore_shape=(t, H), routing_map=mask_d,
                          drop_and_pad=mode == "drop_and_pad")
    want, _ = _unpermute_expect(x_h.detach(), None, copies, dest, t, e,
                                merging_h.detach() if merge else None)
    _close(out, want, dtype, "token_unpermute")
    g_o = torch.randn((t, H), generator=g).to(dtype)
    out.backward(g_o.to(device))
    want_gx = torch.zeros((n_rows, H), dtype=F64)
    want_gm = torch.zeros((t, e), dtype=F64)
    for (tok, ex), row in dest.items():
        w = merging_h[tok, ex].double() if merge else 1.0
        want_gx[row] = g_o[tok].double() * w
        want_gm[tok, ex] = (g_o[tok].double() * x_h[row].double()).sum()
    _close(x.grad, want_gx, dtype, "grad token_unpermute inp")
    if merge:
        _close(merging.grad, want_gm, dtype, "grad merging_probs")


# -- router ---------------------------------------------------------------------------------------

def _route_row(logit: list[float], topk, groups, sel, fn, scale):
    e = len(logit)
    if fn == "sigmoid":
        raw = [1.0 / (1.0 + math.exp(-v)) for v in logit]
    else:
        m = max(logit)
        ex = [math.exp(v - m) for v in logit]
        raw = [v / sum(ex) for v in ex]
    per, kg = e // groups, topk // sel
    gscore = [sum(sorted(raw[i * per:(i + 1) * per], reverse=True)[:kg]) for i in range(groups)]
    kept = sorted(range(groups), key=lambda i: (-gscore[i], i))[:sel]
    cand = [x for x in range(e) if x // per in kept]
    chosen = sorted(cand, key=lambda x: (-raw[x], x))[:topk]
    return chosen


def _routing_formula(logits64, mask, fn, scale):
    """Differentiable float64 scores and probs with the selection fixed."""
    if fn == "sigmoid":
        s = torch.sigmoid(logits64)
        scores = s / s.sum(-1, keepdim=True)
        sel = s * mask
        probs = sel / sel.sum(-1, keepdim=True).clamp_min(1e-300) * scale
    else:
        s = torch.softmax(logits64, -1)
        scores = s
        probs = s * mask * scale
    return scores, probs


def _run_routing(t, e, topk, groups, sel, fn, dtype, *, device="cpu"):
    """Inputs drawn on the CPU, the op on ``device``, expectations and comparisons on the CPU."""
    g = _gen("route", t, e, topk, groups, sel, fn, str(dtype))
    # Distinct logits in every row (a permutation), so no backend meets a tie.
    base = torch.stack([torch.randperm(e, generator=g) for _ in range(t)]) if t else torch.zeros((0, e))
    logits_h = ((base.double() - e / 2) * 0.37 + 0.05).to(dtype)
    logits = logits_h.to(device).requires_grad_()
    scale = 2.5
    scores, probs, rmap = fused_group_topk_routing_with_aux_score(logits, topk, groups, sel, fn, scale)
    mask = torch.zeros((t, e), dtype=torch.bool)
    for i in range(t):
        mask[i, _route_row(logits_h[i].double().tolist(), topk, groups, sel, fn, scale)] = True
    _exact(rmap, mask, "routing_map")
    l64 = logits_h.detach().double().requires_grad_()
    ws, wp = _routing_formula(l64, mask.double(), fn, scale)
    _close(scores, ws, dtype, "scores")
    _close(probs, wp, dtype, "probs")
    gs = torch.randn((t, e), generator=g).to(dtype)
    gp = torch.randn((t, e), generator=g).to(dtype)
    torch.autograd.backward([scores, probs], [gs.to(device), gp.to(device)])
    torch.autograd.backward([ws, wp], [gs.double(), gp.double()])
    _close(logits.grad, l64.grad, dtype, "grad logits")


# -- index conversions, dispatch/combine -----------------------------------------------------------

def _run_multihot(t, e, k, dtype, *, device="cpu"):
    """Inputs drawn on the CPU, the op on ``device``, expectations and comparisons on the CPU."""
    g = _gen("multihot", t, e, k, str(dtype))
    rows = _index_map(t, e, k, g)
    idx = torch.tensor(rows, dtype=torch.int64).reshape(t, k)
    probs_h = torch.rand((t, k), generator=g).to(dtype)
    probs = probs_h.to(device).requires_grad_()
    rmap, dense = indices_to_multihot(idx.to(device), probs, e, fused=True)
    want_map = torch.zeros((t, e), dtype=torch.bool)
    want = torch.zeros((t, e), dtype=F64)
    first = torch.zeros((t, k), dtype=F64)
    for i, row in enumerate(rows):
        for slot, x in enumerate(row):
            if x >= 0 and not want_map[i, x]:
                want_map[i, x] = True
                want[i, x] = probs_h[i, slot].double()
                first[i, slot] = 1.0
    _exact(rmap, want_map, "routing_map")
    assert dense.dtype == dtype
    _close(dense, want, dtype, "multihot probs")
    gd = torch.randn((t, e), generator=g).to(dtype)
    dense.backward(gd.to(device))
    want_g = torch.zeros((t, k), dtype=F64)
    for i, row in enumerate(rows):
        for slot, x in enumerate(row):
            if first[i, slot]:
                want_g[i, slot] = gd[i, x].double()
    _close(probs.grad, want_g, dtype, "grad probs_indices")


def _run_tpe_mask(counts, num_tokens, *, device="cpu"):
    """Inputs drawn on the CPU, the op on ``device``, expectations and comparisons on the CPU."""
    got = tokens_per_expert_to_mask(torch.tensor(counts, dtype=torch.int32, device=device), num_tokens)
    total = sum(counts)
    _exact(got, [1 if i < total else 0 for i in range(num_tokens)], "mask")
    assert got.dtype == torch.int64


def _run_dispatch_combine(t, e, k, worst, dtype, *, device="cpu"):
    """Inputs drawn on the CPU, the op on ``device``, expectations and comparisons on the CPU."""
    g = _gen("dispatch", t, e, k, worst, str(dtype))
    rows = _index_map(t, e, k, g)
    idx = torch.tensor(rows, dtype=torch.int64).reshape(t, k)
    x_h = torch.randn((t, H), generator=g).to(dtype)
    probs_h = torch.rand((t, k), generator=g)
    x, probs = x_h.to(device).requires_grad_(), probs_h.to(device).requires_grad_()
    recv_x, recv_idx, recv_probs, tpe, handle = moe_dispatch(x, idx.to(device), probs, e, None,
                                                             num_worst_tokens=worst)
    r = max(t, worst)
    want_x = torch.zeros((r, H), dtype=F64)
    want_idx = torch.full((r, k), -1, dtype=torch.int64)
    want_p = torch.zeros((r, k), dtype=F64)
    counts = [0] * e
    for i, row in enumerate(rows):
        want_x[i] = x_h[i].double()
        for slot, ex in enumerate(row):
            if ex >= 0:
                want_idx[i, slot] = ex
                want_p[i, slot] = probs_h[i, slot].double()
        for ex in set(v for v in row if v >= 0):
            counts[ex] += 1
    _close(recv_x, want_x, dtype, "recv_x")
    _exact(recv_idx, want_idx, "recv_token_indices")
    _close(recv_probs, want_p, torch.float32, "recv_token_probs")
    _exact(tpe, counts, "tokens_per_expert")
    y_h = torch.randn((r, H), generator=g).to(dtype)
    y = y_h.to(device).requires_grad_()
    combined = moe_combine(y, None, handle)
    _close(combined, y_h.detach()[:t].double(), dtype, "combined")
    g_c = torch.randn((t, H), generator=g).to(dtype)
    combined.backward(g_c.to(device))
    want_gy = torch.zeros((r, H), dtype=F64)
    want_gy[:t] = g_c.double()
    _close(y.grad, want_gy, dtype, "grad combine input")
    g_x = torch.randn((r, H), generator=g).to(dtype)
    g_p = torch.randn((r, k), generator=g)
    torch.autograd.backward([recv_x, recv_probs], [g_x.to(device), g_p.to(device)])
    _close(x.grad, g_x[:t].double(), dtype, "grad x")
    _close(probs.grad, (g_p[:t] * (idx >= 0)).double(), torch.float32, "grad token_probs")


def _dt(d: torch.dtype) -> str:
    return str(d).replace("torch.", "")


_PERM = "moe_permute_preprocess", "moe_permute", "moe_unpermute"
_ROUTERS = [(4, 1, 1, 1), (8, 3, 1, 1), (8, 2, 4, 2), (8, 3, 2, 1), (8, 3, 4, 2)]  # E, topk, groups, selected

CASES = [
    Case(f"moe_permute-T{t}-E{e}-k{k}-pad{pad}-{cap}-{kind}", _PERM,
         functools.partial(_run_moe_permute, t, e, k, pad, cap, kind, torch.float32))
    for t, k, pad, cap, kind in itertools.product(TOKENS, TOPKS, (0, 8), ("none", "roomy", "tight"), ("index", "mask"))
    for e in [EXPERTS[(k + pad // 8 + len(kind)) % 2]]
] + [
    Case(f"moe_permute-T{t}-E{e}-k{k}-pad{pad}-{cap}-{_dt(dt)}", _PERM,
         functools.partial(_run_moe_permute, t, e, k, pad, cap, "index", dt))
    for (t, e, k, pad, cap), dt in itertools.product([(33, 8, 3, 8, "tight"), (7, 4, 2, 0, "none")],
                                                     (torch.bfloat16, torch.float16))
] + [
    Case(f"moe_permute-fp8-T{t}-E{e}-k{k}", _PERM, functools.partial(_run_moe_permute_fp8, t, e, k))
    for t, e, k in [(7, 4, 2), (33, 8, 3), (0, 4, 1)]
] + [
    Case(f"token_permute-T{t}-E{e}-k{k}-{mode}-{'merge' if merge else 'sum'}", (*_PERM, "moe_unpermute_bwd"),
         functools.partial(_run_token_permute, t, e, k, mode, merge, torch.float32))
    for t, k, mode, merge in itertools.product(TOKENS, TOPKS, ("sync", "exact", "tight", "drop_and_pad"), (False, True))
    for e in [EXPERTS[(k + merge) % 2]]
] + [
    Case(f"token_permute-T33-E8-k2-{mode}-merge-bf16", (*_PERM, "moe_unpermute_bwd"),
         functools.partial(_run_token_permute, 33, 8, 2, mode, True, torch.bfloat16))
    for mode in ("exact", "drop_and_pad")
] + [
    Case(f"routing-T{t}-E{e}-k{k}-g{gr}s{sel}-{fn}-{_dt(dt)}", ("moe_routing_fwd", "moe_routing_bwd"),
         functools.partial(_run_routing, t, e, k, gr, sel, fn, dt))
    for t, (e, k, gr, sel), fn, dt in itertools.product(TOKENS, _ROUTERS, ("sigmoid", "softmax"),
                                                        (torch.float32, torch.bfloat16))
] + [
    Case(f"indices_to_multihot-T{t}-E{e}-k{k}-{_dt(dt)}", ("indices_to_multihot", "indices_to_multihot_bwd"),
         functools.partial(_run_multihot, t, e, k, dt))
    for t, e, k, dt in itertools.product(TOKENS, EXPERTS, TOPKS, (torch.float32, torch.bfloat16))
] + [
    Case(f"tokens_per_expert_to_mask-{i}", ("tokens_per_expert_to_mask",), functools.partial(_run_tpe_mask, c, n))
    for i, (c, n) in enumerate([([2, 0, 3], 7), ([0, 0], 3), ([4, 4], 5), ([1], 0)])
] + [
    Case(f"moe_dispatch_combine-T{t}-E{e}-k{k}-worst{w}-{_dt(dt)}", ("moe_dispatch", "moe_combine"),
         functools.partial(_run_dispatch_combine, t, e, k, w, dt))
    for (t, e, k, w), dt in itertools.product([(0, 4, 1, 0), (1, 4, 2, 0), (7, 4, 2, 0), (7, 8, 3, 10), (33, 8, 3, 0)],
                                              (torch.float32, torch.bfloat16))
]
