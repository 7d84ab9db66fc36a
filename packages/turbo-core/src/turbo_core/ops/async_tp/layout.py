"""Row bookkeeping of the async tensor-parallel pipelines: chunk ranges, chunk orders, and where a
chunk's rows sit in a gathered or scattered tensor.

A *chunk* is ``(rank, split)``: rows ``[lo, hi)`` of one rank's block along the gathered (or
scattered) dim. In an all-gather the rank is the rows' source; in a reduce-scatter, their
destination. Every rank's block is cut into the same ``num_splits`` ranges
(:func:`split_ranges`). Two orders are defined (:data:`ORDERS`):

* ``"rank"`` (rank-major): every split of one rank, then every split of the next;
* ``"split"`` (split-major): split 0 of every rank, then split 1 of every rank, ...

Ranks are visited in ring order from the calling rank: an all-gather starts with the local rank
(its rows need no transfer) and goes on with ``rank + 1, rank + 2, ...``; a reduce-scatter starts
with ``rank + 1`` and ends with the local rank (its rows need no transfer either, so they come last,
behind the transfers). At any step of the ring every rank talks to a different peer.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["ORDERS", "Chunk", "blocks", "chunk_order", "place", "split_ranges"]

ORDERS = ("rank", "split")


class Chunk(NamedTuple):
    rank: int   # the rows' source rank (all-gather) or destination rank (reduce-scatter)
    split: int
    lo: int     # rows [lo, hi) of that rank's block
    hi: int


def split_ranges(length: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` nearly equal ``[lo, hi)`` ranges covering ``length`` (empty ones dropped)."""
    bounds = [length * i // parts for i in range(parts + 1)]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False) if hi > lo]


def chunk_order(rank: int, world: int, ranges: list[tuple[int, int]], order: str, *, local_last: bool = False
                ) -> list[Chunk]:
    """Every ``(rank, split)`` chunk once, in ``order`` (module docstring); ``local_last``: the ring
    starts after the local rank and ends with it (reduce-scatter), else it starts with it."""
    start = 1 if local_last else 0
    ring = [(rank + i) % world for i in range(start, start + world)]
    if order == "rank":
        return [Chunk(r, s, lo, hi) for r in ring for s, (lo, hi) in enumerate(ranges)]
    return [Chunk(r, s, lo, hi) for s, (lo, hi) in enumerate(ranges) for r in ring]


def blocks(full: torch.Tensor, dim: int, world: int) -> torch.Tensor:
    """``full`` viewed as ``[world, rows, *rest, last]``: rank ``r``'s block of rows along ``dim``."""
    return full.movedim(dim, 0).unflatten(0, (world, -1))


def place(full: torch.Tensor, dim: int, world: int, r0: int, r1: int, lo: int, hi: int, part: torch.Tensor) -> None:
    """Copy ``part`` (rows ordered rank, chunk row, rest) into rows ``[lo, hi)`` of the blocks of
    ranks ``[r0, r1)`` of ``full`` along ``dim``."""
    dst = blocks(full, dim, world)[r0:r1, lo:hi]
    dst.copy_(part.view(dst.shape))
