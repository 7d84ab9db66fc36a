"""Triton kernels of ``indices_to_multihot(_bwd)`` and ``tokens_per_expert_to_mask``.

The forward takes ``BLOCK_T`` tokens a program, the backward one slot a lane. The first slot of each
id in a row wins (a slot whose id appears in an earlier slot, or lies outside ``[0, E)``, is
dropped): the forward writes the slots last to first, the backward compares each slot with the
earlier ones. ``K`` (top-k, at most 64) is a compile-time constant, the slot loops unrolled. Probs
travel as same-width integers (bit-exact).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def multihot_kernel(idx_ptr, probs_ptr, map_ptr, dense_ptr, T, E, K: tl.constexpr, BLOCK_T: tl.constexpr,
                    BLOCK_E: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    rm = rows < T
    rows64 = rows.to(tl.int64)
    ex = tl.arange(0, BLOCK_E).to(tl.int64)
    hit = tl.zeros([BLOCK_T, BLOCK_E], dtype=tl.int32)
    dense = tl.zeros([BLOCK_T, BLOCK_E], dtype=dense_ptr.dtype.element_ty)
    # Slots last to first, each overwriting what matches its id: an id's first slot writes last and
    # wins, with no test against the earlier slots. An id outside [0, E) matches no stored column
    # (negative: none; E or more: a column the store masks off). Unrolled (K constexpr): the 2K loads
    # are independent and issue together, where a loop of dependent reloads would serialize them.
    for j in tl.static_range(K):
        id_k = tl.load(idx_ptr + rows64 * K + (K - 1 - j), mask=rm, other=-1).to(tl.int64)
        p_k = tl.load(probs_ptr + rows64 * K + (K - 1 - j), mask=rm, other=0)
        on = ex[None, :] == id_k[:, None]
        hit = tl.where(on, 1, hit)
        dense = tl.where(on, p_k[:, None].to(dense.dtype), dense)
    out = rows64[:, None] * E + ex[None, :]
    om = rm[:, None] & (ex < E)[None, :]
    tl.store(map_ptr + out, hit.to(map_ptr.dtype.element_ty), mask=om)
    tl.store(dense_ptr + out, dense, mask=om)


@triton.jit
def multihot_bwd_kernel(idx_ptr, gd_ptr, out_ptr, N, E, K: tl.constexpr, BLOCK: tl.constexpr):
    """One slot ``i = t * K + k`` of ``[T, K]`` a lane (``N = T * K``): the slot's id, the row's earlier
    slots reloaded (cached, unrolled: they issue together) and compared, then the gather. 128 slots a
    program on 4 warps: tuned on sm90 over launch shapes at DeepSeek-V3 sizes of 1-16384 tokens, faster
    than row tiles (the ``moe`` suite measures it)."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = i < N
    row = i // K
    k = i % K
    ids = tl.load(idx_ptr + i, mask=m, other=-1).to(tl.int64)
    ok = m & (ids >= 0) & (ids < E)
    for j in tl.static_range(K - 1):
        prev = tl.load(idx_ptr + row * K + j, mask=m & (k > j), other=-1).to(tl.int64)
        ok = ok & (prev != ids)
    v = tl.load(gd_ptr + row * E + ids, mask=ok, other=0)
    tl.store(out_ptr + i, v, mask=m)


@triton.jit
def tpe_mask_kernel(tpe_ptr, out_ptr, E, num_tokens, BLOCK_E: tl.constexpr, BLOCK: tl.constexpr):
    total = tl.zeros([BLOCK_E], dtype=tl.int64)
    for e0 in range(0, E, BLOCK_E):
        ex = e0 + tl.arange(0, BLOCK_E)
        total += tl.load(tpe_ptr + ex, mask=ex < E, other=0).to(tl.int64)
    s = tl.sum(total, axis=0)
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.where(i < s, 1, 0).to(tl.int64), mask=i < num_tokens)
