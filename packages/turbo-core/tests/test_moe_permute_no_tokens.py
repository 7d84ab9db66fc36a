"""``moe_permute`` with no tokens and ``pad_multiple=P`` (where turbo's shapes differ from
Primus-Turbo's, ``turbo_core.ops.moe_permute`` says how): a ``[0, 2E + 1]`` row map that every
consumer takes, forward and backward. The conformance cases ``moe_permute-T0-*`` check the same
on every backend against the float64 oracle."""

from __future__ import annotations

import pytest
import torch

from turbo_core.modules import MoELayer
from turbo_core.ops import moe_permute, moe_unpermute, token_permute, token_unpermute

E, H, K, P = 4, 16, 2, 8


@pytest.mark.parametrize("kind", ["index", "mask"])
@pytest.mark.parametrize("cap", [-1, 0, 24])
def test_no_tokens_permute_unpermute(kind, cap):
    tokens = torch.randn(0, H, requires_grad=True)
    expert_map = torch.zeros(0, K, dtype=torch.int64) if kind == "index" else torch.zeros(0, E, dtype=torch.bool)
    probs = torch.rand(0, K if kind == "index" else E, requires_grad=True)
    res = moe_permute(tokens, expert_map, num_local_experts=E, pad_multiple=P, num_permuted_tokens=cap, probs=probs,
                      probs_layout="topk" if kind == "index" else "routing_map")
    rows = max(cap, 0)
    assert res.row_id_map.shape == (0, 2 * E + 1) and res.row_id_map.dtype == torch.int32
    assert res.permuted_tokens.shape == (rows, H) and torch.count_nonzero(res.permuted_tokens) == 0
    assert res.tokens_per_expert.tolist() == [0] * E and res.tokens_per_expert.dtype == torch.int64
    assert res.overflow_flag.tolist() == [0] and res.num_dispatched_tokens.tolist() == [0]
    assert res.permuted_probs.shape == (rows,)
    out, up = moe_unpermute(res.permuted_tokens * 2, res.row_id_map, res.num_dispatched_tokens, restore_shape=(0, H),
                            num_local_experts=E, permuted_probs=res.permuted_probs,
                            probs_topk_stride=K if kind == "index" else 0, pad_multiple=P)
    assert out.shape == (0, H) and up.shape == probs.shape
    (out.sum() + up.sum()).backward()
    assert tokens.grad.shape == (0, H) and probs.grad.shape == probs.shape


def test_no_tokens_through_token_permute_and_the_moe_layer():
    x = torch.randn(0, H, requires_grad=True)
    routing_map = torch.zeros(0, E, dtype=torch.bool)
    permuted, _, row_id_map, tpe = token_permute(x, num_out_tokens=0, routing_map=routing_map, fused=True)
    assert permuted.shape == (0, H) and row_id_map.shape == (0, 2 * E + 1) and tpe.tolist() == [0] * E
    back = token_unpermute(permuted, row_id_map, restore_shape=(0, H), routing_map=routing_map, fused=True)
    assert back.shape == (0, H)
    torch.manual_seed(0)
    layer = MoELayer(H, 8, E, K)
    y = layer(x)
    y.sum().backward()
    assert y.shape == (0, H) and x.grad.shape == (0, H)
    assert all(p.grad is None or torch.count_nonzero(p.grad) == 0 for p in layer.parameters())
