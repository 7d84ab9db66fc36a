"""Quantization ops (Primus-Turbo's names and arguments): FP8 and MXFP4, plain and grouped.

Every function takes ``(x, out_dtype, granularity)`` (grouped ones then ``group_lens, group_offs``)
and keyword-only arguments after that. Quantization has **no autograd**: inputs are detached and
outputs never require grad (the GEMM ops differentiate through the high-precision tensors).

Semantics (identical on every backend; ``amax`` in fp32 over the elements sharing a scale):

* FP32 scales: ``scale = fp8_max / max(amax, 1e-12)``, ``q = clamp(x * scale, ±fp8_max)`` rounded to
  nearest-even, ``scale_inv = 1 / scale`` (what the library stores and GEMMs consume).
* MX (E8M0) scales, OCP MX v1.0: ``X = clamp(floor(log2(amax)) - emax_elem, -127, 127)`` (emax_elem
  8 for E4M3, 15 for E5M2, 2 for E2M1), ``q = x / 2**X`` rounded to nearest-even and saturated,
  ``scale_inv = 2**X`` stored as the byte ``X + 127``.
* All-zero blocks get finite scales and zero data. A block with NaN dequantizes to NaN (its
  scale is NaN); a block with ±Inf has ``scale_inv = inf`` (FP32) or the NaN byte 0xFF (MX) and
  dequantizes to NaN. FP4 cannot hold NaN: such elements are stored as +0 under a NaN scale.
* FP4 packs two E2M1 values per byte, the even element in the low nibble.

Scale layouts (``bs`` = block_size, ``cdiv`` = ceil-divide; MX pads the blocked dim to 128):

==========================  ==============================  ======================================
granularity / call          data                            scale_inv (dtype)
==========================  ==============================  ======================================
TENSORWISE                  x.shape                         ``[]`` (fp32)
ROWWISE, axis               x.shape                         x.shape with axis -> 1 (fp32)
BLOCKWISE 1-D, axis         x.shape                         axis=-1: ``[M, cdiv(N,bs)]``;
                                                            axis=-2: ``[cdiv(M,bs), N]`` (fp32)
BLOCKWISE 2-D (weights)     x.shape (2-D/3-D)               ``[(B,) cdiv(M,bs), cdiv(N,bs)]`` (fp32)
MX row-wise (axis -1)       ``[(B,) M, N_pad]``             ``[(B,) M, N_pad/32]`` (E8M0)
MX col-wise (axis -2)       ``[(B,) N, M_pad]``             ``[(B,) N, M_pad/32]`` (E8M0)
MXFP4                       last dim halved (packed)        as MX (E8M0)
grouped MX FP8              rows padded per group to 32     row: ``[M_r, N_pad/32]``;
                            (row) / 128 (col)               col: ``[N, M_c/32]``
grouped BLOCKWISE           row ``[M, N]``, col             row ``[cdiv(N,bs), M]`` (transposed),
                            ``[M + G*bs, N]``               col ``[cdiv(M+G*bs, bs), N]``
grouped MXFP4               row tight, col 512 per group    as MX
==========================  ==============================  ======================================

The FP8 dtype depends on the device (``turbo_core.low_precision.float8_e4m3_dtype(device)``);
``out_dtype`` may also be given as ``Format.E4M3``/``Format.E5M2`` and is then resolved for x's device.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.launch import quantization as launch
from turbo_core.dispatch.specs import quantization as spec
from turbo_core.dispatch.specs.validate import require_fp4_granularity
from turbo_core.low_precision import (
    MXFP4_BLOCK_SIZE,
    MXFP8_BLOCK_SIZE,
    Format,
    ScalingGranularity,
    ScalingRecipe,
    as_format,
    as_granularity,
    as_recipe,
    float4_e2m1_dtype,
    fp8_dtype_for,
)

__all__ = [
    "dequantize_fp4",
    "dequantize_fp8",
    "grouped_dequantize_fp4",
    "grouped_dequantize_fp8",
    "grouped_quantize_fp4",
    "grouped_quantize_fp4_with_trans",
    "grouped_quantize_fp8",
    "grouped_quantize_fp8_with_trans",
    "quantize_fp4",
    "quantize_fp4_with_trans",
    "quantize_fp8",
    "quantize_fp8_with_trans",
]

G = ScalingGranularity
Tensor = torch.Tensor


def _device(x: object) -> torch.device | None:
    return x.device if isinstance(x, Tensor) else None


def _fp8_dtype(out_dtype: object, x: object) -> object:
    """A torch dtype passes through; an E4M3/E5M2 :class:`Format` is resolved for x's device."""
    if isinstance(out_dtype, str):  # a Format member or its name
        fmt = as_format(out_dtype, "out_dtype")
        if fmt not in (Format.E4M3, Format.E5M2):
            raise ValueError(f"out_dtype: expected an FP8 dtype or E4M3/E5M2, got {fmt.value}")
        return fp8_dtype_for(fmt, _device(x))
    return out_dtype


def _fp4_dtype(out_dtype: object) -> object:
    if isinstance(out_dtype, str):
        if as_format(out_dtype, "out_dtype") != Format.E2M1_X2:
            raise ValueError(f"out_dtype: expected torch.float4_e2m1fn_x2 or E2M1_X2, got {out_dtype!r}")
        return float4_e2m1_dtype()
    return out_dtype


def _block_size(gran: G, block_size: object, mx_size: int = MXFP8_BLOCK_SIZE) -> object:
    return mx_size if gran == G.MX_BLOCKWISE and block_size is None else block_size


def _fp8_axis(gran: G, axis: object, recipe: ScalingRecipe) -> object:
    # TENSORWISE and 2-D blocks have no axis (Primus ignores it there).
    if gran == G.TENSORWISE or (gran == G.BLOCKWISE and recipe.use_2d_block):
        return None
    return axis


def _offs(group_lens: object, group_offs: object) -> object:
    """``group_offs`` or, when None, the exclusive prefix sum of ``group_lens`` (on its device)."""
    if group_offs is not None or not isinstance(group_lens, Tensor) or group_lens.dim() != 1:
        return group_offs
    offs = group_lens.new_zeros(group_lens.shape[0] + 1)
    offs[1:] = torch.cumsum(group_lens, 0)
    return offs


def _detach(t: object) -> object:
    return t.detach() if isinstance(t, Tensor) else t


# -- FP8 --------------------------------------------------------------------------------------------

def quantize_fp8(x: Tensor, out_dtype: torch.dtype, granularity: ScalingGranularity, *,
                 block_size: int | None = None, axis: int | None = None,
                 scaling_recipe: ScalingRecipe | None = None) -> tuple[Tensor, Tensor]:
    """Quantize ``x`` to FP8; returns ``(q, scale_inv)`` (layouts in the module table).

    Args:
        x: fp32/fp16/bf16, any strides (read as if contiguous). TENSORWISE: any rank. ROWWISE and
            BLOCKWISE 1-D: rank >= 1. BLOCKWISE 2-D and MX_BLOCKWISE: 2-D ``[M, N]`` or 3-D ``[B, M, N]``.
        out_dtype: float8_e4m3fn / float8_e5m2 (or the FNUZ variants; MX: OCP only), or
            ``Format.E4M3`` / ``Format.E5M2`` resolved for x's device.
        granularity: TENSORWISE, ROWWISE, BLOCKWISE or MX_BLOCKWISE.
        block_size: BLOCKWISE: required (e.g. 128). MX_BLOCKWISE: 32 (``None`` means 32).
        axis: ROWWISE/BLOCKWISE 1-D: the dim reduced into a scale / cut into blocks (negative
            allowed). MX: -1 (row-wise) or -2 (col-wise: the data comes out transposed; 0/1 for 2-D,
            1/2 for 3-D as in Primus). Ignored for TENSORWISE and BLOCKWISE 2-D.
        scaling_recipe: ``use_2d_block`` (BLOCKWISE bs x bs / MX 32x32 tiles for weights),
            ``shuffle_scale``/``shuffle_out`` (MX, AITER layouts; not produced by the reference).

    Returns:
        ``q`` (``out_dtype``, contiguous) and ``scale_inv`` (fp32, or E8M0 for MX), such that
        ``dequantize_fp8(q, ..., scale_inv=scale_inv)`` approximates ``x``. No autograd.
    """
    gran = as_granularity(granularity)
    recipe = as_recipe(scaling_recipe)
    args = spec.QuantizeFp8Args(x, _fp8_dtype(out_dtype, x), gran, _fp8_axis(gran, axis, recipe),
                                _block_size(gran, block_size), recipe)
    if torch.compiler.is_compiling() or not isinstance(x, Tensor):
        # Eagerly the dispatcher validates these very arguments before any kernel runs (its verdict
        # cached per signature); at trace time, and before a non-tensor meets .detach(), it runs here.
        spec.QUANTIZE_FP8.check_args(args)
    return launch.quantize_fp8(x.detach(), args.out_dtype, gran, axis=args.axis, block_size=args.block_size,
                               recipe=recipe)


def quantize_fp8_with_trans(x: Tensor, out_dtype: torch.dtype, granularity: ScalingGranularity, *,
                            block_size: int | None = None, scaling_recipe: ScalingRecipe | None = None,
                            scaling_recipe_for_trans: ScalingRecipe | None = None
                            ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Row-wise and col-wise FP8 quantization in one call: ``(q_row, s_row, q_col, s_col)``.

    BLOCKWISE (``x`` 2-D ``[M, N]``): ``q_row`` ``[M, N]`` with ``s_row`` ``[M, cdiv(N,bs)]`` and
    ``q_col`` ``[M, N]`` (same layout as x) with ``s_col`` ``[cdiv(M,bs), N]``. MX_BLOCKWISE (2-D or
    3-D): ``q_row`` ``[(B,) M, N_pad]`` / ``[(B,) M, N_pad/32]`` and ``q_col`` ``[(B,) N, M_pad]``
    (transposed) / ``[(B,) N, M_pad/32]``. ROWWISE (2-D or 3-D, no block_size; beyond Primus-Turbo):
    ``q_row`` / ``q_col`` ``[(B,) M, N]`` with ``s_row`` ``[(B,) M, 1]`` and ``s_col`` ``[(B,) 1, N]``.
    ``scaling_recipe`` applies to the row copy, ``scaling_recipe_for_trans`` to the col copy. A
    backend may fuse both into one pass of x; the results equal two ``quantize_fp8`` calls (axis -1
    and -2).
    """
    gran = as_granularity(granularity)
    args = spec.QuantizeFp8WithTransArgs(x, _fp8_dtype(out_dtype, x), gran, _block_size(gran, block_size),
                                         as_recipe(scaling_recipe),
                                         as_recipe(scaling_recipe_for_trans, "scaling_recipe_for_trans"))
    spec.QUANTIZE_FP8_WITH_TRANS.check_args(args)
    return launch.quantize_fp8_with_trans(x.detach(), args.out_dtype, gran, block_size=args.block_size,
                                          recipe=args.recipe, recipe_for_trans=args.recipe_for_trans)


def dequantize_fp8(x: Tensor, out_dtype: torch.dtype, granularity: ScalingGranularity, *,
                   block_size: int | None = None, axis: int | None = None, scale_inv: Tensor,
                   scaling_recipe: ScalingRecipe | None = None) -> Tensor:
    """``q * scale_inv`` in ``out_dtype`` (fp32/fp16/bf16): the inverse of :func:`quantize_fp8`
    with the same ``granularity``/``block_size``/``axis``/``scaling_recipe``.

    Computed in fp32 (float64 for MX) and rounded once. MX keeps the padding, and col-wise data
    ``[(B,) N, M_pad]`` comes back as ``[(B,) M_pad, N]``.
    """
    gran = as_granularity(granularity)
    recipe = as_recipe(scaling_recipe)
    args = spec.DequantizeFp8Args(x, scale_inv, out_dtype, gran, _fp8_axis(gran, axis, recipe),
                                  _block_size(gran, block_size), recipe)
    spec.DEQUANTIZE_FP8.check_args(args)
    return launch.dequantize_fp8(x.detach(), scale_inv.detach(), out_dtype, gran, axis=args.axis,
                                 block_size=args.block_size, recipe=recipe)


def grouped_quantize_fp8(x: Tensor, out_dtype: torch.dtype, granularity: ScalingGranularity,
                         group_lens: Tensor, group_offs: Tensor | None = None, *, block_size: int | None = None,
                         axis: int | None = None, scaling_recipe: ScalingRecipe | None = None
                         ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Grouped FP8 quantization of ``x`` ``[M, N]`` (tokens packed by group along M):
    ``(q, scale_inv, group_lens_padded, group_offs_padded)``.

    MX_BLOCKWISE: each group's rows are zero-padded to 32 (axis=1/-1, row-wise: ``q`` ``[M_r, N_pad]``,
    ``M_r = cdiv(M + G*32, 32)*32``) or 128 (axis=0/-2, col-wise: ``q`` ``[N, M_c]``, ``M_c =
    cdiv(M + G*128, 128)*128``). BLOCKWISE: row-wise is tight with scales ``[cdiv(N,bs), M]``; col-wise
    pads each group to ``bs`` (``q`` ``[M + G*bs, N]``, scales ``[cdiv(M + G*bs, bs), N]``). The padded
    lens/offs are computed on the device (no host sync). ``group_lens`` ``[G]`` int64/int32;
    ``group_offs`` ``[G+1]`` (``None``: the prefix sum of group_lens). Groups must cover at most M
    rows (not checked: that would be a host sync).
    """
    gran = as_granularity(granularity)
    args = spec.GroupedQuantizeFp8Args(x, _fp8_dtype(out_dtype, x), gran, group_lens, _offs(group_lens, group_offs),
                                       axis, _block_size(gran, block_size), as_recipe(scaling_recipe))
    spec.GROUPED_QUANTIZE_FP8.check_args(args)
    return launch.grouped_quantize_fp8(x.detach(), args.out_dtype, gran, group_lens, args.group_offs, axis=axis,
                                       block_size=args.block_size, recipe=args.recipe)


def grouped_quantize_fp8_with_trans(x: Tensor, out_dtype: torch.dtype, granularity: ScalingGranularity,
                                    group_lens: Tensor, group_offs: Tensor | None = None, *,
                                    block_size: int | None = None, scaling_recipe: ScalingRecipe | None = None,
                                    scaling_recipe_for_trans: ScalingRecipe | None = None) -> tuple[Tensor, ...]:
    """Grouped row + col FP8 quantization: ``(q_row, s_row, q_col, s_col, lens_pad_row, offs_pad_row,
    lens_pad_col, offs_pad_col)``; each half equals :func:`grouped_quantize_fp8` with axis 1 / 0.
    BLOCKWISE is the fused segment quantization of the grouped FP8 GEMM (row copy tight with
    transposed scales, col copy padded per group to ``bs`` with the variable-K offsets)."""
    gran = as_granularity(granularity)
    args = spec.GroupedQuantizeFp8WithTransArgs(
        x, _fp8_dtype(out_dtype, x), gran, group_lens, _offs(group_lens, group_offs), _block_size(gran, block_size),
        as_recipe(scaling_recipe), as_recipe(scaling_recipe_for_trans, "scaling_recipe_for_trans"))
    spec.GROUPED_QUANTIZE_FP8_WITH_TRANS.check_args(args)
    return launch.grouped_quantize_fp8_with_trans(
        x.detach(), args.out_dtype, gran, group_lens, args.group_offs, block_size=args.block_size,
        recipe=args.recipe, recipe_for_trans=args.recipe_for_trans)


def _total_m(total_m: object, default_rows: int | None, group_offs: object) -> object:
    if total_m is not None:
        return total_m
    if default_rows is not None:
        return default_rows
    if isinstance(group_offs, Tensor) and group_offs.dim() == 1 and group_offs.shape[0] >= 2:
        return int(group_offs[-1])  # host sync: pass total_M to avoid it (and under torch.compile)
    return None


def grouped_dequantize_fp8(x: Tensor, out_dtype: torch.dtype, granularity: ScalingGranularity,
                           group_offs: Tensor, group_offs_padded: Tensor, *, block_size: int | None = None,
                           axis: int | None = None, scale_inv: Tensor, scaling_recipe: ScalingRecipe | None = None,
                           total_M: int | None = None) -> Tensor:
    """Inverse of :func:`grouped_quantize_fp8`: ``[total_M, N]`` in ``out_dtype`` with the group padding
    removed (MX row-wise keeps ``N_pad`` columns; col-wise data comes back untransposed).

    ``total_M=None`` reads ``group_offs[-1]`` on the host (a device sync, and a graph break under
    torch.compile): pass it in hot paths. BLOCKWISE row-wise data is tight (``total_M`` = its rows).
    """
    gran = as_granularity(granularity)
    rows = x.shape[0] if (gran == G.BLOCKWISE and isinstance(x, Tensor) and x.dim() == 2 and isinstance(axis, int)
                          and axis % 2 == 1) else None
    args = spec.GroupedDequantizeFp8Args(x, scale_inv, out_dtype, gran, group_offs, group_offs_padded,
                                         _total_m(total_M, rows, group_offs), axis, _block_size(gran, block_size),
                                         as_recipe(scaling_recipe))
    spec.GROUPED_DEQUANTIZE_FP8.check_args(args)
    return launch.grouped_dequantize_fp8(x.detach(), scale_inv.detach(), out_dtype, gran, group_offs,
                                         group_offs_padded, total_m=args.total_m, axis=axis,
                                         block_size=args.block_size)


# -- FP4 --------------------------------------------------------------------------------------------

def quantize_fp4(x: Tensor, out_dtype: torch.dtype, granularity: ScalingGranularity, *,
                 block_size: int | None = None, axis: int | None = None,
                 scaling_recipe: ScalingRecipe | None = None) -> tuple[Tensor, Tensor]:
    """MXFP4 quantization (MX_BLOCKWISE only): ``(q, scale_inv)``.

    ``x`` 2-D ``[M, N]`` or 3-D ``[B, M, N]``, fp32/fp16/bf16. ``axis`` -1 (row-wise: ``q``
    ``[(B,) M, N_pad/2]`` packed E2M1, ``scale_inv`` ``[(B,) M, N_pad/32]`` E8M0) or -2 (col-wise,
    transposed: ``[(B,) N, M_pad/2]`` / ``[(B,) N, M_pad/32]``); 1x32 blocks, the blocked dim padded to
    a multiple of 128. ``out_dtype``: ``torch.float4_e2m1fn_x2`` (or ``Format.E2M1_X2``).
    ``scaling_recipe``: ``use_2d_block`` (32x32 tiles), ``use_sr`` (stochastic rounding: each value
    rounds to one of its two neighbours with probability proportional to closeness), ``use_rht``
    and shuffles (backend layouts, not produced by the reference).
    """
    require_fp4_granularity(granularity)
    args = spec.QuantizeFp4Args(x, _fp4_dtype(out_dtype), axis, _block_size(G.MX_BLOCKWISE, block_size,
                                                                            MXFP4_BLOCK_SIZE),
                                as_recipe(scaling_recipe))
    spec.QUANTIZE_FP4.check_args(args)
    return launch.quantize_fp4(x.detach(), args.out_dtype, axis=axis, block_size=args.block_size, recipe=args.recipe)


def quantize_fp4_with_trans(x: Tensor, out_dtype: torch.dtype, granularity: ScalingGranularity, *,
                            block_size: int | None = None, axis: int | None = None,
                            scaling_recipe: ScalingRecipe | None = None,
                            scaling_recipe_for_trans: ScalingRecipe | None = None
                            ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Row + col MXFP4 in one call: ``(q_row, s_row, q_col, s_col)``, each equal to
    :func:`quantize_fp4` with axis -1 / -2 and its recipe. ``axis`` must be None (both directions)."""
    require_fp4_granularity(granularity)
    if axis is not None:
        raise ValueError(f"axis: quantize_fp4_with_trans makes both directions; expected None, got {axis!r}")
    args = spec.QuantizeFp4WithTransArgs(
        x, _fp4_dtype(out_dtype), _block_size(G.MX_BLOCKWISE, block_size, MXFP4_BLOCK_SIZE),
        as_recipe(scaling_recipe), as_recipe(scaling_recipe_for_trans, "scaling_recipe_for_trans"))
    spec.QUANTIZE_FP4_WITH_TRANS.check_args(args)
    return launch.quantize_fp4_with_trans(x.detach(), args.out_dtype, block_size=args.block_size,
                                          recipe=args.recipe, recipe_for_trans=args.recipe_for_trans)


def _no_shuffle_fp4(scaling_recipe: object) -> None:
    recipe = as_recipe(scaling_recipe)
    if recipe.shuffle_scale or recipe.shuffle_out:
        raise ValueError("scaling_recipe.shuffle_scale/shuffle_out: pre-shuffled MX data cannot be dequantized")


def dequantize_fp4(x: Tensor, out_dtype: torch.dtype, granularity: ScalingGranularity, *,
                   block_size: int | None = None, axis: int | None = None, scale_inv: Tensor,
                   scaling_recipe: ScalingRecipe | None = None) -> Tensor:
    """MXFP4 back to ``out_dtype``: row-wise ``[(B,) M, N_pad/2]`` -> ``[(B,) M, N_pad]``, col-wise
    ``[(B,) N, M_pad/2]`` -> ``[(B,) M_pad, N]`` (padding kept); exact products in float64, rounded once."""
    require_fp4_granularity(granularity)
    _no_shuffle_fp4(scaling_recipe)
    args = spec.DequantizeFp4Args(x, scale_inv, out_dtype, axis,
                                  _block_size(G.MX_BLOCKWISE, block_size, MXFP4_BLOCK_SIZE))
    spec.DEQUANTIZE_FP4.check_args(args)
    return launch.dequantize_fp4(x.detach(), scale_inv.detach(), out_dtype, axis=axis, block_size=args.block_size)


def grouped_quantize_fp4(x: Tensor, out_dtype: torch.dtype, granularity: ScalingGranularity,
                         group_lens: Tensor, group_offs: Tensor | None = None, *, block_size: int | None = None,
                         axis: int | None = None, scaling_recipe: ScalingRecipe | None = None
                         ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Grouped MXFP4 of ``x`` ``[M, N]``: ``(q, scale_inv, group_lens_padded, group_offs_padded)``.
    Row-wise (axis 1/-1) is tight (lens/offs come back as copies); col-wise (axis 0/-2) pads each
    group to 512 rows: ``q`` ``[N, M_c/2]``, ``M_c = cdiv(M + G*512, 512)*512``."""
    require_fp4_granularity(granularity)
    args = spec.GroupedQuantizeFp4Args(x, _fp4_dtype(out_dtype), group_lens, _offs(group_lens, group_offs), axis,
                                       _block_size(G.MX_BLOCKWISE, block_size, MXFP4_BLOCK_SIZE),
                                       as_recipe(scaling_recipe))
    spec.GROUPED_QUANTIZE_FP4.check_args(args)
    return launch.grouped_quantize_fp4(x.detach(), args.out_dtype, group_lens, args.group_offs, axis=axis,
                                       block_size=args.block_size, recipe=args.recipe)


def grouped_quantize_fp4_with_trans(x: Tensor, out_dtype: torch.dtype, granularity: ScalingGranularity,
                                    group_lens: Tensor, group_offs: Tensor | None = None, *,
                                    block_size: int | None = None, scaling_recipe: ScalingRecipe | None = None,
                                    scaling_recipe_for_trans: ScalingRecipe | None = None) -> tuple[Tensor, ...]:
    """Grouped row (tight) + col (512 per group) MXFP4: ``(q_row, s_row, q_col, s_col, lens_row,
    offs_row, lens_col, offs_col)``."""
    require_fp4_granularity(granularity)
    args = spec.GroupedQuantizeFp4WithTransArgs(
        x, _fp4_dtype(out_dtype), group_lens, _offs(group_lens, group_offs),
        _block_size(G.MX_BLOCKWISE, block_size, MXFP4_BLOCK_SIZE), as_recipe(scaling_recipe),
        as_recipe(scaling_recipe_for_trans, "scaling_recipe_for_trans"))
    spec.GROUPED_QUANTIZE_FP4_WITH_TRANS.check_args(args)
    return launch.grouped_quantize_fp4_with_trans(x.detach(), args.out_dtype, group_lens, args.group_offs,
                                                  block_size=args.block_size, recipe=args.recipe,
                                                  recipe_for_trans=args.recipe_for_trans)


def grouped_dequantize_fp4(x: Tensor, out_dtype: torch.dtype, granularity: ScalingGranularity, *,
                           block_size: int | None = None, axis: int | None = None, scale_inv: Tensor,
                           scaling_recipe: ScalingRecipe | None = None, group_offs: Tensor | None = None,
                           group_offs_padded: Tensor | None = None, total_M: int | None = None) -> Tensor:
    """Grouped MXFP4 back to ``out_dtype``. Row-wise (tight, Primus's only form): as
    :func:`dequantize_fp4`. Col-wise (an extension): pass ``group_offs``, ``group_offs_padded`` and
    ``total_M`` (None reads ``group_offs[-1]``: a host sync) to get ``[total_M, N]``."""
    require_fp4_granularity(granularity)
    _no_shuffle_fp4(scaling_recipe)
    colwise = isinstance(axis, int) and not isinstance(axis, bool) and axis % 2 == 0
    total = _total_m(total_M, None, group_offs) if colwise else total_M
    args = spec.GroupedDequantizeFp4Args(x, scale_inv, out_dtype, axis,
                                         _block_size(G.MX_BLOCKWISE, block_size, MXFP4_BLOCK_SIZE),
                                         group_offs, group_offs_padded, total)
    spec.GROUPED_DEQUANTIZE_FP4.check_args(args)
    return launch.grouped_dequantize_fp4(x.detach(), scale_inv.detach(), out_dtype, axis=axis,
                                         block_size=args.block_size, group_offs=group_offs,
                                         group_offs_padded=group_offs_padded, total_m=total)

