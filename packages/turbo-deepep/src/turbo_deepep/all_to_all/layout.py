"""Where each token goes, computed on the device with torch ops (no host sync in this module).

Rank ``r`` of ``W`` holds experts ``[r * E_l, (r + 1) * E_l)``. A token is sent once to every rank
holding at least one of its valid expert ids (``0 <= id < E``; -1 and, on a GPU, out-of-range ids
are "no expert"), so a token with no valid id is sent nowhere.

Send order (DeepEP's): rows for rank 0 first, then rank 1, ...; within a rank the tokens in
increasing index. A receiver therefore gets its rows grouped by source rank in rank order, each
source's tokens in increasing index.
"""

from __future__ import annotations

import torch

__all__ = ["compact_rows", "count_pairs", "local_indices", "ordered_rows", "slot_rows", "token_in_rank"]


def token_in_rank(indices: torch.Tensor, num_experts: int, world: int) -> torch.Tensor:
    """bool ``[T, W]``: whether token ``t`` has a valid expert on rank ``d``."""
    idx = indices.long()
    per = num_experts // world
    valid = (idx >= 0) & (idx < num_experts)
    dest = torch.where(valid, idx // per, torch.full_like(idx, world))
    hit = torch.zeros((idx.shape[0], world + 1), dtype=torch.bool, device=idx.device)
    return hit.scatter_(1, dest, True)[:, :world]


def _flat_positions(in_rank: torch.Tensor, ranks_first: torch.Tensor) -> torch.Tensor:
    """Positions in the rank-major flattening of ``in_rank`` (``[W * T]``, rank ``d``'s tokens at
    ``[d * T, (d + 1) * T)``) of its ``n``-th True entries, ``n = ranks_first`` (1-based, any shape);
    ``W * T`` where there are fewer."""
    cum = in_rank.t().reshape(-1).long().cumsum(0)
    return torch.searchsorted(cum, ranks_first.reshape(-1)).reshape(ranks_first.shape)


def ordered_rows(in_rank: torch.Tensor, num_rows: int) -> torch.Tensor:
    """int64 ``[num_rows]``: the token of each sent row in send order, ``num_rows`` being the
    number of True entries of ``in_rank`` (known on the host)."""
    t = in_rank.shape[0]
    if num_rows == 0 or t == 0:
        return torch.zeros((0,), dtype=torch.int64, device=in_rank.device)
    wanted = torch.arange(1, num_rows + 1, dtype=torch.int64, device=in_rank.device)
    return _flat_positions(in_rank, wanted) % t


def slot_rows(in_rank: torch.Tensor, slot: int) -> torch.Tensor:
    """int64 ``[W * slot]``: fixed-size slots, one per destination rank in rank order; slot ``d``
    lists the tokens sent to rank ``d`` in increasing index, then -1 (an empty row). Tokens past
    ``slot`` for one rank are not sent (the caller sizes ``slot`` so that none are)."""
    t, world = in_rank.shape
    dev = in_rank.device
    if slot == 0 or t == 0:
        return torch.full((world * slot,), -1, dtype=torch.int64, device=dev)
    counts = in_rank.sum(dim=0, dtype=torch.int64)  # [W]
    before = counts.cumsum(0) - counts  # True entries of the ranks before d
    j = torch.arange(slot, dtype=torch.int64, device=dev)
    pos = _flat_positions(in_rank, before[:, None] + j[None, :] + 1)  # [W, slot]
    rank_base = torch.arange(world, dtype=torch.int64, device=dev)[:, None] * t
    token = pos - rank_base
    return torch.where(j[None, :] < counts[:, None], token, torch.full_like(token, -1)).reshape(-1)


def local_indices(indices: torch.Tensor, rank: int, num_local_experts: int) -> torch.Tensor:
    """Global expert ids ``[R, K]`` to the ids local to ``rank`` (``id - rank * E_l``), -1 for ids
    held by other ranks and for -1."""
    lo = rank * num_local_experts
    inside = (indices >= lo) & (indices < lo + num_local_experts)
    return torch.where(inside, indices - lo, torch.full_like(indices, -1))


def count_pairs(local: torch.Tensor, num_local_experts: int) -> torch.Tensor:
    """int64 ``[E_l]``: rows holding each local expert (an id repeated in a row counts once)."""
    idx = local.long()
    valid = (idx >= 0) & (idx < num_local_experts)
    col = torch.where(valid, idx, torch.full_like(idx, num_local_experts))
    hit = torch.zeros((idx.shape[0], num_local_experts + 1), dtype=torch.bool, device=idx.device)
    return hit.scatter_(1, col, True)[:, :num_local_experts].sum(dim=0, dtype=torch.int64)


def compact_rows(valid: torch.Tensor, num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pack the ``valid`` rows of a slotted receive buffer (``[N]`` bool, in order) into the first
    rows of a ``num_rows``-row result.

    Returns ``(recv_from int64 [num_rows], to_recv int64 [N])``: the buffer row each result row
    comes from (``N``: none, a padding row), and the result row each buffer row goes to
    (``num_rows``: none; valid rows past ``num_rows`` are dropped).
    """
    n = valid.shape[0]
    dev = valid.device
    cum = valid.long().cumsum(0)
    want = torch.arange(1, num_rows + 1, dtype=torch.int64, device=dev)
    recv_from = torch.searchsorted(cum, want) if n else torch.zeros_like(want)
    pos = cum - 1
    to_recv = torch.where(valid & (pos < num_rows), pos, torch.full_like(pos, num_rows))
    return recv_from, to_recv
