"""The MoE router and index conversions: validation messages, torch.compile (fullgraph, aot_eager),
opcheck of their custom ops, and a few semantic spot checks written out by hand."""

import pytest
import torch

from turbo_core.ops import fused_group_topk_routing_with_aux_score, indices_to_multihot, tokens_per_expert_to_mask

route = fused_group_topk_routing_with_aux_score


@pytest.mark.parametrize("kwargs, exc, msg", [
    (dict(logits=torch.randn(2, 3, 4)), ValueError, "^logits: expected a 2-D tensor"),
    (dict(logits=torch.randn(4, 8).to(torch.int32)), TypeError, "^logits: expected dtype"),
    (dict(topk=9), ValueError, r"^topk: expected at most the number of experts \(8\)"),
    (dict(topk=0), ValueError, "^topk: expected an int >= 1"),
    (dict(groups=3), ValueError, r"^groups: expected a divisor of the number of experts \(8\)"),
    (dict(groups=2, selected_groups=3), ValueError, r"^selected_groups: expected at most groups \(2\)"),
    (dict(groups=4, selected_groups=4, topk=2), ValueError, "^selected_groups: topk // selected_groups"),
    (dict(groups=4, selected_groups=1, topk=3), ValueError, "^selected_groups: topk // selected_groups"),
    (dict(score_function="relu"), ValueError, "^score_function: expected 'sigmoid' or 'softmax'"),
    (dict(scaling_factor=float("nan")), TypeError, "^scaling_factor: expected a finite float"),
])
def test_routing_validation(kwargs, exc, msg):
    args = dict(logits=torch.randn(4, 8), topk=2, groups=1, selected_groups=1, score_function="sigmoid",
                scaling_factor=1.0)
    args.update(kwargs)
    with pytest.raises(exc, match=msg):
        route(**args)


def test_routing_hand_example_sigmoid_groups():
    # 4 experts in 2 groups; the group score is its best sigmoid (topk // selected_groups = 1).
    logits = torch.tensor([[0.0, 3.0, 2.0, 2.5]])
    scores, probs, rmap = route(logits, 1, 2, 1, "sigmoid", 2.0)
    s = torch.sigmoid(logits.double())
    torch.testing.assert_close(scores.double(), s / s.sum(), rtol=1e-6, atol=1e-6)
    assert rmap.tolist() == [[False, True, False, False]]
    assert probs.tolist() == [[0.0, 2.0, 0.0, 0.0]]  # one expert: normalized to 1, times 2
    # groups=None means one group: the top-2 overall.
    _, probs2, rmap2 = route(logits, 2, None, None, "softmax", None)
    sm = torch.softmax(logits.double(), -1)
    assert rmap2.tolist() == [[False, True, False, True]]
    torch.testing.assert_close(probs2.double(), sm * rmap2, rtol=1e-6, atol=1e-6)


def test_routing_group_limit_changes_the_choice():
    # Group 0 = {0.9, -5}, group 1 = {0.8, 0.7}: top-2 overall picks experts 0 and 2, but with
    # 2 experts scoring each group and 1 group kept, group 1 wins (0.8 + 0.7 > 0.9 - 5).
    logits = torch.tensor([[0.9, -5.0, 0.8, 0.7]])
    assert route(logits, 2, 1, 1)[2].tolist() == [[True, False, True, False]]
    assert route(logits, 2, 2, 1)[2].tolist() == [[False, False, True, True]]


def test_routing_ties_go_to_the_lower_index():
    logits = torch.zeros(2, 6)
    assert route(logits, 2)[2].tolist() == [[True, True, False, False, False, False]] * 2
    assert route(logits, 2, 3, 1)[2].tolist() == [[True, True, False, False, False, False]] * 2


def test_routing_only_probs_gradient_and_bf16_dtype():
    torch.manual_seed(0)
    logits = torch.randn(5, 8, dtype=torch.bfloat16, requires_grad=True)
    scores, probs, rmap = route(logits, 2, 4, 2, "softmax", 1.5)
    assert scores.dtype == probs.dtype == torch.bfloat16 and rmap.dtype == torch.bool
    assert (rmap.sum(1) == 2).all() and not rmap.requires_grad
    probs.sum().backward()
    l64 = logits.detach().double().requires_grad_()
    (torch.softmax(l64, -1) * rmap * 1.5).sum().backward()
    torch.testing.assert_close(logits.grad.double(), l64.grad, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("fn", ["sigmoid", "softmax"])
def test_routing_compile_fullgraph(fn):
    torch.manual_seed(1)
    logits = torch.randn(7, 8, requires_grad=True)
    compiled = torch.compile(lambda x: route(x, 3, 4, 2, fn, 2.0), fullgraph=True, backend="aot_eager")
    scores, probs, rmap = compiled(logits)
    (scores.square().sum() + probs.square().sum()).backward()
    ref = logits.detach().clone().requires_grad_()
    s2, p2, m2 = route(ref, 3, 4, 2, fn, 2.0)
    (s2.square().sum() + p2.square().sum()).backward()
    assert torch.equal(rmap, m2)
    torch.testing.assert_close(probs, p2)
    torch.testing.assert_close(logits.grad, ref.grad)


def test_indices_to_multihot_validation():
    idx = torch.tensor([[0, 1], [2, -1]])
    p = torch.rand(2, 2)
    with pytest.raises(ValueError, match=r"^probs: expected shape \(2, 2\)"):
        indices_to_multihot(idx, torch.rand(2, 3), 4)
    with pytest.raises(ValueError, match="^indices: expert id 4 out of range"):
        indices_to_multihot(torch.tensor([[0, 4]]), torch.rand(1, 2), 4)
    with pytest.raises(ValueError, match="^indices: expert id -2 out of range"):
        indices_to_multihot(torch.tensor([[0, -2]]), torch.rand(1, 2), 4)
    with pytest.raises(ValueError, match="^num_experts: expected an int >= 1"):
        indices_to_multihot(idx, p, 0)
    with pytest.raises(TypeError, match="^indices: expected dtype"):
        indices_to_multihot(idx.float(), p, 4)
    with pytest.raises(TypeError, match="^fused: expected a bool"):
        indices_to_multihot(idx, p, 4, fused=1)


def test_indices_to_multihot_hand_example():
    idx = torch.tensor([[2, 0], [1, 1], [-1, 3]], dtype=torch.int32)
    p = torch.tensor([[0.25, 0.5], [0.125, 0.75], [0.5, 0.375]], requires_grad=True)
    rmap, dense = indices_to_multihot(idx, p, 4)
    assert rmap.tolist() == [[True, False, True, False], [False, True, False, False], [False, False, False, True]]
    assert dense.tolist() == [[0.5, 0, 0.25, 0], [0, 0.125, 0, 0], [0, 0, 0, 0.375]]
    dense.backward(torch.arange(12.0).reshape(3, 4))
    assert p.grad.tolist() == [[2.0, 0.0], [5.0, 0.0], [0.0, 11.0]]  # repeated id: first slot only


def test_tokens_per_expert_to_mask():
    assert tokens_per_expert_to_mask(torch.tensor([1, 2]), 5).tolist() == [1, 1, 1, 0, 0]
    with pytest.raises(ValueError, match="^tokens_per_expert: expected a 1-D tensor"):
        tokens_per_expert_to_mask(torch.tensor([[1]]), 5)
    with pytest.raises(ValueError, match="^num_tokens: expected an int >= 0"):
        tokens_per_expert_to_mask(torch.tensor([1]), -1)
    with pytest.raises(TypeError, match="^tokens_per_expert: expected dtype"):
        tokens_per_expert_to_mask(torch.tensor([1.0]), 3)


def test_conversions_compile_fullgraph():
    idx = torch.tensor([[2, 0], [1, -1], [3, 3]])
    p = torch.rand(3, 2, requires_grad=True)

    def fn(i, q, counts):
        rmap, dense = indices_to_multihot(i, q, 4)
        return rmap, dense, tokens_per_expert_to_mask(counts, 6)

    rmap, dense, mask = torch.compile(fn, fullgraph=True, backend="aot_eager")(idx, p, torch.tensor([2, 1]))
    dense.sum().backward()
    assert mask.tolist() == [1, 1, 1, 0, 0, 0]
    assert rmap.sum().item() == 4
    assert p.grad.tolist() == [[1.0, 1.0], [1.0, 0.0], [1.0, 0.0]]


def test_opcheck_custom_ops():
    torch.manual_seed(2)
    logits = torch.randn(5, 8)
    torch.library.opcheck(torch.ops.turbo.moe_routing_fwd.default, (logits, 3, 4, 2, "sigmoid", 1.0))
    torch.library.opcheck(torch.ops.turbo.moe_routing_fwd.default, (logits.half(), 2, 1, 1, "softmax", 2.0))
    _, _, rmap = route(logits, 3, 4, 2)
    g = torch.randn(5, 8)
    torch.library.opcheck(torch.ops.turbo.moe_routing_bwd.default, (logits, rmap, g, g, "sigmoid", 1.0))
    torch.library.opcheck(torch.ops.turbo.moe_routing_bwd.default, (logits, rmap, None, g, "softmax", 1.0))
    idx = torch.tensor([[2, 0], [1, -1], [3, 3]])
    torch.library.opcheck(torch.ops.turbo.indices_to_multihot.default, (idx, torch.rand(3, 2), 4))
    torch.library.opcheck(torch.ops.turbo.indices_to_multihot_bwd.default, (torch.rand(3, 4), idx))
    torch.library.opcheck(torch.ops.turbo.tokens_per_expert_to_mask.default, (torch.tensor([2, 3]), 7))
