"""TRITON MoE data movement under the interpreter: moe_permute_preprocess, moe_permute,
moe_unpermute(_bwd), indices_to_multihot(_bwd), tokens_per_expert_to_mask.

Data movement is checked bit for bit against the reference kernels called directly (an independent
vectorized torch implementation) and, for the row map, against plain Python loops written here.
Sums (unpermute, its backward's dots) are checked against float64 math with fp32-rounding
tolerances. Grid: T=13 (odd, several tokens per expert) and T=0, E=5 with expert 3 never routed
(an empty segment), K=2 with a -1 slot and a repeated id (ids stay in range: the spec validates
them on the CPU); pad_multiple 0/4; no cap, a roomy cap, a tight cap (overflow), cap 0; Megatron
capacity; fp32/bf16/fp16/fp8 (with per-token scales travelling), probs in both layouts.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from turbo_core.dispatch.specs.moe import (
    IndicesToMultihotArgs,
    IndicesToMultihotBwdArgs,
    MoePermuteArgs,
    MoePermutePreprocessArgs,
    MoeUnpermuteArgs,
    MoeUnpermuteBwdArgs,
    TokensPerExpertToMaskArgs,
)
from turbo_core.reference import moe_permute as ref
from turbo_core.reference import moe_routing as ref_routing
from turbo_triton.moe import multihot, permute, permute_kernels, permute_preprocess, unpermute

T, E, K, H = 13, 5, 2, 24
FP8 = getattr(torch, "float8_e4m3fn", None)


def _index_map(t: int, dtype=torch.int32) -> torch.Tensor:
    g = torch.Generator().manual_seed(t)
    idx = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(t)]) if t else torch.zeros((0, K))
    idx = idx.long()
    idx[idx == 3] = 1  # expert 3 gets no token (and token rows with [1, 1] repeat an id)
    if t > 2:
        idx[1, 0] = -1
        idx[2, 1] = idx[2, 0]
    return idx.to(dtype)


def _mask(idx: torch.Tensor) -> torch.Tensor:
    m = torch.zeros((idx.shape[0], E), dtype=torch.bool)
    for t, row in enumerate(idx.tolist()):
        for x in row:
            if x >= 0:
                m[t, x] = True
    return m


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def _loop_row_map(idx, pad, cap, capacity, topk):
    """The row map and counts by Python loops over experts and tokens (independent of both kernels)."""
    copies = []
    for row in idx.tolist():
        seen = {}
        for k, x in enumerate(row):
            if 0 <= x < E and x not in seen:
                seen[x] = k
        copies.append(sorted((x, k if topk else x) for x, k in seen.items()))
    routed = [[t for t, cs in enumerate(copies) if any(y == ex for y, _ in cs)] for ex in range(E)]
    if capacity >= 0:
        sizes = [capacity] * E
        routed = [r[:capacity] for r in routed]
    else:
        sizes = [math.ceil(len(r) / pad) * pad if pad else len(r) for r in routed]
    offsets = [sum(sizes[:x]) for x in range(E)]
    limit = cap if cap >= 0 else sum(sizes)
    dest = {(t, x): offsets[x] + i for x in range(E) for i, t in enumerate(routed[x]) if offsets[x] + i < limit}
    rows = []
    for t, cs in enumerate(copies):
        kept = [(dest[(t, x)], c) for x, c in cs if (t, x) in dest]
        fill = [-1] * (E - len(kept))
        rows.append([d for d, _ in kept] + fill + [c for _, c in kept] + fill + [len(kept)])
    tpe = [min(sizes[x], max(0, limit - offsets[x])) for x in range(E)]
    return (torch.tensor(rows, dtype=torch.int32).reshape(len(copies), 2 * E + 1), tpe,
            int(cap >= 0 and sum(sizes) > cap), sum(1 for cs in copies if cs))


# Every layout option: index maps of both widths and a bool map, both probs layouts, padding,
# no / roomy / tight / zero cap, Megatron capacity (which excludes padding).
PRE = [(t, kind, layout, pad, cap, capa)
       for t, kind, layout, pad, cap, capa in itertools.product(
           (T, 0), ("int32", "int64", "mask"), ("routing_map", "topk"), (0, 4), (-1, 40, 9, 0), (-1, 2))
       if not (layout == "topk" and kind == "mask") and not (capa >= 0 and pad) and (t or cap in (-1, 9))]


@pytest.mark.parametrize("t,kind,layout,pad,cap,capa", PRE)
def test_preprocess_matches_loops_and_reference(t, kind, layout, pad, cap, capa):
    idx = _index_map(t, torch.int64 if kind == "int64" else torch.int32)
    emap = _mask(idx) if kind == "mask" else idx
    args = MoePermutePreprocessArgs(emap, E, pad, cap, layout, capa)
    assert permute_preprocess.can_handle(args) is None
    got = permute_preprocess.moe_permute_preprocess(args)
    want = ref.moe_permute_preprocess(args)
    for name, a, b in zip(("row_id_map", "tokens_per_expert", "overflow_flag", "num_dispatched_tokens"), got, want,
                             strict=True):
        assert _bits_equal(a, b), f"{name}: {a.tolist()} != reference {b.tolist()}"
    rmap, tpe, over, disp = _loop_row_map(idx, pad, cap, capa, layout == "topk")
    assert torch.equal(got[0], rmap)
    assert got[1].tolist() == tpe and got[2].tolist() == [over] and got[3].tolist() == [disp]


@pytest.mark.parametrize("block_t,block_b", [(1, 1), (2, 2), (4, 1), (2, 8)])
@pytest.mark.parametrize("kind,pad,cap,capa", [("int32", 4, 9, -1), ("mask", 0, -1, 2), ("int64", 0, 20, -1)])
def test_preprocess_many_blocks(block_t, block_b, kind, pad, cap, capa):
    """Small tiles: T=13 spans up to 13 token blocks and several scan steps (the cross-block prefix)."""
    idx = _index_map(T, torch.int64 if kind == "int64" else torch.int32)
    args = MoePermutePreprocessArgs(_mask(idx) if kind == "mask" else idx, E, pad, cap, "routing_map", capa)
    got = permute_preprocess.moe_permute_preprocess(args, block_t=block_t, block_b=block_b)
    rmap, tpe, over, disp = _loop_row_map(idx, pad, cap, capa, False)
    assert torch.equal(got[0], rmap)
    assert got[1].tolist() == tpe and got[2].tolist() == [over] and got[3].tolist() == [disp]


def test_preprocess_overflow_flag_and_empty_expert():
    args = MoePermutePreprocessArgs(_index_map(T), E, pad_multiple=4, num_permuted_tokens=9)
    rmap, tpe, over, disp = permute_preprocess.moe_permute_preprocess(args)
    assert over.item() == 1 and tpe.sum().item() == 9
    full = permute_preprocess.moe_permute_preprocess(MoePermutePreprocessArgs(_index_map(T), E, pad_multiple=4))
    assert full[2].item() == 0 and full[1][3].item() == 0  # expert 3 has no token: no rows, not even padding
    assert disp.item() == sum(1 for row in _index_map(T).tolist() if any(x >= 0 for x in row))


@pytest.mark.parametrize("kind,layout,pad,cap,capa", [("int32", "topk", 4, 9, -1), ("mask", "routing_map", 0, -1, 2),
                                                      ("int64", "routing_map", 0, 20, -1), ("int32", "topk", 0, 0, -1)])
def test_preprocess_one_launch_matches_three(kind, layout, pad, cap, capa, monkeypatch):
    """Tokens that fit one block take ``single_block_kernel`` alone (its tile shrunk to them); the same
    inputs through the three launches (``single=False``) and the loops give the same outputs."""
    from turbo_triton.moe import preprocess_kernels

    launched = _record_launches(monkeypatch, preprocess_kernels,
                                ("single_block_kernel", "block_counts_kernel", "scan_kernel", "row_map_kernel"))
    idx = _index_map(T, torch.int64 if kind == "int64" else torch.int32)
    args = MoePermutePreprocessArgs(_mask(idx) if kind == "mask" else idx, E, pad, cap, layout, capa)
    one = permute_preprocess.moe_permute_preprocess(args)
    assert launched == ["single_block_kernel"]
    three = permute_preprocess.moe_permute_preprocess(args, single=False)
    assert launched[1:] == ["block_counts_kernel", "scan_kernel", "row_map_kernel"]
    rmap, tpe, over, disp = _loop_row_map(idx, pad, cap, capa, layout == "topk")
    for a, b in zip(one, three, strict=True):
        assert _bits_equal(a, b)
    assert torch.equal(one[0], rmap)
    assert one[1].tolist() == tpe and one[2].tolist() == [over] and one[3].tolist() == [disp]
    with pytest.raises(ValueError, match="single=True"):
        permute_preprocess.moe_permute_preprocess(args, block_t=4, single=True)


def _record_launches(monkeypatch, module, names) -> list[str]:
    """Wraps each Triton kernel ``module.<name>`` so that launching it appends its name to the list
    returned."""
    launched = []

    class Spy:
        def __init__(self, name, real):
            self.name, self.real = name, real

        def __getitem__(self, grid):
            launched.append(self.name)
            return self.real[grid]

    for name in names:
        monkeypatch.setattr(module, name, Spy(name, getattr(module, name)))
    return launched


def _permute_inputs(dtype, layout, pad, cap, t=T):
    idx = _index_map(t)
    rmap, tpe, _, _ = ref.moe_permute_preprocess(MoePermutePreprocessArgs(idx, E, pad, cap, layout))
    num_out = cap if cap >= 0 else int(tpe.sum())
    g = torch.Generator().manual_seed(7)
    x = torch.randn((t, H), generator=g).to(dtype)
    width = K if layout == "topk" else E
    return x, rmap, num_out, torch.rand((t, 3), generator=g), torch.rand((t, width), generator=g), width


PERM = [(dt, layout, pad, cap, t) for dt, layout, pad, cap, t in itertools.product(
    (torch.float32, torch.bfloat16, torch.float16, *((FP8,) if FP8 else ())), ("topk", "routing_map"),
    (0, 4), (-1, 9), (T,))] + [(torch.float32, "topk", 4, -1, 0), (torch.bfloat16, "routing_map", 0, 6, 0)]


@pytest.mark.parametrize("search", [False, True], ids=["scatter", "search"])
@pytest.mark.parametrize("dtype,layout,pad,cap,t", PERM)
def test_permute_bit_exact(dtype, layout, pad, cap, t, search):
    """Both forms of the launch: the three-launch scatter, and the one-launch search of small batches."""
    x, rmap, num_out, scales, probs, _ = _permute_inputs(dtype, layout, pad, cap, t)
    if t:
        x[0, 0] = float("nan") if dtype != FP8 else x[0, 0]
    args = MoePermuteArgs(x, rmap, num_out, scales if dtype == FP8 or pad else None, probs)
    assert permute.can_handle(args) is None
    got, want = permute.moe_permute(args, search=search), ref.moe_permute(args)
    for name, a, b in zip(("permuted", "scales", "probs"), got, want, strict=True):
        assert (a is None) == (b is None), name
        if a is not None:
            assert _bits_equal(a, b), f"{name} differs"
    # Independent check: every token row lands at each of its copies, padding rows are zero.
    mapped = set()
    for tok in range(t):
        for j in range(int(rmap[tok, 2 * E])):
            r = int(rmap[tok, j])
            mapped.add(r)
            assert _bits_equal(got[0][r], x[tok])
    for r in set(range(num_out)) - mapped:
        assert not got[0][r].view(torch.uint8).any() and got[2][r] == 0


def _unpermute_oracle(x, rmap, merging, pp, width):
    """float64 sums by Python loops; the probs scatter."""
    t = rmap.shape[0]
    out = torch.zeros((t, x.shape[1]), dtype=torch.float64)
    up = torch.zeros((t, width), dtype=torch.float64)
    for tok in range(t):
        for j in range(int(rmap[tok, 2 * E])):
            r, c = int(rmap[tok, j]), int(rmap[tok, E + j])
            w = merging[tok, c].double() if merging is not None else 1.0
            out[tok] += w * x[r].double()
            up[tok, c] = pp[r].double()
    return out, up


_TOL = {torch.float32: dict(rtol=2e-6, atol=2e-6), torch.bfloat16: dict(rtol=8e-3, atol=1e-5),
        torch.float16: dict(rtol=1e-3, atol=1e-5)}


@pytest.mark.parametrize("dtype,layout,pad,cap,merge", list(itertools.product(
    (torch.float32, torch.bfloat16, torch.float16), ("topk", "routing_map"), (0, 4), (-1, 9), (False, True))))
def test_unpermute_against_float64(dtype, layout, pad, cap, merge):
    _, rmap, n, _, _, width = _permute_inputs(dtype, layout, pad, cap)
    g = torch.Generator().manual_seed(3)
    x = torch.randn((n, H), generator=g).to(dtype)
    pp = torch.rand((n,), generator=g)
    merging = torch.rand((T, width), generator=g).to(dtype) if merge else None
    args = MoeUnpermuteArgs(x, rmap, pp, width, merging)
    assert unpermute.can_handle(args) is None
    out, up = unpermute.moe_unpermute(args)
    want, want_up = _unpermute_oracle(x, rmap, merging, pp, width)
    torch.testing.assert_close(out.double(), want, **_TOL[dtype])
    assert out.dtype == dtype and _bits_equal(up, ref.moe_unpermute(args)[1])
    torch.testing.assert_close(up.double(), want_up, rtol=0, atol=0)
    if dtype == torch.float32 and not merge:  # at most 2 copies: the fp32 sum is correctly rounded
        assert torch.equal(out, ref.moe_unpermute(args)[0])


@pytest.mark.parametrize("dtype,layout,pad,cap", list(itertools.product(
    (torch.float32, torch.bfloat16), ("topk", "routing_map"), (0, 4), (-1, 9))))
def test_unpermute_bwd_against_float64(dtype, layout, pad, cap):
    _, rmap, n, _, _, width = _permute_inputs(dtype, layout, pad, cap)
    g = torch.Generator().manual_seed(5)
    x = torch.randn((n, H), generator=g).to(dtype)
    gt = torch.randn((T, H), generator=g).to(dtype)
    merging = torch.rand((T, width), generator=g).to(dtype)
    args = MoeUnpermuteBwdArgs(gt, x, rmap, merging)
    assert unpermute.can_handle_bwd(args) is None
    gx, gm = unpermute.moe_unpermute_bwd(args)
    want_gx = torch.zeros((n, H), dtype=torch.float64)
    want_gm = torch.zeros((T, width), dtype=torch.float64)
    for tok in range(T):
        for j in range(int(rmap[tok, 2 * E])):
            r, c = int(rmap[tok, j]), int(rmap[tok, E + j])
            want_gx[r] = gt[tok].double() * merging[tok, c].double()
            want_gm[tok, c] = (gt[tok].double() * x[r].double()).sum()
    torch.testing.assert_close(gx.double(), want_gx, **_TOL[dtype])
    torch.testing.assert_close(gm.double(), want_gm, **_TOL[dtype])
    if dtype == torch.float32:  # one product rounded once: bit-exact
        assert torch.equal(gx, ref.moe_unpermute_bwd(args)[0])


def test_unpermute_zero_tokens_and_rows():
    rmap = torch.zeros((0, 2 * E + 1), dtype=torch.int32)
    out, up = unpermute.moe_unpermute(MoeUnpermuteArgs(torch.zeros((0, H)), rmap, torch.zeros(0), 3, None))
    assert out.shape == (0, H) and up.shape == (0, 3)
    _, rmap, n, _, _, width = _permute_inputs(torch.float32, "topk", 4, -1)
    gx, gm = unpermute.moe_unpermute_bwd(MoeUnpermuteBwdArgs(torch.ones((T, H)), torch.ones((n, H)), rmap,
                                                              torch.ones((T, 0))))
    assert gm.shape == (T, 0) and not gx.any()  # no valid column: every weight is 0


@pytest.mark.parametrize("itype,dtype", list(itertools.product((torch.int32, torch.int64),
                                                               (torch.float32, torch.bfloat16))))
def test_indices_to_multihot(itype, dtype):
    idx = _index_map(T, itype)
    g = torch.Generator().manual_seed(11)
    p = torch.rand((T, K), generator=g).to(dtype)
    p[4, 0] = -0.0
    args = IndicesToMultihotArgs(idx, p, E)
    assert multihot.can_handle(args) is None
    rm, dense = multihot.indices_to_multihot(args)
    want_rm, want_dense = ref_routing.indices_to_multihot(args)
    assert torch.equal(rm, want_rm) and _bits_equal(dense, want_dense)
    assert torch.equal(rm, _mask(idx))
    gd = torch.randn((T, E), generator=g).to(dtype)
    bargs = IndicesToMultihotBwdArgs(gd, idx)
    got = multihot.indices_to_multihot_bwd(bargs)
    assert _bits_equal(got, ref_routing.indices_to_multihot_bwd(bargs))
    assert got[2, 1] == 0 and got[1, 0] == 0  # the repeated slot and the -1 slot get nothing


@pytest.mark.parametrize("k", [0, 1, 6])
def test_indices_to_multihot_ids_out_of_range_and_repeated(k):
    """Ids in [E, next_power_of_2(E)) and past it, negative ids, an id repeated in later slots: only an
    id's first in-range slot counts (the forward writes slots last to first)."""
    g = torch.Generator().manual_seed(5 + k)
    idx = torch.randint(-2, 10, (T, k), generator=g)
    if k > 1:
        idx[0] = torch.tensor([4, 4, 6, 4, -1, 7])[:k]
        idx[1] = torch.tensor([7, 2, 9, 2, 0, 2])[:k]
    p = torch.rand((T, k), generator=g)
    args = IndicesToMultihotArgs(idx, p, E)
    rm, dense = multihot.indices_to_multihot(args)
    want_rm, want_dense = ref_routing.indices_to_multihot(args)
    assert torch.equal(rm, want_rm) and _bits_equal(dense, want_dense)
    if k > 1:
        assert dense[0, 4] == p[0, 0] and dense[1, 2] == p[1, 1] and rm[1].sum() == 2
    gd = torch.randn((T, E), generator=g)
    got = multihot.indices_to_multihot_bwd(IndicesToMultihotBwdArgs(gd, idx))
    assert _bits_equal(got, ref_routing.indices_to_multihot_bwd(IndicesToMultihotBwdArgs(gd, idx)))


@pytest.mark.parametrize("counts,n", [([2, 0, 3], 7), ([0, 0], 3), ([4, 4], 5), ([1], 0), ([], 4)])
def test_tokens_per_expert_to_mask(counts, n):
    for d in (torch.int32, torch.int64):
        got = multihot.tokens_per_expert_to_mask(TokensPerExpertToMaskArgs(torch.tensor(counts, dtype=d), n))
        assert got.dtype == torch.int64 and got.tolist() == [int(i < sum(counts)) for i in range(n)]


def test_declines_with_reasons():
    idx = _index_map(T)
    wide = torch.zeros((T, 2 * 2048 + 1), dtype=torch.int32)
    assert "experts" in permute_preprocess.can_handle(MoePermutePreprocessArgs(idx, 2048))
    assert "contiguous tokens" in permute.can_handle(MoePermuteArgs(torch.zeros((H, T)).t(), wide[:, :11], 4))
    assert "experts" in unpermute.can_handle(MoeUnpermuteArgs(torch.zeros((4, H)), wide))


def test_rows_wider_than_one_tile():
    """H = 4100 > one hidden tile (4096 under the interpreter): the tiled grid, the zero-row walk and the
    backward's chunked dots."""
    h = 4100
    idx = _index_map(T)
    rmap, tpe, _, _ = ref.moe_permute_preprocess(MoePermutePreprocessArgs(idx, E, 4, -1, "topk"))
    n = int(tpe.sum())
    g = torch.Generator().manual_seed(13)
    x = torch.randn((T, h), generator=g)
    for search in (False, True):
        got = permute.moe_permute(MoePermuteArgs(x, rmap, n), search=search)[0]
        assert _bits_equal(got, ref.moe_permute(MoePermuteArgs(x, rmap, n))[0]), search
    y = torch.randn((n, h), generator=g)
    merging = torch.rand((T, K), generator=g)
    out, _ = unpermute.moe_unpermute(MoeUnpermuteArgs(y, rmap, merging_probs=merging))
    want, _ = _unpermute_oracle(y, rmap, merging, torch.zeros(n), K)
    torch.testing.assert_close(out.double(), want, **_TOL[torch.float32])
    gx, gm = unpermute.moe_unpermute_bwd(MoeUnpermuteBwdArgs(x, y, rmap, merging))
    want_gx, want_gm = ref.moe_unpermute_bwd(MoeUnpermuteBwdArgs(x, y, rmap, merging))
    assert torch.equal(gx, want_gx)
    torch.testing.assert_close(gm, want_gm, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("unroll,block_h", [(1, 16), (3, 16), (4, 32), (8, 16)])
@pytest.mark.parametrize("layout,pad,cap", [("topk", 4, -1), ("routing_map", 4, 9), ("topk", 0, -1)])
def test_launch_variants(unroll, block_h, layout, pad, cap):
    """The launchers' tile overrides: copies a step (1 to 8, more than a token has: the masked
    copies past n), hidden tiles of 16 / 32 (H = 24: two tiles, the scales / probs / unpermuted probs
    moved only by the tile-0 program), padding rows and a tight cap; fp8 tokens with scales; the
    permute's row-major (gather) form too."""
    x, rmap, n, scales, probs, width = _permute_inputs(FP8 or torch.float32, layout, pad, cap)
    args = MoePermuteArgs(x, rmap, n, scales, probs)
    for gather, search in ((False, False), (False, True), (True, False)):
        got = permute.moe_permute(args, block_h=block_h, unroll=unroll, num_warps=1, gather=gather, search=search)
        for name, a, b in zip(("permuted", "scales", "probs"), got, ref.moe_permute(args), strict=True):
            assert _bits_equal(a, b), f"{name} differs (gather={gather}, search={search})"
    g = torch.Generator().manual_seed(17)
    y = torch.randn((n, H), generator=g)
    pp = torch.rand((n,), generator=g)
    merging = torch.rand((T, width), generator=g)
    for merge in (None, merging):
        ua = MoeUnpermuteArgs(y, rmap, pp, width, merge)
        out, up = unpermute.moe_unpermute(ua, block_h=block_h, unroll=unroll, num_warps=2)
        want, want_up = _unpermute_oracle(y, rmap, merge, pp, width)
        torch.testing.assert_close(out.double(), want, **_TOL[torch.float32])
        assert _bits_equal(up, ref.moe_unpermute(ua)[1])
    gt = torch.randn((T, H), generator=g)
    ba = MoeUnpermuteBwdArgs(gt, y, rmap, merging)
    gx, gm = unpermute.moe_unpermute_bwd(ba, block_h=block_h, num_warps=1)
    want_gx, want_gm = ref.moe_unpermute_bwd(ba)
    assert torch.equal(gx, want_gx)  # one product rounded once; padding rows zero
    torch.testing.assert_close(gm, want_gm, rtol=1e-5, atol=1e-5)


def test_search_path_threshold_and_many_chunks(monkeypatch):
    """The one-launch search runs by default up to ``SEARCH_MAX`` row-map entries and the scatter above;
    a row map of several ``_SEARCH_F`` chunks (40 tokens x 64 experts, the last chunk partial) finds
    every row, padding rows zero, probs by column, at every step width."""
    calls = _record_launches(monkeypatch, permute_kernels, ("search_gather_kernel", "permute_kernel"))
    t, e, h = 40, 64, 8
    g = torch.Generator().manual_seed(23)
    idx = torch.stack([torch.randperm(e, generator=g)[:3] for _ in range(t)]).to(torch.int64)
    rmap, tpe, _, _ = ref.moe_permute_preprocess(MoePermutePreprocessArgs(idx, e, 8, -1, "topk"))
    n = int(tpe.sum())
    x = torch.randn((t, h), generator=g)
    probs = torch.rand((t, 3), generator=g)
    args = MoePermuteArgs(x, rmap, n, torch.rand((t, 2), generator=g), probs)
    want = ref.moe_permute(args)
    monkeypatch.setattr(permute, "SEARCH_MAX", t * e)  # 2560 entries: 2 default steps of 2048, the second partial
    got = permute.moe_permute(args)
    monkeypatch.setattr(permute, "SEARCH_MAX", t * e - 1)
    scattered = permute.moe_permute(args)
    assert calls == ["search_gather_kernel", "permute_kernel"]
    for name, a, b, c in zip(("permuted", "scales", "probs"), got, want, scattered, strict=True):
        assert _bits_equal(a, b) and _bits_equal(c, b), name
    for rows in (1, 4, 16, 64):  # 4096, 1024, 256 and 64 row-map entries a step: one step, three, ten, forty
        wide = permute.moe_permute(args, search=True, search_rows=rows)
        for name, a, b in zip(("permuted", "scales", "probs"), wide, want, strict=True):
            assert _bits_equal(a, b), (name, rows)
    with pytest.raises(ValueError, match="search_rows"):
        permute.moe_permute(args, search=True, search_rows=3)


def test_zero_width_probs_and_no_tokens():
    """probs of width 0: every permuted probs entry is 0 (no extra fill); T = 0 with padding-only rows."""
    x, rmap, n, _, _, _ = _permute_inputs(torch.float32, "topk", 4, -1)
    empty = torch.zeros((0, 2 * E + 1), dtype=torch.int32)
    for gather, search in ((False, False), (False, True), (True, False)):
        got = permute.moe_permute(MoePermuteArgs(x, rmap, n, None, torch.zeros((T, 0))), gather=gather,
                                  search=search)
        assert got[2].shape == (n,) and not got[2].any()
        out, sc, pr = permute.moe_permute(MoePermuteArgs(torch.zeros((0, H)), empty, 5, torch.zeros((0, 2)),
                                                         torch.zeros((0, E))), gather=gather, search=search)
        assert out.shape == (5, H) and not out.any() and not sc.any() and not pr.any()
    gx, gm = unpermute.moe_unpermute_bwd(MoeUnpermuteBwdArgs(torch.zeros((0, H)), torch.ones((5, H)), empty,
                                                              torch.zeros((0, E))))
    assert gx.shape == (5, H) and not gx.any() and gm.shape == (0, E)
