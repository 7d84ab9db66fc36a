"""The Triton kernel behind :func:`turbo_triton.transpose.transpose_last2` (imports triton)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def transpose_kernel(x_ptr, y_ptr, R, C, sxb, sxr, sxc, syb, syc, syr,
                     BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """One ``BLOCK_R x BLOCK_C`` tile of batch ``program_id(2)``: ``y[b, c, r] = x[b, r, c]``."""
    pid_b = tl.program_id(2).to(tl.int64)
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (offs_r[:, None] < R) & (offs_c[None, :] < C)
    tile = tl.load(x_ptr + pid_b * sxb + offs_r[:, None].to(tl.int64) * sxr + offs_c[None, :].to(tl.int64) * sxc,
                   mask=mask)
    dst = y_ptr + pid_b * syb + offs_c[:, None].to(tl.int64) * syc + offs_r[None, :].to(tl.int64) * syr
    tl.store(dst, tl.trans(tile), mask=tl.trans(mask))
