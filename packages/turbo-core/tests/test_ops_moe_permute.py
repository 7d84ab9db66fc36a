"""moe_permute / moe_unpermute and token_permute / token_unpermute: validation messages, a worked
example of the layout, torch.compile (fullgraph, aot_eager) with static caps, opcheck of the
permutation custom ops."""

import pytest
import torch

from turbo_core.ops import moe_permute, moe_unpermute, token_permute, token_unpermute

FP8 = getattr(torch, "float8_e4m3fn", None)


def _permute(**kw):
    args = dict(tokens=torch.randn(3, 4), expert_map=torch.tensor([[0, 1], [2, -1], [1, 3]]), num_local_experts=4)
    args.update(kw)
    return moe_permute(args.pop("tokens"), args.pop("expert_map"), **args)


@pytest.mark.parametrize("kwargs, exc, msg", [
    (dict(tokens=torch.randn(3)), ValueError, "^tokens: expected a 2-D tensor"),
    (dict(tokens=torch.randn(2, 4)), ValueError, "^expert_map: expected 2 rows"),
    (dict(expert_map=torch.rand(3, 2)), TypeError, "^expert_map: expected dtype"),
    (dict(expert_map=torch.tensor([[0, 4], [1, 2], [3, -1]])), ValueError, "^expert_map: expert id 4 out of range"),
    (dict(expert_map=torch.ones(3, 5, dtype=torch.bool)), ValueError, "^expert_map: a routing map must be"),
    (dict(num_local_experts=0), ValueError, "^num_local_experts: expected an int >= 1"),
    (dict(num_topk=3), ValueError, "^num_topk: expected 0 or the index map's width 2"),
    (dict(pad_multiple=-1), ValueError, "^pad_multiple: expected an int >= 0"),
    (dict(num_permuted_tokens=-2), ValueError, "^num_permuted_tokens: expected an int >= -1"),
    (dict(probs_layout="dense"), ValueError, "^probs_layout: expected 'topk' or 'routing_map'"),
    (dict(probs=torch.rand(3, 4)), ValueError, r"^probs: expected shape \(3, 2\) \(probs_layout='topk'\), got \(3, 4\)"),
    (dict(expert_map=torch.ones(3, 4, dtype=torch.bool), probs=torch.rand(3, 4)), ValueError,
     "^probs_layout: 'topk' needs a top-k index map"),
    (dict(scaling_factor=torch.rand(3, 2)), ValueError, "^scaling_factor: per-token scales travel with fp8"),
    (dict(use_fp8=True), TypeError, "^tokens: use_fp8=True expects an fp8 dtype"),
    (dict(use_fp8=1), TypeError, "^use_fp8: expected a bool"),
])
def test_moe_permute_validation(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        _permute(**kwargs)


@pytest.mark.skipif(FP8 is None, reason="no float8 dtype in this torch")
def test_moe_permute_fp8_validation():
    tokens = torch.randn(3, 4).to(FP8)
    with pytest.raises(TypeError, match=r"^tokens: expected dtype .*pass use_fp8=True"):
        _permute(tokens=tokens)
    with pytest.raises(ValueError, match=r"^scaling_factor: expected shape \[3, 3\]"):
        _permute(tokens=tokens, use_fp8=True, scaling_factor=torch.rand(3, 2), scales_per_token=3)
    res = _permute(tokens=tokens, use_fp8=True, scaling_factor=torch.rand(3, 2))
    assert res.permuted_tokens.dtype == FP8 and res.permuted_scaling_factor.shape == (5, 2)


def test_moe_permute_worked_example():
    # Tokens 0..4 with top-2 ids; expert 1 has 3 tokens, padded to 4 rows; cap of 9 rows.
    idx = torch.tensor([[1, 0], [1, -1], [2, 2], [-1, -1], [0, 1]])
    tokens = torch.arange(5.0).unsqueeze(1).repeat(1, 2)
    probs = torch.tensor([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6], [0.7, 0.8], [0.9, 1.0]])
    res = moe_permute(tokens, idx, num_local_experts=3, pad_multiple=2, num_permuted_tokens=9, probs=probs)
    # Segments: expert 0 = tokens {0, 4} (rows 0-1), expert 1 = {0, 1, 4} + pad (rows 2-5),
    # expert 2 = {2} + pad (rows 6-7), row 8 unused.
    assert res.permuted_tokens[:, 0].tolist() == [0, 4, 0, 1, 4, 0, 2, 0, 0]
    assert res.permuted_probs.tolist() == pytest.approx([0.2, 0.9, 0.1, 0.3, 1.0, 0, 0.5, 0, 0])
    assert res.tokens_per_expert.tolist() == [2, 4, 2]
    assert res.overflow_flag.tolist() == [0] and res.num_dispatched_tokens.tolist() == [4]
    assert res.row_id_map[0].tolist() == [0, 2, -1, 1, 0, -1, 2]
    assert res.row_id_map[3].tolist() == [-1, -1, -1, -1, -1, -1, 0]
    # A tight cap drops rows past it and raises the flag; tokens_per_expert is clipped.
    tight = moe_permute(tokens, idx, num_local_experts=3, pad_multiple=2, num_permuted_tokens=5)
    assert tight.overflow_flag.tolist() == [1] and tight.tokens_per_expert.tolist() == [2, 3, 0]
    assert tight.row_id_map[4].tolist() == [1, 4, -1, 0, 1, -1, 2]
    # No cap: sized from the data (host sync) = 8 rows.
    assert moe_permute(tokens, idx, num_local_experts=3, pad_multiple=2).permuted_tokens.shape == (8, 2)


def test_moe_permute_empty_and_no_grad_outputs():
    res = moe_permute(torch.zeros(0, 6, requires_grad=True), torch.zeros(0, 2, dtype=torch.int64),
                      num_local_experts=4, pad_multiple=8, probs=torch.zeros(0, 2))
    assert res.permuted_tokens.shape == (0, 6) and res.row_id_map.shape == (0, 9)
    assert res.tokens_per_expert.tolist() == [0, 0, 0, 0] and res.permuted_probs.shape == (0,)
    assert not res.row_id_map.requires_grad
    res.permuted_tokens.sum().backward()


def test_moe_unpermute_validation():
    res = _permute(probs=torch.rand(3, 2))
    good = dict(restore_shape=(3, 4), num_local_experts=4)
    x, rmap, nd = res.permuted_tokens, res.row_id_map, res.num_dispatched_tokens
    with pytest.raises(ValueError, match=r"^restore_shape: expected \(3, 4\)"):
        moe_unpermute(x, rmap, nd, restore_shape=(3, 5), num_local_experts=4)
    with pytest.raises(ValueError, match="^num_local_experts: expected 4"):
        moe_unpermute(x, rmap, nd, restore_shape=(3, 4), num_local_experts=3)
    with pytest.raises(TypeError, match="^row_id_map: expected the row map"):
        moe_unpermute(x, rmap.long(), nd, **good)
    with pytest.raises(ValueError, match="^num_dispatched_tokens_tensor: expected one element"):
        moe_unpermute(x, rmap, torch.zeros(2, dtype=torch.int32), **good)
    with pytest.raises(ValueError, match=r"^permuted_probs: expected shape \(5,\)"):
        moe_unpermute(x, rmap, nd, permuted_probs=torch.rand(4), **good)
    with pytest.raises(ValueError, match="^probs_topk_stride: expected an int >= 0"):
        moe_unpermute(x, rmap, nd, probs_topk_stride=-1, **good)
    out, probs = moe_unpermute(x, rmap, nd, **good)
    assert probs is None and out.shape == (3, 4)


def test_token_permute_validation():
    inp, rm = torch.randn(3, 4), torch.tensor([[1, 0], [0, 1], [1, 1]], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="^topk_indices: not supported"):
        token_permute(inp, 4, topk_indices=torch.zeros(3, 1, dtype=torch.int64))
    with pytest.raises(ValueError, match="^routing_map: required"):
        token_permute(inp, 4)
    with pytest.raises(ValueError, match=r"^routing_map: expected \[T=3, E>=1\]"):
        token_permute(inp, 4, routing_map=rm[:2])
    with pytest.raises(ValueError, match="^num_out_tokens: drop_and_pad needs the total capacity"):
        token_permute(inp, -1, routing_map=rm, drop_and_pad=True)
    with pytest.raises(ValueError, match=r"^probs: expected shape \(3, 2\)"):
        token_permute(inp, 4, probs=torch.rand(3, 3), routing_map=rm)
    out = token_permute(inp, -1, routing_map=rm)  # an int 0/1 map is accepted
    assert out.permuted_tokens.shape == (4, 4) and out.permuted_probs is None
    with pytest.raises(TypeError, match="^sorted_indices: expected the row map"):
        token_unpermute(out.permuted_tokens, torch.arange(4), restore_shape=(3, 4))
    with pytest.raises(ValueError, match=r"^merging_probs: expected shape \(3, 2\)"):
        token_unpermute(out.permuted_tokens, out.row_id_map, merging_probs=torch.rand(3, 4))
    with pytest.raises(ValueError, match=r"^restore_shape: expected \(3, 4\)"):
        token_unpermute(out.permuted_tokens, out.row_id_map, restore_shape=(4, 4))
    with pytest.raises(ValueError, match=r"^routing_map: expected shape \(3, 2\)"):
        token_unpermute(out.permuted_tokens, out.row_id_map, routing_map=torch.ones(3, 3))


def test_token_permute_primus_call_forms():
    torch.manual_seed(3)
    inp = torch.randn(6, 4)
    rm = torch.rand(6, 3) > 0.4
    probs = torch.rand(6, 3)
    # Megatron / Primus unpack four values, with the row map in slot 3, and hand it back.
    permuted, pprobs, mapping, tpe = token_permute(inp, num_out_tokens=-1, routing_map=rm, probs=probs, fused=True,
                                                   return_tokens_per_expert=True)
    assert tpe.tolist() == rm.sum(0).tolist() and pprobs.shape == (permuted.shape[0],)
    back = token_unpermute(permuted, mapping, restore_shape=inp.shape, routing_map=rm, fused=True)
    torch.testing.assert_close(back, inp * rm.sum(1, keepdim=True))
    merged = token_unpermute(permuted, mapping, merging_probs=probs, restore_shape=inp.shape)
    torch.testing.assert_close(merged, inp * (probs * rm).sum(1, keepdim=True))


def test_permute_compile_fullgraph_static_cap():
    torch.manual_seed(4)
    idx = torch.tensor([[0, 2], [1, -1], [3, 3], [2, 0], [1, 0]])
    tokens = torch.randn(5, 6, requires_grad=True)
    probs = torch.rand(5, 2, requires_grad=True)

    def fn(x, i, p):
        r = moe_permute(x, i, num_local_experts=4, pad_multiple=4, num_permuted_tokens=20, probs=p)
        y = r.permuted_tokens * r.permuted_probs.unsqueeze(1)
        out, _ = moe_unpermute(y, r.row_id_map, r.num_dispatched_tokens, restore_shape=(5, 6), num_local_experts=4)
        return out, r.tokens_per_expert

    out, tpe = torch.compile(fn, fullgraph=True, backend="aot_eager")(tokens, idx, probs)
    out.square().sum().backward()
    x2, p2 = tokens.detach().clone().requires_grad_(), probs.detach().clone().requires_grad_()
    out2, tpe2 = fn(x2, idx, p2)
    out2.square().sum().backward()
    assert torch.equal(tpe, tpe2)
    torch.testing.assert_close(out, out2)
    torch.testing.assert_close(tokens.grad, x2.grad)
    torch.testing.assert_close(probs.grad, p2.grad)
    # The math: token t's output is x[t] times the sum of its (first-slot) probs.
    first = torch.tensor([[1, 1], [1, 0], [1, 0], [1, 1], [1, 1]], dtype=torch.float32)
    torch.testing.assert_close(out2, x2.detach() * (p2.detach() * first).sum(1, keepdim=True))


def test_token_permute_compile_fullgraph():
    torch.manual_seed(5)
    rm = torch.rand(7, 4) > 0.5
    inp = torch.randn(7, 3, requires_grad=True)
    merging = torch.rand(7, 4, requires_grad=True)

    def fn(x, m, w):
        p, _, mapping, tpe = token_permute(x, 12, routing_map=m)
        return token_unpermute(p * 2, mapping, merging_probs=w, restore_shape=(7, 3)), tpe

    out, tpe = torch.compile(fn, fullgraph=True, backend="aot_eager")(inp, rm, merging)
    out.sum().backward()
    x2, w2 = inp.detach().clone().requires_grad_(), merging.detach().clone().requires_grad_()
    out2, _ = fn(x2, rm, w2)
    out2.sum().backward()
    torch.testing.assert_close(out, out2)
    torch.testing.assert_close(inp.grad, x2.grad)
    torch.testing.assert_close(merging.grad, w2.grad)
    assert int(tpe.sum()) == min(12, int(rm.sum()))


def test_opcheck_custom_ops():
    torch.manual_seed(6)
    idx = torch.tensor([[0, 2], [1, -1], [3, 3], [2, 0], [1, 0]], dtype=torch.int32)
    mask = torch.rand(5, 4) > 0.5
    pre = torch.ops.turbo.moe_permute_preprocess.default
    torch.library.opcheck(pre, (idx, 4, 4, 20, "topk", -1))
    torch.library.opcheck(pre, (mask, 4, 0, -1, "routing_map", -1))
    torch.library.opcheck(pre, (mask, 4, 0, 8, "routing_map", 2))
    rmap = pre(idx, 4, 4, 20, "topk", -1)[0]
    tokens, probs = torch.randn(5, 6), torch.rand(5, 2)
    torch.library.opcheck(torch.ops.turbo.moe_permute.default, (tokens, rmap, 20, None, probs))
    torch.library.opcheck(torch.ops.turbo.moe_permute.default, (tokens, rmap, 20, torch.rand(5, 3), None))
    permuted = torch.randn(20, 6)
    unp = torch.ops.turbo.moe_unpermute.default
    torch.library.opcheck(unp, (permuted, rmap, torch.rand(20), 2, None))
    torch.library.opcheck(unp, (permuted, rmap, None, 0, torch.rand(5, 4)))
    torch.library.opcheck(torch.ops.turbo.moe_unpermute_bwd.default, (torch.randn(5, 6), permuted, rmap,
                                                                        torch.rand(5, 4)))
