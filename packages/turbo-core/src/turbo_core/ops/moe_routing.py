"""MoE router and index conversions: ``fused_group_topk_routing_with_aux_score``,
``indices_to_multihot``, ``tokens_per_expert_to_mask`` (Primus-Turbo's names and arguments)."""

from __future__ import annotations

import torch

from turbo_core.dispatch.launch import moe_routing as launch
from turbo_core.dispatch.specs.moe import (
    INDICES_TO_MULTIHOT,
    MOE_ROUTING_FWD,
    TOKENS_PER_EXPERT_TO_MASK,
    IndicesToMultihotArgs,
    MoeRoutingFwdArgs,
    TokensPerExpertToMaskArgs,
)
from turbo_core.dispatch.specs.validate import require_bool

__all__ = ["fused_group_topk_routing_with_aux_score", "indices_to_multihot", "tokens_per_expert_to_mask"]


class _RoutingFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, topk, groups, selected_groups, score_function, scaling_factor):
        scores, probs, routing_map = launch.moe_routing_fwd(logits, topk, groups, selected_groups, score_function,
                                                            scaling_factor)
        ctx.save_for_backward(logits, routing_map)
        ctx.score_function, ctx.scaling_factor = score_function, scaling_factor
        ctx.mark_non_differentiable(routing_map)
        return scores, probs, routing_map

    @staticmethod
    def backward(ctx, grad_scores, grad_probs, _grad_map):
        logits, routing_map = ctx.saved_tensors
        grad = launch.moe_routing_bwd(logits, routing_map, grad_scores.contiguous(), grad_probs.contiguous(),
                                      ctx.score_function, ctx.scaling_factor)
        return grad, None, None, None, None, None


def fused_group_topk_routing_with_aux_score(logits: torch.Tensor, topk: int, groups: int | None = 1,
                                            selected_groups: int | None = 1, score_function: str = "sigmoid",
                                            scaling_factor: float | None = 1.0):
    """Group-limited top-k routing, with the scores an auxiliary load-balancing loss uses.

    Args:
        logits: ``[T, E]`` router logits, fp16/bf16/fp32 (non-contiguous input is copied).
        topk: experts per token, ``1 <= topk <= E``.
        groups: expert groups (``E % groups == 0``); ``None`` means 1 (and ``selected_groups`` 1).
        selected_groups: groups kept per token, ``1..groups``; ``topk // selected_groups`` experts
            score a group (must be ``1..E/groups``).
        score_function: ``"sigmoid"`` or ``"softmax"``.
        scaling_factor: multiplies the probs (``None`` means 1.0).

    Returns:
        ``(scores, probs, routing_map)``, each ``[T, E]``:

        * ``scores``: ``sigmoid(l) / sum(sigmoid(l))`` or ``softmax(l)`` over all experts (aux loss);
        * ``probs``: at the selected experts, the sigmoid values normalized over the top-k
          (sigmoid) or the raw softmax values (softmax), times ``scaling_factor``; 0 elsewhere;
        * ``routing_map``: bool, True at the ``topk`` selected experts of each row.

        Selection: a group scores the sum of its ``topk // selected_groups`` best raw scores; the
        ``selected_groups`` best groups are kept, then the ``topk`` best experts inside them; ties
        go to the lower index. Scores and probs are in logits' dtype (fp32 or wider math, rounded
        once). The backward (``moe_routing_bwd``) differentiates scores and probs with the
        selection held fixed; routing_map has no gradient.
    """
    if groups is None:
        groups, selected_groups = 1, 1
    if selected_groups is None:
        selected_groups = 1
    scaling_factor = 1.0 if scaling_factor is None else scaling_factor
    args = MoeRoutingFwdArgs(logits, topk, groups, selected_groups, score_function, scaling_factor)
    MOE_ROUTING_FWD.check_args(args)
    return _RoutingFunction.apply(logits.contiguous(), topk, groups, selected_groups, score_function,
                                  float(scaling_factor))


class _MultihotFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, indices, probs, num_experts):
        routing_map, multihot = launch.indices_to_multihot(indices, probs, num_experts)
        ctx.save_for_backward(indices)
        ctx.mark_non_differentiable(routing_map)
        return routing_map, multihot

    @staticmethod
    def backward(ctx, _grad_map, grad_multihot):
        (indices,) = ctx.saved_tensors
        return None, launch.indices_to_multihot_bwd(grad_multihot.contiguous(), indices), None


def indices_to_multihot(indices: torch.Tensor, probs_indices: torch.Tensor, num_of_local_experts: int,
                        fused: bool = False):
    """Top-k expert ids to a routing map and dense probs.

    Args:
        indices: int32/int64 ``[T, K]`` local expert ids, -1 = none (e.g. DeepEP's received ids).
        probs_indices: ``[T, K]`` fp16/bf16/fp32, the probability of each slot.
        num_of_local_experts: ``E >= 1``; on CPU an id outside ``[-1, E)`` raises, on a GPU it is
            treated as -1 (no host sync).
        fused: accepted for Primus-Turbo compatibility; the result does not depend on it.

    Returns:
        ``(routing_map bool [T, E], probs [T, E])`` with ``probs[t, indices[t, k]] =
        probs_indices[t, k]`` and zeros elsewhere, in probs_indices' dtype (Primus-Turbo's unfused
        path always returned fp32: here one convention, the input dtype). An id repeated in a row
        counts once, at its first slot; the gradient flows back to that slot only.
    """
    require_bool("fused", fused)
    if isinstance(indices, torch.Tensor):
        indices = indices.contiguous()
    if isinstance(probs_indices, torch.Tensor):
        probs_indices = probs_indices.contiguous()
    INDICES_TO_MULTIHOT.check_args(IndicesToMultihotArgs(indices, probs_indices, num_of_local_experts))
    return _MultihotFunction.apply(indices, probs_indices, num_of_local_experts)


def tokens_per_expert_to_mask(tokens_per_expert: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """``mask[i] = 1 if i < sum(tokens_per_expert) else 0`` for ``i < num_tokens``.

    ``tokens_per_expert``: int32/int64 ``[E]`` on any device (computed there, no host sync).
    Returns int64 ``[num_tokens]``; no autograd.
    """
    TOKENS_PER_EXPERT_TO_MASK.check_args(TokensPerExpertToMaskArgs(tokens_per_expert, num_tokens))
    return launch.tokens_per_expert_to_mask(tokens_per_expert.contiguous(), num_tokens)
