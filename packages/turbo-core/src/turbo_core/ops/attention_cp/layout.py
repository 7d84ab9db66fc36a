"""Where each rank's tokens sit in the global sequence, and which part of a ring step's key/value
block each query sees.

Ulysses inside, ring outside: the ring group splits the global sequence into ``R`` ring-local
sequences; the Ulysses all-to-all gathers one ring-local sequence on every rank of a Ulysses group
from its ``U`` equal, consecutive slices (Ulysses rank ``u`` holds slice ``u``).

Ring layouts (how the global sequence of length ``S`` maps to ring rank ``r``'s local sequence):

- ``"contiguous"``: chunk ``r`` of ``R`` equal chunks (Primus-Turbo's split).
- ``"zigzag"``: chunks ``r`` and ``2R - 1 - r`` of ``2R`` equal chunks, in that order. Under a causal
  mask every rank then does the same work at every ring step (half a block), where the contiguous
  split leaves rank 0 idle after one step and rank ``R - 1`` busy for all ``R``.

Varlen (packed) inputs split every sequence this way on its own (its length divisible by ``R``, or
``2R`` for zigzag); a ring-local sequence packs the rank's pieces of every sequence in order, so its
offsets are the global ``cu_seqlens // R``. Rows past ``cu_seqlens[-1]`` (padding) are split in
``R`` consecutive equal parts, placed after the rank's pieces.
"""

from __future__ import annotations

import torch

__all__ = ["RING_LAYOUTS", "step_kind", "usp_positions", "usp_varlen_positions"]

RING_LAYOUTS = ("contiguous", "zigzag")

#: What ring rank ``r`` computes with the key/value block of ring rank ``j`` (see :func:`step_kind`).
FULL, CAUSAL, KV_FRONT, Q_BACK, SKIP = "full", "causal", "kv_front", "q_back", "skip"


def step_kind(causal: bool, layout: str, rank: int, src: int) -> str:
    """The attention ring rank ``rank`` runs against ring rank ``src``'s key/value block.

    ``"full"``: every query sees every key; ``"causal"``: the local causal mask (the diagonal
    block); ``"kv_front"``: every query sees the first half of the block (zigzag, ``src < rank``);
    ``"q_back"``: the second half of the queries sees the whole block (zigzag, ``src > rank``);
    ``"skip"``: no query sees the block (contiguous, causal, ``src > rank``).
    """
    if not causal:
        return FULL
    if src == rank:
        return CAUSAL
    if layout == "contiguous":
        return FULL if src < rank else SKIP
    return KV_FRONT if src < rank else Q_BACK


def _ring_chunks(length: int, ring_rank: int, ring_size: int, layout: str) -> list[tuple[int, int]]:
    """``(start, stop)`` of the ring rank's pieces of one sequence of ``length`` tokens."""
    if layout == "contiguous":
        c = length // ring_size
        return [(ring_rank * c, (ring_rank + 1) * c)]
    c = length // (2 * ring_size)
    back = 2 * ring_size - 1 - ring_rank
    return [(ring_rank * c, (ring_rank + 1) * c), (back * c, (back + 1) * c)]


def _check_layout(layout: str) -> None:
    if layout not in RING_LAYOUTS:
        raise ValueError(f"ring_layout: expected one of {RING_LAYOUTS}, got {layout!r}")


def _check_ranks(ulysses_rank: int, ulysses_size: int, ring_rank: int, ring_size: int) -> None:
    for name, rank, size in (("ulysses_rank", ulysses_rank, ulysses_size), ("ring_rank", ring_rank, ring_size)):
        if not (isinstance(size, int) and size >= 1 and isinstance(rank, int) and 0 <= rank < size):
            raise ValueError(f"{name}: expected 0 <= rank < size, got rank {rank!r} of size {size!r}")


def usp_positions(seqlen: int, *, ulysses_rank: int = 0, ulysses_size: int = 1, ring_rank: int = 0,
                  ring_size: int = 1, ring_layout: str = "contiguous") -> torch.Tensor:
    """The global positions (int64, in local order) of the tokens that one rank holds for
    :func:`~turbo_core.ops.flash_attn_usp_func` / ``flash_attn_fp8_usp_func``.

    ``seqlen`` must be divisible by ``ulysses_size * ring_size`` (and by ``2 * ring_size`` more for
    ``"zigzag"``: ``2 * ulysses_size * ring_size``). ``x[:, usp_positions(...)]`` is the rank's
    shard of a ``[b, seqlen, ...]`` tensor; the inverse scatter puts results back.
    """
    _check_layout(ring_layout)
    _check_ranks(ulysses_rank, ulysses_size, ring_rank, ring_size)
    parts = ulysses_size * ring_size * (2 if ring_layout == "zigzag" else 1)
    if seqlen % parts:
        raise ValueError(f"seqlen: {seqlen} is not divisible by {parts} (the ulysses size x the ring size"
                         f"{' x 2 for zigzag' if ring_layout == 'zigzag' else ''})")
    ring_local = torch.cat([torch.arange(a, b) for a, b in _ring_chunks(seqlen, ring_rank, ring_size, ring_layout)])
    n = ring_local.numel() // ulysses_size
    return ring_local[ulysses_rank * n:(ulysses_rank + 1) * n]


def usp_varlen_positions(cu_seqlens: torch.Tensor | list[int], total: int, *, ulysses_rank: int = 0,
                         ulysses_size: int = 1, ring_rank: int = 0, ring_size: int = 1,
                         ring_layout: str = "contiguous") -> torch.Tensor:
    """The global row indices (int64, in local order) of the packed tokens that one rank holds for
    :func:`~turbo_core.ops.flash_attn_varlen_usp_func`.

    ``cu_seqlens``: the global offsets ``[B + 1]``; ``total``: the global packed row count (rows past
    ``cu_seqlens[-1]`` are padding). Every sequence length must be divisible by ``ring_size``
    (``2 * ring_size`` for ``"zigzag"``), ``total - cu_seqlens[-1]`` by ``ring_size``, and the
    ring-local row count ``total / ring_size`` by ``ulysses_size``.
    """
    _check_layout(ring_layout)
    _check_ranks(ulysses_rank, ulysses_size, ring_rank, ring_size)
    cu = [int(c) for c in (cu_seqlens.tolist() if isinstance(cu_seqlens, torch.Tensor) else cu_seqlens)]
    div = ring_size * (2 if ring_layout == "zigzag" else 1)
    pieces = []
    for start, stop in zip(cu, cu[1:], strict=False):
        if (stop - start) % div:
            raise ValueError(f"cu_seqlens: sequence length {stop - start} is not divisible by {div}")
        pieces += [torch.arange(start + a, start + b) for a, b in _ring_chunks(stop - start, ring_rank, ring_size,
                                                                               ring_layout)]
    pad = total - cu[-1]
    if pad < 0 or pad % ring_size or (total // ring_size) % ulysses_size:
        raise ValueError(f"total: {total} rows do not split over the ring ({ring_size}) and Ulysses "
                         f"({ulysses_size}) ranks (padding {pad} rows past cu_seqlens[-1])")
    p = pad // ring_size
    pieces.append(torch.arange(cu[-1] + ring_rank * p, cu[-1] + (ring_rank + 1) * p))
    ring_local = torch.cat(pieces)
    n = ring_local.numel() // ulysses_size
    return ring_local[ulysses_rank * n:(ulysses_rank + 1) * n]
