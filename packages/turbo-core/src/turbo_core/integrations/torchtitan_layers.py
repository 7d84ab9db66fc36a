"""TorchTitan modules whose compute is turbo's: linears, RMSNorm and the inner attention.

Each class subclasses the TorchTitan module it stands in for (its ``Config`` subclasses that module's
``Config``), so the model's module tree, parameter names, state_dict, ``param_init`` and
``sharding_config`` stay TorchTitan's, and every ``isinstance`` check TorchTitan makes still holds.
Only ``forward`` changes. :mod:`turbo_core.integrations.torchtitan` swaps their configs in.

A layer runs turbo's op on plain tensors. On a ``DTensor`` (tensor or sequence parallelism) the
linears and the norm run TorchTitan's own forward, and the attention raises (it has no such path).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor
from torchtitan.models.common.attention import VarlenAttention, VarlenMetadata
from torchtitan.models.common.linear import Linear
from torchtitan.models.common.nn_modules import RMSNorm
from torchtitan.protocols.module import Module

from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity
from turbo_core.modules.float8_linear import Float8Linear as _TurboFloat8Linear
from turbo_core.modules.linear import Linear as _TurboLinear
from turbo_core.ops.attention import flash_attn_func, flash_attn_varlen_func
from turbo_core.ops.normalization import rmsnorm
from turbo_core.ops.weight_cache import WeightQuantCache

__all__ = ["FP8_RECIPES", "TurboCausalAttention", "TurboDocumentAttention", "TurboFloat8Linear", "TurboLinear",
           "TurboRMSNorm", "fp8_recipe"]

#: The FP8 recipe names the converter takes (E4M3 forward and backward; blockwise: 128-element blocks).
FP8_RECIPES = ("tensorwise", "rowwise", "blockwise")


def fp8_recipe(name: str) -> Float8QuantConfig:
    """The E4M3 :class:`Float8QuantConfig` of a recipe name in :data:`FP8_RECIPES`."""
    if name not in FP8_RECIPES:
        raise ValueError(f"fp8: expected one of {', '.join(FP8_RECIPES)} (or None), got {name!r}")
    return Float8QuantConfig(granularity=ScalingGranularity(name.upper()),
                             block_size=128 if name == "blockwise" else None)


def _distributed(*tensors: torch.Tensor | None) -> bool:
    return any(isinstance(t, DTensor) for t in tensors)


class TurboLinear(_TurboLinear, Linear):
    """TorchTitan's ``Linear`` computing ``x @ W^T + b`` with turbo's ``gemm`` (turbo ``Linear``'s
    forward): ``x [..., in]`` -> ``[..., out]`` in x's dtype. A DTensor operand, or an ``x`` whose
    dtype is not the weight's, takes ``F.linear`` as TorchTitan's ``Linear`` does."""

    @dataclass(kw_only=True, slots=True)
    class Config(Linear.Config):
        pass

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _distributed(x, self.weight, self.bias) or x.dtype != self.weight.dtype:
            return F.linear(x, self.weight, self.bias)
        return _TurboLinear.forward(self, x)


class TurboFloat8Linear(_TurboFloat8Linear, Linear):
    """TorchTitan's ``Linear`` computing turbo's ``gemm_fp8`` with the config's recipe (turbo
    ``Float8Linear``'s forward, its weight-quantization cache included): ``x [..., in]`` ->
    ``[..., out]`` in x's dtype. Parameters and state_dict are the plain ``Linear``'s. A DTensor
    operand, or a dtype other than the weight's, takes ``F.linear`` (no FP8)."""

    @dataclass(kw_only=True, slots=True)
    class Config(Linear.Config):
        recipe: str = "tensorwise"
        """One of :data:`FP8_RECIPES`."""

    def __init__(self, config: Config):
        Linear.__init__(self, config)
        self.config = fp8_recipe(config.recipe)
        self.weight_cache = WeightQuantCache()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _distributed(x, self.weight, self.bias) or x.dtype != self.weight.dtype:
            return F.linear(x, self.weight, self.bias)
        return _TurboFloat8Linear.forward(self, x)


class TurboRMSNorm(RMSNorm):
    """TorchTitan's ``RMSNorm`` computing turbo's ``rmsnorm`` over the last dim:
    ``y = x * rsqrt(mean(x^2) + eps) * weight`` (fp32 math, x's shape and dtype; ``eps=None`` means
    ``finfo(x.dtype).eps`` as in ``torch.nn.RMSNorm``). A DTensor takes ``torch.nn.RMSNorm``'s
    forward."""

    @dataclass(kw_only=True, slots=True)
    class Config(RMSNorm.Config):
        pass

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _distributed(x, self.weight):
            return super().forward(x)
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        return rmsnorm(x, self.weight, eps)


def _check_plain(q, k, v) -> None:
    if _distributed(q, k, v):
        raise NotImplementedError("turbo attention: q, k, v are DTensors (tensor or context parallelism); "
                                  "convert the model with attention=False to keep TorchTitan's attention")


def _dense(q, k, v, scale, window, out_transform):
    """Causal (or windowed) attention over each whole sequence: ``[B, L, N, H]`` in and out."""
    causal = window[1] == 0
    if out_transform is None:
        return flash_attn_func(q, k, v, softmax_scale=scale, causal=causal, window_size=window)
    out, lse = flash_attn_func(q, k, v, softmax_scale=scale, causal=causal, window_size=window, return_lse=True)
    return out_transform(out, lse.transpose(1, 2))


class TurboCausalAttention(Module):
    """In place of ``ScaledDotProductAttention``: causal attention over each whole sequence with
    turbo's ``flash_attn_func``, no masks. ``q [B, L, Nq, H]``, ``k [B, L, Nkv, H]``,
    ``v [B, L, Nkv, Hv]`` (``Nq % Nkv == 0``: grouped-query attention without repeating k/v) ->
    ``[B, L, Nq, Hv]``; ``scale`` ``None`` means ``H ** -0.5``."""

    @dataclass(kw_only=True, slots=True)
    class Config(Module.Config):
        pass

    def __init__(self, config: Config) -> None:
        super().__init__()

    def forward(self, q_BLNH: torch.Tensor, k_BLNH: torch.Tensor, v_BLNH: torch.Tensor, *,
                attention_masks=None, scale: float | None = None, enable_gqa: bool = False,
                is_causal: bool = True, **kwargs) -> torch.Tensor:
        if attention_masks is not None:
            raise ValueError("attention_masks: turbo's causal attention takes none (it replaces "
                             "ScaledDotProductAttention, which only supports is_causal)")
        _check_plain(q_BLNH, k_BLNH, v_BLNH)
        return flash_attn_func(q_BLNH, k_BLNH, v_BLNH, softmax_scale=scale, causal=is_causal)


class TurboDocumentAttention(Module):
    """In place of ``FlexAttention`` / ``VarlenAttention``: causal attention inside each packed
    document with turbo's ``flash_attn_varlen_func``.

    Its ``Config`` is a ``VarlenAttention.Config``, so TorchTitan's ``Decoder.get_attention_masks``
    (and the trainer) build ``VarlenMetadata`` from the per-token positions (a document starts where
    the position is 0): the same mask as the block-causal document mask those models build for
    FlexAttention. ``window_size`` ``(left, right)`` is ``VarlenAttention``'s (``(-1, 0)``: causal).

    ``q [B, L, Nq, H]``, ``k [B, L, Nkv, H]``, ``v [B, L, Nkv, Hv]`` (``Nq % Nkv == 0``) ->
    ``[B, L, Nq, Hv]`` in q's dtype (turbo runs in q's dtype; TorchTitan's varlen path rounds to
    bf16). Without masks (no positions given) each row of the batch is one document.
    ``out_transform(out [B, L, N, Hv], lse [B, L, N])`` is applied as TorchTitan's backends do.
    """

    @dataclass(kw_only=True, slots=True)
    class Config(VarlenAttention.Config):
        pass

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.window_size = tuple(config.window_size)

    def forward(self, q_BLNH: torch.Tensor, k_BLNH: torch.Tensor, v_BLNH: torch.Tensor, *,
                attention_masks: VarlenMetadata | None = None, scale: float | None = None,
                out_transform=None, **kwargs) -> torch.Tensor:
        _check_plain(q_BLNH, k_BLNH, v_BLNH)
        window = self.window_size
        if attention_masks is None:
            return _dense(q_BLNH, k_BLNH, v_BLNH, scale, window, out_transform)
        if not isinstance(attention_masks, VarlenMetadata):
            raise TypeError(f"attention_masks: turbo's document attention takes VarlenMetadata (built by the "
                            f"model's get_attention_masks), got {type(attention_masks).__name__}")
        b, seq = q_BLNH.shape[:2]
        flat = [t.reshape(b * seq, *t.shape[2:]) for t in (q_BLNH, k_BLNH, v_BLNH)]
        m = attention_masks
        out, lse = flash_attn_varlen_func(*flat, m.cu_seq_q, m.cu_seq_k, m.max_q, m.max_k, softmax_scale=scale,
                                          causal=window[1] == 0, window_size=window, return_lse=True)
        out = out.view(b, seq, *out.shape[1:])
        if out_transform is None:
            return out
        return out_transform(out, lse.transpose(0, 1).reshape(b, seq, -1))
