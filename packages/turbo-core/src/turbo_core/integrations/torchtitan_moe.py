"""TorchTitan's ``MoE`` layer computed with turbo: routing (where its semantics are TorchTitan's),
``moe_permute``, grouped GEMMs over the stored 3-D expert weights, ``moe_unpermute``.

:class:`TurboMoE` subclasses TorchTitan's ``MoE`` and builds the same children (router, routed
experts with their ``w1_EFD``/``w2_EDF``/``w3_EFD`` weights and token dispatcher, shared experts) and
buffers, so parameters, state_dict, initialization, sharding configs and the load-balancing hook
are TorchTitan's. Only ``forward`` changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.distributed.tensor import DTensor
from torchtitan.models.common.moe import MoE

from turbo_core.integrations.torchtitan_layers import fp8_recipe
from turbo_core.ops.activation import swiglu_with_probs
from turbo_core.ops.gemm import gemm
from turbo_core.ops.grouped_gemm import grouped_gemm
from turbo_core.ops.grouped_gemm_fp8 import grouped_gemm_fp8
from turbo_core.ops.moe_permute import moe_permute, moe_unpermute
from turbo_core.ops.moe_routing import fused_group_topk_routing_with_aux_score
from turbo_core.ops.weight_cache import WeightQuantCache

__all__ = ["TurboMoE", "routing_mismatch"]


def routing_mismatch(config: MoE.Config) -> str | None:
    """Why turbo's ``fused_group_topk_routing_with_aux_score`` cannot stand in for this MoE's
    ``TokenChoiceTopKRouter`` (``None``: it can; the selection and the weights are the same).

    TorchTitan: ``s = softmax|sigmoid(x @ gate^T)`` in fp32; the top-k of ``s + expert_bias`` (with
    group-limited routing, inside the ``num_limited_groups`` groups whose two best scores sum
    highest); weights ``s`` at the chosen experts, divided by their sum with ``route_norm``, times
    ``route_scale``. turbo's op has no expert bias, always normalizes sigmoid weights over the top-k
    and scores a group by its ``top_k // num_limited_groups`` best; softmax with ``route_norm`` is
    normalized after it.
    """
    router = config.router
    if config.load_balance_coeff is not None:
        return ("load_balance_coeff is set: TorchTitan adds the load-balancing expert bias before the top-k "
                "(turbo's routing op has no bias)")
    if router.score_func == "sigmoid" and not router.route_norm:
        return "sigmoid scores without route_norm (turbo's sigmoid routing normalizes the top-k weights)"
    groups, limited = router.num_expert_groups, router.num_limited_groups
    if groups is not None:
        if limited is None or router.top_k % limited or router.top_k // limited != 2:
            return (f"group-limited routing with top_k {router.top_k} over {limited} groups: TorchTitan scores a "
                    "group by its 2 best experts, turbo by its top_k // num_limited_groups best")
        if router.num_experts % groups or router.num_experts // groups < 2:
            return f"{router.num_experts} experts in {groups} groups (turbo needs at least 2 experts per group)"
    return None


class TurboMoE(MoE):
    """TorchTitan's ``MoE`` with turbo's kernels: ``x [B, L, D]`` -> ``[B, L, D]``.

    ``out[t] = sum over t's top-k experts e of w[t, e] * W2_e(silu(W1_e x_t) * W3_e x_t)`` (plus the
    shared experts), as TorchTitan computes it, in x's dtype (TorchTitan rounds the experts'
    operands to bf16 for ``torch._grouped_mm``; turbo's grouped GEMM takes x's dtype and
    accumulates in fp32). Steps: the router (turbo's routing op with ``turbo_routing``, else
    TorchTitan's), ``moe_permute`` of the ``T * top_k`` copies into expert order (a static size: no
    host sync), ``grouped_gemm`` with ``W1`` and ``W3``, ``swiglu_with_probs`` (the routing weight
    multiplies each copy), ``grouped_gemm`` with ``W2``, ``moe_unpermute`` (each token's copies summed
    in fp32). With ``recipe`` the three expert GEMMs are ``grouped_gemm_fp8``.

    TorchTitan's own forward runs instead under expert parallelism (the dispatcher has an EP mesh)
    or when a weight or the input is a DTensor.
    """

    @dataclass(kw_only=True, slots=True)
    class Config(MoE.Config):
        turbo_routing: bool = False
        """Route with turbo's op (the converter sets it where :func:`routing_mismatch` is None)."""
        recipe: str | None = None
        """FP8 recipe of the expert GEMMs (``turbo_core.integrations.torchtitan_layers.FP8_RECIPES``)."""

    def __init__(self, config: Config):
        super().__init__(config)
        self.turbo_routing = config.turbo_routing
        self.fp8 = fp8_recipe(config.recipe) if config.recipe is not None else None
        self.weight_caches = (WeightQuantCache(), WeightQuantCache(), WeightQuantCache())

    def _turbo_applies(self, x: torch.Tensor) -> bool:
        experts = self.routed_experts.inner_experts
        if getattr(self.routed_experts.token_dispatcher, "ep_mesh", None) is not None:
            return False
        tensors = (x, experts.w1_EFD, experts.w2_EDF, experts.w3_EFD, self.router.gate.weight)
        return not any(isinstance(t, DTensor) for t in tensors)

    def _route(self, x_TD: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(weights fp32 [T, E], routing_map bool [T, E])`` from turbo's routing op."""
        router = self.router
        logits = gemm(x_TD.float(), router.gate.weight.float(), trans_b=True)
        if router.gate.bias is not None:
            logits = logits + router.gate.bias.float()
        renorm = router.score_func == "softmax" and router.route_norm
        _, probs, routing_map = fused_group_topk_routing_with_aux_score(
            logits, router.top_k, router.num_expert_groups, router.num_limited_groups, router.score_func,
            1.0 if renorm else router.route_scale)
        if renorm:
            probs = probs / (probs.sum(dim=-1, keepdim=True) + 1e-20) * router.route_scale
        return probs, routing_map

    def _grouped(self, a: torch.Tensor, weight: torch.Tensor, lens: torch.Tensor, cache: WeightQuantCache):
        w = weight if weight.dtype == a.dtype else weight.to(a.dtype)
        if self.fp8 is None:
            return grouped_gemm(a, w, lens, trans_b=True)
        return grouped_gemm_fp8(a, w, lens, trans_b=True, out_dtype=a.dtype, config=self.fp8,
                                weight_cache=cache if w is weight else None)

    def _experts(self, rows: torch.Tensor, lens: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        experts = self.routed_experts.inner_experts
        c1, c2, c3 = self.weight_caches
        gate = self._grouped(rows, experts.w1_EFD, lens, c1)
        up = self._grouped(rows, experts.w3_EFD, lens, c3)
        act = swiglu_with_probs(torch.cat([gate, up], dim=-1), probs)
        return self._grouped(act, experts.w2_EDF, lens, c2)

    def forward(self, x_BLD: torch.Tensor) -> torch.Tensor:
        if not self._turbo_applies(x_BLD):
            return super().forward(x_BLD)
        b, seq, dim = x_BLD.shape
        x_TD = x_BLD.reshape(-1, dim)
        tokens, top_k = x_TD.shape[0], self.router.top_k
        num_experts = self.routed_experts.inner_experts.num_experts
        if self.turbo_routing and not self.router._debug_force_load_balance:
            probs, expert_map = self._route(x_TD)
            layout = "routing_map"
        else:
            scores_BLK, experts_BLK, _ = self.router(x_BLD, self.expert_bias_E)
            probs, expert_map = scores_BLK.reshape(tokens, top_k).float(), experts_BLK.reshape(tokens, top_k)
            layout = "topk"
        perm = moe_permute(x_TD, expert_map, num_local_experts=num_experts, num_permuted_tokens=tokens * top_k,
                           probs=probs, probs_layout=layout)
        if self.training:
            with torch.no_grad():
                self.tokens_per_expert_E.add_(perm.tokens_per_expert.float())
        rows = self._experts(perm.permuted_tokens, perm.tokens_per_expert, perm.permuted_probs)
        out_TD, _ = moe_unpermute(rows, perm.row_id_map, perm.num_dispatched_tokens, restore_shape=(tokens, dim),
                                  num_local_experts=num_experts)
        out_BLD = out_TD.view(b, seq, dim)
        if self.shared_experts is not None:
            out_BLD = out_BLD + self.shared_experts(x_BLD)
        return out_BLD
