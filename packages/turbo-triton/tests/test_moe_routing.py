"""TRITON router (``moe_routing_fwd`` / ``moe_routing_bwd``) under the interpreter.

Expectations are independent of both implementations: the selection by plain Python loops over raw
scores (``1 / (1 + exp(-x))`` / softmax with ``math.exp``, in float64; for the fp32 path the raw
scores are torch's fp32 ones, which is what the reference compares on a GPU), scores and probs by
float64 formulas, the backward by float64 autograd through the formulas with the selection fixed.
The selection must also equal the reference kernel's bit for bit (ties included).

Both compute paths run: the default on CPU tensors (fp64, the reference's choice there) and the GPU's
fp32 path (``wide=False``; exp and division as the interpreter computes them).

Grid: E not a power of two (10, 12, 20, 24) and groups not a power of two (3, 5), experts per group
not a power of two (3, 5), ``k_g = 1`` and ``topk`` not a multiple of ``selected_groups``, E = 1; T odd
(several tokens per program, and 1-token programs to cross block edges); fp32/fp16/bf16 logits.
Ties: small-integer logits (ties inside and across groups, all-equal rows), saturated sigmoids
(distinct logits, equal fp64 / fp32 scores). NaN / +-inf logits propagate like the reference.
"""

from __future__ import annotations

import math

import pytest
import torch

from turbo_core.dispatch.specs.moe import MOE_ROUTING_BWD, MOE_ROUTING_FWD, MoeRoutingBwdArgs, MoeRoutingFwdArgs
from turbo_core.reference import moe_routing as ref
from turbo_core.testing.numerics import assert_close_to_reference
from turbo_triton.moe import routing

F64 = torch.float64
SCALE = 2.5
MODES = [None, False]  # reference's compute type (fp64 on CPU), the GPU's fp32 path


# -- the oracle: Python loops ---------------------------------------------------------------------

def _sigmoid(v: float) -> float:
    if math.isnan(v):
        return v
    return 0.0 if -v > 709 else 1.0 / (1.0 + math.exp(-v))


def _softmax(row: list[float]) -> list[float]:
    if any(math.isnan(v) for v in row) or max(row) == math.inf or max(row) == -math.inf:
        return [math.nan] * len(row)
    m = max(row)
    ex = [math.exp(v - m) for v in row]
    total = sum(ex)
    return [v / total for v in ex]


def _raw(logits: torch.Tensor, fn: str, wide: bool) -> list[list[float]]:
    """Raw scores per row: float64 Python math, or (fp32 path) torch's fp32 scores."""
    if not wide:
        x = logits.float()
        r = torch.sigmoid(x) if fn == "sigmoid" else torch.softmax(x, -1)
        return r.double().tolist()
    rows = logits.double().tolist()
    return [[_sigmoid(v) for v in row] if fn == "sigmoid" else _softmax(row) for row in rows]


def _fdiv(a: float, b: float) -> float:
    """IEEE division (Python raises on a zero divisor)."""
    if b == 0.0:
        return math.nan if a == 0.0 or math.isnan(a) else math.copysign(math.inf, a)
    return a / b


def _key(v: float) -> float:
    """Sort key: NaN ranks above everything (torch's descending sort puts NaN first)."""
    return math.inf if math.isnan(v) else v


def _select(raw: list[float], topk: int, groups: int, sel: int) -> list[int]:
    e = len(raw)
    per, kg = e // groups, topk // sel
    gscore = []
    for gi in range(groups):
        total = 0.0
        for v in sorted((_key(v) for v in raw[gi * per:(gi + 1) * per]), reverse=True)[:kg]:
            total += v
        gscore.append(total)
    kept = sorted(range(groups), key=lambda i: (-gscore[i], i))[:sel]
    cand = [x for x in range(e) if x // per in kept]
    return sorted(cand, key=lambda x: (-_key(raw[x]), x))[:topk]


def _expect(logits, topk, groups, sel, fn, wide):
    """``(mask bool [T, E], scores float64, probs float64)`` by loops."""
    t, e = logits.shape
    raws = _raw(logits, fn, wide)
    mask = torch.zeros((t, e), dtype=torch.bool)
    scores = torch.zeros((t, e), dtype=F64)
    probs = torch.zeros((t, e), dtype=F64)
    for i, raw in enumerate(raws):
        chosen = _select(raw, topk, groups, sel)
        mask[i, chosen] = True
        total = sum(raw)
        scores[i] = torch.tensor([_fdiv(v, total) for v in raw] if fn == "sigmoid" else raw, dtype=F64)
        picked = sum(raw[x] for x in chosen)
        for x in chosen:
            probs[i, x] = (_fdiv(raw[x], picked) if fn == "sigmoid" else raw[x]) * SCALE
    return mask, scores, probs


def _formula(l64: torch.Tensor, mask: torch.Tensor, fn: str):
    """Differentiable float64 ``(scores, probs)`` with the selection fixed."""
    m = mask.to(F64)
    if fn == "sigmoid":
        s = torch.sigmoid(l64)
        sel = s * m
        return s / s.sum(-1, keepdim=True), sel / sel.sum(-1, keepdim=True) * SCALE
    s = torch.softmax(l64, -1)
    return s, s * m * SCALE


def _logits(t: int, e: int, dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn((t, e), generator=g) * 2).to(dtype)


def _check_forward(logits, topk, groups, sel, fn, wide, block_t=None):
    args = MoeRoutingFwdArgs(logits, topk, groups, sel, fn, SCALE)
    MOE_ROUTING_FWD.check_args(args)
    assert routing.can_handle(args) is None
    scores, probs, rmap = routing.moe_routing_fwd(args, wide=wide, block_t=block_t)
    mask, want_s, want_p = _expect(logits, topk, groups, sel, fn, wide is None)
    assert torch.equal(rmap, mask), f"routing_map\n{rmap.int()}\n!= loops\n{mask.int()}"
    assert (rmap.sum(1) == topk).all()
    if wide is None:
        assert torch.equal(rmap, ref.moe_routing_fwd(args)[2]), "routing_map != the reference's"
    assert scores.dtype == probs.dtype == logits.dtype and rmap.dtype == torch.bool
    assert_close_to_reference(scores, want_s, dtype=logits.dtype, what="scores")
    assert_close_to_reference(probs, want_p, dtype=logits.dtype, what="probs")
    return rmap


# -- forward --------------------------------------------------------------------------------------

# (T, E, topk, groups, selected_groups): see the module docstring.
SHAPES = [
    (13, 12, 4, 4, 2),   # P = 3
    (9, 24, 6, 3, 3),    # G = 3, k_g = 2
    (7, 10, 3, 1, 1),    # plain top-k, E = 10
    (6, 16, 5, 8, 4),    # k_g = 1, topk % selected_groups != 0
    (11, 20, 4, 5, 2),   # G = 5, P = 4
    (3, 1, 1, 1, 1),     # one expert
]


@pytest.mark.parametrize("wide", MODES, ids=["ref-ct", "fp32"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("fn", ["sigmoid", "softmax"])
@pytest.mark.parametrize("t,e,topk,groups,sel", SHAPES)
def test_forward_matches_loops(t, e, topk, groups, sel, fn, dtype, wide):
    _check_forward(_logits(t, e, dtype, seed=t * 100 + e), topk, groups, sel, fn, wide)


@pytest.mark.parametrize("block_t", [1, 2, 4])
@pytest.mark.parametrize("fn", ["sigmoid", "softmax"])
def test_forward_many_programs(block_t, fn):
    """Token blocks of 1, 2, 4 over T = 13: block edges and a partial last block."""
    _check_forward(_logits(13, 12, torch.float32, seed=7), 4, 4, 2, fn, None, block_t=block_t)


def test_forward_empty():
    scores, probs, rmap = routing.moe_routing_fwd(MoeRoutingFwdArgs(torch.zeros((0, 6)), 2, 2, 1))
    assert scores.shape == probs.shape == rmap.shape == (0, 6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("fn", ["sigmoid", "softmax"])
def test_bits_match_the_reference_on_cpu(fn, dtype):
    """On CPU tensors both compute in float64 with the same formulas and round once (through fp32,
    as torch converts a double): every output equals the reference's bit for bit, the backward
    too, with a scaling factor that fp32 cannot hold (1/3)."""
    x = _logits(24, 24, dtype, seed=4)
    args = MoeRoutingFwdArgs(x, 6, 4, 2, fn, 1 / 3)
    got, want = routing.moe_routing_fwd(args), ref.moe_routing_fwd(args)
    for name, a, b in zip(("scores", "probs", "routing_map"), got, want, strict=True):
        assert torch.equal(a, b), f"{name} differs from the reference"
    g = torch.Generator().manual_seed(6)
    bwd = MoeRoutingBwdArgs(x, want[2], torch.randn((24, 24), generator=g).to(dtype),
                            torch.randn((24, 24), generator=g).to(dtype), fn, 1 / 3)
    assert torch.equal(routing.moe_routing_bwd(bwd), ref.moe_routing_bwd(bwd))


# -- ties -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("wide", MODES, ids=["ref-ct", "fp32"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("fn", ["sigmoid", "softmax"])
@pytest.mark.parametrize("t,e,topk,groups,sel", [(17, 12, 4, 4, 2), (9, 15, 4, 3, 2), (8, 10, 3, 1, 1)])
def test_ties_go_to_the_lower_index(t, e, topk, groups, sel, fn, dtype, wide):
    """Small integers: equal scores inside a group, equal group scores, an all-equal row."""
    g = torch.Generator().manual_seed(e)
    logits = torch.randint(-1, 2, (t, e), generator=g).to(dtype)
    logits[0] = 0.5
    logits[1, : e // groups] = 3.0  # the first group wins alone, then equal groups
    logits[2] = torch.arange(e).remainder(e // groups).to(dtype)  # every group alike
    rmap = _check_forward(logits, topk, groups, sel, fn, wide)
    assert rmap[0].nonzero().flatten().tolist() == _select([0.0] * e, topk, groups, sel)


@pytest.mark.parametrize("wide,big", [(None, [38.0, 41.0, 45.0, 50.0]), (False, [17.5, 19.0, 22.0, 30.0])],
                         ids=["fp64", "fp32"])
def test_saturated_sigmoid_ties(wide, big):
    """Distinct logits whose sigmoid rounds to 1.0 in the compute type tie: lower index first."""
    e = 9
    rows = []
    for shift in range(4):
        row = [-1.0, 0.5, 2.0, -3.0, 1.0, 0.0, -0.5, 3.0, -2.0]
        for j, v in enumerate(big):
            row[(shift + 2 * j) % e] = v
        rows.append(row)
    logits = torch.tensor(rows, dtype=torch.float32)
    for topk, groups, sel in ((2, 1, 1), (3, 3, 2)):
        rmap = _check_forward(logits, topk, groups, sel, "sigmoid", wide)
        for i, row in enumerate(rows):
            hot = [x for x in range(e) if row[x] in big]
            if groups == 1:  # the lowest-index saturated experts, not the largest logits
                assert rmap[i].nonzero().flatten().tolist() == sorted(hot)[:topk]


def test_nan_and_inf_propagate_like_the_reference():
    """NaN ranks first (torch's descending sort) and poisons its row's normalized values; +inf
    makes a softmax row NaN; -inf experts score 0."""
    ninf, inf, nan = -math.inf, math.inf, math.nan
    logits = torch.tensor([
        [0.1, nan, 0.3, -0.2, 0.4, 0.0],
        [0.1, 0.2, inf, -0.2, 0.4, 0.0],
        [ninf, 0.2, 0.3, ninf, 0.4, 0.0],
        [ninf] * 6,
        [0.3, 0.2, nan, nan, 0.4, 0.0],
    ])
    for fn in ("sigmoid", "softmax"):
        for topk, groups, sel in ((2, 1, 1), (2, 3, 2)):
            args = MoeRoutingFwdArgs(logits, topk, groups, sel, fn, SCALE)
            got = routing.moe_routing_fwd(args)
            want = ref.moe_routing_fwd(args)
            assert torch.equal(got[2], want[2]), f"{fn} {groups}: {got[2].int()} != {want[2].int()}"
            mask, _, _ = _expect(logits, topk, groups, sel, fn, True)
            assert torch.equal(got[2], mask)
            for name, a, b in zip(("scores", "probs"), got[:2], want[:2], strict=False):
                torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, equal_nan=True, msg=lambda m, n=name: f"{n}: {m}")
            if fn == "sigmoid" and groups == 1:  # the NaN experts are picked (softmax: all NaN, lowest ids)
                assert got[2][0].nonzero().flatten().tolist() == [1, 4]
                assert got[2][4].nonzero().flatten().tolist() == [2, 3]


# -- backward -------------------------------------------------------------------------------------

@pytest.mark.parametrize("wide", MODES, ids=["ref-ct", "fp32"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("fn", ["sigmoid", "softmax"])
@pytest.mark.parametrize("grads", ["both", "scores", "probs", "none"])
def test_backward_matches_float64_autograd(grads, fn, dtype, wide):
    t, e, topk, groups, sel = 11, 12, 4, 4, 2
    logits = _logits(t, e, dtype, seed=3)
    mask, _, _ = _expect(logits, topk, groups, sel, fn, True)
    g = torch.Generator().manual_seed(5)
    gs = torch.randn((t, e), generator=g).to(dtype) if grads in ("both", "scores") else None
    gp = torch.randn((t, e), generator=g).to(dtype) if grads in ("both", "probs") else None
    args = MoeRoutingBwdArgs(logits, mask, gs, gp, fn, SCALE)
    MOE_ROUTING_BWD.check_args(args)
    assert routing.can_handle_bwd(args) is None
    got = routing.moe_routing_bwd(args, wide=wide)
    l64 = logits.double().requires_grad_()
    ws, wp = _formula(l64, mask, fn)
    outs = [(o, gr.double()) for o, gr in ((ws, gs), (wp, gp)) if gr is not None]
    want = torch.autograd.grad([o for o, _ in outs], l64, [gr for _, gr in outs])[0] if outs else torch.zeros_like(l64)
    assert got.dtype == dtype
    assert_close_to_reference(got, want, dtype=dtype, what="grad_logits")


@pytest.mark.parametrize("block_t,num_warps", [(1, None), (4, None), (2, 1), (8, 2)])
def test_backward_many_programs(block_t, num_warps):
    logits = _logits(13, 10, torch.float32, seed=9)
    mask, _, _ = _expect(logits, 3, 1, 1, "sigmoid", True)
    gp = torch.randn((13, 10), generator=torch.Generator().manual_seed(1))
    got = routing.moe_routing_bwd(MoeRoutingBwdArgs(logits, mask, None, gp, "sigmoid", SCALE), block_t=block_t,
                                  num_warps=num_warps)
    l64 = logits.double().requires_grad_()
    want = torch.autograd.grad(_formula(l64, mask, "sigmoid")[1], l64, gp.double())[0]
    assert_close_to_reference(got, want, dtype=torch.float32, what="grad_logits")


def test_backward_empty():
    args = MoeRoutingBwdArgs(torch.zeros((0, 4)), torch.zeros((0, 4), dtype=torch.bool), None, None)
    assert routing.moe_routing_bwd(args).shape == (0, 4)


# -- capability -----------------------------------------------------------------------------------

def test_can_handle_reasons():
    x = torch.randn(4, 8)
    assert "contiguous logits" in routing.can_handle(MoeRoutingFwdArgs(torch.randn(8, 4).t(), 2))
    assert "at most 1024" in routing.can_handle(MoeRoutingFwdArgs(torch.randn(2, 1040), 2))
    assert "CPU tensors only" in routing.can_handle(MoeRoutingFwdArgs(torch.empty((4, 8), device="meta"), 2))
    bad = MoeRoutingBwdArgs(x, torch.zeros((4, 8), dtype=torch.bool), torch.randn(8, 4).t(), None)
    assert "contiguous grad_scores" in routing.can_handle_bwd(bad)
