"""MoETokenDispatcher and MoELayer in one process (group=None; the multi-rank runs are in
turbo-deepep's tests), against a float64 MoE written here from the definition:
``out[t] = sum over t's kept top-k experts e of p[t, e] * W2_e (silu(g) * u)``, ``(g, u) = W1_e x[t]``,
with softmax routing and Megatron's capacity drops. Forward, every gradient, and a few training steps.
"""

import math

import pytest
import torch

from turbo_core.modules.moe_token_dispatcher import MoELayer, MoETokenDispatcher, drop_tokens, expert_capacity
from turbo_core.testing import assert_close_to_reference

F64 = torch.float64


def _kept_loop(probs, rmap, capacity, policy):
    """bool [T, E]: per expert, the first `capacity` routed tokens by (prob desc, index) or index."""
    t, e = rmap.shape
    kept = torch.zeros_like(rmap)
    for ex in range(e):
        toks = [i for i in range(t) if rmap[i, ex]]
        if policy == "probs":
            toks.sort(key=lambda i: (-float(probs[i, ex]), i))
        for i in toks[:capacity]:
            kept[i, ex] = True
    return kept


@pytest.mark.parametrize("policy", ["probs", "position"])
@pytest.mark.parametrize("capacity", [0, 2, 5, 40])
def test_drop_tokens_against_loop(policy, capacity):
    g = torch.Generator().manual_seed(capacity)
    probs = torch.rand((17, 5), generator=g)
    probs[3, :] = probs[4, :]  # equal probs: the lower token index wins
    rmap = torch.rand((17, 5), generator=g) < 0.5
    p_kept, kept = drop_tokens(probs * rmap, rmap, capacity, policy)
    want = _kept_loop(probs * rmap, rmap, capacity, policy)
    assert torch.equal(kept, want)
    assert torch.equal(p_kept, probs * want)


def test_capacity_formula():
    assert expert_capacity(4096, 8, 256, 1.0) == 128
    assert expert_capacity(12, 2, 4, 0.5) == 3 and expert_capacity(10, 3, 4, 1.1) == 9


def _reference(x64, wr, w1, w2, topk, capacity=None, policy="probs"):
    """float64 output of the MoE with the selection taken from detached values (held fixed)."""
    logits = x64 @ wr.T
    scores = torch.softmax(logits, dim=-1)
    t, e = scores.shape
    order = torch.sort(scores.detach(), dim=1, descending=True, stable=True).indices[:, :topk]
    rmap = torch.zeros((t, e), dtype=torch.bool).scatter_(1, order, True)
    if capacity is not None:
        rmap = _kept_loop(scores.detach() * rmap, rmap, capacity, policy)
    f = w2.shape[2]
    out = torch.zeros_like(x64)
    for ex in range(e):
        h = x64 @ w1[ex].T
        y = (torch.nn.functional.silu(h[:, :f]) * h[:, f:]) @ w2[ex].T
        out = out + (scores[:, ex] * rmap[:, ex])[:, None] * y
    return out


def _layer(h, f, e, k, seed, **kw):
    torch.manual_seed(seed)
    layer = MoELayer(h, f, e, k, **kw)
    with torch.no_grad():  # spread the router so that top-k choices are far from ties
        layer.router_weight.mul_(4)
    return layer


def _params64(layer):
    return [p.detach().double().clone().requires_grad_() for p in (layer.router_weight, layer.fc1.weight,
                                                                  layer.fc2.weight)]


# Dropless, and with capacity 3 of 12 tokens x top-2 over 4 experts (some tokens dropped) under both
# policies, with and without padding every expert to its capacity.
@pytest.mark.parametrize("cfg", [{}, {"capacity_factor": 0.5}, {"capacity_factor": 0.5, "drop_policy": "position"},
                                 {"capacity_factor": 0.5, "pad_to_capacity": True}])
def test_layer_forward_backward_against_float64(cfg):
    h, f, e, k, t = 8, 6, 4, 2, 12
    layer = _layer(h, f, e, k, seed=len(cfg), **cfg)
    x = torch.randn((3, t // 3, h), generator=torch.Generator().manual_seed(7)).requires_grad_()
    out = layer(x)
    assert out.shape == x.shape and out.dtype == torch.float32
    wr, w1, w2 = _params64(layer)
    x64 = x.detach().double().reshape(t, h).requires_grad_()
    cap = None
    if "capacity_factor" in cfg:
        cap = expert_capacity(t, k, e, cfg["capacity_factor"])
        assert cap == 3
    want = _reference(x64, wr, w1, w2, k, cap, cfg.get("drop_policy", "probs"))
    assert_close_to_reference(out.reshape(t, h), want, what="output")
    g = torch.randn((t, h), generator=torch.Generator().manual_seed(8))
    out.backward(g.reshape(x.shape))
    want.backward(g.double())
    assert_close_to_reference(x.grad.reshape(t, h), x64.grad, what="grad x")
    assert_close_to_reference(layer.router_weight.grad, wr.grad, what="grad router")
    assert_close_to_reference(layer.fc1.weight.grad, w1.grad, what="grad fc1")
    assert_close_to_reference(layer.fc2.weight.grad, w2.grad, what="grad fc2")


def test_dispatcher_layout_and_round_trip():
    t, h, e, k = 10, 4, 4, 2
    g = torch.Generator().manual_seed(3)
    x = torch.randn((t, h), generator=g)
    scores = torch.rand((t, e), generator=g)
    order = scores.argsort(dim=1, descending=True)[:, :k]
    rmap = torch.zeros((t, e), dtype=torch.bool).scatter_(1, order, True)
    probs = scores * rmap
    d = MoETokenDispatcher(e, k, capacity_factor=1.0, pad_to_capacity=True)
    cap = expert_capacity(t, k, e, 1.0)  # 5
    rows, tpe, row_probs = d.token_permutation(x, probs, rmap)
    assert rows.shape == (cap * e, h) and tpe.tolist() == [cap] * e
    kept = _kept_loop(probs, rmap, cap, "probs")
    for ex in range(e):
        toks = [i for i in range(t) if kept[i, ex]]
        seg = rows[ex * cap:(ex + 1) * cap]
        assert torch.equal(seg[: len(toks)], x[toks]) and not seg[len(toks):].any()
        assert torch.equal(row_probs[ex * cap: ex * cap + len(toks)], probs[toks, ex])
        assert not row_probs[ex * cap + len(toks):(ex + 1) * cap].any()
    back = d.token_unpermutation(rows)
    assert_close_to_reference(back, x.double() * kept.sum(dim=1, keepdim=True).double(), what="round trip")
    with pytest.raises(RuntimeError, match="call token_permutation first"):
        d.token_unpermutation(rows)


def test_argument_errors():
    with pytest.raises(ValueError, match="^pad_to_capacity: needs a capacity_factor"):
        MoETokenDispatcher(4, 2, pad_to_capacity=True)
    with pytest.raises(ValueError, match="^drop_policy: expected 'probs' or 'position'"):
        MoETokenDispatcher(4, 2, capacity_factor=1.0, drop_policy="random")
    with pytest.raises(ValueError, match="^topk: expected at most num_experts"):
        MoETokenDispatcher(4, 5)
    with pytest.raises(ValueError, match="^capacity_factor: expected None or a number > 0"):
        MoETokenDispatcher(4, 2, capacity_factor=0)
    d = MoETokenDispatcher(4, 2)
    with pytest.raises(ValueError, match=r"^probs: expected shape \(3, 4\)"):
        d.token_permutation(torch.zeros(3, 2), torch.zeros(3, 5), torch.zeros(3, 4, dtype=torch.bool))


def test_aux_loss_formula():
    layer = _layer(8, 6, 4, 2, seed=0, aux_loss_coeff=0.01)
    x = torch.randn((6, 8), generator=torch.Generator().manual_seed(1))
    layer(x)
    scores, _, rmap = layer.route(x)
    want = 0.01 * 4 / (2 * 36) * (scores.double().sum(0) * rmap.double().sum(0)).sum()
    assert_close_to_reference(layer.aux_loss, want, what="aux loss")


def test_trains_like_the_float64_reference():
    h, f, e, k, t = 8, 6, 4, 2, 12
    layer = _layer(h, f, e, k, seed=11, capacity_factor=1.0)
    params = _params64(layer)
    g = torch.Generator().manual_seed(12)
    x = torch.randn((t, h), generator=g)
    target = torch.randn((t, h), generator=g)
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    opt64 = torch.optim.SGD(params, lr=0.5)
    cap = expert_capacity(t, k, e, 1.0)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        opt64.zero_grad()
        loss = (layer(x) - target).pow(2).mean()
        loss64 = (_reference(x.double(), *params, k, cap) - target.double()).pow(2).mean()
        loss.backward()
        loss64.backward()
        opt.step()
        opt64.step()
        assert math.isclose(loss.item(), loss64.item(), rel_tol=1e-4), (loss.item(), loss64.item())
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    for p, p64 in zip((layer.router_weight, layer.fc1.weight, layer.fc2.weight), params, strict=True):
        assert_close_to_reference(p, p64, what="trained weight")
