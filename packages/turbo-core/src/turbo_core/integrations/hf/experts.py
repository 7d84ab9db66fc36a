"""The ``"turbo"`` experts implementation of transformers' ``ExpertsInterface``.

transformers 5 stores an MoE layer's experts as two 3-D parameters, ``gate_up_proj [E, 2I, H]``
(the gate's ``I`` rows first) and ``down_proj [E, H, I]``, and lets a registry choose the function
that computes ``experts(hidden_states [T, H], top_k_index [T, K], top_k_weights [T, K])``.
:func:`turbo_experts_forward` computes it as

1. ``moe_permute`` of the tokens by the top-k index map, each copy carrying its routing weight
   (exactly ``T * K`` rows: a static size, no host sync);
2. ``grouped_gemm`` over ``gate_up_proj`` (``trans_b``: the stored layout, no copy) -> ``[T*K, 2I]``;
3. ``swiglu_with_probs``: ``silu(gate) * up * weight`` per row (the weight applied here, before the
   down projection, rather than after it: the same linear map);
4. ``grouped_gemm`` over ``down_proj`` -> ``[T*K, H]``;
5. ``moe_unpermute``: each token's K rows summed in fp32, rounded once to the hidden dtype.

With an FP8 recipe both grouped GEMMs are ``grouped_gemm_fp8`` with that recipe, each weight with
its own weight cache (quantized once per optimizer step).

A module ``apply_turbo`` did not mark (excluded, or of a layout this function does not compute),
or one in expert parallelism (its index map holds the sentinel ``E`` for other ranks' experts),
runs transformers' ``"grouped_mm"`` function instead, counted in :func:`fallbacks`.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field

import torch
from transformers.integrations.moe import ExpertsInterface, _default_apply_gate, grouped_mm_experts_forward

from turbo_core.low_precision import Float8QuantConfig
from turbo_core.ops.activation import swiglu_with_probs
from turbo_core.ops.grouped_gemm import grouped_gemm
from turbo_core.ops.grouped_gemm_fp8 import grouped_gemm_fp8
from turbo_core.ops.moe_permute import moe_permute, moe_unpermute
from turbo_core.ops.weight_cache import WeightQuantCache

__all__ = ["NAME", "ExpertsPlan", "fallbacks", "register", "turbo_experts_forward", "unsupported_layout"]

#: The implementation's name in transformers' registry (``experts_implementation="turbo"``).
NAME = "turbo"
#: The attribute ``apply_turbo`` sets on the experts modules it patches (an :class:`ExpertsPlan`).
MARK = "_turbo_experts"

_FALLBACKS: Counter = Counter()


@dataclass
class ExpertsPlan:
    """How a patched experts module computes: ``fp8`` (``None``: the weights' dtype) and, with
    FP8, one weight cache per 3-D weight."""

    fp8: Float8QuantConfig | None = None
    caches: dict[str, WeightQuantCache] = field(default_factory=dict)


def fallbacks() -> dict[str, int]:
    """How many experts calls ran transformers' ``grouped_mm`` instead of turbo, by reason."""
    return dict(_FALLBACKS)


def unsupported_layout(module: torch.nn.Module) -> str | None:
    """Why :func:`turbo_experts_forward` cannot compute ``module``, or ``None`` when it can: it needs
    the concatenated, untransposed, bias-free gated layout of ``use_experts_implementation`` with
    transformers' own gate (``act(gate) * up``), a SiLU activation and no post-expert norm."""
    flags = {"has_gate": True, "has_bias": False, "is_concatenated": True, "is_transposed": False,
             "has_post_expert_norm": False}
    for name, want in flags.items():
        if getattr(module, name, None) is not want:
            return f"{name} is {getattr(module, name, None)} (turbo computes {name}={want})"
    if getattr(type(module), "_apply_gate", None) is not _default_apply_gate:
        return "the class defines its own gate (_apply_gate)"
    act = getattr(module, "act_fn", None)
    if not isinstance(act, torch.nn.SiLU) and type(act).__name__ != "SiLUActivation":
        return f"activation {type(act).__name__} (turbo's fused gate is SiLU)"
    for name in ("gate_up_proj", "down_proj"):
        w = getattr(module, name, None)
        if not isinstance(w, torch.nn.Parameter) or w.dim() != 3:
            return f"{name} is not a 3-D parameter"
    return None


def _grouped(plan: ExpertsPlan, x: torch.Tensor, w: torch.Tensor, lens: torch.Tensor, name: str) -> torch.Tensor:
    if plan.fp8 is None:
        return grouped_gemm(x, w, lens, trans_b=True)
    return grouped_gemm_fp8(x, w, lens, trans_b=True, out_dtype=x.dtype, config=plan.fp8,
                            weight_cache=plan.caches.get(name))


def turbo_experts_forward(self: torch.nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                          top_k_weights: torch.Tensor) -> torch.Tensor:
    """``hidden_states [T, H]``, ``top_k_index`` int ``[T, K]`` (distinct ids in ``[0, E)`` per
    row), ``top_k_weights [T, K]`` (any float dtype; used in fp32) -> ``[T, H]`` in the hidden
    dtype: ``sum_k weight[t, k] * down[e](silu(gate[e] x_t) * up[e] x_t)`` with ``e =
    top_k_index[t, k]`` (see the module docstring for the steps). Gradients reach the tokens, the
    routing weights and both 3-D weights."""
    plan = getattr(self, MARK, None)
    reason = None
    if plan is None:
        reason = "module excluded from turbo or of a layout turbo does not compute"
    elif getattr(self, "_is_expert_parallel", False):
        reason = "expert parallelism (sentinel ids for other ranks' experts)"
    if reason is not None:
        if reason not in _FALLBACKS:
            warnings.warn(f"turbo experts: {reason}; this call runs transformers' grouped_mm", stacklevel=2)
        _FALLBACKS[reason] += 1
        return grouped_mm_experts_forward(self, hidden_states, top_k_index, top_k_weights)
    tokens, hidden = hidden_states.shape
    experts = self.gate_up_proj.shape[0]
    perm = moe_permute(hidden_states, top_k_index, num_local_experts=experts,
                       num_permuted_tokens=tokens * top_k_index.shape[1], probs=top_k_weights.float(),
                       probs_layout="topk")
    lens = perm.tokens_per_expert
    h = _grouped(plan, perm.permuted_tokens, self.gate_up_proj, lens, "gate_up_proj")
    h = _grouped(plan, swiglu_with_probs(h, perm.permuted_probs), self.down_proj, lens, "down_proj")
    out, _ = moe_unpermute(h, perm.row_id_map, perm.num_dispatched_tokens, restore_shape=(tokens, hidden),
                           num_local_experts=experts)
    return out


def register() -> None:
    """Register ``"turbo"`` in transformers' experts registry (idempotent)."""
    ExpertsInterface.register(NAME, turbo_experts_forward)
