"""The GLU forward with an FP8 epilogue (``swiglu_fwd_fp8`` / ``geglu_fwd_fp8``).

The activation is ``glu_fwd_kernel``'s, statement for statement (the same ``_act``, the same
``act(a) * b * p`` in fp32, the same masking): it is elementwise, so ``y`` has that kernel's bits on
any tile. ``y`` is rounded to x's dtype, as ``glu_fwd`` stores it, and that rounded value is
quantized along the row with the quantization kernels' arithmetic
(``turbo_triton.quantization.numerics``: the reference's bits):

* ``GRAN`` 0, ROWWISE: one FP32 scale per row; the tile holds whole rows (``GS`` = the tile width,
  one column block).
* ``GRAN`` 1, BLOCKWISE: one FP32 scale per ``1 x GS`` block of the row; tiles of whole blocks.
* ``GRAN`` 2, MX_BLOCKWISE: one E8M0 scale per ``1 x 32`` block; the column blocks cover the row
  padded to a multiple of 128 (``QW``), whose padding gets zero data and the zero block's byte 0.

Columns past H and inactive rows (``row_mask == 0``, never read) are zeros, so they add nothing to a
group's amax; inactive rows come out as zero data with the all-zero group's scale, which is what
``quantize_fp8`` gives the zero rows ``glu_fwd`` writes there.
"""

from __future__ import annotations

import triton
import triton.language as tl

from turbo_triton.activation.kernels import _act, _active_rows
from turbo_triton.normalization.fp8_kernels import _rounded
from turbo_triton.normalization.kernels import to_out
from turbo_triton.quantization.numerics import expand, fp32_scale, group_amax, mx_scale, to_fp8


@triton.jit
def glu_fwd_fp8_kernel(
    x_ptr, p_ptr, m_ptr, y_ptr, q_ptr, sc_ptr, T, H, QW, SW, q_eps,
    GELU: tl.constexpr, HAS_MASK: tl.constexpr, ROUND_BF16: tl.constexpr, STORE_Y: tl.constexpr,
    Y_DTYPE: tl.constexpr, GRAN: tl.constexpr, GS: tl.constexpr, FMAX: tl.constexpr, MB: tl.constexpr,
    BIAS: tl.constexpr, FNUZ: tl.constexpr, SOFT: tl.constexpr, HW_SAT: tl.constexpr, EMAX: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Rows ``[pid0 * BLOCK_M, +BLOCK_M)`` x columns ``[pid1 * BLOCK_N, +BLOCK_N)`` of ``y [T, H]``.
    ``QW``: q's row length (H, or MX's padded H); ``SW``: scales per row. ``y_ptr`` is written only
    when ``STORE_Y``."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    active = _active_rows(m_ptr, rows, T, HAS_MASK)
    row_ok = rows < T
    col_ok = cols < H
    load_mask = active[:, None] & col_ok[None, :]
    rows64 = rows.to(tl.int64)[:, None]
    x_offs = rows64 * (2 * H) + cols[None, :]
    a = tl.load(x_ptr + x_offs, mask=load_mask, other=0.0).to(tl.float32)
    b = tl.load(x_ptr + x_offs + H, mask=load_mask, other=0.0).to(tl.float32)
    p = tl.load(p_ptr + rows, mask=active, other=0.0)
    out = tl.where(load_mask, _act(a, GELU) * b * p[:, None], 0.0)
    if STORE_Y:
        tl.store(y_ptr + rows64 * H + cols[None, :], to_out(out, y_ptr, ROUND_BF16),
                 mask=row_ok[:, None] & col_ok[None, :])
    v = _rounded(out, ROUND_BF16, Y_DTYPE)
    amax = group_amax(v, BLOCK_M, BLOCK_N, 1, GS)
    if GRAN == 2:
        mult, byte = mx_scale(amax, EMAX)
        scale_out = byte.to(tl.uint8)
    else:
        mult, scale_out = fp32_scale(amax, q_eps, FMAX)
    q = to_fp8(v * expand(mult, BLOCK_M, BLOCK_N, 1, GS), q_ptr, FMAX, MB, BIAS, FNUZ, SOFT, HW_SAT)
    tl.store(q_ptr + rows64 * QW + cols[None, :], q, mask=row_ok[:, None] & (cols < QW)[None, :])
    groups = tl.program_id(1) * (BLOCK_N // GS) + tl.arange(0, BLOCK_N // GS)
    tl.store(sc_ptr + rows64 * SW + groups[None, :], scale_out, mask=row_ok[:, None] & (groups < SW)[None, :])
