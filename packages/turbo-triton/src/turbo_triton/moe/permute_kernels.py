"""Triton kernels of ``moe_permute`` (and the row bookkeeping ``moe_unpermute_bwd`` shares).

* ``sources_kernel``: the inverse of the row map, ``src[r]`` (token) and ``col[r]`` (probs column)
  of every permuted row ``r`` that a copy lands on (rows ids outside ``[0, num_out)`` are dropped);
  the launcher fills both with -1 first. Row ids are distinct, so the scatter has no races.
* ``scatter_rows_kernel``: one program per (token, hidden tile); the token is read once and stored
  at each of its ``n = row_id_map[t, 2E]`` copies (values travel as same-width integers: bit-exact).
* ``fill_rows_kernel``: one program per ``BLOCK_R`` permuted rows: zeroes the rows no token maps to
  (padding) and gathers the per-row FP8 scales and probs through ``src`` / ``col``.

Row offsets are int64 (``num_out * H`` passes 2^31 at DeepSeek-V3 sizes).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def sources_kernel(map_ptr, src_ptr, col_ptr, T, E, num_out, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_T + tl.arange(0, BLOCK_T)
    ex = tl.arange(0, BLOCK_E)
    ok = (rows < T)[:, None] & (ex < E)[None, :]
    row_ptr = map_ptr + rows.to(tl.int64)[:, None] * (2 * E + 1)
    dest = tl.load(row_ptr + ex[None, :], mask=ok, other=-1)
    col = tl.load(row_ptr + E + ex[None, :], mask=ok, other=-1)
    valid = ok & (dest >= 0) & (dest < num_out)
    tok = tl.zeros([BLOCK_T, BLOCK_E], dtype=tl.int32) + rows[:, None]
    tl.store(src_ptr + dest, tok, mask=valid)
    tl.store(col_ptr + dest, col, mask=valid)


@triton.jit
def scatter_rows_kernel(x_ptr, map_ptr, out_ptr, H, E, num_out, BLOCK_H: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = offs < H
    x = tl.load(x_ptr + t * H + offs, mask=hm)
    row = map_ptr + t * (2 * E + 1)
    n = tl.minimum(tl.maximum(tl.load(row + 2 * E), 0), E)
    for j in range(n):
        d = tl.load(row + j).to(tl.int64) + tl.zeros([BLOCK_H], dtype=tl.int64)  # a vector: portable masks
        tl.store(out_ptr + d * H + offs, x, mask=hm & (d >= 0) & (d < num_out))


@triton.jit
def fill_rows_kernel(out_ptr, src_ptr, col_ptr, scale_ptr, pscale_ptr, probs_ptr, pprobs_ptr,
                     num_out, H, S, W, ZERO_ROWS: tl.constexpr, HAS_SCALES: tl.constexpr,
                     HAS_PROBS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr,
                     BLOCK_S: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rm = r < num_out
    src = tl.load(src_ptr + r, mask=rm, other=0).to(tl.int64)
    r64 = r.to(tl.int64)
    if ZERO_ROWS:
        empty = rm & (src < 0)
        zeros = tl.zeros([BLOCK_R, BLOCK_H], dtype=out_ptr.dtype.element_ty)
        for h0 in range(0, H, BLOCK_H):
            offs = h0 + tl.arange(0, BLOCK_H)
            tl.store(out_ptr + r64[:, None] * H + offs[None, :], zeros, mask=empty[:, None] & (offs < H)[None, :])
    if HAS_SCALES:
        cs = tl.arange(0, BLOCK_S)
        sm = rm[:, None] & (cs < S)[None, :]
        have = sm & (src >= 0)[:, None]
        sc = tl.load(scale_ptr + src[:, None] * S + cs[None, :], mask=have, other=0)
        tl.store(pscale_ptr + r64[:, None] * S + cs[None, :], sc, mask=sm)
    if HAS_PROBS:
        col = tl.load(col_ptr + r, mask=rm, other=-1).to(tl.int64)
        have = rm & (src >= 0) & (col >= 0) & (col < W)
        p = tl.load(probs_ptr + src * W + col, mask=have, other=0)
        tl.store(pprobs_ptr + r, p, mask=rm)
