"""What DeepEP's ``Buffer`` returns, computed with Python loops over every rank's inputs (float64).

DeepEP's semantics (its docs, its ``tests/legacy/test_intranode.py`` and its intranode kernels):
rank ``d`` of ``W`` holds experts ``[d * E_l, (d + 1) * E_l)``; ``num_tokens_per_rank[d]`` counts the
tokens with at least one id there, ``num_tokens_per_expert[e]`` the ``(token, slot)`` pairs naming
``e``; rank ``d`` receives the tokens ``is_token_in_rank`` marks for it, source ranks in order and
each source's tokens ascending, with the ids local to ``d`` (-1 elsewhere) and their weights (0
elsewhere); ``num_recv_tokens_per_expert_list`` sums the sources' ``num_tokens_per_expert`` over
``d``'s experts, each rounded up to ``expert_alignment``; combine sums each token's returned rows
(and weights) without weighting them.
"""

from __future__ import annotations

import torch

F64 = torch.float64


def layout(idx: torch.Tensor, e: int, world: int):
    """``(num_tokens_per_rank [W], num_tokens_per_expert [E], is_token_in_rank [T, W])`` as int64 /
    bool, by loops."""
    per = e // world
    t = idx.shape[0]
    in_rank = torch.zeros((t, world), dtype=torch.bool)
    per_expert = torch.zeros(e, dtype=torch.int64)
    for i in range(t):
        for v in idx[i].tolist():
            if 0 <= v < e:
                in_rank[i, v // per] = True
                per_expert[v] += 1
    return in_rank.sum(dim=0).long(), per_expert, in_rank


def received(data, in_ranks, rank: int, world: int, e: int):
    """Rank ``rank``'s received rows ``[(src, t)]`` and ``(recv_x, recv_idx, recv_w)`` (float64,
    int64; ids and weights ``None`` when the inputs carry no top-k). ``data[s] = (x, idx, w)``."""
    per = e // world
    lo, hi = rank * per, (rank + 1) * per
    rows = [(s, t) for s in range(world) for t in range(in_ranks[s].shape[0]) if bool(in_ranks[s][t, rank])]
    h = data[0][0].shape[1]
    rx = torch.zeros((len(rows), h), dtype=F64)
    with_topk = data[0][1] is not None
    k = data[0][1].shape[1] if with_topk else 0
    ri = torch.full((len(rows), k), -1, dtype=torch.int64)
    rw = torch.zeros((len(rows), k), dtype=F64)
    for i, (s, t) in enumerate(rows):
        x, idx, w = data[s]
        rx[i] = x[t]
        for j in range(k):
            v = int(idx[t, j])
            if lo <= v < hi:
                ri[i, j], rw[i, j] = v - lo, w[t, j]
    return rows, rx, (ri if with_topk else None), (rw if with_topk else None)


def recv_counts(per_experts, rank: int, world: int, alignment: int) -> list[int]:
    per = per_experts[0].shape[0] // world
    out = []
    for j in range(per):
        c = sum(int(pe[rank * per + j]) for pe in per_experts)
        out.append(-(-c // alignment) * alignment)
    return out


def combined(per_rank_rows, in_rank: torch.Tensor, src: int, h: int):
    """Rank ``src``'s combine: for each of its tokens, the sum over the ranks ``d`` it was sent to
    of the row rank ``d`` returns for it. ``per_rank_rows[d]`` maps ``(src, t)`` to that row."""
    t = in_rank.shape[0]
    out = torch.zeros((t, h), dtype=F64)
    for i in range(t):
        for d in range(in_rank.shape[1]):
            if in_rank[i, d]:
                out[i] += per_rank_rows[d][(src, i)]
    return out
