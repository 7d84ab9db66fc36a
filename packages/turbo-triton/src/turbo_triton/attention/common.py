"""Pieces shared by the attention kernels: the visibility mask of a tile and the ranges of tiles
that need it.

Positions are per sequence. Query row ``i`` sees key ``j`` iff ``diag - left <= j <= diag + right``
with ``diag = i + len_k - len_q`` (the bottom-right aligned diagonal); ``HAS_LEFT``/``HAS_RIGHT``
say whether that side is bounded (causal is ``right = 0``). A *full* tile has every (row, key)
pair visible and in bounds, so its loop runs without masks; the tiles around it are masked.
"""

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def visible(rows, cols, len_q, len_k, left, right, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr):
    """bool ``[len(rows), len(cols)]``: in bounds and inside the window."""
    diag = rows[:, None] + (len_k - len_q)
    ok = (rows[:, None] < len_q) & (cols[None, :] < len_k)
    if HAS_RIGHT:
        ok = ok & (cols[None, :] <= diag + right)
    if HAS_LEFT:
        ok = ok & (cols[None, :] >= diag - left)
    return ok


@triton.jit
def online_softmax(s, m_i, l_i, rows, cols, len_q, len_k, left, right, MASK: tl.constexpr,
                   HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr):
    """One key tile of the base-2 online softmax: ``s`` (scores times ``scale * log2(e)``) masked
    when ``MASK``; returns ``(p, alpha, l, m)``: the tile's unnormalized probabilities, the factor
    that rescales the running sums, and the new running denominator and max. A row that has seen
    no key keeps ``m = -inf`` and gets ``p = 0`` (never ``exp2(-inf - -inf)``)."""
    if MASK:
        s = tl.where(visible(rows, cols, len_q, len_k, left, right, HAS_LEFT, HAS_RIGHT), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_sub = m_new
    p = tl.math.exp2(s - m_sub[:, None])
    alpha = tl.math.exp2(m_i - m_sub)
    return p, alpha, l_i * alpha + tl.sum(p, 1), m_new


@triton.jit
def key_ranges(m0, len_q, len_k, left, right, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr):
    """Key tiles for the query rows ``[m0, m0 + BLOCK_M)``: ``lo <= full_lo <= full_hi <= hi``;
    ``[lo, full_lo)`` and ``[full_hi, hi)`` are masked, ``[full_lo, full_hi)`` is full."""
    off = len_k - len_q
    lo = 0
    hi = len_k
    if HAS_LEFT:
        lo = tl.maximum(m0 + off - left, 0) // BLOCK_N * BLOCK_N
    if HAS_RIGHT:
        hi = tl.minimum(hi, tl.maximum(m0 + BLOCK_M + off + right, 0))
    hi = tl.maximum(hi, lo)
    full_hi = len_k // BLOCK_N * BLOCK_N
    if m0 + BLOCK_M > len_q:  # rows past the end: mask every tile
        full_hi = full_hi * 0
    if HAS_RIGHT:
        full_hi = tl.minimum(full_hi, tl.maximum(m0 + off + right + 1, 0) // BLOCK_N * BLOCK_N)
    full_lo = lo
    if HAS_LEFT:
        full_lo = tl.maximum(lo, tl.cdiv(tl.maximum(m0 + BLOCK_M - 1 + off - left, 0), BLOCK_N) * BLOCK_N)
    full_lo = tl.minimum(full_lo, hi)
    full_hi = tl.maximum(tl.minimum(full_hi, hi), full_lo)
    return lo, full_lo, full_hi, hi


@triton.jit
def query_ranges(n0, len_q, len_k, left, right, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr):
    """Query tiles that see the keys ``[n0, n0 + BLOCK_N)``, split like :func:`key_ranges`."""
    off = len_k - len_q
    lo = 0
    hi = len_q
    if HAS_RIGHT:
        lo = tl.maximum(n0 - off - right, 0) // BLOCK_M * BLOCK_M
    if HAS_LEFT:
        hi = tl.minimum(hi, tl.maximum(n0 + BLOCK_N - off + left, 0))
    hi = tl.maximum(hi, lo)
    full_hi = len_q // BLOCK_M * BLOCK_M
    if n0 + BLOCK_N > len_k:
        full_hi = full_hi * 0
    if HAS_LEFT:
        full_hi = tl.minimum(full_hi, tl.maximum(n0 - off + left + 1, 0) // BLOCK_M * BLOCK_M)
    full_lo = lo
    if HAS_RIGHT:
        full_lo = tl.maximum(lo, tl.cdiv(tl.maximum(n0 + BLOCK_N - 1 - off - right, 0), BLOCK_M) * BLOCK_M)
    full_lo = tl.minimum(full_lo, hi)
    full_hi = tl.maximum(tl.minimum(full_hi, hi), full_lo)
    return lo, full_lo, full_hi, hi


@triton.jit
def mm(a, b, acc, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """``acc + a @ b`` in fp32; ``UPCAST`` multiplies in fp32 (the CPU interpreter's bf16 dot is
    wrong; products of bf16 values are exact in fp32)."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc, input_precision=PRECISION)


@triton.jit
def sequence(Cu, b, seq, VARLEN: tl.constexpr):
    """``(start, length)`` of sequence ``b``: from ``cu_seqlens`` (varlen) or ``(0, seq)`` (dense)."""
    if VARLEN:
        start = tl.load(Cu + b)
        return start, tl.load(Cu + b + 1) - start
    return 0, seq
