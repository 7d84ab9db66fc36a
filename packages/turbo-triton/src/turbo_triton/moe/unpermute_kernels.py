"""Triton kernels of ``moe_unpermute`` and ``moe_unpermute_bwd``.

* ``unpermute_kernel``: one program per (token, hidden tile); fp32 ``acc = acc + w_j * x_j`` over
  the token's copies in the row map's order (``j < row_id_map[t, 2E]``), rounded once. The launcher
  turns fp-fusion off on a GPU, so the product and the sum round separately, as torch's fp32
  reference does. A copy whose row is outside ``[0, N)`` adds nothing; a probs column outside
  ``[0, W)`` weighs 0.
* ``unpermute_probs_kernel``: ``BLOCK_T`` tokens a program; ``unpermuted_probs[t, c_j] =
  permuted_probs[r_j]`` (bits copied), zeros elsewhere.
* ``unpermute_bwd_kernel``: one program per token; for each copy, walks the hidden dimension in
  tiles: ``grad_permuted[r] = (g * w)`` rounded once, and the fp32 dot ``sum(g * x[r])`` (tile
  partial sums, then across tiles) for ``grad_merging_probs[t, c]``.

``ROUND_BF16`` rounds fp32 -> bf16 to nearest-even by bit arithmetic (the CPU interpreter's own
conversion truncates).
"""

from __future__ import annotations

import triton
import triton.language as tl

from turbo_triton.normalization.kernels import to_out


@triton.jit
def unpermute_kernel(x_ptr, map_ptr, merge_ptr, out_ptr, H, E, N, W, HAS_MERGE: tl.constexpr,
                     ROUND_BF16: tl.constexpr, BLOCK_H: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hm = offs < H
    row = map_ptr + t * (2 * E + 1)
    n = tl.minimum(tl.maximum(tl.load(row + 2 * E), 0), E)
    acc = tl.zeros([BLOCK_H], dtype=tl.float32)
    zero = tl.zeros([BLOCK_H], dtype=tl.int64)
    for j in range(n):
        d = tl.load(row + j).to(tl.int64) + zero
        valid = (d >= 0) & (d < N)
        x = tl.load(x_ptr + d * H + offs, mask=hm & valid, other=0.0).to(tl.float32)
        if HAS_MERGE:
            c = tl.load(row + E + j).to(tl.int64) + zero
            okc = valid & (c >= 0) & (c < W)
            w = tl.load(merge_ptr + t * W + c, mask=okc, other=0.0).to(tl.float32)
            x = x * w
        acc = acc + x
    tl.store(out_ptr + t * H + offs, to_out(acc, out_ptr, ROUND_BF16), mask=hm)


@triton.jit
def unpermute_probs_kernel(pp_ptr, map_ptr, out_ptr, T, E, N, W, BLOCK_T: tl.constexpr, BLOCK_W: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    rm = rows < T
    cw = tl.arange(0, BLOCK_W)
    row_ptr = map_ptr + rows.to(tl.int64) * (2 * E + 1)
    n = tl.load(row_ptr + 2 * E, mask=rm, other=0)
    acc = tl.zeros([BLOCK_T, BLOCK_W], dtype=out_ptr.dtype.element_ty)
    for j in range(E):
        d = tl.load(row_ptr + j, mask=rm, other=-1)
        c = tl.load(row_ptr + E + j, mask=rm, other=-1)
        ok = rm & (j < n) & (d >= 0) & (d < N) & (c >= 0) & (c < W)
        v = tl.load(pp_ptr + d, mask=ok, other=0)
        acc = tl.where(ok[:, None] & (cw[None, :] == c[:, None]), v[:, None], acc)
    tl.store(out_ptr + rows.to(tl.int64)[:, None] * W + cw[None, :], acc, mask=rm[:, None] & (cw < W)[None, :])


@triton.jit
def unpermute_bwd_kernel(g_ptr, x_ptr, map_ptr, merge_ptr, gx_ptr, gm_ptr, H, E, N, W,
                         ROUND_BF16: tl.constexpr, ROUND_BF16_M: tl.constexpr,
                         BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    row = map_ptr + t * (2 * E + 1)
    n = tl.minimum(tl.maximum(tl.load(row + 2 * E), 0), E)
    cw = tl.arange(0, BLOCK_W)
    gm = tl.zeros([BLOCK_W], dtype=tl.float32)
    zero = tl.zeros([BLOCK_H], dtype=tl.int64)
    for j in range(n):
        d = tl.load(row + j).to(tl.int64) + zero
        c = tl.load(row + E + j).to(tl.int64) + zero
        valid = (d >= 0) & (d < N)
        okc = valid & (c >= 0) & (c < W)
        w = tl.load(merge_ptr + t * W + c, mask=okc, other=0.0).to(tl.float32)
        part = tl.zeros([BLOCK_H], dtype=tl.float32)
        for h0 in range(0, H, BLOCK_H):
            offs = h0 + tl.arange(0, BLOCK_H)
            hm = offs < H
            g = tl.load(g_ptr + t * H + offs, mask=hm, other=0.0).to(tl.float32)
            tl.store(gx_ptr + d * H + offs, to_out(g * w, gx_ptr, ROUND_BF16), mask=hm & valid)
            x = tl.load(x_ptr + d * H + offs, mask=hm & valid, other=0.0).to(tl.float32)
            part += g * x
        dot = tl.sum(part, axis=0)
        c0 = tl.max(c, axis=0)
        ok0 = tl.max(okc.to(tl.int32), axis=0) > 0
        gm = tl.where((cw == c0) & ok0, dot, gm)
    tl.store(gm_ptr + t * W + cw, to_out(gm, gm_ptr, ROUND_BF16_M), mask=cw < W)
