"""Triton kernels of ``moe_unpermute`` and ``moe_unpermute_bwd``.

* ``unpermute_kernel``: one program per (token, hidden tile); fp32 ``acc = acc + w_j * x_j`` over
  the token's copies in the row map's order (``j < row_id_map[t, 2E]``), rounded once. ``UNROLL``
  copies a step: their row ids, weights and rows load together (the first step's alongside the copy
  count ``n``, before it is known); a step's copies past ``n`` add
  ``+0.0``, which leaves every sum's bits as they are (``acc`` starts at ``+0.0`` and a sum is never
  ``-0.0`` unless both terms are). The launcher turns fp-fusion off on a GPU, so the product and the
  sum round separately, as torch's fp32 reference does. A copy whose row is outside ``[0, N)`` adds
  nothing; a probs column outside ``[0, W)`` weighs 0. With ``HAS_PP`` the hidden-tile-0 program
  also writes the token's row of ``unpermuted_probs`` (``permuted_probs[r_j]`` at column ``c_j``,
  bits copied, later copies over earlier ones; zeros elsewhere), so the op is one launch.
* ``unpermute_bwd_kernel``: one program per permuted row ``r`` (after ``sources_kernel`` gave its
  token ``s`` and column ``c``; that launch also zeroed ``grad_merging_probs``): walks the hidden
  dimension in tiles: ``grad_permuted[r] = (g[s] * w)`` rounded once (zeros on a padding row, so no
  separate zero-fill), and the fp32 dot ``sum(g[s] * x[r])`` (tile partial sums, then across tiles)
  for ``grad_merging_probs[s, c]``. Row ids are distinct and a token's columns are distinct, so no
  two programs write one entry.

``ROUND_BF16`` rounds fp32 -> bf16 to nearest-even by bit arithmetic (the CPU interpreter's own
conversion truncates).
"""

from __future__ import annotations

import triton
import triton.language as tl

from turbo_triton.normalization.kernels import to_out


@triton.jit
def splat(flag, like):
    """A scalar bool as a vector mask shaped like the int vector ``like`` (the interpreter mistypes
    ``scalar & vector``; addresses stay scalar base + vector offsets, so no per-lane int64 copies)."""
    return (like * 0 + flag.to(tl.int32)) != 0


@triton.jit
def _gather_copy(jj, n, row, t, acc, prow, offs, hm, cw, ph, x_ptr, merge_ptr, pp_ptr, E, H, N, W, PW,
                 HAS_MERGE: tl.constexpr, HAS_PP: tl.constexpr):
    """``(acc, prow)`` after copy ``jj`` of token ``t`` (which adds +0.0 when ``jj >= n``)."""
    j = tl.maximum(tl.minimum(jj, E - 1), 0)  # a copy past n reads a real entry of the row
    d = tl.load(row + j).to(tl.int64)
    valid = (jj < n) & (d >= 0) & (d < N)
    x = tl.load(x_ptr + d * H + offs, mask=hm & splat(valid, offs), other=0.0).to(tl.float32)
    if HAS_MERGE or HAS_PP:
        c = tl.load(row + E + j)
    if HAS_MERGE:
        okc = valid & (c >= 0) & (c < W)
        w = tl.load(merge_ptr + t * W + c, mask=okc, other=0.0).to(tl.float32)
        x = x * w
    acc = acc + x
    if HAS_PP:
        hit = (cw == c) & (cw < PW) & splat(valid & (ph == 0), cw)
        prow = tl.where(hit, tl.load(pp_ptr + d + cw * 0, mask=hit, other=0), prow)
    return acc, prow


@triton.jit
def unpermute_kernel(x_ptr, map_ptr, merge_ptr, out_ptr, pp_ptr, pout_ptr, H, E, N, W, PW,
                     HAS_MERGE: tl.constexpr, HAS_PP: tl.constexpr, ROUND_BF16: tl.constexpr,
                     UNROLL: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_PW: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    ph = tl.program_id(1)
    offs = ph * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = offs < H
    row = map_ptr + t * (2 * E + 1)
    n = tl.minimum(tl.maximum(tl.load(row + 2 * E), 0), E)
    acc = tl.zeros([BLOCK_H], dtype=tl.float32)
    cw = tl.arange(0, BLOCK_PW)
    prow = tl.zeros([BLOCK_PW], dtype=pout_ptr.dtype.element_ty)
    # The first UNROLL copies unconditionally (masked past n): their loads issue alongside n's.
    for u in tl.static_range(UNROLL):
        acc, prow = _gather_copy(u, n, row, t, acc, prow, offs, hm, cw, ph, x_ptr, merge_ptr, pp_ptr, E, H, N, W,
                                 PW, HAS_MERGE, HAS_PP)
    for j0 in range(UNROLL, n, UNROLL):
        for u in tl.static_range(UNROLL):
            acc, prow = _gather_copy(j0 + u, n, row, t, acc, prow, offs, hm, cw, ph, x_ptr, merge_ptr, pp_ptr, E,
                                     H, N, W, PW, HAS_MERGE, HAS_PP)
    tl.store(out_ptr + t * H + offs, to_out(acc, out_ptr, ROUND_BF16), mask=hm)
    if HAS_PP:
        tl.store(pout_ptr + t * PW + cw, prow, mask=(cw < PW) & splat(ph == 0, cw))


@triton.jit
def unpermute_bwd_kernel(g_ptr, x_ptr, src_ptr, col_ptr, merge_ptr, gx_ptr, gm_ptr, H, W,
                         ROUND_BF16: tl.constexpr, ROUND_BF16_M: tl.constexpr, BLOCK_H: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    lanes = tl.arange(0, BLOCK_H)
    s = tl.load(src_ptr + r).to(tl.int64)
    c = tl.load(col_ptr + r)
    tok = s >= 0
    okc = tok & (c >= 0) & (c < W)
    w = tl.load(merge_ptr + s * W + c, mask=okc, other=0.0).to(tl.float32)
    tokv = splat(tok, lanes)
    part = tl.zeros([BLOCK_H], dtype=tl.float32)
    for h0 in range(0, H, BLOCK_H):
        offs = h0 + lanes
        hm = offs < H
        g = tl.load(g_ptr + s * H + offs, mask=hm & tokv, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + r * H + offs, mask=hm & tokv, other=0.0).to(tl.float32)
        tl.store(gx_ptr + r * H + offs, to_out(g * w, gx_ptr, ROUND_BF16), mask=hm)  # padding row: 0 * 0
        part += g * x
    dot = tl.sum(part, axis=0)
    tl.store(gm_ptr + s * W + c, to_out(dot, gm_ptr, ROUND_BF16_M), mask=okc)
