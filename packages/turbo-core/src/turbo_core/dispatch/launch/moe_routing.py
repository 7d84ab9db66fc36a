"""Custom ops and launchers of the router and index-conversion primitives:
``turbo::moe_routing_fwd``, ``turbo::moe_routing_bwd``, ``turbo::indices_to_multihot``,
``turbo::indices_to_multihot_bwd``, ``turbo::tokens_per_expert_to_mask`` (all static shapes)."""

from __future__ import annotations

import torch

from turbo_core.dispatch.dispatcher import call
from turbo_core.dispatch.specs.moe import (
    IndicesToMultihotArgs,
    IndicesToMultihotBwdArgs,
    MoeRoutingBwdArgs,
    MoeRoutingFwdArgs,
    TokensPerExpertToMaskArgs,
)

__all__ = ["indices_to_multihot", "indices_to_multihot_bwd", "moe_routing_bwd", "moe_routing_fwd",
           "tokens_per_expert_to_mask"]


@torch.library.custom_op("turbo::moe_routing_fwd", mutates_args=())
def _routing_fwd_op(logits: torch.Tensor, topk: int, groups: int, selected_groups: int, score_function: str,
                    scaling_factor: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return call("moe_routing_fwd", MoeRoutingFwdArgs(logits, topk, groups, selected_groups, score_function,
                                                     scaling_factor))


@_routing_fwd_op.register_fake
def _routing_fwd_fake(logits, topk, groups, selected_groups, score_function, scaling_factor):
    return torch.empty_like(logits), torch.empty_like(logits), torch.empty_like(logits, dtype=torch.bool)


@torch.library.custom_op("turbo::moe_routing_bwd", mutates_args=())
def _routing_bwd_op(logits: torch.Tensor, routing_map: torch.Tensor, grad_scores: torch.Tensor | None,
                    grad_probs: torch.Tensor | None, score_function: str, scaling_factor: float) -> torch.Tensor:
    return call("moe_routing_bwd", MoeRoutingBwdArgs(logits, routing_map, grad_scores, grad_probs, score_function,
                                                     scaling_factor))


@_routing_bwd_op.register_fake
def _routing_bwd_fake(logits, routing_map, grad_scores, grad_probs, score_function, scaling_factor):
    return torch.empty_like(logits)


@torch.library.custom_op("turbo::indices_to_multihot", mutates_args=())
def _multihot_op(indices: torch.Tensor, probs: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    return call("indices_to_multihot", IndicesToMultihotArgs(indices, probs, num_experts))


@_multihot_op.register_fake
def _multihot_fake(indices, probs, num_experts):
    t = indices.shape[0]
    return indices.new_empty((t, num_experts), dtype=torch.bool), probs.new_empty((t, num_experts))


@torch.library.custom_op("turbo::indices_to_multihot_bwd", mutates_args=())
def _multihot_bwd_op(grad_multihot: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    return call("indices_to_multihot_bwd", IndicesToMultihotBwdArgs(grad_multihot, indices))


@_multihot_bwd_op.register_fake
def _multihot_bwd_fake(grad_multihot, indices):
    return grad_multihot.new_empty(tuple(indices.shape))


@torch.library.custom_op("turbo::tokens_per_expert_to_mask", mutates_args=())
def _tpe_mask_op(tokens_per_expert: torch.Tensor, num_tokens: int) -> torch.Tensor:
    return call("tokens_per_expert_to_mask", TokensPerExpertToMaskArgs(tokens_per_expert, num_tokens))


@_tpe_mask_op.register_fake
def _tpe_mask_fake(tokens_per_expert, num_tokens):
    return tokens_per_expert.new_empty((num_tokens,), dtype=torch.int64)


def moe_routing_fwd(logits, topk, groups, selected_groups, score_function, scaling_factor):
    """Run ``moe_routing_fwd`` (see :class:`MoeRoutingFwdArgs`): ``(scores, probs, routing_map)``."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.moe_routing_fwd(logits, topk, groups, selected_groups, score_function, scaling_factor)
    return call("moe_routing_fwd", MoeRoutingFwdArgs(logits, topk, groups, selected_groups, score_function,
                                                     scaling_factor))


def moe_routing_bwd(logits, routing_map, grad_scores, grad_probs, score_function, scaling_factor):
    """Run ``moe_routing_bwd`` (see :class:`MoeRoutingBwdArgs`): ``grad_logits``."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.moe_routing_bwd(logits, routing_map, grad_scores, grad_probs, score_function,
                                               scaling_factor)
    return call("moe_routing_bwd", MoeRoutingBwdArgs(logits, routing_map, grad_scores, grad_probs, score_function,
                                                     scaling_factor))


def indices_to_multihot(indices, probs, num_experts):
    """Run ``indices_to_multihot``: ``(routing_map bool [T, E], multihot_probs [T, E])``."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.indices_to_multihot(indices, probs, num_experts)
    return call("indices_to_multihot", IndicesToMultihotArgs(indices, probs, num_experts))


def indices_to_multihot_bwd(grad_multihot, indices):
    """Run ``indices_to_multihot_bwd``: the ``[T, K]`` gradient of the top-k probs."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.indices_to_multihot_bwd(grad_multihot, indices)
    return call("indices_to_multihot_bwd", IndicesToMultihotBwdArgs(grad_multihot, indices))


def tokens_per_expert_to_mask(tokens_per_expert, num_tokens):
    """Run ``tokens_per_expert_to_mask``: int64 ``[num_tokens]``."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.tokens_per_expert_to_mask(tokens_per_expert, num_tokens)
    return call("tokens_per_expert_to_mask", TokensPerExpertToMaskArgs(tokens_per_expert, num_tokens))
