"""``Float8Linear``: ``torch.nn.Linear`` whose matmul is turbo's ``gemm_fp8``."""

from __future__ import annotations

import torch

from turbo_core.low_precision import Float8QuantConfig
from turbo_core.ops.gemm_fp8 import fp8_config, gemm_fp8
from turbo_core.ops.weight_cache import WeightQuantCache
from turbo_core.quantized_tensor import QuantizedTensor, QuantizedTensorPair

__all__ = ["Float8Linear"]


class Float8Linear(torch.nn.Linear):
    """``y = dequant(q(x)) @ dequant(q(W)).T + bias`` with ``W: [out_features, in_features]`` (NT).

    Same parameters, initialisation and state_dict as ``torch.nn.Linear`` (the config is a plain
    attribute, not state). ``x`` may have any number of leading dims; they are flattened to
    ``[T, in_features]`` for ``gemm_fp8(x2d, W, trans_b=True, out_dtype=x.dtype, config=config)``;
    the bias is added in high precision afterwards. A weight carrying ``main_grad`` gets
    Megatron's fused wgrad accumulation.

    The weight is quantized once per update, not once per call: ``weight_cache`` (a
    :class:`~turbo_core.ops.weight_cache.WeightQuantCache`, not state) keeps its FP8 copies (the
    forward one and, when gradients are on, the dgrad's column copy) and every later forward reuses
    them while the weight is unchanged: the other micro-batches of a gradient-accumulation step, the
    recomputed forward of activation checkpointing, eval forwards. An in-place write to the
    Parameter (``optimizer.step()``, ``copy_``, ``load_state_dict``), any ``torch.optim`` step,
    moving or casting the module, or a change of ``config`` makes it quantize again. Results and
    gradients are bit for bit those without the cache; the cost is the copies' memory between
    forwards (about the weight's size for a bf16 weight in training). Writes through
    ``weight.data`` outside an optimizer step are not seen: call ``weight_cache.clear()`` or
    :func:`~turbo_core.ops.weight_cache.invalidate_weight_caches` after them. ``weight_cache =
    None`` turns the cache off for this module (``weight_cache_disabled()`` for every module in a
    block); under ``torch.compile`` and during CUDA-graph capture it is not used.

    ``x`` may also come pre-quantized, as a 2-D ``[T, in_features]`` :class:`QuantizedTensor` or
    :class:`QuantizedTensorPair` quantized with this layer's recipe (e.g. from
    :func:`turbo_core.ops.rmsnorm_fp8`, ``with_trans=True`` in training): the GEMM uses it as given
    and the output is ``[T, out_features]`` in its (logical) dtype.

    Args:
        in_features, out_features, bias, device, dtype: as ``torch.nn.Linear``.
        config: :class:`Float8QuantConfig`; ``None`` means TENSORWISE E4M3.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 config: Float8QuantConfig | None = None, device=None, dtype=None) -> None:
        config = fp8_config(config)
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.config = config
        self.weight_cache: WeightQuantCache | None = WeightQuantCache()

    def forward(self, x: torch.Tensor | QuantizedTensor | QuantizedTensorPair) -> torch.Tensor:
        pre = x.data if isinstance(x, QuantizedTensorPair) else x
        if isinstance(pre, QuantizedTensor) and pre.dim() != 2:
            raise ValueError(f"x: a pre-quantized x must be 2-D [T, {self.in_features}], got shape {tuple(pre.shape)}")
        if pre.shape[-1] != self.in_features:
            raise ValueError(f"x: expected last dim {self.in_features}, got shape {tuple(pre.shape)}")
        x2d = x if isinstance(pre, QuantizedTensor) else x.reshape(-1, self.in_features)
        pattern = "megatron" if hasattr(self.weight, "main_grad") else None
        y = gemm_fp8(x2d, self.weight, trans_a=False, trans_b=True, out_dtype=pre.dtype, config=self.config,
                     fuse_bgrad_accum_pattern=pattern, weight_cache=getattr(self, "weight_cache", None))
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*pre.shape[:-1], self.out_features)

    @classmethod
    def from_float(cls, mod: torch.nn.Linear, config: Float8QuantConfig | None = None,
                   inplace: bool = True) -> Float8Linear:
        """A ``Float8Linear`` from a ``torch.nn.Linear``.

        ``inplace=True`` turns ``mod`` itself into a ``Float8Linear`` (its class is swapped; its
        parameters, hooks and place in the parent module are kept) and returns it.
        ``inplace=False`` returns a new module with copies of the weight and bias (same device and
        dtype) and leaves ``mod`` untouched.
        """
        if not isinstance(mod, torch.nn.Linear):
            raise TypeError(f"mod: expected a torch.nn.Linear, got {type(mod).__name__}")
        if not isinstance(inplace, bool):
            raise TypeError(f"inplace: expected a bool, got {inplace!r}")
        config = fp8_config(config)
        if inplace:
            mod.__class__ = cls
            mod.config = config
            mod.weight_cache = WeightQuantCache()
            return mod
        new = cls(mod.in_features, mod.out_features, bias=mod.bias is not None, config=config,
                  device=mod.weight.device, dtype=mod.weight.dtype)
        with torch.no_grad():
            new.weight.copy_(mod.weight)
            if mod.bias is not None:
                new.bias.copy_(mod.bias)
        new.weight.requires_grad_(mod.weight.requires_grad)
        if mod.bias is not None:
            new.bias.requires_grad_(mod.bias.requires_grad)
        return new

    def extra_repr(self) -> str:
        cfg = self.config
        block = f", block_size={cfg.block_size}" if cfg.block_size is not None else ""
        return f"{super().extra_repr()}, format={cfg.format.value}, granularity={cfg.granularity.value}{block}"
