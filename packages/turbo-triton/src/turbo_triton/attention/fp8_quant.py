"""Quantization of FP8 attention's operands: E4M3 data and fp32 scales per (batch, head, 64 rows).

``attn_fp8_quant_kernel`` reads one block of 64 sequence rows of one head of a ``[b, s, h, d]``
tensor (any strides with a unit head-dim stride; fp16/bf16/fp32) and writes, bit-identical to
``turbo_core.reference.attention.fake_quant_e4m3_blocks``:

- ``scale = amax(|block|) / 448`` (fp32, correctly rounded: ``div_rn``), 1 for an all-zero block, NaN
  for a block holding a NaN (the whole block comes out NaN);
- ``x_q = e4m3(clamp(x / scale, -448, 448))`` with ``x / scale`` correctly rounded and the cast
  round-to-nearest-even (the native ``rtne`` cast on GPUs; under the CPU interpreter, whose float8
  cast rounds half-up, the software encoder of ``turbo_triton.quantization.numerics``, writing bytes).

Layouts written (``rows`` = s padded with zero rows to a multiple of ``ROW_PAD``, ``d_pad`` = the
head dim padded with zero columns to the kernels' ``BLOCK_D``; both paddings are written here, so
the attention kernels read whole tiles without masks):

- ``rows``-major ``[b, h, rows, d_pad]`` (``TRANS=False``): the K-major operand of ``q k^T`` and
  ``dout v^T`` (the contraction runs over d, contiguous);
- head-dim-major ``[b, h, d_pad, rows]`` (``TRANS=True``): the K-major operand of ``P v`` and
  ``P^T dout`` (the contraction runs over the sequence; Hopper's FP8 MMA reads both operands K-major);
- ``scale`` fp32 ``[b, h, rows // 64]``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from turbo_core.dispatch.specs.attention import FP8_BLOCK, FP8_MAX
from turbo_triton import _runtime
from turbo_triton.intmath import cdiv, next_power_of_2
from turbo_triton.launcher import fast_kernel
from turbo_triton.quantization.numerics import abs_bits, encode_fp8, load_f32, saturate

#: Rows of the padded quantized tensors are a multiple of this (>= every attention tile's rows).
ROW_PAD = 128
#: Smallest head-dim tile: an FP8 dot needs K >= 32 on NVIDIA GPUs.
MIN_BLOCK_D = 32


def block_d(head_dim: int) -> int:
    """Padded head dim of the quantized tensors: the next power of two, at least 32."""
    return max(MIN_BLOCK_D, next_power_of_2(head_dim))


def padded_rows(seq: int) -> int:
    return cdiv(max(seq, 1), ROW_PAD) * ROW_PAD


@triton.jit
def attn_fp8_quant_kernel(
    X, Q, QT, S,
    stride_xb, stride_xs, stride_xh, seq, rows_pad,
    D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, FMAX: tl.constexpr,
    X_BITS: tl.constexpr, SOFT: tl.constexpr, ROWS_OUT: tl.constexpr, TRANS_OUT: tl.constexpr,
):
    """Grid ``(rows_pad // BLOCK_S, h, b)``. ``Q`` ``[b, h, rows_pad, BLOCK_D]`` (written when
    ``ROWS_OUT``), ``QT`` ``[b, h, BLOCK_D, rows_pad]`` (when ``TRANS_OUT``), ``S`` fp32
    ``[b, h, rows_pad // BLOCK_S]``; ``X_BITS``: bf16 ``X`` read as int16 bits; ``SOFT``: ``Q``/``QT``
    are uint8 views written by the software encoder (the CPU interpreter)."""
    blk = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.program_id(2)
    nh = tl.num_programs(1)
    rows = blk * BLOCK_S + tl.arange(0, BLOCK_S)
    cols = tl.arange(0, BLOCK_D)
    ptrs = X + b.to(tl.int64) * stride_xb + h * stride_xh + rows[:, None].to(tl.int64) * stride_xs + cols[None, :]
    x = load_f32(ptrs, (rows < seq)[:, None] & (cols < D)[None, :], X_BITS)
    bits = abs_bits(x)  # int32, ordered like |x| (NaN above inf): amax as torch's, NaN included
    amax = (tl.zeros_like(bits) + tl.max(tl.max(bits, 1), 0)).to(tl.float32, bitcast=True)
    scale = tl.where(amax == 0, 1.0, tl.math.div_rn(amax, tl.full(x.shape, FMAX, tl.float32)))  # NaN amax: NaN
    v = saturate(tl.math.div_rn(x, scale), FMAX)
    if SOFT:
        code = encode_fp8(v, 3, 7, False).to(tl.uint8)
    else:
        code = v.to(tl.float8e4nv, fp_downcast_rounding="rtne")
    base = (b * nh + h).to(tl.int64) * rows_pad * BLOCK_D
    if ROWS_OUT:
        tl.store(Q + base + rows[:, None] * BLOCK_D + cols[None, :], code)
    if TRANS_OUT:
        tl.store(QT + base + cols[None, :] * rows_pad + rows[:, None], code)
    tl.store(S + (b * nh + h) * (rows_pad // BLOCK_S) + blk, tl.max(tl.max(scale, 1), 0))


def fp8_storage() -> torch.dtype:
    """Element type of the quantized tensors: E4M3 on GPUs, its raw bytes under the interpreter."""
    return torch.uint8 if _runtime.interpreting() else torch.float8_e4m3fn


def quantize_blocks(x: torch.Tensor, *, rows: bool = True, trans: bool = False):
    """Quantize ``x [b, s, h, d]`` per (b, h, 64-row block).

    Returns ``(x_q, x_qt, scale)``: ``x_q`` ``[b, h, padded_rows(s), block_d(d)]`` (or None when not
    ``rows``), ``x_qt`` ``[b, h, block_d(d), padded_rows(s)]`` (or None when not ``trans``), both
    E4M3 (uint8 bytes under the interpreter) and zero in the padding; ``scale`` fp32
    ``[b, h, padded_rows(s) // 64]`` (1 for padding blocks). Dequantized: ``x_q * scale[row // 64]``.
    """
    b, s, h, d = x.shape
    rp, dp = padded_rows(s), block_d(d)
    store = fp8_storage()
    x_q = torch.empty((b, h, rp, dp), dtype=store, device=x.device) if rows else None
    x_qt = torch.empty((b, h, dp, rp), dtype=store, device=x.device) if trans else None
    scale = torch.empty((b, h, rp // FP8_BLOCK), dtype=torch.float32, device=x.device)
    bits = _runtime.interpreting() and x.dtype == torch.bfloat16
    src = x.view(torch.int16) if bits else x
    dummy = scale
    grid = (rp // FP8_BLOCK, h, b)
    if b * h:
        fast_kernel(attn_fp8_quant_kernel)[grid](
            src, x_q if rows else dummy, x_qt if trans else dummy, scale,
            x.stride(0), x.stride(1), x.stride(2), s, rp,
            D=d, BLOCK_D=dp, BLOCK_S=FP8_BLOCK, FMAX=FP8_MAX, X_BITS=bits, SOFT=_runtime.interpreting(),
            ROWS_OUT=rows, TRANS_OUT=trans, num_warps=4)
    return x_q, x_qt, scale
