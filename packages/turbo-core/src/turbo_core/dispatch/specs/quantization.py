"""Quantization primitives: FP8 (per-tensor, per-row, 1-D/2-D blocks, MX) and MXFP4.

Every primitive is its own selection family (``TURBO_QUANTIZE_FP8_BACKEND``, ...). Shapes of every
output are functions of the input *shapes* only (see the ``*_shapes`` helpers, which backends
should use to allocate), so the fake implementations need no data.

Numerics (every backend): ``amax`` is taken in fp32 over the elements that share a scale.

* FP32 scales (TENSORWISE, ROWWISE, BLOCKWISE): ``scale = fp8_max / max(amax, QUANT_EPS)`` in fp32,
  ``q = clamp(x * scale, -fp8_max, fp8_max)`` rounded to nearest-even, ``scale_inv = 1 / scale``.
* E8M0 scales (MX_BLOCKWISE, FP8 and FP4): OCP MX v1.0, ``X = clamp(floor(log2(amax)) - emax_elem,
  -127, 127)``, ``q = x / 2**X`` rounded to nearest-even and saturated to ``±max``, ``scale_inv`` the
  byte ``X + 127`` (``torch.float8_e8m0fnu``, or uint8 on a torch without it).
* Dequantization: ``x = q * scale_inv`` in fp32 (float64 for E8M0), rounded once to ``out_dtype``.
* All-zero blocks: finite scales (``fp8_max / QUANT_EPS``; MX byte 0) and zero data.
* NaN/Inf: a block containing NaN has a NaN amax, so its scale, ``scale_inv`` and every dequantized
  value are NaN; a block containing ±Inf gets ``scale = 0`` and ``scale_inv = inf`` (FP32) and
  dequantizes to NaN. MX blocks with NaN/Inf get the E8M0 NaN byte 0xFF; their FP8 elements keep
  NaN (OCP and FNUZ FP8 represent it) and saturate Inf; E2M1 has no NaN, so such FP4 elements are
  stored as +0 and the NaN scale makes the whole block dequantize to NaN.
* FP4 (``torch.float4_e2m1fn_x2``): two E2M1 codes per byte, **the even element in the low nibble**
  (bits 0-3) and the odd element in the high nibble; code = sign bit 3 + magnitude index into
  ``(0, 0.5, 1, 1.5, 2, 3, 4, 6)``.

Scale layouts (``scale_inv`` shapes; ``cdiv`` = ceil-divide):

=========================  =============================  =========================================
granularity                data                           scale_inv
=========================  =============================  =========================================
TENSORWISE                 x.shape                        ``[]`` fp32
ROWWISE (axis)             x.shape                        x.shape with ``axis`` set to 1, fp32
BLOCKWISE 1-D (axis)       x.shape                        x.shape with ``axis`` set to cdiv(n, bs)
BLOCKWISE 2-D              x.shape (2-D or 3-D)           ``[(B,) cdiv(M,bs), cdiv(N,bs)]``
MX row-wise (axis=-1)      ``[(B,) M, N_pad]``            ``[(B,) M, N_pad/32]`` E8M0
MX col-wise (axis=-2)      ``[(B,) N, M_pad]``            ``[(B,) N, M_pad/32]`` E8M0
MXFP4                      like MX, last dim halved       like MX (K counts unpacked values)
=========================  =============================  =========================================

``N_pad``/``M_pad``: the blocked dim zero-padded to a multiple of 128. ``shuffle_scale`` pads MX scales
to ``[cdiv(rows,256)*256, cdiv(cols,8)*8]``. Grouped layouts are described on their arg classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.backend import PrecisionType
from turbo_core.dispatch.primitives import Primitive, define_primitive
from turbo_core.dispatch.specs.validate import (
    E8M0_SCALE_DTYPES,
    FLOAT_DTYPES,
    INDEX_DTYPES,
    OCP_FP8_DTYPES,
    cdiv,
    check_block_size,
    check_group_lens,
    check_group_offs,
    check_mx_operand,
    check_tensorwise_scale,
    require_dtype,
    require_fp4_granularity,
    require_fp4_support,
    require_int,
    require_same_device,
    require_shape,
    require_tensor,
)
from turbo_core.low_precision import (
    FP8_DTYPES,
    MXFP4_BLOCK_SIZE,
    MXFP4_GROUP_COL_ALIGN,
    MXFP4_PADDING_ALIGN_SIZE,
    MXFP8_BLOCK_SIZE,
    MXFP8_GROUP_COL_ALIGN,
    MXFP8_GROUP_ROW_ALIGN,
    MXFP8_PADDING_ALIGN_SIZE,
    ScalingGranularity,
    ScalingRecipe,
    as_granularity,
    as_recipe,
)

__all__ = [
    "DequantizeFp4Args",
    "DequantizeFp8Args",
    "GroupedDequantizeFp4Args",
    "GroupedDequantizeFp8Args",
    "GroupedQuantizeFp4Args",
    "GroupedQuantizeFp4WithTransArgs",
    "GroupedQuantizeFp8Args",
    "GroupedQuantizeFp8WithTransArgs",
    "QuantizeFp4Args",
    "QuantizeFp4WithTransArgs",
    "QuantizeFp8Args",
    "QuantizeFp8WithTransArgs",
    "cdiv",
    "fp8_scale_shape",
    "grouped_fp4_shapes",
    "grouped_fp8_shapes",
    "mx_is_rowwise",
    "mx_shapes",
    "normalize_axis",
]

G = ScalingGranularity


def normalize_axis(axis: int, ndim: int) -> int:
    return axis % ndim if ndim else 0


# -- shape helpers (what every backend allocates) ------------------------------------------------

def fp8_scale_shape(shape: tuple[int, ...], granularity: G, axis: int | None, block_size: int | None,
                    use_2d_block: bool = False) -> tuple[int, ...]:
    """``scale_inv`` shape of a TENSORWISE/ROWWISE/BLOCKWISE quantization of ``shape``."""
    granularity = G(granularity)
    if granularity == G.TENSORWISE:
        return ()
    if granularity == G.BLOCKWISE and use_2d_block:
        return tuple(shape[:-2]) + (cdiv(shape[-2], block_size), cdiv(shape[-1], block_size))
    ax = normalize_axis(axis, len(shape))
    out = list(shape)
    out[ax] = 1 if granularity == G.ROWWISE else cdiv(shape[ax], block_size)
    return tuple(out)


def mx_is_rowwise(ndim: int, axis: int) -> bool:
    """MX ``axis`` is the dim the 32-blocks run along: the last (row-wise) or the one before."""
    return normalize_axis(axis, ndim) == ndim - 1


def mx_shapes(shape: tuple[int, ...], axis: int, *, packed: bool = False, shuffle_scale: bool = False,
              align: int = MXFP8_PADDING_ALIGN_SIZE) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(data_shape, scale_shape)`` of an MX quantization of a 2-D/3-D ``shape`` along ``axis``.

    Row-wise: ``[(B,) M, N_pad]`` / ``[(B,) M, N_pad/32]``; col-wise (the data comes out transposed):
    ``[(B,) N, M_pad]`` / ``[(B,) N, M_pad/32]``. ``packed`` (FP4) halves the data's last dim.
    """
    lead = tuple(shape[:-2])
    if mx_is_rowwise(len(shape), axis):
        rows, cols = shape[-2], shape[-1]
    else:
        rows, cols = shape[-1], shape[-2]
    cols_pad = cdiv(cols, align) * align
    nblk = cols_pad // MXFP8_BLOCK_SIZE
    data = lead + (rows, cols_pad // 2 if packed else cols_pad)
    scale = lead + ((cdiv(rows, 256) * 256, cdiv(nblk, 8) * 8) if shuffle_scale else (rows, nblk))
    return data, scale


def grouped_fp8_shapes(m: int, n: int, groups: int, granularity: G, axis: int, block_size: int | None,
                       shuffle_scale: bool = False) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(data_shape, scale_shape)`` of a grouped FP8 quantization of ``[m, n]`` with ``groups`` groups.

    MX row-wise: each group's rows padded to 32: ``[M_r, N_pad]`` / ``[M_r, N_pad/32]`` with
    ``M_r = cdiv(m + G*32, 32)*32``. MX col-wise: groups padded to 128, ``[N, M_c]`` / ``[N, M_c/32]``,
    ``M_c = cdiv(m + G*128, 128)*128``. BLOCKWISE row-wise (tight rows): ``[m, n]`` with the scales
    transposed ``[cdiv(n,bs), m]``; BLOCKWISE col-wise: groups padded to ``bs``, ``[m + G*bs, n]`` /
    ``[cdiv(m + G*bs, bs), n]``.
    """
    rowwise = normalize_axis(axis, 2) == 1
    if G(granularity) == G.BLOCKWISE:
        if rowwise:
            return (m, n), (cdiv(n, block_size), m)
        m_pad = m + groups * block_size
        return (m_pad, n), (cdiv(m_pad, block_size), n)
    align = MXFP8_GROUP_ROW_ALIGN if rowwise else MXFP8_GROUP_COL_ALIGN
    m_pad = cdiv(m + groups * align, align) * align
    if rowwise:
        return mx_shapes((m_pad, n), 1, shuffle_scale=shuffle_scale)
    return mx_shapes((m_pad, n), 0, shuffle_scale=shuffle_scale)


def grouped_fp4_shapes(m: int, n: int, groups: int, axis: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Grouped MXFP4: row-wise tight (``[m, N_pad/2]`` / ``[m, N_pad/32]``); col-wise each group
    padded to 512 rows: ``[N, M_c/2]`` / ``[N, M_c/32]`` with ``M_c = cdiv(m + G*512, 512)*512``."""
    if normalize_axis(axis, 2) == 1:
        return mx_shapes((m, n), 1, packed=True, align=MXFP4_PADDING_ALIGN_SIZE)
    m_pad = cdiv(m + groups * MXFP4_GROUP_COL_ALIGN, MXFP4_GROUP_COL_ALIGN) * MXFP4_GROUP_COL_ALIGN
    return mx_shapes((m_pad, n), 0, packed=True, align=MXFP4_PADDING_ALIGN_SIZE)


def grouped_row_align(granularity: G, axis: int, block_size: int | None, fp4: bool = False) -> int:
    """Per-group row padding of a grouped quantization (1 = tight)."""
    rowwise = normalize_axis(axis, 2) == 1
    if fp4:
        return 1 if rowwise else MXFP4_GROUP_COL_ALIGN
    if G(granularity) == G.BLOCKWISE:
        return 1 if rowwise else block_size
    return MXFP8_GROUP_ROW_ALIGN if rowwise else MXFP8_GROUP_COL_ALIGN


# -- shared validators -----------------------------------------------------------------------------

def _require_axis(name: str, axis: object, ndim: int, allowed: tuple[int, ...] | None = None) -> int:
    if axis is None:
        raise ValueError(f"{name}: required for this granularity (the dim the scales reduce along)")
    require_int(name, axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name}: {axis} is out of range for a {ndim}-D tensor")
    ax = axis % ndim
    if allowed is not None and ax not in allowed:
        raise ValueError(f"{name}: expected one of {sorted(set(allowed) | {a - ndim for a in allowed})} "
                         f"for a {ndim}-D tensor, got {axis}")
    return ax


def _require_input(x: object, *, ndim=None) -> torch.Tensor:
    return require_tensor("x", x, ndim=ndim, dtypes=FLOAT_DTYPES)


def _require_recipe(name: str, recipe: object, *, fp4: bool, mx: bool) -> ScalingRecipe:
    recipe = as_recipe(recipe, name)
    if not fp4:
        if recipe.use_sr:
            raise ValueError(f"{name}.use_sr: stochastic rounding is an FP4 feature")
        if recipe.use_rht:
            raise ValueError(f"{name}.use_rht: the random Hadamard transform is an FP4 feature")
    if not mx and (recipe.shuffle_scale or recipe.shuffle_out):
        raise ValueError(f"{name}.shuffle_scale/shuffle_out: pre-shuffled layouts are MX only")
    return recipe


def _require_fp8_out(out_dtype: object, mx: bool) -> None:
    if mx:
        if out_dtype not in OCP_FP8_DTYPES:
            raise TypeError(f"out_dtype: MX_BLOCKWISE needs an OCP FP8 dtype (float8_e4m3fn or "
                            f"float8_e5m2), got {out_dtype!r}")
    else:
        require_dtype("out_dtype", out_dtype, FP8_DTYPES)


def _require_fp4_out(out_dtype: object) -> None:
    if out_dtype != require_fp4_support("out_dtype"):
        raise TypeError(f"out_dtype: expected torch.float4_e2m1fn_x2, got {out_dtype!r}")


def _require_block_size(granularity: G, block_size: object, *, mx_size: int = MXFP8_BLOCK_SIZE) -> None:
    # An explicit block size (the ops fill in MX's); TENSORWISE and ROWWISE ignore it.
    check_block_size(granularity, block_size, mx_size=mx_size, mx_optional=False, blockless_none=False)


def _require_groups(x: torch.Tensor, group_lens: object, group_offs: object) -> None:
    g = check_group_lens(group_lens, dtypes=INDEX_DTYPES).shape[0]
    check_group_offs(group_offs, g, dtypes=INDEX_DTYPES)
    if g == 0:
        raise ValueError("group_lens: expected at least one group")
    require_same_device(x=x, group_lens=group_lens, group_offs=group_offs)


def _require_scale(scale_inv: object, want_shape: tuple[int, ...], dtypes: tuple[torch.dtype, ...],
                   x: torch.Tensor) -> None:
    require_tensor("scale_inv", scale_inv, dtypes=dtypes)
    if want_shape == ():
        check_tensorwise_scale("scale_inv", scale_inv)
    else:
        require_shape("scale_inv", scale_inv, want_shape, f"for x of shape {tuple(x.shape)}")
    require_same_device(x=x, scale_inv=scale_inv)


def _require_mx_data(x: torch.Tensor, scale_inv: object, *, packed: bool) -> None:
    require_tensor("scale_inv", scale_inv, dtypes=E8M0_SCALE_DTYPES)
    check_mx_operand("x", x, scale_inv, packed=packed, scale_name="scale_inv")
    require_same_device(x=x, scale_inv=scale_inv)


def _require_offs_padded(group_offs: torch.Tensor, group_offs_padded: torch.Tensor, x: torch.Tensor) -> None:
    """Grouped dequantization's offsets: int ``[G + 1]`` each, ``G >= 1``, on x's device."""
    require_tensor("group_offs", group_offs, ndim=1, dtypes=INDEX_DTYPES)
    require_tensor("group_offs_padded", group_offs_padded, ndim=1, dtypes=INDEX_DTYPES)
    if group_offs.shape[0] < 2 or group_offs_padded.shape != group_offs.shape:
        raise ValueError(f"group_offs_padded: expected the shape of group_offs ({tuple(group_offs.shape)},"
                         f" G+1 >= 2 entries), got {tuple(group_offs_padded.shape)}")
    require_same_device(x=x, group_offs=group_offs, group_offs_padded=group_offs_padded)


# -- FP8 --------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class QuantizeFp8Args:
    """``(q, scale_inv) = quantize(x)`` in FP8.

    ``x``: fp32/fp16/bf16, any strides. TENSORWISE: any rank (``axis`` ignored). ROWWISE / BLOCKWISE
    1-D: rank >= 1, ``axis`` (any dim, negative allowed) is the dim reduced into one scale (ROWWISE)
    or cut into blocks of ``block_size`` (BLOCKWISE). BLOCKWISE with ``recipe.use_2d_block``: 2-D or
    3-D, ``block_size x block_size`` tiles of the last two dims (``axis`` ignored). MX_BLOCKWISE:
    2-D or 3-D, ``axis`` in (-1, -2) (or 1/0 for 2-D, 2/1 for 3-D), ``block_size`` 32, OCP FP8 only;
    ``recipe.use_2d_block`` gives 32x32 tiles (weights) with the same scale layout.
    ``out_dtype``: an FP8 dtype. Shapes: see the module table; ``q`` and ``scale_inv`` are contiguous.
    """

    x: torch.Tensor
    out_dtype: torch.dtype
    granularity: ScalingGranularity
    axis: int | None = None
    block_size: int | None = None
    recipe: ScalingRecipe = ScalingRecipe()


def _validate_fp8_layout(x: torch.Tensor, granularity: G, axis, block_size, recipe: ScalingRecipe,
                         what: str = "x") -> None:
    if granularity == G.TENSORWISE:
        return
    if granularity == G.MX_BLOCKWISE:
        require_tensor(what, x, ndim=(2, 3))
        _require_axis("axis", axis, x.dim(), (x.dim() - 2, x.dim() - 1))
        return
    if granularity == G.BLOCKWISE and recipe.use_2d_block:
        require_tensor(what, x, ndim=(2, 3))
        return
    if x.dim() == 0:
        raise ValueError(f"{what}: {granularity.value} needs a tensor of rank >= 1, got a 0-D tensor")
    _require_axis("axis", axis, x.dim())


def _validate_quantize_fp8(args: QuantizeFp8Args) -> None:
    _require_input(args.x)
    gran = as_granularity(args.granularity)
    mx = gran == G.MX_BLOCKWISE
    _require_fp8_out(args.out_dtype, mx)
    recipe = _require_recipe("scaling_recipe", args.recipe, fp4=False, mx=mx)
    _require_block_size(gran, args.block_size)
    if recipe.use_2d_block and gran not in (G.BLOCKWISE, G.MX_BLOCKWISE):
        raise ValueError(f"scaling_recipe.use_2d_block: 2-D blocks need BLOCKWISE or MX_BLOCKWISE, "
                         f"not {gran.value}")
    _validate_fp8_layout(args.x, gran, args.axis, args.block_size, recipe)


def quantize_fp8_shapes(args: QuantizeFp8Args) -> tuple[tuple[int, ...], tuple[int, ...]]:
    shape = tuple(args.x.shape)
    gran = G(args.granularity)
    if gran == G.MX_BLOCKWISE:
        return mx_shapes(shape, args.axis, shuffle_scale=args.recipe.shuffle_scale)
    return shape, fp8_scale_shape(shape, gran, args.axis, args.block_size, args.recipe.use_2d_block)


@dataclass(frozen=True, eq=False)
class QuantizeFp8WithTransArgs:
    """Fused row-wise + col-wise FP8 quantization: ``(q_row, s_row, q_col, s_col)``.

    BLOCKWISE (``x`` 2-D ``[M, N]``, 1-D blocks): ``q_row`` ``[M, N]`` / ``s_row`` ``[M, cdiv(N,bs)]``
    (blocks along N), ``q_col`` ``[M, N]`` (not transposed) / ``s_col`` ``[cdiv(M,bs), N]``.
    MX_BLOCKWISE (``x`` 2-D ``[M, N]`` or 3-D ``[B, M, N]``): ``q_row`` ``[(B,) M, N_pad]`` /
    ``s_row`` ``[(B,) M, N_pad/32]``; ``q_col`` ``[(B,) N, M_pad]`` (transposed) / ``s_col``
    ``[(B,) N, M_pad/32]``; ``recipe`` / ``recipe_for_trans`` choose 32x32 tiles per direction.
    ROWWISE (``x`` 2-D ``[M, N]`` or 3-D ``[B, M, N]``, no ``block_size``; an extension of
    Primus-Turbo's BLOCKWISE / MX forms): ``q_row`` ``[(B,) M, N]`` / ``s_row`` ``[(B,) M, 1]`` (one
    scale per row), ``q_col`` ``[(B,) M, N]`` (not transposed) / ``s_col`` ``[(B,) 1, N]`` (one scale
    per column); a backend may gather the column amax in the row pass, so ``x`` is read twice, not
    three times.
    Each direction equals the corresponding single-direction ``quantize_fp8``.
    """

    x: torch.Tensor
    out_dtype: torch.dtype
    granularity: ScalingGranularity
    block_size: int | None = None
    recipe: ScalingRecipe = ScalingRecipe()
    recipe_for_trans: ScalingRecipe = ScalingRecipe()


def _validate_quantize_fp8_with_trans(args: QuantizeFp8WithTransArgs) -> None:
    _require_input(args.x)
    gran = as_granularity(args.granularity)
    if gran not in (G.ROWWISE, G.BLOCKWISE, G.MX_BLOCKWISE):
        raise ValueError(f"granularity: quantize_fp8_with_trans supports ROWWISE, BLOCKWISE and MX_BLOCKWISE, "
                         f"got {gran.value}")
    mx = gran == G.MX_BLOCKWISE
    _require_fp8_out(args.out_dtype, mx)
    r = _require_recipe("scaling_recipe", args.recipe, fp4=False, mx=mx)
    rt = _require_recipe("scaling_recipe_for_trans", args.recipe_for_trans, fp4=False, mx=mx)
    _require_block_size(gran, args.block_size)
    if gran == G.ROWWISE:
        if args.block_size is not None:
            raise ValueError(f"block_size: ROWWISE has one scale per row / column, no blocks; got {args.block_size!r}")
        require_tensor("x", args.x, ndim=(2, 3))
        for name, rec in (("scaling_recipe", r), ("scaling_recipe_for_trans", rt)):
            if rec.use_2d_block:
                raise ValueError(f"{name}.use_2d_block: ROWWISE has no 2-D blocks")
    elif mx:
        require_tensor("x", args.x, ndim=(2, 3))
    else:
        require_tensor("x", args.x, ndim=2)
        for name, rec in (("scaling_recipe", r), ("scaling_recipe_for_trans", rt)):
            if rec.use_2d_block:
                raise ValueError(f"{name}.use_2d_block: BLOCKWISE with_trans makes 1-D row and column "
                                 f"blocks; a 2-D-block weight is its own transpose (use quantize_fp8)")


# -- dequantize FP8 --------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class DequantizeFp8Args:
    """``x = q * scale_inv`` back to ``out_dtype`` (fp32/fp16/bf16), the inverse of quantize_fp8.

    ``x``: FP8 data as quantize_fp8 returned it; ``scale_inv`` of the shape the table gives for
    ``x``'s shape. MX: the output keeps the padding; col-wise data ``[(B,) N, M_pad]`` comes back
    transposed to ``[(B,) M_pad, N]``.
    """

    x: torch.Tensor
    scale_inv: torch.Tensor
    out_dtype: torch.dtype
    granularity: ScalingGranularity
    axis: int | None = None
    block_size: int | None = None
    recipe: ScalingRecipe = ScalingRecipe()


def _validate_dequantize_fp8(args: DequantizeFp8Args) -> None:
    gran = as_granularity(args.granularity)
    mx = gran == G.MX_BLOCKWISE
    x = require_tensor("x", args.x, dtypes=OCP_FP8_DTYPES if mx else FP8_DTYPES)
    require_dtype("out_dtype", args.out_dtype, FLOAT_DTYPES)
    recipe = _require_recipe("scaling_recipe", args.recipe, fp4=False, mx=mx)
    _require_block_size(gran, args.block_size)
    _validate_fp8_layout(x, gran, args.axis, args.block_size, recipe)
    if mx:
        if recipe.shuffle_scale or recipe.shuffle_out:
            raise ValueError("scaling_recipe.shuffle_scale/shuffle_out: pre-shuffled MX data cannot be "
                             "dequantized")
        _require_mx_data(x, args.scale_inv, packed=False)
    else:
        want = fp8_scale_shape(tuple(x.shape), gran, args.axis, args.block_size, recipe.use_2d_block)
        _require_scale(args.scale_inv, want, (torch.float32,), x)


# -- grouped FP8 -------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class GroupedQuantizeFp8Args:
    """Grouped FP8 quantization of ``x`` ``[M, N]`` (tokens packed by group along M):
    ``(q, scale_inv, group_lens_padded, group_offs_padded)``.

    ``group_lens`` ``[G]`` and ``group_offs`` ``[G+1]`` (exclusive prefix sum) are int64/int32 on x's
    device; they must describe at most M rows (not checked: reading them would be a host sync).
    Each group's rows are zero-padded to a multiple of the alignment (MX: 32 row-wise, 128
    col-wise; BLOCKWISE col-wise: ``block_size``; BLOCKWISE row-wise: tight) so no scale block
    crosses a group; the padded lens/offs are computed on the device. Layouts:
    :func:`grouped_fp8_shapes`. Rows past the padded groups are zero (scale byte 0 / the zero-block
    scale). ``axis``: 1/-1 row-wise, 0/-2 col-wise. 1-D blocks only (no ``use_2d_block``).
    """

    x: torch.Tensor
    out_dtype: torch.dtype
    granularity: ScalingGranularity
    group_lens: torch.Tensor
    group_offs: torch.Tensor
    axis: int | None = None
    block_size: int | None = None
    recipe: ScalingRecipe = ScalingRecipe()


def _validate_grouped_common(x, granularity, group_lens, group_offs, block_size, recipes, *,
                             fp4: bool) -> G:
    _require_input(x, ndim=2)
    gran = require_fp4_granularity(granularity) if fp4 else as_granularity(granularity)
    if gran not in (G.BLOCKWISE, G.MX_BLOCKWISE):
        raise ValueError(f"granularity: grouped FP8 quantization supports BLOCKWISE and MX_BLOCKWISE, got "
                         f"{gran.value} (TENSORWISE/ROWWISE scales do not depend on groups: use quantize_fp8)")
    _require_block_size(gran, block_size, mx_size=MXFP4_BLOCK_SIZE if fp4 else MXFP8_BLOCK_SIZE)
    for name, recipe in recipes:
        recipe = _require_recipe(name, recipe, fp4=fp4, mx=gran == G.MX_BLOCKWISE)
        if recipe.use_2d_block:
            raise ValueError(f"{name}.use_2d_block: grouped quantization (activations) uses 1-D blocks")
    _require_groups(x, group_lens, group_offs)
    return gran


def _validate_grouped_quantize_fp8(args: GroupedQuantizeFp8Args) -> None:
    gran = _validate_grouped_common(args.x, args.granularity, args.group_lens, args.group_offs,
                                    args.block_size, [("scaling_recipe", args.recipe)], fp4=False)
    _require_fp8_out(args.out_dtype, gran == G.MX_BLOCKWISE)
    _require_axis("axis", args.axis, 2)


@dataclass(frozen=True, eq=False)
class GroupedQuantizeFp8WithTransArgs:
    """Fused grouped row + col quantization:
    ``(q_row, s_row, q_col, s_col, lens_row, offs_row, lens_col, offs_col)``.

    MX: the row copy is :class:`GroupedQuantizeFp8Args` with axis=1 (groups padded to 32), the col copy
    with axis=0 (groups padded to 128). BLOCKWISE (the fused segment quantization of grouped FP8 GEMM):
    row copy ``[M, N]`` with transposed scales ``[cdiv(N,bs), M]`` and ``lens_row/offs_row`` equal to
    the inputs; col copy ``[M + G*bs, N]`` / ``[cdiv(M + G*bs, bs), N]`` with each group padded to bs
    (the variable-K offsets of the wgrad GEMM).
    """

    x: torch.Tensor
    out_dtype: torch.dtype
    granularity: ScalingGranularity
    group_lens: torch.Tensor
    group_offs: torch.Tensor
    block_size: int | None = None
    recipe: ScalingRecipe = ScalingRecipe()
    recipe_for_trans: ScalingRecipe = ScalingRecipe()


def _validate_grouped_quantize_fp8_with_trans(args: GroupedQuantizeFp8WithTransArgs) -> None:
    gran = _validate_grouped_common(
        args.x, args.granularity, args.group_lens, args.group_offs, args.block_size,
        [("scaling_recipe", args.recipe), ("scaling_recipe_for_trans", args.recipe_for_trans)], fp4=False)
    _require_fp8_out(args.out_dtype, gran == G.MX_BLOCKWISE)


@dataclass(frozen=True, eq=False)
class GroupedDequantizeFp8Args:
    """Inverse of :class:`GroupedQuantizeFp8Args`: ``[total_m, n]`` in ``out_dtype`` with the group
    padding removed (row ``r`` of group ``g`` is read from padded row ``offs_padded[g] + r - offs[g]``).

    ``total_m`` (an int, so the output shape is static) is the number of output rows. In the padded
    layouts (MX, BLOCKWISE col-wise) rows at or past ``group_offs[-1]`` belong to no group and come
    out zero. MX row-wise keeps the padded N (``N_pad``); MX col-wise data ``[N, M_c]`` comes back as
    ``[total_m, N]``. BLOCKWISE row-wise is not padded: ``x`` ``[M, N]`` with scales ``[cdiv(N,bs), M]``,
    ``total_m`` must be M, and every row is dequantized from its own scales, rows past the last group
    included (the quantizer's output for them).
    """

    x: torch.Tensor
    scale_inv: torch.Tensor
    out_dtype: torch.dtype
    granularity: ScalingGranularity
    group_offs: torch.Tensor
    group_offs_padded: torch.Tensor
    total_m: int
    axis: int | None = None
    block_size: int | None = None
    recipe: ScalingRecipe = ScalingRecipe()


def _validate_grouped_dequantize_fp8(args: GroupedDequantizeFp8Args) -> None:
    gran = as_granularity(args.granularity)
    if gran not in (G.BLOCKWISE, G.MX_BLOCKWISE):
        raise ValueError(f"granularity: grouped_dequantize_fp8 supports BLOCKWISE and MX_BLOCKWISE, got "
                         f"{gran.value}")
    mx = gran == G.MX_BLOCKWISE
    x = require_tensor("x", args.x, ndim=2, dtypes=OCP_FP8_DTYPES if mx else FP8_DTYPES)
    require_dtype("out_dtype", args.out_dtype, FLOAT_DTYPES)
    recipe = _require_recipe("scaling_recipe", args.recipe, fp4=False, mx=mx)
    if recipe.use_2d_block or recipe.shuffle_scale or recipe.shuffle_out:
        raise ValueError("scaling_recipe: grouped dequantization takes 1-D, unshuffled blocks")
    _require_block_size(gran, args.block_size)
    ax = _require_axis("axis", args.axis, 2)
    require_int("total_M", args.total_m, minimum=0)
    _require_offs_padded(args.group_offs, args.group_offs_padded, x)
    if mx:
        _require_mx_data(x, args.scale_inv, packed=False)
    elif ax == 1:
        if args.total_m != x.shape[0]:
            raise ValueError(f"total_M: BLOCKWISE row-wise data is tight: expected {x.shape[0]}, "
                             f"got {args.total_m}")
        _require_scale(args.scale_inv, (cdiv(x.shape[1], args.block_size), x.shape[0]), (torch.float32,), x)
    else:
        _require_scale(args.scale_inv, (cdiv(x.shape[0], args.block_size), x.shape[1]), (torch.float32,), x)


# -- FP4 --------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class QuantizeFp4Args:
    """MXFP4 quantization: ``(q, scale_inv)``, 1x32 blocks, E8M0 scales, packed E2M1 data.

    ``x``: fp32/fp16/bf16, 2-D ``[M, N]`` or 3-D ``[B, M, N]``; ``axis`` -1 (row-wise: ``q``
    ``[(B,) M, N_pad/2]``, ``scale_inv`` ``[(B,) M, N_pad/32]``) or -2 (col-wise, transposed: ``q``
    ``[(B,) N, M_pad/2]``, ``scale_inv`` ``[(B,) N, M_pad/32]``); the blocked dim is zero-padded to
    a multiple of 128. ``recipe.use_2d_block``: 32x32 tiles; ``use_sr``: stochastic rounding;
    ``use_rht``: random Hadamard transform; shuffles: AITER layouts.
    """

    x: torch.Tensor
    out_dtype: torch.dtype
    axis: int
    block_size: int = MXFP4_BLOCK_SIZE
    recipe: ScalingRecipe = ScalingRecipe()


def _validate_quantize_fp4(args: QuantizeFp4Args) -> None:
    x = _require_input(args.x, ndim=(2, 3))
    _require_fp4_out(args.out_dtype)
    _require_block_size(G.MX_BLOCKWISE, args.block_size, mx_size=MXFP4_BLOCK_SIZE)
    _require_recipe("scaling_recipe", args.recipe, fp4=True, mx=True)
    _require_axis("axis", args.axis, x.dim(), (x.dim() - 2, x.dim() - 1))


def quantize_fp4_shapes(args: QuantizeFp4Args):
    return mx_shapes(tuple(args.x.shape), args.axis, packed=True, shuffle_scale=args.recipe.shuffle_scale,
                     align=MXFP4_PADDING_ALIGN_SIZE)


@dataclass(frozen=True, eq=False)
class QuantizeFp4WithTransArgs:
    """Fused row + col MXFP4 quantization: ``(q_row, s_row, q_col, s_col)``, each direction as
    :class:`QuantizeFp4Args` with axis -1 / -2 and its own recipe."""

    x: torch.Tensor
    out_dtype: torch.dtype
    block_size: int = MXFP4_BLOCK_SIZE
    recipe: ScalingRecipe = ScalingRecipe()
    recipe_for_trans: ScalingRecipe = ScalingRecipe()


def _validate_quantize_fp4_with_trans(args: QuantizeFp4WithTransArgs) -> None:
    _require_input(args.x, ndim=(2, 3))
    _require_fp4_out(args.out_dtype)
    _require_block_size(G.MX_BLOCKWISE, args.block_size, mx_size=MXFP4_BLOCK_SIZE)
    _require_recipe("scaling_recipe", args.recipe, fp4=True, mx=True)
    _require_recipe("scaling_recipe_for_trans", args.recipe_for_trans, fp4=True, mx=True)


@dataclass(frozen=True, eq=False)
class DequantizeFp4Args:
    """MXFP4 back to ``out_dtype``: row-wise ``[(B,) M, N_pad/2]`` -> ``[(B,) M, N_pad]``; col-wise
    ``[(B,) N, M_pad/2]`` -> ``[(B,) M_pad, N]`` (transposed back; padding kept)."""

    x: torch.Tensor
    scale_inv: torch.Tensor
    out_dtype: torch.dtype
    axis: int
    block_size: int = MXFP4_BLOCK_SIZE


def _validate_dequantize_fp4(args: DequantizeFp4Args) -> None:
    x = require_tensor("x", args.x, ndim=(2, 3), dtypes=(require_fp4_support("x"),))
    require_dtype("out_dtype", args.out_dtype, FLOAT_DTYPES)
    _require_block_size(G.MX_BLOCKWISE, args.block_size, mx_size=MXFP4_BLOCK_SIZE)
    _require_axis("axis", args.axis, x.dim(), (x.dim() - 2, x.dim() - 1))
    _require_mx_data(x, args.scale_inv, packed=True)


@dataclass(frozen=True, eq=False)
class GroupedQuantizeFp4Args:
    """Grouped MXFP4 of ``x`` ``[M, N]``: ``(q, scale_inv, group_lens_padded, group_offs_padded)``.
    Row-wise (axis 1/-1) is tight (the lens/offs come back unchanged, as copies); col-wise (axis 0/-2)
    pads each group to 512 rows (:func:`grouped_fp4_shapes`)."""

    x: torch.Tensor
    out_dtype: torch.dtype
    group_lens: torch.Tensor
    group_offs: torch.Tensor
    axis: int
    block_size: int = MXFP4_BLOCK_SIZE
    recipe: ScalingRecipe = ScalingRecipe()


def _validate_grouped_quantize_fp4(args: GroupedQuantizeFp4Args) -> None:
    _validate_grouped_common(args.x, G.MX_BLOCKWISE, args.group_lens, args.group_offs, args.block_size,
                             [("scaling_recipe", args.recipe)], fp4=True)
    _require_fp4_out(args.out_dtype)
    _require_axis("axis", args.axis, 2)


@dataclass(frozen=True, eq=False)
class GroupedQuantizeFp4WithTransArgs:
    """Fused grouped MXFP4: ``(q_row, s_row, q_col, s_col, lens_row, offs_row, lens_col, offs_col)``,
    the row copy tight, the col copy 512-row aligned per group."""

    x: torch.Tensor
    out_dtype: torch.dtype
    group_lens: torch.Tensor
    group_offs: torch.Tensor
    block_size: int = MXFP4_BLOCK_SIZE
    recipe: ScalingRecipe = ScalingRecipe()
    recipe_for_trans: ScalingRecipe = ScalingRecipe()


def _validate_grouped_quantize_fp4_with_trans(args: GroupedQuantizeFp4WithTransArgs) -> None:
    _validate_grouped_common(
        args.x, G.MX_BLOCKWISE, args.group_lens, args.group_offs, args.block_size,
        [("scaling_recipe", args.recipe), ("scaling_recipe_for_trans", args.recipe_for_trans)], fp4=True)
    _require_fp4_out(args.out_dtype)


@dataclass(frozen=True, eq=False)
class GroupedDequantizeFp4Args:
    """Grouped MXFP4 back to ``out_dtype``. Row-wise (tight): as :class:`DequantizeFp4Args`
    (``[M, N_pad]``; ``total_m``, if given, must be M). Col-wise: ``group_offs``, ``group_offs_padded`` and ``total_m`` are required and
    the result is ``[total_m, N]`` with the group padding removed."""

    x: torch.Tensor
    scale_inv: torch.Tensor
    out_dtype: torch.dtype
    axis: int
    block_size: int = MXFP4_BLOCK_SIZE
    group_offs: torch.Tensor | None = None
    group_offs_padded: torch.Tensor | None = None
    total_m: int | None = None


def _validate_grouped_dequantize_fp4(args: GroupedDequantizeFp4Args) -> None:
    x = require_tensor("x", args.x, ndim=2, dtypes=(require_fp4_support("x"),))
    require_dtype("out_dtype", args.out_dtype, FLOAT_DTYPES)
    _require_block_size(G.MX_BLOCKWISE, args.block_size, mx_size=MXFP4_BLOCK_SIZE)
    ax = _require_axis("axis", args.axis, 2)
    _require_mx_data(x, args.scale_inv, packed=True)
    if ax == 0:
        for name, value in (("group_offs", args.group_offs), ("group_offs_padded", args.group_offs_padded),
                            ("total_M", args.total_m)):
            if value is None:
                raise ValueError(f"{name}: required to dequantize grouped col-wise FP4")
        _require_offs_padded(args.group_offs, args.group_offs_padded, x)
    if args.total_m is not None:
        require_int("total_M", args.total_m, minimum=0)
        if ax == 1 and args.total_m != x.shape[0]:
            raise ValueError(f"total_M: row-wise grouped FP4 data is tight: expected {x.shape[0]}, "
                             f"got {args.total_m}")


# -- primitive definitions ------------------------------------------------------------------------

def _define(name: str, args_type: type, precision: PrecisionType, validate, doc: str) -> Primitive:
    return define_primitive(Primitive(name=name, args_type=args_type, precision=precision, family=name,
                                      validate=validate, doc=doc))


FP8, FP4 = PrecisionType.FP8, PrecisionType.FP4

QUANTIZE_FP8 = _define("quantize_fp8", QuantizeFp8Args, FP8, _validate_quantize_fp8,
                       "FP8 quantization (TENSORWISE, ROWWISE, BLOCKWISE 1-D/2-D, MX): (q, scale_inv).")
QUANTIZE_FP8_WITH_TRANS = _define(
    "quantize_fp8_with_trans", QuantizeFp8WithTransArgs, FP8, _validate_quantize_fp8_with_trans,
    "Fused row + col FP8 quantization (BLOCKWISE, MX): (q_row, s_row, q_col, s_col).")
DEQUANTIZE_FP8 = _define("dequantize_fp8", DequantizeFp8Args, FP8, _validate_dequantize_fp8,
                         "FP8 dequantization: q * scale_inv in out_dtype.")
GROUPED_QUANTIZE_FP8 = _define(
    "grouped_quantize_fp8", GroupedQuantizeFp8Args, FP8, _validate_grouped_quantize_fp8,
    "Grouped FP8 quantization with per-group padding (MX, BLOCKWISE): (q, s, lens_pad, offs_pad).")
GROUPED_QUANTIZE_FP8_WITH_TRANS = _define(
    "grouped_quantize_fp8_with_trans", GroupedQuantizeFp8WithTransArgs, FP8,
    _validate_grouped_quantize_fp8_with_trans,
    "Fused grouped row + col FP8 quantization (MX, BLOCKWISE segment): 8 tensors.")
GROUPED_DEQUANTIZE_FP8 = _define(
    "grouped_dequantize_fp8", GroupedDequantizeFp8Args, FP8, _validate_grouped_dequantize_fp8,
    "Grouped FP8 dequantization removing the per-group padding: [total_M, N].")
QUANTIZE_FP4 = _define("quantize_fp4", QuantizeFp4Args, FP4, _validate_quantize_fp4,
                       "MXFP4 quantization (1x32 blocks, E8M0 scales, packed E2M1): (q, scale_inv).")
QUANTIZE_FP4_WITH_TRANS = _define(
    "quantize_fp4_with_trans", QuantizeFp4WithTransArgs, FP4, _validate_quantize_fp4_with_trans,
    "Fused row + col MXFP4 quantization: (q_row, s_row, q_col, s_col).")
DEQUANTIZE_FP4 = _define("dequantize_fp4", DequantizeFp4Args, FP4, _validate_dequantize_fp4,
                         "MXFP4 dequantization: decoded E2M1 * 2**X in out_dtype.")
GROUPED_QUANTIZE_FP4 = _define(
    "grouped_quantize_fp4", GroupedQuantizeFp4Args, FP4, _validate_grouped_quantize_fp4,
    "Grouped MXFP4 quantization (row tight, col 512-aligned per group): (q, s, lens_pad, offs_pad).")
GROUPED_QUANTIZE_FP4_WITH_TRANS = _define(
    "grouped_quantize_fp4_with_trans", GroupedQuantizeFp4WithTransArgs, FP4,
    _validate_grouped_quantize_fp4_with_trans, "Fused grouped row + col MXFP4 quantization: 8 tensors.")
GROUPED_DEQUANTIZE_FP4 = _define(
    "grouped_dequantize_fp4", GroupedDequantizeFp4Args, FP4, _validate_grouped_dequantize_fp4,
    "Grouped MXFP4 dequantization (col-wise removes the per-group padding).")
