"""``quantize_fp8_with_trans`` on Triton: both directions from one read of ``x`` (ROWWISE: two).

BLOCKWISE (``x [M, N]``): each ``BM x BN`` tile (multiples of ``bs``) gives its ``1 x bs`` row
blocks (``q_row [M, N]``, ``s_row [M, cdiv(N, bs)]``) and its ``bs x 1`` column blocks
(``q_col [M, N]``, ``s_col [cdiv(M, bs), N]``). MX_BLOCKWISE (``x [(B,) M, N]``): each tile of
the padded ``[M_pad, N_pad]`` extent gives the row-wise copy ``[(B,) M, N_pad]`` and the
transposed col-wise copy ``[(B,) N, M_pad]`` with their E8M0 scales (32x32 tiles per direction
when its recipe says ``use_2d_block``). Reads ``x`` once instead of twice; each output equals
the single-direction ``quantize_fp8``, bit for bit. ROWWISE (``x [(B,) M, N]``): whole rows
quantized while their column amax is gathered, then the column copy cast: two reads of ``x``
where two ``quantize_fp8`` calls take three (the column one reads x twice).
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.quantization import QuantizeFp8WithTransArgs, mx_shapes
from turbo_core.low_precision import E8M0_DTYPE, MXFP8_BLOCK_SIZE, ScalingGranularity
from turbo_triton.intmath import cdiv, next_power_of_2
from turbo_triton.launcher import fast_kernel
from turbo_triton.quantization import common
from turbo_triton.quantization.common import Tile

__all__ = ["can_handle", "quantize_fp8_with_trans"]

G = ScalingGranularity
#: partial_scale_kernel's tile: 8 partial rows x 128 columns a step
_PARTIAL_BP, _PARTIAL_BN = 8, 128


def can_handle(args: QuantizeFp8WithTransArgs) -> str | None:
    reason = (common.device_reason(args.x, args.out_dtype)
              or common.recipe_reason(args.recipe, args.recipe_for_trans))
    if reason:
        return reason
    if G(args.granularity) == G.BLOCKWISE:
        # Each tile holds whole blocks of both directions: bs x bs at least.
        return common.block_size_reason(args.block_size, square=True)
    return None


def _blockwise(x: torch.Tensor, dtype: torch.dtype, bs: int, tile: Tile | None):
    from turbo_triton.quantization import kernels

    m, n = x.shape
    dev = x.device
    q_row = torch.empty((m, n), dtype=dtype, device=dev)
    q_col = torch.empty((m, n), dtype=dtype, device=dev)
    s_row = torch.empty((m, cdiv(n, bs)), dtype=torch.float32, device=dev)
    s_col = torch.empty((cdiv(m, bs), n), dtype=torch.float32, device=dev)
    if x.numel() == 0:
        return q_row, s_row, q_col, s_col
    # 128 x 128 tiles (bs 128) on 8 warps, faster than on 4 (the `quant` suite measures it)
    tile = tile or common.pick(m, n, bs, bs, warps=8 if bs >= 128 else None)
    common.check_tile(tile, bs, bs)
    xa, x_bits = common.x_arg(x)
    fast_kernel(kernels.blockwise_with_trans_kernel)[common.grid(1, m, n, tile)](
        xa, common.data_arg(q_row), s_row, common.data_arg(q_col), s_col, m, n, *x.stride(), common.eps(),
        BM=tile.block_m, BN=tile.block_n, BS=bs, **common.fmt_constexprs(dtype), X_BITS=x_bits,
        num_warps=tile.num_warps)
    return q_row, s_row, q_col, s_col


def _mx(x: torch.Tensor, dtype: torch.dtype, row_2d: bool, col_2d: bool, tile: Tile | None):
    from turbo_triton.quantization import kernels

    nd = x.dim()
    row_data, row_scale = mx_shapes(tuple(x.shape), nd - 1)
    col_data, col_scale = mx_shapes(tuple(x.shape), nd - 2)
    dev = x.device
    q_row = torch.empty(row_data, dtype=dtype, device=dev)
    s_row = torch.empty(row_scale, dtype=E8M0_DTYPE, device=dev)
    q_col = torch.empty(col_data, dtype=dtype, device=dev)
    s_col = torch.empty(col_scale, dtype=E8M0_DTYPE, device=dev)
    if x.numel() == 0:  # every output is empty too (a zero dim, or a padded dim of 0)
        return q_row, s_row, q_col, s_col
    x3 = x if nd == 3 else x.unsqueeze(0)
    b, m, n = x3.shape
    m_pad, n_pad = col_data[-1], row_data[-1]
    tile = tile or common.pick_mx(m_pad, n_pad, MXFP8_BLOCK_SIZE, MXFP8_BLOCK_SIZE)
    common.check_tile(tile, MXFP8_BLOCK_SIZE, MXFP8_BLOCK_SIZE)
    xa, x_bits = common.x_arg(x3)
    fast_kernel(kernels.mx_with_trans_kernel)[common.grid(b, m_pad, n_pad, tile)](
        xa, common.data_arg(q_row), s_row.view(torch.uint8), common.data_arg(q_col), s_col.view(torch.uint8),
        m, n, m_pad, n_pad, *x3.stride(), BM=tile.block_m, BN=tile.block_n, R_GM=32 if row_2d else 1,
        C_GN=32 if col_2d else 1, **common.fmt_constexprs(dtype), EMAX=common.mx_emax_of(dtype),
        X_BITS=x_bits, num_warps=tile.num_warps)
    return q_row, s_row, q_col, s_col


def _rowwise(x: torch.Tensor, dtype: torch.dtype, tile: Tile | None, row_tile: Tile | None = None,
             stages: int = 3, partial: bool = True):
    """ROWWISE both ways (``x`` ``[(B,) M, N]``): rows up to ``ROW_FUSED_MAX`` long are quantized by
    ``rowwise_with_trans_kernel``, which also gathers the column amax, then the column copy is cast
    (two reads of x); longer rows take two ``quantize_fp8`` calls. Each copy equals ``quantize_fp8``
    along its axis, bit for bit. ``row_tile`` (its ``iters`` = row tiles a program walks), ``stages``
    and ``partial`` (column amax as per-program partials, not atomics) set the first kernel's launch
    (for tuning)."""
    from turbo_triton.quantization import kernels, quantize

    *batch, m, n = x.shape
    dev = x.device
    if n > quantize.ROW_FUSED_MAX or x.numel() == 0:
        q_row, s_row = quantize._along_axis(x, dtype, x.dim() - 1, None, tile)
        q_col, s_col = quantize._along_axis(x, dtype, x.dim() - 2, None, tile)
        return q_row, s_row, q_col, s_col
    b = batch[0] if batch else 1
    q_row = torch.empty(x.shape, dtype=dtype, device=dev)
    q_col = torch.empty(x.shape, dtype=dtype, device=dev)
    s_row = torch.empty((*batch, m, 1), dtype=torch.float32, device=dev)
    s_col = torch.empty((*batch, 1, n), dtype=torch.float32, device=dev)
    x3 = common.view3(x, b, m, n)
    bn = next_power_of_2(n)
    r_tile = row_tile or tile or common.pick(m, n, 1, bn, cap_n=max(bn, 1024))
    common.check_tile(r_tile, 1, bn)
    # One column amax per ITERS row tiles, 256 programs at least: 32-64 rows a program (fewer: more
    # partials to write and read back; as atomics, contention) with 3 pipeline stages, which beats the two
    # quantize_fp8 calls on sm90 (the `quant` suite measures both).
    iters = common.amax_iters(b, m, bn, r_tile, True, programs=256)
    programs = cdiv(m, r_tile.block_m * iters)
    amax = (torch.empty((b, programs, n), dtype=torch.int32, device=dev) if partial
            else torch.zeros((b, 1, n), dtype=torch.int32, device=dev))
    xa, x_bits = common.x_arg(x3)
    fmt = common.fmt_constexprs(dtype)
    fast_kernel(kernels.rowwise_with_trans_kernel)[(b * programs,)](
        xa, common.data_arg(q_row), s_row, amax, m, n, *x3.stride(), m, 1, amax.stride(0), amax.stride(2),
        common.eps(), BM=r_tile.block_m, BN=r_tile.block_n, **fmt, X_BITS=x_bits,
        **common.hw_sat(), ITERS=iters, STAGES=stages, PARTIAL=partial, num_warps=r_tile.num_warps)
    c_tile = tile or common.pick_amax_cast(b, m, n, True, False)[1]
    common.check_tile(c_tile, 1, 1)
    scales = None
    if partial:
        scales = torch.empty((b, 1, n), dtype=torch.float32, device=dev)
        fast_kernel(kernels.partial_scale_kernel)[(b * cdiv(n, _PARTIAL_BN),)](
            amax, scales, s_col, programs, n, common.eps(), FMAX=fmt["FMAX"], BP=_PARTIAL_BP, BN=_PARTIAL_BN,
            num_warps=4)
    quantize.scale_cast(x3, q_col.view(b, m, n), s_col.view(b, 1, n), None if partial else amax, True, False,
                        dtype, c_tile, scales=scales)
    return q_row, s_row, q_col, s_col


def quantize_fp8_with_trans(args: QuantizeFp8WithTransArgs, tile: Tile | None = None):
    """``(q_row, s_row, q_col, s_col)``; ``tile`` overrides the heuristic (tests, tuning)."""
    if G(args.granularity) == G.ROWWISE:
        return _rowwise(args.x, args.out_dtype, tile)
    if G(args.granularity) == G.BLOCKWISE:
        return _blockwise(args.x, args.out_dtype, args.block_size, tile)
    return _mx(args.x, args.out_dtype, args.recipe.use_2d_block, args.recipe_for_trans.use_2d_block, tile)
