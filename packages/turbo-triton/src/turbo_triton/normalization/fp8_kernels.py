"""The RMSNorm forward with an FP8 epilogue (``rmsnorm_fwd_fp8``): whole rows in one tile.

The normalization is ``rmsnorm_fwd_kernel``'s, statement for statement, on the same tile the
launcher picks for ``rmsnorm_fwd`` (so ``rstd`` and ``y`` have its bits). ``y`` is rounded to x's
dtype, as ``rmsnorm_fwd`` stores it, and that rounded value is quantized along the row with the
quantization kernels' arithmetic (``turbo_triton.quantization.numerics``: the reference's bits):

* ``GRAN`` 0, ROWWISE: one FP32 scale per row (``GS`` = the tile width).
* ``GRAN`` 1, BLOCKWISE: one FP32 scale per ``1 x GS`` block of the row.
* ``GRAN`` 2, MX_BLOCKWISE: one E8M0 scale per ``1 x 32`` block; the tile covers the row padded to
  a multiple of 128 (the masked columns are zeros, so the padding gets zero data and byte 0).

Columns past H are loaded as zeros, so they add nothing to a row's sum of squares or amax.
"""

from __future__ import annotations

import triton
import triton.language as tl

from turbo_triton.normalization.kernels import _load_s, _weight, to_out
from turbo_triton.quantization.numerics import expand, fp32_scale, group_amax, mx_scale, to_fp8


@triton.jit
def _rounded(y, ROUND_BF16: tl.constexpr, Y_DTYPE: tl.constexpr):
    """fp32 ``y`` rounded once to x's dtype, as an fp32 value (bf16: nearest-even by bits, the
    interpreter's own conversion truncating)."""
    if ROUND_BF16:
        bits = y.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return tl.where(y != y, y, bits.to(tl.float32, bitcast=True))
    return y.to(Y_DTYPE).to(tl.float32)


@triton.jit
def rmsnorm_fwd_fp8_kernel(
    x_ptr, r_ptr, g_ptr, y_ptr, s_ptr, rstd_ptr, q_ptr, sc_ptr, T, H, QW, SW, eps, q_eps,
    HAS_RESIDUAL: tl.constexpr, HAS_GAMMA: tl.constexpr, ZERO_CENTERED: tl.constexpr,
    ROUND_BF16: tl.constexpr, STORE_Y: tl.constexpr, Y_DTYPE: tl.constexpr,
    GRAN: tl.constexpr, GS: tl.constexpr, FMAX: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr,
    FNUZ: tl.constexpr, SOFT: tl.constexpr, HW_SAT: tl.constexpr, EMAX: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Rows ``[pid * BLOCK_M, +BLOCK_M)``. ``QW``: q's row length (H, or MX's padded H); ``SW``:
    scales per row. ``y_ptr`` is written only when ``STORE_Y``."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < T
    col_ok = cols < H
    mask = row_ok[:, None] & col_ok[None, :]
    offs = rows.to(tl.int64)[:, None] * H + cols[None, :]
    s = _load_s(x_ptr, r_ptr, s_ptr, offs, mask, HAS_RESIDUAL, True, ROUND_BF16)
    rstd = 1.0 / tl.sqrt_rn(tl.sum(s * s, axis=1) / H + eps)
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)
    y = s * rstd[:, None]
    if HAS_GAMMA:
        y = y * _weight(g_ptr, cols, col_ok, ZERO_CENTERED)[None, :]
    if STORE_Y:
        tl.store(y_ptr + offs, to_out(y, y_ptr, ROUND_BF16), mask=mask)
    v = tl.where(mask, _rounded(y, ROUND_BF16, Y_DTYPE), 0.0)
    amax = group_amax(v, BLOCK_M, BLOCK_N, 1, GS)
    if GRAN == 2:
        mult, byte = mx_scale(amax, EMAX)
        scale_out = byte.to(tl.uint8)
    else:
        mult, scale_out = fp32_scale(amax, q_eps, FMAX)
    q = to_fp8(v * expand(mult, BLOCK_M, BLOCK_N, 1, GS), q_ptr, FMAX, MB, BIAS, FNUZ, SOFT, HW_SAT)
    q_ok = row_ok[:, None] & (cols < QW)[None, :]
    tl.store(q_ptr + rows.to(tl.int64)[:, None] * QW + cols[None, :], q, mask=q_ok)
    groups = tl.arange(0, BLOCK_N // GS)
    s_ok = row_ok[:, None] & (groups < SW)[None, :]
    tl.store(sc_ptr + rows.to(tl.int64)[:, None] * SW + groups[None, :], scale_out, mask=s_ok)
