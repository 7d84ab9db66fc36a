"""``GroupedLinear``: one bias-free linear layer per group (MoE experts) over turbo's ``grouped_gemm``,
or ``grouped_gemm_fp8`` with an FP8 config."""

from __future__ import annotations

import math

import torch

from turbo_core.dispatch.specs.validate import require_bool
from turbo_core.low_precision import Float8QuantConfig
from turbo_core.ops.gemm_fp8 import fp8_config
from turbo_core.ops.grouped_gemm import grouped_gemm
from turbo_core.ops.grouped_gemm_fp8 import grouped_gemm_fp8
from turbo_core.ops.weight_cache import WeightQuantCache
from turbo_core.quantized_tensor import QuantizedTensor, QuantizedTensorPair

__all__ = ["GroupedLinear"]


def _check_size(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value!r}")
    return value


class GroupedLinear(torch.nn.Module):
    """``y_g = x_g @ W[g]^T`` for each group ``g`` of the packed tokens ``x``.

    Args:
        group_num: ``G``, the number of groups (experts), >= 1.
        in_features, out_features: sizes of each group's linear map.
        device, dtype: of the weight (fp16/bf16/fp32 for the forward).
        config: ``None`` (the high-precision ``grouped_gemm``) or a :class:`Float8QuantConfig`: the
            forward is ``grouped_gemm_fp8(x, W, group_lens, group_offs, trans_b=True,
            out_dtype=x.dtype, config=config)`` (the recipe of ``turbo_core.ops.grouped_gemm_fp8``).
        wgrad_fp8: with an FP8 config, ``False`` computes the weight gradient in the weight's precision
            (``grouped_gemm_fp8``'s ``wgrad_fp8``): the forward and the input gradient stay FP8. Where
            each expert sees a few hundred tokens, the FP8 weight gradient saves little GEMM time and
            costs two column quantizations (``docs/design-notes.md``). Also an attribute, read by every
            forward.

    Attributes:
        weight: ``[G, out_features, in_features]`` (each ``W[g]`` laid out like ``nn.Linear.weight``),
            each group initialised like ``nn.Linear`` (kaiming-uniform with ``a=sqrt(5)``, i.e.
            uniform in ``±1/sqrt(in_features)``). No bias. A weight carrying ``main_grad`` gets
            Megatron's fused wgrad accumulation.
        weight_cache: with an FP8 config, the weight's FP8 copies, made once per weight update and
            reused by later forwards while the weight is unchanged (micro-batches, recomputation);
            the rules, the ``.data`` caveat and how to turn it off are those of ``Float8Linear``
            (``turbo_core.ops.weight_cache``). ``None`` turns it off.

    ``forward(x, group_lens, group_offs=None)``: ``x`` is ``[M_total, in_features]`` in the weight's
    dtype, tokens packed by group; ``group_lens`` int64 ``[G]`` and optional ``group_offs`` int64
    ``[G + 1]`` on x's device (see :func:`turbo_core.ops.grouped_gemm`). Returns
    ``[M_total, out_features]`` in x's dtype; rows past ``sum(group_lens)`` are zero. With a TENSORWISE
    or ROWWISE config ``x`` may also come pre-quantized with that recipe, as a :class:`QuantizedTensor`
    or :class:`QuantizedTensorPair` of logical shape ``[M_total, in_features]`` (e.g. from
    :func:`turbo_core.ops.swiglu_with_probs_fp8`, ``with_trans=True`` in training; ``grouped_gemm_fp8``
    says which pre-quantized tokens it takes); the output is then in its logical dtype.
    """

    def __init__(self, group_num: int, in_features: int, out_features: int, device=None, dtype=None,
                 config: Float8QuantConfig | None = None, wgrad_fp8: bool = True) -> None:
        super().__init__()
        require_bool("wgrad_fp8", wgrad_fp8)
        self.config = None if config is None else fp8_config(config)
        self.wgrad_fp8 = wgrad_fp8
        self.weight_cache: WeightQuantCache | None = WeightQuantCache()
        self.group_num = _check_size("group_num", group_num, 1)
        self.in_features = _check_size("in_features", in_features, 0)
        self.out_features = _check_size("out_features", out_features, 0)
        self.weight = torch.nn.Parameter(torch.empty((group_num, out_features, in_features), device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            for w in self.weight:  # one nn.Linear initialisation per group (fan_in = in_features)
                torch.nn.init.kaiming_uniform_(w, a=math.sqrt(5))

    def forward(self, x: torch.Tensor | QuantizedTensor | QuantizedTensorPair, group_lens: torch.Tensor,
                group_offs: torch.Tensor | None = None) -> torch.Tensor:
        pre = x.data if isinstance(x, QuantizedTensorPair) else x
        if isinstance(pre, QuantizedTensor) and self.config is None:
            raise ValueError("x: a pre-quantized x needs an FP8 config on this GroupedLinear; it has none")
        if pre.dim() != 2 or pre.shape[-1] != self.in_features:
            raise ValueError(f"x: expected shape [M_total, {self.in_features}], got {tuple(pre.shape)}")
        pattern = "megatron" if hasattr(self.weight, "main_grad") else None
        if self.config is not None:
            return grouped_gemm_fp8(x, self.weight, group_lens, group_offs, trans_b=True, out_dtype=pre.dtype,
                                    config=self.config, fuse_bgrad_accum_pattern=pattern,
                                    weight_cache=self.weight_cache, wgrad_fp8=self.wgrad_fp8)
        return grouped_gemm(x, self.weight, group_lens, group_offs, trans_b=True, fuse_bgrad_accum_pattern=pattern)

    def extra_repr(self) -> str:
        fp8 = ""
        if self.config is not None:
            cfg = self.config
            block = f", block_size={cfg.block_size}" if cfg.block_size is not None else ""
            wgrad = "" if self.wgrad_fp8 else ", wgrad_fp8=False"
            fp8 = f", format={cfg.format.value}, granularity={cfg.granularity.value}{block}{wgrad}"
        return f"group_num={self.group_num}, in_features={self.in_features}, out_features={self.out_features}{fp8}"
