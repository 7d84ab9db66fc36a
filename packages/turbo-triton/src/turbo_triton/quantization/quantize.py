"""``quantize_fp8`` on Triton: capability check and launcher.

Each granularity becomes a strided 3-D view ``[B, M, N]`` of ``x`` (no copy when its strides
allow) with a scale group shape:

==========================  =========================  ==============================================
granularity                 view                       kernels
==========================  =========================  ==============================================
BLOCKWISE, last axis        ``[1, rows, n]``           ``quant_groups_kernel``, groups ``1 x bs``
BLOCKWISE, other axis       ``[before, n, after]``     ``quant_groups_kernel``, groups ``bs x 1``
BLOCKWISE 2-D               ``[B, M, N]``              ``quant_groups_kernel``, groups ``bs x bs``
ROWWISE, short reduction    as BLOCKWISE               ``quant_groups_kernel``, one group a row/column
ROWWISE, long reduction     as BLOCKWISE               ``amax_kernel`` (+ ``scale_kernel``) + ``cast_kernel``
TENSORWISE, small           ``[1, numel / C, C]``      ``quant_groups_kernel``, the whole tensor one group
TENSORWISE                  ``[1, numel / C, C]``      ``amax_kernel`` (per-program maxima) + ``cast_kernel``
MX_BLOCKWISE                ``[B, M, N]``              ``quant_mx_kernel`` (row-wise or transposed)
==========================  =========================  ==============================================

A reduction is "short" when one tile holds it: up to ``ROW_FUSED_MAX`` elements along the last
dim, ``COL_FUSED_MAX`` along another. A TENSORWISE tensor is "small" when its view, each dim rounded
up to a power of two, holds at most ``ONE_PROGRAM_MAX`` elements: one program reads it once, takes
its amax and casts it, one launch where the two passes take two (at such sizes the launches, on the
host, are most of the call's time). Results are bit-identical to the TORCH reference
(``turbo_core.reference.quantization``); NaN payloads aside.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.quantization import QuantizeFp8Args, mx_is_rowwise, mx_shapes, normalize_axis
from turbo_core.low_precision import E8M0_DTYPE, MXFP8_BLOCK_SIZE, ScalingGranularity
from turbo_triton.intmath import cdiv, next_power_of_2
from turbo_triton.launcher import fast_kernel
from turbo_triton.quantization import common
from turbo_triton.quantization.common import Tile

__all__ = ["can_handle", "quantize_fp8", "COL_FUSED_MAX", "MAX_PARTIALS", "ONE_PROGRAM_MAX", "ROW_FUSED_MAX"]

G = ScalingGranularity
#: Longest ROWWISE reduction quantized from one read: along the last dim / along another dim.
ROW_FUSED_MAX = 16384
COL_FUSED_MAX = 256
#: Most amax programs of a TENSORWISE quantization whose partial maxima the cast programs reduce
#: themselves (each reads them all: 4 KB at most); more (tensors past about 2^29 elements) take
#: atomics on a zero-filled cell.
MAX_PARTIALS = 1024
#: Most elements (each dim of the ``[1, M, N]`` view rounded up to a power of two) of a TENSORWISE
#: quantization that one program does from one read (module doc).
ONE_PROGRAM_MAX = 16384


def can_handle(args: QuantizeFp8Args) -> str | None:
    reason = common.device_reason(args.x, args.out_dtype) or common.recipe_reason(args.recipe)
    if reason:
        return reason
    if G(args.granularity) == G.BLOCKWISE:
        return common.block_size_reason(args.block_size, square=args.recipe.use_2d_block)
    return None


def _launch_groups(x3: torch.Tensor, q: torch.Tensor, s3: torch.Tensor, gm: int, gn: int, dtype: torch.dtype,
                   tile: Tile | None, q_transposed: bool = False) -> None:
    """``q_transposed``: ``q`` (``[B, M, N]`` here) is stored as ``[B, N, M]`` row-major."""
    from turbo_triton.quantization import kernels

    b, m, n = x3.shape
    tile = tile or common.pick(m, n, gm, gn, cap_n=max(gn, 1024))
    common.check_tile(tile, gm, gn)
    xa, x_bits = common.x_arg(x3)
    fast_kernel(kernels.quant_groups_kernel)[common.grid(b, m, n, tile)](
        xa, common.data_arg(q), s3, m, n, *x3.stride(), *s3.stride(), common.eps(), *_q_strides(m, n, q_transposed),
        BM=tile.block_m, BN=tile.block_n, GM=gm, GN=gn, **common.fmt_constexprs(dtype), X_BITS=x_bits,
        **common.hw_sat(), num_warps=tile.num_warps)


def _q_strides(m: int, n: int, transposed: bool) -> tuple[int, int]:
    """Strides of q's ``(M, N)`` dims: row-major, or row-major ``[N, M]`` (transposed)."""
    return (1, m) if transposed else (n, 1)


def _launch_amax_cast(x3: torch.Tensor, q: torch.Tensor, s3: torch.Tensor, red_m: bool, red_n: bool,
                      dtype: torch.dtype, tile: Tile | None, q_transposed: bool = False) -> None:
    """Two passes: amax of each reduced group into an int32 buffer shaped like ``s3``, then the
    cast. Reductions over M (columns, TENSORWISE): the amax programs each walk ``iters`` tiles
    down M (one atomic per column strip, not per tile), and ``scale_kernel`` turns the amax into
    scales once, so that the cast multiplies only."""
    from turbo_triton.quantization import kernels

    b, m, n = x3.shape
    a_tile, c_tile = (tile, tile) if tile else common.pick_amax_cast(b, m, n, red_m, red_n)
    common.check_tile(a_tile, 1, 1)
    common.check_tile(c_tile, 1, 1)
    iters = common.amax_iters(b, m, n, a_tile, red_m)
    a_grid = (b * cdiv(m, a_tile.block_m * iters) * cdiv(n, a_tile.block_n),)
    # One scale for the whole tensor: each amax program leaves its own max (no zero-filled buffer
    # for atomics), the cast reduces those partials; beyond MAX_PARTIALS programs, atomics.
    partial = red_m and red_n and b == 1 and a_grid[0] <= MAX_PARTIALS
    if partial:
        amax = torch.empty((a_grid[0],), dtype=torch.int32, device=x3.device)
    else:
        amax = torch.zeros(s3.shape, dtype=torch.int32, device=x3.device)
    sa = (0, 0, 0) if partial else amax.stride()
    xa, x_bits = common.x_arg(x3)
    flags = dict(RED_M=red_m, RED_N=red_n, X_BITS=x_bits)
    fast_kernel(kernels.amax_kernel)[a_grid](xa, amax, m, n, *x3.stride(), *sa, BM=a_tile.block_m, BN=a_tile.block_n,
                                ITERS=iters, **flags, PARTIAL=partial, num_warps=a_tile.num_warps)
    scale_cast(x3, q, s3, amax, red_m, red_n, dtype, c_tile, q_transposed, partials=a_grid[0] if partial else 0)


def scale_cast(x3: torch.Tensor, q: torch.Tensor, s3: torch.Tensor, amax: torch.Tensor | None, red_m: bool,
               red_n: bool, dtype: torch.dtype, c_tile: Tile, q_transposed: bool = False,
               scales: torch.Tensor | None = None, partials: int = 0) -> None:
    """The second pass of the two-pass path: the cast of ``x3`` from the amax bits in ``amax``
    (shaped like ``s3``, or ``partials`` per-program maxima of one batch); reductions over M alone
    (one scale a column) first turn the amax into scales once (``scale_kernel``), unless ``scales``
    (fp32, shaped like ``s3``, ``s3`` already written) are given. A reduction over both dims (one
    scale a batch, TENSORWISE) has the cast derive its one scale itself: one launch fewer, the same
    bits (both use ``fp32_scale``)."""
    from turbo_triton.quantization import kernels

    b, m, n = x3.shape
    sa = (0, 0, 0) if partials else (scales if scales is not None else amax).stride()
    xa, x_bits = common.x_arg(x3)
    flags = dict(RED_M=red_m, RED_N=red_n, X_BITS=x_bits)
    fmt = common.fmt_constexprs(dtype)
    scaled = scales is not None or (red_m and not red_n)
    a_arg = scales if scales is not None else amax
    if scaled and scales is None:
        a_arg = torch.empty(amax.shape, dtype=torch.float32, device=x3.device)
        fast_kernel(kernels.scale_kernel)[(cdiv(amax.numel(), 1024),)](amax, a_arg, s3, amax.numel(), common.eps(),
                                                                FMAX=fmt["FMAX"], BLOCK=1024, num_warps=4)
    fast_kernel(kernels.cast_kernel)[common.grid(b, m, n, c_tile)](
        xa, a_arg, common.data_arg(q), s3, m, n, *x3.stride(), *sa, common.eps(), *_q_strides(m, n, q_transposed),
        partials, BM=c_tile.block_m, BN=c_tile.block_n, **flags, **fmt, **common.hw_sat(), SCALED=scaled,
        BP=next_power_of_2(partials) if partials else 0, num_warps=c_tile.num_warps)


def _tensorwise(x: torch.Tensor, dtype: torch.dtype, tile: Tile | None):
    q = torch.empty(x.shape, dtype=dtype, device=x.device)
    s = torch.empty((), dtype=torch.float32, device=x.device)
    if x.numel() == 0:
        common.fill_zero_block(s, dtype)
        return q, s
    if x.is_contiguous() or x.dim() < 2:
        x3 = common.view3(x, *common.flat_rows(x.numel()))
    else:
        x3 = common.view3(x, 1, x.numel() // x.shape[-1], x.shape[-1])
    _, m, n = x3.shape
    gm, gn = next_power_of_2(m), next_power_of_2(n)
    if tile is None and gm * gn <= ONE_PROGRAM_MAX:
        # about 32 elements a thread, as the row-direction tiles (common._warps)
        one = Tile(gm, gn, max(2, min(16, gm * gn // 1024)))
        _launch_groups(x3, q.view(x3.shape), s.view(1, 1, 1), gm, gn, dtype, one)
    else:
        _launch_amax_cast(x3, q.view(x3.shape), s.view(1, 1, 1), True, True, dtype, tile)
    return q, s


def _transposed_view(x: torch.Tensor, ax: int) -> bool:
    """Whether ``x`` is a transposed view quantized along its last dim: 2-D ``y.t()`` of a row-major
    ``y`` (unit stride on dim 0), or 3-D ``y.transpose(-1, -2)`` of a contiguous ``y`` (grouped
    weights). Its rows are ``y``'s columns, so reading them row by row would be strided;
    :func:`_along_axis` quantizes ``y``'s columns instead and stores ``q`` transposed."""
    if ax != x.dim() - 1 or x.dim() not in (2, 3) or x.shape[-2] <= 1 or x.shape[-1] <= 1:
        return False
    if x.dim() == 3:
        return x.transpose(-1, -2).is_contiguous()
    return x.stride(0) == 1 and x.stride(1) >= x.shape[0]


def _along_axis(x: torch.Tensor, dtype: torch.dtype, ax: int, bs: int | None, tile: Tile | None):
    """ROWWISE (``bs`` None) or BLOCKWISE 1-D along dim ``ax``. A transposed view along its last
    dim (e.g. ``quantize_fp8(a.t(), axis=-1)``: a's column-wise copy, laid out K-major for the
    backward GEMMs) runs as the column-direction kernels on the row-major storage, with ``q`` and
    the scales stored transposed: the same values, read coalesced."""
    if _transposed_view(x, ax):
        return _along_columns_transposed(x, dtype, bs, tile)
    shape3, along_n = common.around_axis(tuple(x.shape), ax)
    size = x.shape[ax]
    s_shape = list(x.shape)
    s_shape[ax] = 1 if bs is None else cdiv(size, bs)
    q = torch.empty(x.shape, dtype=dtype, device=x.device)
    s = torch.empty(s_shape, dtype=torch.float32, device=x.device)
    if x.numel() == 0:
        common.fill_zero_block(s, dtype)
        return q, s
    b3, m3, n3 = shape3
    x3 = common.view3(x, *shape3)
    if along_n:
        s3 = s.view(1, m3, s_shape[ax])
    else:
        s3 = s.view(b3, s_shape[ax], n3)
    q3 = q.view(shape3)
    if bs is not None:
        _launch_groups(x3, q3, s3, 1 if along_n else bs, bs if along_n else 1, dtype, tile)
    elif along_n and size <= ROW_FUSED_MAX:
        _launch_groups(x3, q3, s3, 1, next_power_of_2(size), dtype, tile)
    elif not along_n and size <= COL_FUSED_MAX:
        _launch_groups(x3, q3, s3, next_power_of_2(size), 1, dtype, tile)
    else:
        _launch_amax_cast(x3, q3, s3, not along_n, along_n, dtype, tile)
    return q, s


def _along_columns_transposed(x: torch.Tensor, dtype: torch.dtype, bs: int | None, tile: Tile | None):
    """``x = y.t()`` (``y`` ``[C, R]`` with unit stride along R), or ``y.transpose(-1, -2)`` for a
    contiguous ``y`` ``[B, C, R]``, quantized along its last dim (C): ``y``'s columns as ``[B, C, R]``,
    q (``[(B,) R, C]`` row-major) and the scales written transposed."""
    *batch, r, c = x.shape
    b = batch[0] if batch else 1
    y3 = x.transpose(-1, -2) if batch else x.t().unsqueeze(0)  # [B, C, R], strides (_, ld, 1)
    q = torch.empty((*batch, r, c), dtype=dtype, device=x.device)
    groups = 1 if bs is None else cdiv(c, bs)
    s = torch.empty((*batch, r, groups), dtype=torch.float32, device=x.device)
    s3 = s.transpose(-1, -2) if batch else s.t().unsqueeze(0)  # group (g, j) of y's column j at s[.., j, g]
    q3 = q.view(b, c, r)  # the kernels index it through the transposed strides
    if bs is not None:
        _launch_groups(y3, q3, s3, bs, 1, dtype, tile, q_transposed=True)
    elif c <= COL_FUSED_MAX:
        _launch_groups(y3, q3, s3, next_power_of_2(c), 1, dtype, tile, q_transposed=True)
    else:
        _launch_amax_cast(y3, q3, s.view(b, 1, r), True, False, dtype, tile, q_transposed=True)
    return q, s


def _blockwise_2d(x: torch.Tensor, dtype: torch.dtype, bs: int, tile: Tile | None):
    s_shape = (*x.shape[:-2], cdiv(x.shape[-2], bs), cdiv(x.shape[-1], bs))
    q = torch.empty(x.shape, dtype=dtype, device=x.device)
    s = torch.empty(s_shape, dtype=torch.float32, device=x.device)
    if x.numel() == 0:
        return q, s
    b, m, n = (x.shape[0] if x.dim() == 3 else 1), x.shape[-2], x.shape[-1]
    _launch_groups(common.view3(x, b, m, n), q.view(b, m, n), s.view(b, *s_shape[-2:]), bs, bs, dtype, tile)
    return q, s


def _mx(x: torch.Tensor, dtype: torch.dtype, axis: int, use_2d: bool, tile: Tile | None):
    from turbo_triton.quantization import kernels

    data_shape, scale_shape = mx_shapes(tuple(x.shape), axis)
    q = torch.empty(data_shape, dtype=dtype, device=x.device)
    s = torch.empty(scale_shape, dtype=E8M0_DTYPE, device=x.device)
    if q.numel() == 0:
        return q, s
    x3 = x if x.dim() == 3 else x.unsqueeze(0)
    b, m, n = x3.shape
    row = mx_is_rowwise(x.dim(), axis)
    pad = data_shape[-1]
    m_ext, n_ext = (m, pad) if row else (pad, n)
    gm, gn = ((32 if use_2d else 1), 32) if row else (32, (32 if use_2d else 1))
    # col-wise 1-D: 64 x 128, faster than pick_mx's 32 x 128 (the `quant` suite measures it)
    tile = tile or (common.pick(m_ext, n_ext, gm, gn) if row else common.pick_mx(m_ext, n_ext, gm, gn) if use_2d
                    else common.pick(m_ext, n_ext, gm, gn, cap_n=128, target=8192, warps=4))
    common.check_tile(tile, gm, gn)
    rows_out = data_shape[-2]
    xa, x_bits = common.x_arg(x3)
    fast_kernel(kernels.quant_mx_kernel)[common.grid(b, m_ext, n_ext, tile)](
        xa, common.data_arg(q), s.view(torch.uint8), m, n, m_ext, n_ext, *x3.stride(),
        rows_out * pad, pad, rows_out * (pad // MXFP8_BLOCK_SIZE), pad // MXFP8_BLOCK_SIZE,
        BM=tile.block_m, BN=tile.block_n, GM=gm, GN=gn, ROW=row, **common.fmt_constexprs(dtype),
        EMAX=common.mx_emax_of(dtype), X_BITS=x_bits, **common.hw_sat(), num_warps=tile.num_warps)
    return q, s


def quantize_fp8(args: QuantizeFp8Args, tile: Tile | None = None):
    """``(q, scale_inv)`` as the spec's layout table gives; ``tile`` overrides the heuristic
    (tests, tuning)."""
    x, dtype = args.x, args.out_dtype
    gran = G(args.granularity)
    if gran == G.TENSORWISE:
        return _tensorwise(x, dtype, tile)
    if gran == G.MX_BLOCKWISE:
        return _mx(x, dtype, args.axis, args.recipe.use_2d_block, tile)
    if gran == G.BLOCKWISE and args.recipe.use_2d_block:
        return _blockwise_2d(x, dtype, args.block_size, tile)
    bs = args.block_size if gran == G.BLOCKWISE else None
    return _along_axis(x, dtype, normalize_axis(args.axis, x.dim()), bs, tile)
