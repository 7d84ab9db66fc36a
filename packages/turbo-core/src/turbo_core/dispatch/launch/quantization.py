"""``turbo::quantize_fp8`` ... ``turbo::grouped_dequantize_fp4`` custom ops and their launchers.

Enums cross the custom-op boundary as their string values and a :class:`ScalingRecipe` as its five
bools, so compiled graphs do not depend on enum order. In eager mode the launchers call the
dispatcher directly. No op here has an autograd formula (quantization is not differentiated).
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.dispatcher import call
from turbo_core.dispatch.specs import quantization as spec
from turbo_core.dispatch.specs.quantization import (
    DequantizeFp4Args,
    DequantizeFp8Args,
    GroupedDequantizeFp4Args,
    GroupedDequantizeFp8Args,
    GroupedQuantizeFp4Args,
    GroupedQuantizeFp4WithTransArgs,
    GroupedQuantizeFp8Args,
    GroupedQuantizeFp8WithTransArgs,
    QuantizeFp4Args,
    QuantizeFp4WithTransArgs,
    QuantizeFp8Args,
    QuantizeFp8WithTransArgs,
)
from turbo_core.low_precision import (
    E8M0_DTYPE,
    FLOAT4_E2M1FN_X2,
    MXFP4_BLOCK_SIZE,
    ScalingGranularity,
    ScalingRecipe,
    as_granularity,
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

T = torch.Tensor
DEFAULT_RECIPE = ScalingRecipe()
T2 = tuple[T, T]
T4 = tuple[T, T, T, T]
T8 = tuple[T, T, T, T, T, T, T, T]
G = ScalingGranularity


def _name(granularity: G | str) -> str:
    return granularity.value if isinstance(granularity, G) else str(granularity)


def _flags(recipe: ScalingRecipe) -> list[bool]:
    return list(recipe)


def _recipe(flags) -> ScalingRecipe:
    return ScalingRecipe(*(bool(f) for f in flags))


def _empty(like: T, shape, dtype: torch.dtype) -> T:
    return like.new_empty(tuple(shape), dtype=dtype)


def _fp8_outputs(x: T, out_dtype, granularity: G, axis, block_size, recipe) -> T2:
    args = QuantizeFp8Args(x, out_dtype, granularity, axis, block_size, recipe)
    data, scale = spec.quantize_fp8_shapes(args)
    s_dtype = E8M0_DTYPE if granularity == G.MX_BLOCKWISE else torch.float32
    return _empty(x, data, out_dtype), _empty(x, scale, s_dtype)


def _grouped_fp8_outputs(x: T, out_dtype, granularity: G, lens: T, offs: T, axis, block_size, recipe) -> T4:
    m, n = x.shape
    data, scale = spec.grouped_fp8_shapes(m, n, lens.shape[0], granularity, axis, block_size,
                                          recipe.shuffle_scale)
    s_dtype = E8M0_DTYPE if granularity == G.MX_BLOCKWISE else torch.float32
    return (_empty(x, data, out_dtype), _empty(x, scale, s_dtype), torch.empty_like(lens),
            torch.empty_like(offs))


def _grouped_fp4_outputs(x: T, lens: T, offs: T, axis) -> T4:
    data, scale = spec.grouped_fp4_shapes(x.shape[0], x.shape[1], lens.shape[0], axis)
    return (_empty(x, data, FLOAT4_E2M1FN_X2), _empty(x, scale, E8M0_DTYPE), torch.empty_like(lens),
            torch.empty_like(offs))


# -- quantize_fp8 ------------------------------------------------------------------------------------

@torch.library.custom_op("turbo::quantize_fp8", mutates_args=())
def _quantize_fp8_op(x: T, out_dtype: torch.dtype, granularity: str, axis: int | None,
                     block_size: int | None, recipe: list[bool]) -> T2:
    return call("quantize_fp8", QuantizeFp8Args(x, out_dtype, as_granularity(granularity), axis, block_size, _recipe(recipe)))


@_quantize_fp8_op.register_fake
def _(x, out_dtype, granularity, axis, block_size, recipe):
    return _fp8_outputs(x, out_dtype, G(granularity), axis, block_size, _recipe(recipe))


def quantize_fp8(x: T, out_dtype: torch.dtype, granularity: G, *, axis: int | None = None,
                 block_size: int | None = None, recipe: ScalingRecipe = DEFAULT_RECIPE) -> T2:
    """Run the ``quantize_fp8`` primitive (see :class:`QuantizeFp8Args`)."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.quantize_fp8(x, out_dtype, _name(granularity), axis, block_size, _flags(recipe))
    return call("quantize_fp8", QuantizeFp8Args(x, out_dtype, as_granularity(granularity), axis, block_size, recipe))


# -- quantize_fp8_with_trans -----------------------------------------------------------------------------

@torch.library.custom_op("turbo::quantize_fp8_with_trans", mutates_args=())
def _quantize_fp8_with_trans_op(x: T, out_dtype: torch.dtype, granularity: str, block_size: int | None,
                                recipe: list[bool], recipe_for_trans: list[bool]) -> T4:
    return call("quantize_fp8_with_trans", QuantizeFp8WithTransArgs(
        x, out_dtype, G(granularity), block_size, _recipe(recipe), _recipe(recipe_for_trans)))


@_quantize_fp8_with_trans_op.register_fake
def _(x, out_dtype, granularity, block_size, recipe, recipe_for_trans):
    gran = G(granularity)
    nd = x.dim()
    row_axis, col_axis = nd - 1, nd - 2
    return (*_fp8_outputs(x, out_dtype, gran, row_axis, block_size, _recipe(recipe)),
            *_fp8_outputs(x, out_dtype, gran, col_axis, block_size, _recipe(recipe_for_trans)))


def quantize_fp8_with_trans(x: T, out_dtype: torch.dtype, granularity: G, *, block_size: int | None = None,
                            recipe: ScalingRecipe = DEFAULT_RECIPE,
                            recipe_for_trans: ScalingRecipe = DEFAULT_RECIPE) -> T4:
    """Run the ``quantize_fp8_with_trans`` primitive (see :class:`QuantizeFp8WithTransArgs`)."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.quantize_fp8_with_trans(x, out_dtype, _name(granularity), block_size,
                                                       _flags(recipe), _flags(recipe_for_trans))
    return call("quantize_fp8_with_trans",
                QuantizeFp8WithTransArgs(x, out_dtype, G(granularity), block_size, recipe, recipe_for_trans))


# -- dequantize_fp8 --------------------------------------------------------------------------------------

@torch.library.custom_op("turbo::dequantize_fp8", mutates_args=())
def _dequantize_fp8_op(x: T, scale_inv: T, out_dtype: torch.dtype, granularity: str, axis: int | None,
                       block_size: int | None, recipe: list[bool]) -> T:
    return call("dequantize_fp8", DequantizeFp8Args(x, scale_inv, out_dtype, as_granularity(granularity), axis, block_size,
                                                    _recipe(recipe)))


@_dequantize_fp8_op.register_fake
def _(x, scale_inv, out_dtype, granularity, axis, block_size, recipe):
    if G(granularity) == G.MX_BLOCKWISE and not spec.mx_is_rowwise(x.dim(), axis):
        return _empty(x, (*x.shape[:-2], x.shape[-1], x.shape[-2]), out_dtype)
    return _empty(x, x.shape, out_dtype)


def dequantize_fp8(x: T, scale_inv: T, out_dtype: torch.dtype, granularity: G, *, axis: int | None = None,
                   block_size: int | None = None, recipe: ScalingRecipe = DEFAULT_RECIPE) -> T:
    """Run the ``dequantize_fp8`` primitive (see :class:`DequantizeFp8Args`)."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.dequantize_fp8(x, scale_inv, out_dtype, _name(granularity), axis, block_size,
                                              _flags(recipe))
    return call("dequantize_fp8", DequantizeFp8Args(x, scale_inv, out_dtype, as_granularity(granularity), axis, block_size,
                                                    recipe))


# -- grouped FP8 -----------------------------------------------------------------------------------------

@torch.library.custom_op("turbo::grouped_quantize_fp8", mutates_args=())
def _grouped_quantize_fp8_op(x: T, out_dtype: torch.dtype, granularity: str, group_lens: T, group_offs: T,
                             axis: int, block_size: int | None, recipe: list[bool]) -> T4:
    return call("grouped_quantize_fp8", GroupedQuantizeFp8Args(
        x, out_dtype, G(granularity), group_lens, group_offs, axis, block_size, _recipe(recipe)))


@_grouped_quantize_fp8_op.register_fake
def _(x, out_dtype, granularity, group_lens, group_offs, axis, block_size, recipe):
    return _grouped_fp8_outputs(x, out_dtype, G(granularity), group_lens, group_offs, axis, block_size,
                                _recipe(recipe))


def grouped_quantize_fp8(x: T, out_dtype: torch.dtype, granularity: G, group_lens: T, group_offs: T, *,
                         axis: int, block_size: int | None = None, recipe: ScalingRecipe = DEFAULT_RECIPE) -> T4:
    """Run the ``grouped_quantize_fp8`` primitive (see :class:`GroupedQuantizeFp8Args`)."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.grouped_quantize_fp8(x, out_dtype, _name(granularity), group_lens, group_offs,
                                                    axis, block_size, _flags(recipe))
    return call("grouped_quantize_fp8", GroupedQuantizeFp8Args(
        x, out_dtype, G(granularity), group_lens, group_offs, axis, block_size, recipe))


@torch.library.custom_op("turbo::grouped_quantize_fp8_with_trans", mutates_args=())
def _grouped_quantize_fp8_with_trans_op(x: T, out_dtype: torch.dtype, granularity: str, group_lens: T,
                                        group_offs: T, block_size: int | None, recipe: list[bool],
                                        recipe_for_trans: list[bool]) -> T8:
    return call("grouped_quantize_fp8_with_trans", GroupedQuantizeFp8WithTransArgs(
        x, out_dtype, G(granularity), group_lens, group_offs, block_size, _recipe(recipe),
        _recipe(recipe_for_trans)))


@_grouped_quantize_fp8_with_trans_op.register_fake
def _(x, out_dtype, granularity, group_lens, group_offs, block_size, recipe, recipe_for_trans):
    gran = G(granularity)
    qr, sr, lr, orow = _grouped_fp8_outputs(x, out_dtype, gran, group_lens, group_offs, 1, block_size,
                                            _recipe(recipe))
    qc, sc, lc, oc = _grouped_fp8_outputs(x, out_dtype, gran, group_lens, group_offs, 0, block_size,
                                          _recipe(recipe_for_trans))
    return qr, sr, qc, sc, lr, orow, lc, oc


def grouped_quantize_fp8_with_trans(x: T, out_dtype: torch.dtype, granularity: G, group_lens: T,
                                    group_offs: T, *, block_size: int | None = None,
                                    recipe: ScalingRecipe = DEFAULT_RECIPE,
                                    recipe_for_trans: ScalingRecipe = DEFAULT_RECIPE) -> T8:
    """Run the ``grouped_quantize_fp8_with_trans`` primitive."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.grouped_quantize_fp8_with_trans(
            x, out_dtype, _name(granularity), group_lens, group_offs, block_size, _flags(recipe),
            _flags(recipe_for_trans))
    return call("grouped_quantize_fp8_with_trans", GroupedQuantizeFp8WithTransArgs(
        x, out_dtype, G(granularity), group_lens, group_offs, block_size, recipe, recipe_for_trans))


@torch.library.custom_op("turbo::grouped_dequantize_fp8", mutates_args=())
def _grouped_dequantize_fp8_op(x: T, scale_inv: T, out_dtype: torch.dtype, granularity: str, group_offs: T,
                               group_offs_padded: T, total_m: int, axis: int, block_size: int | None) -> T:
    return call("grouped_dequantize_fp8", GroupedDequantizeFp8Args(
        x, scale_inv, out_dtype, G(granularity), group_offs, group_offs_padded, total_m, axis, block_size))


@_grouped_dequantize_fp8_op.register_fake
def _(x, scale_inv, out_dtype, granularity, group_offs, group_offs_padded, total_m, axis, block_size):
    rowwise = spec.normalize_axis(axis, 2) == 1
    cols = x.shape[1] if rowwise else x.shape[0]
    return _empty(x, (total_m, cols), out_dtype)


def grouped_dequantize_fp8(x: T, scale_inv: T, out_dtype: torch.dtype, granularity: G, group_offs: T,
                           group_offs_padded: T, *, total_m: int, axis: int, block_size: int | None = None) -> T:
    """Run the ``grouped_dequantize_fp8`` primitive (see :class:`GroupedDequantizeFp8Args`)."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.grouped_dequantize_fp8(x, scale_inv, out_dtype, _name(granularity), group_offs,
                                                      group_offs_padded, total_m, axis, block_size)
    return call("grouped_dequantize_fp8", GroupedDequantizeFp8Args(
        x, scale_inv, out_dtype, G(granularity), group_offs, group_offs_padded, total_m, axis, block_size))


# -- FP4 ---------------------------------------------------------------------------------------------------

@torch.library.custom_op("turbo::quantize_fp4", mutates_args=())
def _quantize_fp4_op(x: T, out_dtype: torch.dtype, axis: int, block_size: int, recipe: list[bool]) -> T2:
    return call("quantize_fp4", QuantizeFp4Args(x, out_dtype, axis, block_size, _recipe(recipe)))


@_quantize_fp4_op.register_fake
def _(x, out_dtype, axis, block_size, recipe):
    data, scale = spec.quantize_fp4_shapes(QuantizeFp4Args(x, out_dtype, axis, block_size, _recipe(recipe)))
    return _empty(x, data, out_dtype), _empty(x, scale, E8M0_DTYPE)


def quantize_fp4(x: T, out_dtype: torch.dtype, *, axis: int, block_size: int = MXFP4_BLOCK_SIZE,
                 recipe: ScalingRecipe = DEFAULT_RECIPE) -> T2:
    """Run the ``quantize_fp4`` primitive (see :class:`QuantizeFp4Args`)."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.quantize_fp4(x, out_dtype, axis, block_size, _flags(recipe))
    return call("quantize_fp4", QuantizeFp4Args(x, out_dtype, axis, block_size, recipe))


@torch.library.custom_op("turbo::quantize_fp4_with_trans", mutates_args=())
def _quantize_fp4_with_trans_op(x: T, out_dtype: torch.dtype, block_size: int, recipe: list[bool],
                                recipe_for_trans: list[bool]) -> T4:
    return call("quantize_fp4_with_trans", QuantizeFp4WithTransArgs(
        x, out_dtype, block_size, _recipe(recipe), _recipe(recipe_for_trans)))


@_quantize_fp4_with_trans_op.register_fake
def _(x, out_dtype, block_size, recipe, recipe_for_trans):
    nd = x.dim()
    out = []
    for axis, flags in ((nd - 1, recipe), (nd - 2, recipe_for_trans)):
        data, scale = spec.quantize_fp4_shapes(QuantizeFp4Args(x, out_dtype, axis, block_size, _recipe(flags)))
        out += [_empty(x, data, out_dtype), _empty(x, scale, E8M0_DTYPE)]
    return tuple(out)


def quantize_fp4_with_trans(x: T, out_dtype: torch.dtype, *, block_size: int = MXFP4_BLOCK_SIZE,
                            recipe: ScalingRecipe = DEFAULT_RECIPE,
                            recipe_for_trans: ScalingRecipe = DEFAULT_RECIPE) -> T4:
    """Run the ``quantize_fp4_with_trans`` primitive (see :class:`QuantizeFp4WithTransArgs`)."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.quantize_fp4_with_trans(x, out_dtype, block_size, _flags(recipe),
                                                       _flags(recipe_for_trans))
    return call("quantize_fp4_with_trans", QuantizeFp4WithTransArgs(x, out_dtype, block_size, recipe,
                                                                    recipe_for_trans))


@torch.library.custom_op("turbo::dequantize_fp4", mutates_args=())
def _dequantize_fp4_op(x: T, scale_inv: T, out_dtype: torch.dtype, axis: int, block_size: int) -> T:
    return call("dequantize_fp4", DequantizeFp4Args(x, scale_inv, out_dtype, axis, block_size))


@_dequantize_fp4_op.register_fake
def _(x, scale_inv, out_dtype, axis, block_size):
    rows, cols = x.shape[-2], x.shape[-1] * 2
    shape = (rows, cols) if spec.mx_is_rowwise(x.dim(), axis) else (cols, rows)
    return _empty(x, (*x.shape[:-2], *shape), out_dtype)


def dequantize_fp4(x: T, scale_inv: T, out_dtype: torch.dtype, *, axis: int,
                   block_size: int = MXFP4_BLOCK_SIZE) -> T:
    """Run the ``dequantize_fp4`` primitive (see :class:`DequantizeFp4Args`)."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.dequantize_fp4(x, scale_inv, out_dtype, axis, block_size)
    return call("dequantize_fp4", DequantizeFp4Args(x, scale_inv, out_dtype, axis, block_size))


@torch.library.custom_op("turbo::grouped_quantize_fp4", mutates_args=())
def _grouped_quantize_fp4_op(x: T, out_dtype: torch.dtype, group_lens: T, group_offs: T, axis: int,
                             block_size: int, recipe: list[bool]) -> T4:
    return call("grouped_quantize_fp4", GroupedQuantizeFp4Args(x, out_dtype, group_lens, group_offs, axis,
                                                               block_size, _recipe(recipe)))


@_grouped_quantize_fp4_op.register_fake
def _(x, out_dtype, group_lens, group_offs, axis, block_size, recipe):
    return _grouped_fp4_outputs(x, group_lens, group_offs, axis)


def grouped_quantize_fp4(x: T, out_dtype: torch.dtype, group_lens: T, group_offs: T, *, axis: int,
                         block_size: int = MXFP4_BLOCK_SIZE, recipe: ScalingRecipe = DEFAULT_RECIPE) -> T4:
    """Run the ``grouped_quantize_fp4`` primitive (see :class:`GroupedQuantizeFp4Args`)."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.grouped_quantize_fp4(x, out_dtype, group_lens, group_offs, axis, block_size,
                                                    _flags(recipe))
    return call("grouped_quantize_fp4", GroupedQuantizeFp4Args(x, out_dtype, group_lens, group_offs, axis,
                                                               block_size, recipe))


@torch.library.custom_op("turbo::grouped_quantize_fp4_with_trans", mutates_args=())
def _grouped_quantize_fp4_with_trans_op(x: T, out_dtype: torch.dtype, group_lens: T, group_offs: T,
                                        block_size: int, recipe: list[bool], recipe_for_trans: list[bool]) -> T8:
    return call("grouped_quantize_fp4_with_trans", GroupedQuantizeFp4WithTransArgs(
        x, out_dtype, group_lens, group_offs, block_size, _recipe(recipe), _recipe(recipe_for_trans)))


@_grouped_quantize_fp4_with_trans_op.register_fake
def _(x, out_dtype, group_lens, group_offs, block_size, recipe, recipe_for_trans):
    qr, sr, lr, orow = _grouped_fp4_outputs(x, group_lens, group_offs, 1)
    qc, sc, lc, oc = _grouped_fp4_outputs(x, group_lens, group_offs, 0)
    return qr, sr, qc, sc, lr, orow, lc, oc


def grouped_quantize_fp4_with_trans(x: T, out_dtype: torch.dtype, group_lens: T, group_offs: T, *,
                                    block_size: int = MXFP4_BLOCK_SIZE, recipe: ScalingRecipe = DEFAULT_RECIPE,
                                    recipe_for_trans: ScalingRecipe = DEFAULT_RECIPE) -> T8:
    """Run the ``grouped_quantize_fp4_with_trans`` primitive."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.grouped_quantize_fp4_with_trans(x, out_dtype, group_lens, group_offs, block_size,
                                                               _flags(recipe), _flags(recipe_for_trans))
    return call("grouped_quantize_fp4_with_trans", GroupedQuantizeFp4WithTransArgs(
        x, out_dtype, group_lens, group_offs, block_size, recipe, recipe_for_trans))


@torch.library.custom_op("turbo::grouped_dequantize_fp4", mutates_args=())
def _grouped_dequantize_fp4_op(x: T, scale_inv: T, out_dtype: torch.dtype, axis: int, block_size: int,
                               group_offs: T | None, group_offs_padded: T | None, total_m: int | None) -> T:
    return call("grouped_dequantize_fp4", GroupedDequantizeFp4Args(
        x, scale_inv, out_dtype, axis, block_size, group_offs, group_offs_padded, total_m))


@_grouped_dequantize_fp4_op.register_fake
def _(x, scale_inv, out_dtype, axis, block_size, group_offs, group_offs_padded, total_m):
    if spec.normalize_axis(axis, 2) == 1:
        return _empty(x, (x.shape[0], x.shape[1] * 2), out_dtype)
    return _empty(x, (total_m, x.shape[0]), out_dtype)


def grouped_dequantize_fp4(x: T, scale_inv: T, out_dtype: torch.dtype, *, axis: int,
                           block_size: int = MXFP4_BLOCK_SIZE, group_offs: T | None = None,
                           group_offs_padded: T | None = None, total_m: int | None = None) -> T:
    """Run the ``grouped_dequantize_fp4`` primitive (see :class:`GroupedDequantizeFp4Args`)."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.grouped_dequantize_fp4(x, scale_inv, out_dtype, axis, block_size, group_offs,
                                                      group_offs_padded, total_m)
    return call("grouped_dequantize_fp4", GroupedDequantizeFp4Args(
        x, scale_inv, out_dtype, axis, block_size, group_offs, group_offs_padded, total_m))
