"""MoE ops on a GPU (reference backend): same results as on the CPU, no host sync anywhere on the
static-shape paths (``torch.cuda.set_sync_debug_mode("error")``), and CUDA-graph capture of a
static-cap permute + unpermute."""

import contextlib

import pytest
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
from turbo_core.testing.host_sync import no_host_sync

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")]


def _pipeline(dev, check_sync):
    gen = torch.Generator().manual_seed(0)
    t, e, k, h = 33, 8, 3, 16
    logits = torch.randn(t, e, generator=gen).to(dev).requires_grad_()
    x = torch.randn(t, h, generator=gen).to(dev).requires_grad_()
    g_out = torch.randn(t, h, generator=gen).to(dev)
    ctx = no_host_sync() if check_sync else contextlib.nullcontext()
    with ctx:
        scores, probs, rmap = fused_group_topk_routing_with_aux_score(logits, k, 4, 2, "sigmoid", 2.0)
        idx = torch.topk(probs.detach(), k, dim=1).indices
        topk_probs = probs.gather(1, idx)
        recv_x, recv_idx, recv_probs, tpe, handle = moe_dispatch(x, idx, topk_probs.float(), e, None)
        res = moe_permute(recv_x, recv_idx, num_local_experts=e, num_topk=k, pad_multiple=8,
                          num_permuted_tokens=t * k + 8 * e, probs=recv_probs)
        y = res.permuted_tokens * res.permuted_probs.unsqueeze(1)
        back, _ = moe_unpermute(y, res.row_id_map, res.num_dispatched_tokens, restore_shape=(t, h),
                                num_local_experts=e, probs_topk_stride=k, pad_multiple=8)
        out = moe_combine(back, None, handle)
        dense_map, dense_probs = indices_to_multihot(recv_idx, recv_probs, e)
        permuted, _, mapping, tpe2 = token_permute(out, t * k, routing_map=dense_map)
        merged = token_unpermute(permuted, mapping, merging_probs=dense_probs, restore_shape=(t, h))
        mask = tokens_per_expert_to_mask(tpe2, t * k + 4)
        loss = (merged * g_out).sum() + scores.square().sum()
        loss.backward()
    return [merged, scores, probs, rmap, res.tokens_per_expert, res.overflow_flag, mask, logits.grad, x.grad]


def test_matches_cpu_and_never_syncs():
    got = _pipeline("cuda", check_sync=True)
    want = _pipeline("cpu", check_sync=False)
    for name, a, b in zip(["out", "scores", "probs", "map", "tpe", "overflow", "mask", "grad logits", "grad x"],
                          got, want, strict=True):
        if a.dtype.is_floating_point:
            torch.testing.assert_close(a.cpu(), b, rtol=1e-4, atol=1e-4, msg=lambda m, n=name: f"{n}: {m}")
        else:
            assert torch.equal(a.cpu(), b), name


def test_cuda_graph_capture_static_cap():
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randn(7, 8, generator=gen).cuda()
    idx = torch.randint(-1, 4, (7, 2), generator=gen).cuda()

    def step():
        res = moe_permute(tokens, idx, num_local_experts=4, pad_multiple=4, num_permuted_tokens=40)
        out, _ = moe_unpermute(res.permuted_tokens * 2, res.row_id_map, res.num_dispatched_tokens,
                               restore_shape=(7, 8), num_local_experts=4)
        return out

    want = step()  # warm-up: backend selection and allocations happen outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = step()
    tokens.copy_(torch.randn(7, 8, generator=gen).cuda())
    graph.replay()
    torch.testing.assert_close(got, step())
    assert not torch.equal(got, want)
