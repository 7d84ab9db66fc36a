"""The forwards ``apply_turbo`` gives a model's gated MLP blocks and softmax top-k routers.

Each is a mixin placed in front of the module's own class by a class swap
(:func:`swap_class`): the module object, its parameters, buffers, hooks, attribute names and
``isinstance`` checks against transformers' class all stay; only ``forward`` changes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from turbo_core.modules.float8_linear import Float8Linear
from turbo_core.ops.activation import swiglu_with_probs
from turbo_core.ops.gemm import gemm
from turbo_core.ops.gemm_fp8 import gemm_fp8
from turbo_core.ops.moe_routing import fused_group_topk_routing_with_aux_score

__all__ = ["TurboGatedMLP", "TurboPatched", "TurboSoftmaxTopKRouter", "swap_class"]


class TurboPatched:
    """Marks a class made by :func:`swap_class` (a module of such a class is patched already)."""


_SWAPPED: dict[tuple[type, type, tuple], type] = {}


def swap_class(module: torch.nn.Module, mixin: type, **attrs) -> None:
    """Make ``module`` an instance of ``Turbo<its class>``, a subclass of ``(mixin, its class)``
    with the class attributes ``attrs`` (one such class per combination, made once)."""
    cls = type(module)
    key = (mixin, cls, tuple(sorted(attrs.items())))
    new = _SWAPPED.get(key)
    if new is None:
        new = type(f"Turbo{cls.__name__}", (mixin, cls), {"__module__": mixin.__module__, **attrs})
        _SWAPPED[key] = new
    module.__class__ = new


def _cat(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    return None if a is None else torch.cat([a, b])


class TurboGatedMLP(TurboPatched):
    """``down(silu(gate(x)) * up(x))`` as one GEMM over the concatenated ``[gate | up]`` weight
    (``[2F, H]``, made by ``torch.cat`` each forward: the parameters stay two, as the checkpoint
    has them, and the GEMM's backward splits the gradient between them), turbo's
    ``swiglu_with_probs`` (probability 1 per token: SiLU of the first half times the second, in
    fp32, rounded once) and the ``down_proj`` module. When ``gate_proj`` and ``up_proj`` are
    ``Float8Linear`` layers of one recipe the GEMM is ``gemm_fp8`` with that recipe (the
    concatenated weight is quantized each forward; it is not a parameter a weight cache could key
    on). ``x [..., H] -> [..., H]`` in x's dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_proj, self.up_proj
        x2d = x.reshape(-1, x.shape[-1])
        w = torch.cat([gate.weight, up.weight])
        if isinstance(gate, Float8Linear) and isinstance(up, Float8Linear) and gate.config == up.config:
            h = gemm_fp8(x2d, w, trans_b=True, out_dtype=x.dtype, config=gate.config)
        else:
            h = gemm(x2d, w, trans_b=True, out_dtype=x.dtype)
        bias = _cat(gate.bias, up.bias)
        if bias is not None:
            h = h + bias
        ones = torch.ones(h.shape[0], dtype=torch.float32, device=h.device)
        y = self.down_proj(swiglu_with_probs(h, ones))
        return y.reshape(*x.shape[:-1], y.shape[-1])


class TurboSoftmaxTopKRouter(TurboPatched):
    """A softmax top-k router (Mixtral's, Qwen3-MoE's) computed by
    ``fused_group_topk_routing_with_aux_score(logits.float(), top_k, score_function="softmax")``.

    ``hidden_states [..., H] -> (router_logits [T, E] in the weight's dtype, weights [T, K],
    indices int64 [T, K])``, as transformers' router returns them: the logits ``x @ weight^T``, the
    K largest softmax probabilities (fp32) and their experts in descending order (read from the
    router's dense ``[T, E]`` probabilities with ``topk``), divided by their sum when the router
    normalizes (``norm_topk_prob``, always for Mixtral), cast back to the logits' dtype when the
    architecture's router does (class attribute ``turbo_weights_in_logits_dtype``). Gradients reach
    the router weight and the tokens through the softmax of all E logits, as in transformers."""

    turbo_weights_in_logits_dtype = False

    def forward(self, hidden_states: torch.Tensor):
        x = hidden_states.reshape(-1, self.hidden_dim)
        logits = F.linear(x, self.weight)
        _, probs, _ = fused_group_topk_routing_with_aux_score(logits.float(), self.top_k, score_function="softmax")
        weights, indices = torch.topk(probs, self.top_k, dim=-1)
        if getattr(self, "norm_topk_prob", True):
            weights = weights / weights.sum(dim=-1, keepdim=True)
        if self.turbo_weights_in_logits_dtype:
            weights = weights.to(logits.dtype)
        return logits, weights, indices
