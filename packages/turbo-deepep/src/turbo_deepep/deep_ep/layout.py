"""The layout arithmetic of turbo's DeepEP-compatible ``Buffer`` (device-side torch ops, no host sync).

Rank ``r`` of ``W`` holds experts ``[r * E_l, (r + 1) * E_l)``, ``E_l = E / W`` (DeepEP's placement).

:func:`dispatch_layout` is ``Buffer.get_dispatch_layout``'s result. :func:`route` turns DeepEP's
dispatch arguments into the arguments of turbo's ``moe_dispatch`` primitive so that the rows move
exactly as ``is_token_in_rank`` says, whatever the top-k ids: each token carries, after its ``K``
top-k slots, ``W`` marker slots, marker ``d`` holding expert ``d * E_l`` (rank ``d``'s first expert)
where ``is_token_in_rank[t, d]`` and -1 elsewhere; a top-k id whose rank the token is not sent to
becomes -1. ``moe_dispatch`` sends a token once to every rank holding one of its ids, hence to
exactly the marked ranks, and turns the received ids into local ids: the first ``K`` columns are
then DeepEP's ``recv_topk_idx``.
"""

from __future__ import annotations

import torch

from turbo_deepep.all_to_all.layout import token_in_rank
from turbo_deepep.deep_ep.config import NUM_MAX_NVL_PEERS

__all__ = ["aligned_counts", "dispatch_layout", "route"]


def dispatch_layout(topk_idx: torch.Tensor, num_experts: int, world: int):
    """``(num_tokens_per_rank int32 [W], num_tokens_per_rdma_rank int32 [ceil(W / 8)] or None,
    num_tokens_per_expert int32 [E], is_token_in_rank bool [T, W])``.

    A token counts once for each rank holding at least one of its valid ids (``0 <= id < E``); an
    expert counts each ``(token, slot)`` naming it (a repeated id counts twice, as in DeepEP). The
    RDMA count (only for ``W > 8``, else ``None``) is per group of 8 consecutive ranks."""
    in_rank = token_in_rank(topk_idx, num_experts, world)
    per_rank = in_rank.sum(dim=0, dtype=torch.int32)
    idx = topk_idx.long()
    valid = (idx >= 0) & (idx < num_experts)
    col = torch.where(valid, idx, torch.full_like(idx, num_experts)).reshape(-1)
    per_expert = torch.zeros(num_experts + 1, dtype=torch.int32, device=idx.device)
    per_expert.index_add_(0, col, torch.ones_like(col, dtype=torch.int32))
    per_rdma = None
    if world > NUM_MAX_NVL_PEERS:
        nodes = -(-world // NUM_MAX_NVL_PEERS)
        padded = torch.zeros((in_rank.shape[0], nodes * NUM_MAX_NVL_PEERS), dtype=torch.bool, device=idx.device)
        padded[:, :world] = in_rank
        per_rdma = padded.view(-1, nodes, NUM_MAX_NVL_PEERS).any(dim=2).sum(dim=0, dtype=torch.int32)
    return per_rank, per_rdma, per_expert[:num_experts], in_rank


def route(is_token_in_rank: torch.Tensor, topk_idx: torch.Tensor | None, topk_weights: torch.Tensor | None,
          num_local_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids int64 [T, K + W], probs fp32 [T, K + W])`` for ``moe_dispatch`` (see the module
    docstring): the top-k ids kept only where their rank is marked, then the ``W`` markers; the
    weights, then zeros. Without top-k (``topk_idx`` None), ``K = 0``."""
    t, world = is_token_in_rank.shape
    dev = is_token_in_rank.device
    first = torch.arange(world, dtype=torch.int64, device=dev) * num_local_experts
    none = torch.full((), -1, dtype=torch.int64, device=dev)
    markers = torch.where(is_token_in_rank, first, none)
    zeros = torch.zeros((t, world), dtype=torch.float32, device=dev)
    if topk_idx is None:
        return markers, zeros
    idx = topk_idx.long()
    num_experts = world * num_local_experts
    valid = (idx >= 0) & (idx < num_experts)
    owner = torch.where(valid, idx // num_local_experts, torch.zeros_like(idx))
    sent = valid & is_token_in_rank.gather(1, owner)
    ids = torch.where(sent, idx, none)
    return torch.cat([ids, markers], dim=1), torch.cat([topk_weights.float(), zeros], dim=1)


def aligned_counts(counts: torch.Tensor, alignment: int) -> list[int]:
    """The host list of ``counts`` (a 1-D integer tensor), each rounded up to a multiple of
    ``alignment`` (DeepEP's ``num_recv_tokens_per_expert_list``). Reads the values (a host sync)."""
    return [-(-int(c) // alignment) * alignment for c in counts.tolist()]
