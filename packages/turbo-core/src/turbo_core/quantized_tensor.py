"""``QuantizedTensor``: a pre-quantized tensor (FP8 or MXFP4 data + ``scale_inv``) that looks like the
high-precision tensor it came from, so GEMM ops can take pre-quantized weights and cached transposes.

A ``torch.Tensor`` wrapper subclass: its ``shape``/``dtype``/``device`` are those of the original
tensor; ``qdata``/``scale_inv`` hold the quantized data exactly as ``turbo_core.ops.quantize_fp8`` /
``quantize_fp4`` (or their grouped forms) return them, made by the same primitives
(``turbo_core.dispatch.launch.quantization``; the GEMM ops import this module, never the reverse).
Supported tensor ops (anything else raises ``NotImplementedError``; call
:meth:`QuantizedTensor.dequantize` first):

* ``detach``/``alias``/``clone``, ``.to(device)``;
* ``view``/``reshape`` that keep the last dim when the scales run along it (TENSORWISE: any shape);
  data and scales are reshaped together;
* ``select`` on the leading dim of a 3-D (batched) tensor;
* ``t``/``transpose(-1, -2)``: exact (a layout change) for TENSORWISE and 2-D BLOCKWISE tiles; for
  the others the values are dequantized (fp32) and requantized so that the transposed tensor is
  quantized along the same positional axis (e.g. a weight quantized along its last dim K gives a
  transpose quantized along its last dim N: the operand layout of the backward GEMM).

Quantization itself is not differentiated: a ``QuantizedTensor`` made from a tensor that requires
grad requires grad too (a leaf), but ``dequantize()`` runs without autograd.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from turbo_core.dispatch.specs.validate import FLOAT_DTYPES, require_tensor
from turbo_core.low_precision import (
    MXFP4_BLOCK_SIZE,
    MXFP8_BLOCK_SIZE,
    Float4QuantConfig,
    Float8QuantConfig,
    Format,
    ScalingGranularity,
    ScalingRecipe,
    as_format,
    as_granularity,
    as_recipe,
    float4_e2m1_dtype,
    fp8_dtype_for,
    is_fp4_dtype,
    is_fp8_dtype,
)

__all__ = ["QuantizedTensor", "QuantizedTensorPair", "check_quantized_tensor", "create_quantized_weight"]

G = ScalingGranularity
aten = torch.ops.aten


def _dest_dtype(dest: object, device: torch.device) -> torch.dtype:
    if isinstance(dest, str):
        fmt = as_format(dest, "dest_dtype")
        if fmt == Format.E2M1_X2:
            return float4_e2m1_dtype()
        if fmt == Format.HYBRID:
            raise ValueError("dest_dtype: HYBRID is not a dtype; pass E4M3 or E5M2")
        return fp8_dtype_for(fmt, device)
    if not (is_fp8_dtype(dest) or is_fp4_dtype(dest)):
        raise TypeError(f"dest_dtype: expected an FP8 dtype or torch.float4_e2m1fn_x2, got {dest!r}")
    return dest


def _negative_axis(axis: int | None, ndim: int) -> int | None:
    if axis is None:
        return None
    if not isinstance(axis, int) or isinstance(axis, bool) or not -ndim <= axis < ndim:
        raise ValueError(f"axis: expected a dim of a {ndim}-D tensor, got {axis!r}")
    return axis - ndim if axis >= 0 else axis


def _offs_from_lens(lens: torch.Tensor) -> torch.Tensor:
    offs = lens.new_zeros(lens.shape[0] + 1)
    offs[1:] = torch.cumsum(lens, 0)
    return offs


class QuantizedTensor(torch.Tensor):
    """Quantized data + ``scale_inv`` presented as the original high-precision tensor.

    Build one with :meth:`quantize`. Attributes (read through the properties): ``qdata`` (FP8, or
    packed FP4, in the layout of the quantize op), ``scale_inv`` (fp32 or E8M0, layout of the
    quantize op), ``dtype`` (the original dtype), ``real_dtype`` (``qdata.dtype``), ``granularity``,
    ``block_size``, ``scaling_recipe``, ``quantized_axis`` (non-negative, or ``None`` for TENSORWISE
    and 2-D blocks), and for grouped tensors ``group_lens``/``group_offs`` (padded, as the quantized
    layout uses them) and ``orig_group_lens``/``orig_group_offs``.
    """

    _data: torch.Tensor
    _scale_inv: torch.Tensor

    @staticmethod
    def __new__(cls, data: torch.Tensor, scale_inv: torch.Tensor, *, shape: torch.Size | tuple[int, ...],
                orig_dtype: torch.dtype, granularity: ScalingGranularity, block_size: int | None = None,
                scaling_recipe: ScalingRecipe | None = None, quantized_axis: int | None = None,
                group_lens: torch.Tensor | None = None, group_offs: torch.Tensor | None = None,
                orig_group_lens: torch.Tensor | None = None, orig_group_offs: torch.Tensor | None = None,
                requires_grad: bool = False) -> QuantizedTensor:
        require_tensor("data", data)
        require_tensor("scale_inv", scale_inv)
        if not (is_fp8_dtype(data.dtype) or is_fp4_dtype(data.dtype)):
            raise TypeError(f"data: expected FP8 or packed FP4 data, got {data.dtype}")
        if orig_dtype not in FLOAT_DTYPES:
            raise TypeError(f"orig_dtype: expected fp32/fp16/bf16, got {orig_dtype}")
        self = torch.Tensor._make_wrapper_subclass(cls, tuple(shape), dtype=orig_dtype, device=data.device,
                                                   requires_grad=requires_grad)
        self._data = data.contiguous()
        self._scale_inv = scale_inv.contiguous()
        self._orig_dtype = orig_dtype
        self._granularity = as_granularity(granularity)
        self._block_size = block_size
        self._scaling_recipe = as_recipe(scaling_recipe)
        self._axis = _negative_axis(quantized_axis, len(shape))
        self._group_lens = group_lens
        self._group_offs = group_offs
        self._orig_group_lens = orig_group_lens if orig_group_lens is not None else group_lens
        self._orig_group_offs = orig_group_offs if orig_group_offs is not None else group_offs
        return self

    # -- factory ---------------------------------------------------------------------------------

    @classmethod
    def quantize(cls, hp_tensor: torch.Tensor, dest_dtype: torch.dtype, granularity: ScalingGranularity, *,
                 axis: int | None = None, group_lens: torch.Tensor | None = None, block_size: int | None = None,
                 scaling_recipe: ScalingRecipe | None = None) -> QuantizedTensor:
        """Quantize ``hp_tensor`` (2-D or 3-D; grouped: 2-D packed-M) and wrap the result.

        ``dest_dtype``: an FP8 dtype, ``torch.float4_e2m1fn_x2`` (MX only), or a :class:`Format`
        (resolved for the tensor's device). ``axis`` is required except for TENSORWISE and 2-D
        BLOCKWISE tiles (``scaling_recipe.use_2d_block``). ``group_lens`` ``[G]`` makes a grouped
        tensor: TENSORWISE/ROWWISE quantize as if ungrouped, BLOCKWISE and MX use the grouped
        layouts of ``grouped_quantize_fp8``/``grouped_quantize_fp4`` (each group padded so that no
        block crosses groups).
        """
        from turbo_core.dispatch.launch import quantization as launch  # registers custom ops: on first use

        require_tensor("hp_tensor", hp_tensor, ndim=(2, 3), dtypes=FLOAT_DTYPES)
        gran = as_granularity(granularity)
        dest = _dest_dtype(dest_dtype, hp_tensor.device)
        fp4 = is_fp4_dtype(dest)
        if fp4 and gran != G.MX_BLOCKWISE:
            raise ValueError(f"granularity: FP4 is MX_BLOCKWISE only, got {gran.value}")
        recipe = as_recipe(scaling_recipe)
        two_d = gran == G.BLOCKWISE and recipe.use_2d_block
        if gran != G.TENSORWISE and not two_d and axis is None:
            raise ValueError(f"axis: required for {gran.value} quantization")
        if gran == G.MX_BLOCKWISE and block_size is None:
            block_size = MXFP4_BLOCK_SIZE if fp4 else MXFP8_BLOCK_SIZE
        if gran == G.TENSORWISE or two_d:
            axis = None
        hp = hp_tensor.detach()
        kw = dict(axis=axis, block_size=block_size, recipe=recipe)
        grouped = dict(group_lens=None, group_offs=None, orig_group_lens=None, orig_group_offs=None)
        if group_lens is not None:
            require_tensor("group_lens", group_lens, ndim=1, dtypes=(torch.int64, torch.int32))
            if hp.dim() != 2:
                raise ValueError(f"hp_tensor: a grouped tensor is 2-D packed-M, got shape {tuple(hp.shape)}")
            offs = _offs_from_lens(group_lens)
            if gran in (G.TENSORWISE, G.ROWWISE):
                data, scale = launch.quantize_fp8(hp, dest, gran, **kw)
                grouped.update(group_lens=group_lens, group_offs=offs)
            else:
                if fp4:
                    data, scale, lens_pad, offs_pad = launch.grouped_quantize_fp4(hp, dest, group_lens, offs, **kw)
                else:
                    data, scale, lens_pad, offs_pad = launch.grouped_quantize_fp8(hp, dest, gran, group_lens, offs,
                                                                                  **kw)
                grouped.update(group_lens=lens_pad, group_offs=offs_pad, orig_group_lens=group_lens,
                               orig_group_offs=offs)
        elif fp4:
            data, scale = launch.quantize_fp4(hp, dest, **kw)
        else:
            data, scale = launch.quantize_fp8(hp, dest, gran, **kw)
        return cls(data, scale, shape=hp_tensor.shape, orig_dtype=hp_tensor.dtype, granularity=gran,
                   block_size=block_size, scaling_recipe=recipe, quantized_axis=axis,
                   requires_grad=hp_tensor.requires_grad, **grouped)

    # -- properties ------------------------------------------------------------------------------------

    @property
    def qdata(self) -> torch.Tensor:
        return self._data

    @property
    def scale_inv(self) -> torch.Tensor:
        return self._scale_inv

    @property
    def real_dtype(self) -> torch.dtype:
        return self._data.dtype

    @property
    def granularity(self) -> ScalingGranularity:
        return self._granularity

    @property
    def block_size(self) -> int | None:
        return self._block_size

    @property
    def scaling_recipe(self) -> ScalingRecipe:
        return self._scaling_recipe

    @property
    def quantized_axis(self) -> int | None:
        return None if self._axis is None else self._axis % self.dim()

    @property
    def is_grouped(self) -> bool:
        return self._group_lens is not None

    @property
    def group_lens(self) -> torch.Tensor | None:
        return self._group_lens

    @property
    def group_offs(self) -> torch.Tensor | None:
        return self._group_offs

    @property
    def orig_group_lens(self) -> torch.Tensor | None:
        return self._orig_group_lens

    @property
    def orig_group_offs(self) -> torch.Tensor | None:
        return self._orig_group_offs

    def __repr__(self, *, tensor_contents=None) -> str:  # noqa: D105
        extra = f", block_size={self._block_size}" if self._block_size is not None else ""
        axis = f", quantized_axis={self.quantized_axis}" if self._axis is not None else ""
        groups = f", groups={self._group_lens.shape[0]}" if self.is_grouped else ""
        return (f"QuantizedTensor(shape={tuple(self.shape)}, dtype={self.dtype}, real_dtype={self.real_dtype}, "
                f"granularity={self._granularity.value}{extra}{axis}{groups}, device={self.device})")

    # -- dequantize ------------------------------------------------------------------------------------

    @torch.no_grad()
    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The high-precision tensor (``dtype``, default the original dtype) of the logical shape:
        MX padding and group padding removed. No autograd."""
        from turbo_core.dispatch.launch import quantization as launch  # registers custom ops: on first use

        out_dtype = dtype or self._orig_dtype
        gran, axis, block = self._granularity, self.quantized_axis, self._block_size
        data, scale = self._data, self._scale_inv
        fp4 = is_fp4_dtype(self.real_dtype)
        if fp4 and (self._scaling_recipe.shuffle_scale or self._scaling_recipe.shuffle_out):
            raise ValueError("QuantizedTensor: pre-shuffled MX data cannot be dequantized")
        if self.is_grouped and gran in (G.BLOCKWISE, G.MX_BLOCKWISE):
            total = self.shape[0]
            if fp4:
                out = launch.grouped_dequantize_fp4(data, scale, out_dtype, axis=axis, block_size=block,
                                                    group_offs=self._orig_group_offs,
                                                    group_offs_padded=self._group_offs,
                                                    total_m=total if axis == 0 else None)
            else:
                out = launch.grouped_dequantize_fp8(data, scale, out_dtype, gran, self._orig_group_offs,
                                                    self._group_offs, total_m=total, axis=axis, block_size=block)
        elif fp4:
            out = launch.dequantize_fp4(data, scale, out_dtype, axis=axis, block_size=block)
        else:
            out = launch.dequantize_fp8(data, scale, out_dtype, gran, axis=axis, block_size=block,
                                        recipe=self._scaling_recipe)
        rows, cols = self.shape[-2], self.shape[-1]
        return out[..., :rows, :cols].contiguous()

    # -- torch.compile / FSDP --------------------------------------------------------------------------

    _INNER = ("_data", "_scale_inv", "_group_lens", "_group_offs", "_orig_group_lens", "_orig_group_offs")

    def __tensor_flatten__(self):
        names = [n for n in self._INNER if getattr(self, n) is not None]
        ctx = {"orig_dtype": self._orig_dtype, "granularity": self._granularity, "block_size": self._block_size,
               "scaling_recipe": self._scaling_recipe, "axis": self._axis}
        return names, ctx

    @staticmethod
    def __tensor_unflatten__(inner_tensors, ctx, outer_size, outer_stride):
        return QuantizedTensor(
            inner_tensors["_data"], inner_tensors["_scale_inv"], shape=outer_size, orig_dtype=ctx["orig_dtype"],
            granularity=ctx["granularity"], block_size=ctx["block_size"], scaling_recipe=ctx["scaling_recipe"],
            quantized_axis=ctx["axis"], group_lens=inner_tensors.get("_group_lens"),
            group_offs=inner_tensors.get("_group_offs"), orig_group_lens=inner_tensors.get("_orig_group_lens"),
            orig_group_offs=inner_tensors.get("_orig_group_offs"))

    # -- tensor ops --------------------------------------------------------------------------------

    def _like(self, data: torch.Tensor, scale_inv: torch.Tensor, shape, *, keep_groups: bool = True,
              fn=None, requires_grad: bool = False) -> QuantizedTensor:
        groups = {n[1:]: (fn(getattr(self, n)) if fn and getattr(self, n) is not None else getattr(self, n))
                  for n in self._INNER[2:]} if keep_groups else {}
        return QuantizedTensor(data, scale_inv, shape=shape, orig_dtype=self._orig_dtype,
                               granularity=self._granularity, block_size=self._block_size,
                               scaling_recipe=self._scaling_recipe,
                               quantized_axis=None if self._axis is None else self._axis % len(shape) - len(shape),
                               requires_grad=requires_grad, **groups)

    def _reshaped(self, shape) -> QuantizedTensor:
        shape = tuple(torch.empty(0, device="meta").new_empty(self.shape).reshape(shape).shape)
        if shape == tuple(self.shape):
            return self._like(self._data, self._scale_inv, shape)
        if self.is_grouped:
            raise NotImplementedError("QuantizedTensor: a grouped (packed-M) tensor cannot be reshaped")
        if self._granularity == G.TENSORWISE:
            return self._like(self._data.reshape(shape), self._scale_inv, shape)
        two_d = self._granularity == G.BLOCKWISE and self._scaling_recipe.use_2d_block
        if two_d or self._axis != -1 or not shape or shape[-1] != self.shape[-1]:
            raise NotImplementedError(
                "QuantizedTensor: only reshapes that keep the last dim, on tensors quantized along it "
                f"(quantized_axis=-1), are supported; got {tuple(self.shape)} -> {shape} with "
                f"{self._granularity.value}, quantized_axis={self.quantized_axis}")
        lead = shape[:-1]
        return self._like(self._data.reshape(*lead, self._data.shape[-1]),
                          self._scale_inv.reshape(*lead, self._scale_inv.shape[-1]), shape)

    def _selected(self, dim: int, index: int) -> QuantizedTensor:
        if self.dim() != 3 or dim % 3 != 0 or self.is_grouped:
            raise NotImplementedError("QuantizedTensor: select is supported on the leading dim of a 3-D tensor")
        scale = self._scale_inv if self._granularity == G.TENSORWISE else self._scale_inv.select(0, index)
        return self._like(self._data.select(0, index), scale, tuple(self.shape[1:]))

    def _transposed(self) -> QuantizedTensor:
        if self.is_grouped:
            raise NotImplementedError("QuantizedTensor: a grouped (packed-M) tensor cannot be transposed")
        shape = (*self.shape[:-2], self.shape[-1], self.shape[-2])
        if self._granularity == G.TENSORWISE:
            return self._like(self._data.transpose(-1, -2), self._scale_inv, shape)
        if self._granularity == G.BLOCKWISE and self._scaling_recipe.use_2d_block:
            return self._like(self._data.transpose(-1, -2), self._scale_inv.transpose(-1, -2), shape)
        hp_t = self.dequantize(torch.float32).transpose(-1, -2)
        out = QuantizedTensor.quantize(hp_t, self.real_dtype, self._granularity, axis=self._axis,
                                       block_size=self._block_size, scaling_recipe=self._scaling_recipe)
        return self._like(out._data, out._scale_inv, shape)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        t = args[0] if args else None
        if not isinstance(t, QuantizedTensor):
            raise NotImplementedError(f"QuantizedTensor: {func} is not supported")
        if func in (aten.detach.default, aten.alias.default):
            return t._like(t._data, t._scale_inv, tuple(t.shape))
        if func == aten.clone.default:
            return t._like(t._data.clone(), t._scale_inv.clone(), tuple(t.shape), fn=torch.clone)
        if func in (aten.view.default, aten._unsafe_view.default, aten.reshape.default):
            return t._reshaped(args[1])
        if func == aten.select.int:
            return t._selected(args[1], args[2])
        if func == aten.t.default or (func == aten.transpose.int and {args[1] % t.dim(), args[2] % t.dim()}
                                      == {t.dim() - 1, t.dim() - 2}):
            return t._transposed()
        if func == aten._to_copy.default and set(kwargs) <= {"device", "dtype", "layout", "non_blocking"} \
                and kwargs.get("dtype") in (None, t.dtype):
            device = kwargs.get("device") or t.device
            return t._like(t._data.to(device), t._scale_inv.to(device), tuple(t.shape),
                           fn=lambda g: g.to(device))
        raise NotImplementedError(
            f"QuantizedTensor: {func} is not supported (supported: detach, clone, view/reshape, select, "
            "t/transpose, to(device)); call .dequantize() first")

    __torch_function__ = torch._C._disabled_torch_function_impl


class _Pair(NamedTuple):
    data: QuantizedTensor
    data_t: QuantizedTensor | None = None


class QuantizedTensorPair(_Pair):
    """A quantized operand plus, optionally, its cached transpose for the backward pass.

    ``data``: the operand as the forward uses it; ``data_t``: ``data.t()`` (a tensor of the transposed
    logical shape, quantized along its own last dim), e.g. from
    ``create_quantized_weight(..., need_weight_transpose_cache=True)``.
    """

    __slots__ = ()

    def __new__(cls, data: QuantizedTensor, data_t: QuantizedTensor | None = None) -> QuantizedTensorPair:
        if not isinstance(data, QuantizedTensor):
            raise TypeError(f"data: expected a QuantizedTensor, got {type(data).__name__}")
        if data_t is not None:
            if not isinstance(data_t, QuantizedTensor):
                raise TypeError(f"data_t: expected a QuantizedTensor or None, got {type(data_t).__name__}")
            want = (*data.shape[:-2], data.shape[-1], data.shape[-2])
            if tuple(data_t.shape) != want:
                raise ValueError(f"data_t: expected the transposed shape {want}, got {tuple(data_t.shape)}")
            if data_t.granularity != data.granularity or data_t.real_dtype != data.real_dtype:
                raise ValueError("data_t: expected the granularity and real_dtype of data")
        return super().__new__(cls, data, data_t)


def _weight_recipe(config: Float8QuantConfig | Float4QuantConfig) -> ScalingRecipe:
    if isinstance(config, Float4QuantConfig):
        return ScalingRecipe(use_2d_block=True, shuffle_scale=config.use_preshuffle, shuffle_out=config.use_preshuffle)
    if config.granularity in (G.BLOCKWISE, G.MX_BLOCKWISE):
        return ScalingRecipe(use_2d_block=True)
    return ScalingRecipe()


def create_quantized_weight(weight: torch.Tensor, dest_dtype: torch.dtype | None,
                            quant_config: Float8QuantConfig | Float4QuantConfig,
                            need_weight_transpose_cache: bool = False
                            ) -> tuple[QuantizedTensor, QuantizedTensor | None]:
    """Quantize a weight (``[out, in]`` or ``[G, out, in]``) for a GEMM: ``(qw, qw_t or None)``.

    Recipe: FP8 BLOCKWISE/MX and FP4 use 2-D blocks (FP4 adds the pre-shuffle flags of
    ``use_preshuffle``); the scales run along the last dim (K) where there is an axis.
    ``dest_dtype=None`` takes the config's dtype on the weight's device (HYBRID: E4M3).
    ``qw_t`` (when asked) is ``qw.t()``: the transposed weight, quantized along its own last dim.
    """
    if not isinstance(quant_config, (Float8QuantConfig, Float4QuantConfig)):
        raise TypeError(f"quant_config: expected Float8QuantConfig or Float4QuantConfig, got "
                        f"{type(quant_config).__name__}")
    quant_config.validate("quant_config")
    if not isinstance(need_weight_transpose_cache, bool):
        raise TypeError(f"need_weight_transpose_cache: expected a bool, got {need_weight_transpose_cache!r}")
    require_tensor("weight", weight, ndim=(2, 3), dtypes=FLOAT_DTYPES)
    if dest_dtype is None:
        dest_dtype = (quant_config.dtype() if isinstance(quant_config, Float4QuantConfig)
                      else quant_config.dtype(weight.device))
    recipe = _weight_recipe(quant_config)
    gran = quant_config.granularity
    axis = None if gran == G.TENSORWISE or (gran == G.BLOCKWISE and recipe.use_2d_block) else -1
    qw = QuantizedTensor.quantize(weight, dest_dtype, gran, axis=axis, block_size=quant_config.block_size,
                                  scaling_recipe=recipe)
    qw_t = qw.transpose(-1, -2) if need_weight_transpose_cache else None
    return qw, qw_t


def check_quantized_tensor(qt: QuantizedTensor, config: Float8QuantConfig | Float4QuantConfig,
                           axis: int | None = None, scaling_recipe: ScalingRecipe | None = None) -> None:
    """Raise ``ValueError`` unless a pre-quantized input matches ``config`` (granularity, block size)
    and, when given, ``axis`` and ``scaling_recipe``."""
    if not isinstance(qt, QuantizedTensor):
        raise TypeError(f"qt: expected a QuantizedTensor, got {type(qt).__name__}")
    if isinstance(config, (Float8QuantConfig, Float4QuantConfig)):
        config.validate()
    if qt.granularity != config.granularity:
        raise ValueError(f"qt: granularity {qt.granularity.value} does not match the config's "
                         f"{config.granularity.value}")
    if qt.block_size != config.block_size:
        raise ValueError(f"qt: block_size {qt.block_size} does not match the config's {config.block_size}")
    if axis is not None and qt.quantized_axis != axis % qt.dim():
        raise ValueError(f"qt: quantized_axis {qt.quantized_axis} does not match axis={axis}")
    if scaling_recipe is not None and qt.scaling_recipe != scaling_recipe:
        raise ValueError(f"qt: scaling_recipe {qt.scaling_recipe} does not match {scaling_recipe}")
