"""Triton kernels of ``moe_permute_preprocess`` (see ``turbo_core.dispatch.specs.moe``).

Three launches, deterministic (no atomics), or one (``single_block_kernel``) when every token fits one
block (``T <= BLOCK_T``: small batches, where the three launches cost more than their work):

1. ``block_counts_kernel``: one program per block of ``BLOCK_T`` tokens; ``counts[b, e]`` = tokens
   of block ``b`` routed to expert ``e``, ``counts[b, E]`` = tokens of the block routed anywhere.
2. ``scan_kernel`` (one program): walks the blocks in order, ``BLOCK_B`` at a time, writing the exclusive prefix
   ``prefix[b, e]`` (tokens of expert ``e`` in blocks before ``b``), then the segment sizes
   (padding / capacity), their offsets (``tl.cumsum``), ``tokens_per_expert`` under the cap, the
   overflow flag and the dispatched count.
3. ``row_map_kernel``: per block again, the rank of each token inside its expert is
   ``prefix[b, e]`` plus an in-block ``tl.cumsum``; kept copies are compacted to the front of the
   row (another ``tl.cumsum`` across experts) and the rest of the row is -1. The two stores of a row
   touch disjoint columns, so no ordering between them is needed.

``single_block_kernel`` is the three in one program: the block's counts are the totals, every prefix
is 0, and the scan's layout (``_layout``) and the row map's stores (``_rows``) are the same code.

The routing tile ``[BLOCK_T, BLOCK_E]`` comes from a bool map (loaded as bytes) or from a top-k
index map (an id repeated in a row counts once, at its first slot; ids outside ``[0, E)`` are no
expert).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _routing_tile(emap_ptr, row0, T, K, E, IS_MASK: tl.constexpr, TOPK_LAYOUT: tl.constexpr,
                  BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr):
    """``(rows, experts, mask int32 [BLOCK_T, BLOCK_E], column int32 [BLOCK_T, BLOCK_E])``."""
    rows = row0 + tl.arange(0, BLOCK_T)
    ex = tl.arange(0, BLOCK_E)
    ok = (rows < T)[:, None] & (ex < E)[None, :]
    rows64 = rows.to(tl.int64)
    if IS_MASK:
        m = tl.load(emap_ptr + rows64[:, None] * E + ex[None, :], mask=ok, other=0).to(tl.int32)
        m = tl.where(m != 0, 1, 0)
        col = tl.zeros([BLOCK_T, BLOCK_E], dtype=tl.int32) + ex[None, :]
    else:
        m = tl.zeros([BLOCK_T, BLOCK_E], dtype=tl.int32)
        col = tl.full([BLOCK_T, BLOCK_E], -1, tl.int32)
        for k in range(K):
            ids = tl.load(emap_ptr + rows64 * K + k, mask=rows < T, other=-1).to(tl.int64)
            hit = (ids[:, None] == ex[None, :].to(tl.int64)) & ok
            col = tl.where(hit & (m == 0), k, col)
            m = tl.where(hit, 1, m)
        if not TOPK_LAYOUT:
            col = tl.zeros([BLOCK_T, BLOCK_E], dtype=tl.int32) + ex[None, :]
    return rows, ex, m, col


@triton.jit
def block_counts_kernel(emap_ptr, counts_ptr, T, K, E, IS_MASK: tl.constexpr,
                        BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr):
    """``counts`` int32 ``[blocks, E + 1]``."""
    pid = tl.program_id(0)
    rows, ex, m, col = _routing_tile(emap_ptr, pid * BLOCK_T, T, K, E, IS_MASK, False, BLOCK_T, BLOCK_E)
    per_expert = tl.sum(m, axis=0)
    routed = tl.sum(tl.where(tl.sum(m, axis=1) > 0, 1, 0), axis=0)
    base = counts_ptr + pid * (E + 1)
    tl.store(base + ex, per_expert, mask=ex < E)
    tl.store(base + E, routed)


@triton.jit
def _layout(run, routed, ex, em, offsets_ptr, tpe_ptr, overflow_ptr, dispatched_ptr, pad, capacity, cap,
            HAS_PAD: tl.constexpr, HAS_CAPACITY: tl.constexpr, HAS_CAP: tl.constexpr):
    """From the per-expert totals ``run`` [BLOCK_E] and the routed-token count: the segment sizes
    (padding / capacity), ``offsets`` (stored and returned), ``tokens_per_expert`` under the cap,
    the overflow flag and the dispatched count."""
    if HAS_CAPACITY:
        sizes = tl.where(em, capacity, 0)
    elif HAS_PAD:
        sizes = (run + pad - 1) // pad * pad
    else:
        sizes = run
    offsets = tl.cumsum(sizes, axis=0) - sizes
    total = tl.sum(sizes, axis=0)
    tl.store(offsets_ptr + ex, offsets, mask=em)
    if HAS_CAP:
        tpe = tl.minimum(sizes, tl.maximum(cap - offsets, 0))
        over = tl.where(total > cap, 1, 0)
    else:
        tpe = sizes
        over = total * 0
    tl.store(tpe_ptr + ex, tpe.to(tl.int64), mask=em)
    tl.store(overflow_ptr, over.to(tl.int32))
    tl.store(dispatched_ptr, routed)
    return offsets


@triton.jit
def scan_kernel(counts_ptr, prefix_ptr, offsets_ptr, tpe_ptr, overflow_ptr, dispatched_ptr,
                blocks, E, pad, capacity, cap,
                HAS_PAD: tl.constexpr, HAS_CAPACITY: tl.constexpr, HAS_CAP: tl.constexpr,
                BLOCK_B: tl.constexpr, BLOCK_E: tl.constexpr):
    """One program: ``prefix`` int32 ``[blocks, E]``, ``offsets`` int32 ``[E]``, ``tpe`` int64
    ``[E]``, ``overflow`` / ``dispatched`` int32 ``[1]``."""
    ex = tl.arange(0, BLOCK_E)
    em = ex < E
    run = tl.zeros([BLOCK_E], dtype=tl.int32)
    routed = tl.sum(run, axis=0)  # an int32 scalar 0
    for b0 in range(0, blocks, BLOCK_B):  # BLOCK_B blocks a step: a short serial chain
        bs = b0 + tl.arange(0, BLOCK_B)
        bm = bs < blocks
        ok = bm[:, None] & em[None, :]
        c = tl.load(counts_ptr + bs[:, None] * (E + 1) + ex[None, :], mask=ok, other=0)
        before = run[None, :] + tl.cumsum(c, axis=0) - c
        tl.store(prefix_ptr + bs[:, None] * E + ex[None, :], before, mask=ok)
        run += tl.sum(c, axis=0)
        routed += tl.sum(tl.load(counts_ptr + bs * (E + 1) + E, mask=bm, other=0), axis=0)
    _layout(run, routed, ex, em, offsets_ptr, tpe_ptr, overflow_ptr, dispatched_ptr, pad, capacity, cap,
            HAS_PAD, HAS_CAPACITY, HAS_CAP)


@triton.jit
def row_map_kernel(emap_ptr, prefix_ptr, offsets_ptr, map_ptr, T, K, E, capacity, cap,
                   IS_MASK: tl.constexpr, TOPK_LAYOUT: tl.constexpr, HAS_CAPACITY: tl.constexpr,
                   HAS_CAP: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr):
    """``map`` int32 ``[T, 2E + 1]`` for the tokens of block ``pid``."""
    pid = tl.program_id(0)
    rows, ex, m, col = _routing_tile(emap_ptr, pid * BLOCK_T, T, K, E, IS_MASK, TOPK_LAYOUT, BLOCK_T, BLOCK_E)
    em = ex < E
    prefix = tl.load(prefix_ptr + pid * E + ex, mask=em, other=0)
    offsets = tl.load(offsets_ptr + ex, mask=em, other=0)
    _rows(rows, ex, m, col, prefix, offsets, map_ptr, T, E, capacity, cap, HAS_CAPACITY, HAS_CAP)


@triton.jit
def _rows(rows, ex, m, col, prefix, offsets, map_ptr, T, E, capacity, cap,
          HAS_CAPACITY: tl.constexpr, HAS_CAP: tl.constexpr):
    """The row map's rows ``rows`` from their routing tile, the tokens of each expert before them
    (``prefix``) and the expert offsets."""
    em = ex < E
    rank = prefix[None, :] + tl.cumsum(m, axis=0) - m  # position of the token inside its expert
    dest = offsets[None, :] + rank
    keep = m != 0
    if HAS_CAPACITY:
        keep = keep & (rank < capacity)
    if HAS_CAP:
        keep = keep & (dest < cap)
    ki = tl.where(keep, 1, 0)
    slot = tl.cumsum(ki, axis=1) - 1
    n = tl.sum(ki, axis=1)
    rm = rows < T
    row_ptr = map_ptr + rows.to(tl.int64) * (2 * E + 1)
    kept = keep & rm[:, None]
    tl.store(row_ptr[:, None] + slot, dest, mask=kept)
    tl.store(row_ptr[:, None] + E + slot, col, mask=kept)
    empty = (ex[None, :] >= n[:, None]) & em[None, :] & rm[:, None]
    minus = tl.zeros_like(m) - 1
    tl.store(row_ptr[:, None] + ex[None, :], minus, mask=empty)
    tl.store(row_ptr[:, None] + E + ex[None, :], minus, mask=empty)
    tl.store(row_ptr + 2 * E, n, mask=rm)


@triton.jit
def single_block_kernel(emap_ptr, map_ptr, offsets_ptr, tpe_ptr, overflow_ptr, dispatched_ptr, T, K, E,
                        pad, capacity, cap, IS_MASK: tl.constexpr, TOPK_LAYOUT: tl.constexpr,
                        HAS_PAD: tl.constexpr, HAS_CAPACITY: tl.constexpr, HAS_CAP: tl.constexpr,
                        BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr):
    """One program, ``T <= BLOCK_T``: the three kernels' outputs (``offsets`` as scratch)."""
    rows, ex, m, col = _routing_tile(emap_ptr, 0, T, K, E, IS_MASK, TOPK_LAYOUT, BLOCK_T, BLOCK_E)
    em = ex < E
    run = tl.sum(m, axis=0)
    routed = tl.sum(tl.where(tl.sum(m, axis=1) > 0, 1, 0), axis=0)
    offsets = _layout(run, routed, ex, em, offsets_ptr, tpe_ptr, overflow_ptr, dispatched_ptr, pad, capacity, cap,
                      HAS_PAD, HAS_CAPACITY, HAS_CAP)
    _rows(rows, ex, m, col, run * 0, offsets, map_ptr, T, E, capacity, cap, HAS_CAPACITY, HAS_CAP)
