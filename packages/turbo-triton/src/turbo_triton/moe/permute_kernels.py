"""Triton kernels of ``moe_permute`` (and the row bookkeeping ``moe_unpermute_bwd`` shares).

* ``sources_kernel``: the inverse of the row map, ``src[r]`` (token) and, with ``HAS_COL``,
  ``col[r]`` (probs column) of every permuted row ``r`` that a copy lands on (row ids outside
  ``[0, num_out)`` are dropped); the launcher fills them with -1 first (one fill of one buffer).
  Row ids are distinct, so the scatter has no races. With ``ZERO_GM`` the same programs also zero
  their tokens' rows of ``grad_merging_probs`` (``moe_unpermute_bwd`` then writes only the
  entries a copy reaches).
* ``permute_kernel``: the whole ``moe_permute`` after ``src`` in one launch, grid
  ``(T + cdiv(num_out, BLOCK_R), hidden tiles)``. Programs ``pid < T`` copy token ``pid``'s hidden
  tile to each of its ``n = row_id_map[t, 2E]`` copies (values travel as same-width integers:
  bit-exact; ``UNROLL`` copies a step, so their row ids load together, the first step's alongside
  the copy count); the hidden-tile-0 program
  of a token also writes its copies' FP8 scales and probs (a column outside ``[0, W)``: 0). Programs ``pid >= T`` zero the rows no
  token maps to (``src < 0``) in ``BLOCK_R``-row blocks (and their scales / probs), skipping a block
  with none. Mapped rows and padding rows are disjoint, so the two kinds of program need no order.
* ``gather_kernel``: the row-major form (``moe_permute(..., gather=True)``), each permuted row read
  from its token; slower than the scatter on sm90 (the ``moe`` suite measures both), kept for
  comparison.
* ``search_gather_kernel``: small batches (``T x E`` row ids up to ``SEARCH_MAX``) in one launch: each
  program searches the row map for its rows' tokens, then gathers (no inverse map, no fill).

Row offsets are int64 (``num_out * H`` passes 2^31 at DeepSeek-V3 sizes).
"""

from __future__ import annotations

import triton
import triton.language as tl

from turbo_triton.moe.unpermute_kernels import splat


@triton.jit
def sources_kernel(map_ptr, src_ptr, col_ptr, gm_ptr, T, E, num_out, W, HAS_COL: tl.constexpr,
                   ZERO_GM: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr,
                   BLOCK_W: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_T + tl.arange(0, BLOCK_T)
    ex = tl.arange(0, BLOCK_E)
    ok = (rows < T)[:, None] & (ex < E)[None, :]
    row_ptr = map_ptr + rows.to(tl.int64)[:, None] * (2 * E + 1)
    dest = tl.load(row_ptr + ex[None, :], mask=ok, other=-1)
    valid = ok & (dest >= 0) & (dest < num_out)
    tok = tl.zeros([BLOCK_T, BLOCK_E], dtype=tl.int32) + rows[:, None]
    tl.store(src_ptr + dest, tok, mask=valid)
    if HAS_COL:
        col = tl.load(row_ptr + E + ex[None, :], mask=ok, other=-1)
        tl.store(col_ptr + dest, col, mask=valid)
    if ZERO_GM:
        cw = tl.arange(0, BLOCK_W)
        zeros = tl.zeros([BLOCK_T, BLOCK_W], dtype=gm_ptr.dtype.element_ty)
        gm_rows = gm_ptr + rows.to(tl.int64)[:, None] * W
        for w0 in range(0, W, BLOCK_W):
            tl.store(gm_rows + (w0 + cw)[None, :], zeros, mask=(rows < T)[:, None] & ((w0 + cw) < W)[None, :])


@triton.jit
def _scatter_copy(jj, n, row, t, x, sc, offs, hm, cs, sm, ph, out_ptr, pscale_ptr, probs_ptr, pprobs_ptr,
                  E, H, S, W, num_out, HAS_SCALES: tl.constexpr, HAS_PROBS: tl.constexpr):
    """Copy ``jj`` of token ``t`` (masked off when ``jj >= n``)."""
    j = tl.maximum(tl.minimum(jj, E - 1), 0)  # a copy past n reads a real entry of the row
    d = tl.load(row + j).to(tl.int64)
    ok = (jj < n) & (d >= 0) & (d < num_out)
    tl.store(out_ptr + d * H + offs, x, mask=hm & splat(ok, offs))
    if HAS_SCALES:
        tl.store(pscale_ptr + d * S + cs, sc, mask=sm & splat(ok, cs))
    if HAS_PROBS:
        c = tl.load(row + E + j)
        first = ok & (ph == 0)
        p = tl.load(probs_ptr + t * W + c, mask=first & (c >= 0) & (c < W), other=0)
        tl.store(pprobs_ptr + d, p, mask=first)  # a column outside [0, W): 0


@triton.jit
def permute_kernel(x_ptr, map_ptr, src_ptr, out_ptr, scale_ptr, pscale_ptr, probs_ptr, pprobs_ptr,
                   T, H, E, num_out, S, W, HAS_SCALES: tl.constexpr, HAS_PROBS: tl.constexpr,
                   UNROLL: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr,
                   BLOCK_S: tl.constexpr):
    pid = tl.program_id(0)
    ph = tl.program_id(1)
    offs = ph * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = offs < H
    # The hidden-tile-0 program also moves scales and probs (lane 0 of ``cs`` carries the probs).
    cs = tl.arange(0, BLOCK_S)
    sm = (cs < S) & splat(ph == 0, cs)
    if pid < T:
        t = pid.to(tl.int64)
        x = tl.load(x_ptr + t * H + offs, mask=hm)
        sc = cs  # stands in when there are no scales
        if HAS_SCALES:
            sc = tl.load(scale_ptr + t * S + cs, mask=sm)
        row = map_ptr + t * (2 * E + 1)
        n = tl.minimum(tl.maximum(tl.load(row + 2 * E), 0), E)
        # The first UNROLL copies unconditionally (masked past n): their row ids load alongside n.
        for u in tl.static_range(UNROLL):
            _scatter_copy(u, n, row, t, x, sc, offs, hm, cs, sm, ph, out_ptr, pscale_ptr, probs_ptr, pprobs_ptr,
                          E, H, S, W, num_out, HAS_SCALES, HAS_PROBS)
        for j0 in range(UNROLL, n, UNROLL):
            for u in tl.static_range(UNROLL):
                _scatter_copy(j0 + u, n, row, t, x, sc, offs, hm, cs, sm, ph, out_ptr, pscale_ptr, probs_ptr,
                              pprobs_ptr, E, H, S, W, num_out, HAS_SCALES, HAS_PROBS)
    else:
        r = (pid - T) * BLOCK_R + tl.arange(0, BLOCK_R)
        rm = r < num_out
        empty = rm & (tl.load(src_ptr + r, mask=rm, other=0) < 0)
        if tl.max(empty.to(tl.int32), axis=0) > 0:
            r64 = r.to(tl.int64)
            zeros = tl.zeros([BLOCK_R, BLOCK_H], dtype=out_ptr.dtype.element_ty)
            tl.store(out_ptr + r64[:, None] * H + offs[None, :], zeros, mask=empty[:, None] & hm[None, :])
            if HAS_SCALES:
                zs = tl.zeros([BLOCK_R, BLOCK_S], dtype=pscale_ptr.dtype.element_ty)
                tl.store(pscale_ptr + r64[:, None] * S + cs[None, :], zs, mask=empty[:, None] & sm[None, :])
            if HAS_PROBS:
                zp = tl.zeros([BLOCK_R], dtype=pprobs_ptr.dtype.element_ty)
                tl.store(pprobs_ptr + r64, zp, mask=empty & splat(ph == 0, r))


@triton.jit
def _gather_rows(x_ptr, src, col, r, rm, out_ptr, scale_ptr, pscale_ptr, probs_ptr, pprobs_ptr, H, S, W,
                 HAS_SCALES: tl.constexpr, HAS_PROBS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_S: tl.constexpr):
    """Permuted rows ``r`` (mask ``rm``) read from their tokens ``src`` (int64, -1: zeros), one hidden
    tile (``program_id(1)``); the hidden-tile-0 program also gathers their scales and probs (column
    ``col``)."""
    have = rm & (src >= 0)
    r64 = r.to(tl.int64)
    offs = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = offs < H
    v = tl.load(x_ptr + src[:, None] * H + offs[None, :], mask=have[:, None] & hm[None, :], other=0)
    tl.store(out_ptr + r64[:, None] * H + offs[None, :], v, mask=rm[:, None] & hm[None, :])
    first = splat(tl.program_id(1) == 0, r)
    if HAS_SCALES:
        cs = tl.arange(0, BLOCK_S)
        sm = (rm & first)[:, None] & (cs < S)[None, :]
        sc = tl.load(scale_ptr + src[:, None] * S + cs[None, :], mask=sm & have[:, None], other=0)
        tl.store(pscale_ptr + r64[:, None] * S + cs[None, :], sc, mask=sm)
    if HAS_PROBS:
        p = tl.load(probs_ptr + src * W + col, mask=have & first & (col >= 0) & (col < W), other=0)
        tl.store(pprobs_ptr + r64, p, mask=rm & first)


@triton.jit
def gather_kernel(x_ptr, src_ptr, col_ptr, out_ptr, scale_ptr, pscale_ptr, probs_ptr, pprobs_ptr,
                  num_out, H, S, W, HAS_SCALES: tl.constexpr, HAS_PROBS: tl.constexpr,
                  BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_S: tl.constexpr):
    """``moe_permute``'s row-major form (the ``gather=True`` launch): ``BLOCK_R`` permuted rows x
    one hidden tile a program, each row read from its token (``src``), zeros where ``src < 0``; the
    hidden-tile-0 program also gathers the rows' scales and probs (through ``col``)."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rm = r < num_out
    src = tl.load(src_ptr + r, mask=rm, other=-1).to(tl.int64)
    col = src * 0 - 1
    if HAS_PROBS:
        col = tl.load(col_ptr + r, mask=rm, other=-1).to(tl.int64)
    _gather_rows(x_ptr, src, col, r, rm, out_ptr, scale_ptr, pscale_ptr, probs_ptr, pprobs_ptr, H, S, W,
                 HAS_SCALES, HAS_PROBS, BLOCK_H, BLOCK_S)


@triton.jit
def search_gather_kernel(x_ptr, map_ptr, out_ptr, scale_ptr, pscale_ptr, probs_ptr, pprobs_ptr,
                         T, E, num_out, H, S, W, HAS_SCALES: tl.constexpr, HAS_PROBS: tl.constexpr,
                         BLOCK_R: tl.constexpr, BLOCK_F: tl.constexpr, BLOCK_H: tl.constexpr,
                         BLOCK_S: tl.constexpr):
    """The whole ``moe_permute`` of a small batch in one launch: each program finds the token (and
    probs column) of its ``BLOCK_R`` permuted rows by searching the row map's ``T x E`` row ids
    (``BLOCK_F`` at a time; row ids are distinct, so at most one entry matches, and a row no entry
    names is a padding row: zeros), then copies as :func:`gather_kernel` does. No inverse map, no
    fill: one launch instead of three, for the batches where launches are the cost."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rm = r < num_out
    found = r * 0 - 1  # flat index t * E + j of the entry holding row r
    for f0 in range(0, T * E, BLOCK_F):
        f = f0 + tl.arange(0, BLOCK_F)
        t, j = f // E, f % E
        ids = tl.load(map_ptr + t.to(tl.int64) * (2 * E + 1) + j, mask=f < T * E, other=-1)
        hit = (ids[None, :] == r[:, None]) & rm[:, None]
        found = tl.maximum(found, tl.max(tl.where(hit, f[None, :], -1), axis=1))
    src = tl.where(found >= 0, found // E, -1).to(tl.int64)
    col = src * 0 - 1
    if HAS_PROBS:
        j = tl.where(found >= 0, found % E, 0)
        col = tl.load(map_ptr + src * (2 * E + 1) + E + j, mask=rm & (found >= 0), other=-1).to(tl.int64)
    _gather_rows(x_ptr, src, col, r, rm, out_ptr, scale_ptr, pscale_ptr, probs_ptr, pprobs_ptr, H, S, W,
                 HAS_SCALES, HAS_PROBS, BLOCK_H, BLOCK_S)
