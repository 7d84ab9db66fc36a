"""Custom ops and launchers of the permutation primitives: ``turbo::moe_permute_preprocess``,
``turbo::moe_permute``, ``turbo::moe_unpermute``, ``turbo::moe_unpermute_bwd``.

Output shapes follow the arguments only (``num_out`` is an int argument), never the data. A custom
op cannot return ``None``, so optional outputs come back in a list whose length follows from which
optional inputs were given; the launchers turn them back into fixed-arity tuples.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.dispatcher import call
from turbo_core.dispatch.specs.moe import (
    MoePermuteArgs,
    MoePermutePreprocessArgs,
    MoeUnpermuteArgs,
    MoeUnpermuteBwdArgs,
)

__all__ = ["moe_permute", "moe_permute_preprocess", "moe_unpermute", "moe_unpermute_bwd"]


@torch.library.custom_op("turbo::moe_permute_preprocess", mutates_args=())
def _preprocess_op(expert_map: torch.Tensor, num_local_experts: int, pad_multiple: int, num_permuted_tokens: int,
                   probs_layout: str, expert_capacity: int
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return call("moe_permute_preprocess", MoePermutePreprocessArgs(
        expert_map, num_local_experts, pad_multiple, num_permuted_tokens, probs_layout, expert_capacity))


@_preprocess_op.register_fake
def _preprocess_fake(expert_map, num_local_experts, pad_multiple, num_permuted_tokens, probs_layout, expert_capacity):
    t, e = expert_map.shape[0], num_local_experts
    return (expert_map.new_empty((t, 2 * e + 1), dtype=torch.int32), expert_map.new_empty((e,), dtype=torch.int64),
            expert_map.new_empty((1,), dtype=torch.int32), expert_map.new_empty((1,), dtype=torch.int32))


@torch.library.custom_op("turbo::moe_permute", mutates_args=())
def _permute_op(tokens: torch.Tensor, row_id_map: torch.Tensor, num_out: int, scaling_factor: torch.Tensor | None,
                probs: torch.Tensor | None) -> list[torch.Tensor]:
    out, scales, pprobs = call("moe_permute", MoePermuteArgs(tokens, row_id_map, num_out, scaling_factor, probs))
    return [t for t in (out, scales, pprobs) if t is not None]


@_permute_op.register_fake
def _permute_fake(tokens, row_id_map, num_out, scaling_factor, probs):
    outs = [tokens.new_empty((num_out, tokens.shape[1]))]
    if scaling_factor is not None:
        outs.append(scaling_factor.new_empty((num_out, scaling_factor.shape[1])))
    if probs is not None:
        outs.append(probs.new_empty((num_out,)))
    return outs


@torch.library.custom_op("turbo::moe_unpermute", mutates_args=())
def _unpermute_op(permuted_tokens: torch.Tensor, row_id_map: torch.Tensor, permuted_probs: torch.Tensor | None,
                  probs_width: int, merging_probs: torch.Tensor | None) -> list[torch.Tensor]:
    out, probs = call("moe_unpermute", MoeUnpermuteArgs(permuted_tokens, row_id_map, permuted_probs, probs_width,
                                                        merging_probs))
    return [out] if probs is None else [out, probs]


@_unpermute_op.register_fake
def _unpermute_fake(permuted_tokens, row_id_map, permuted_probs, probs_width, merging_probs):
    t = row_id_map.shape[0]
    outs = [permuted_tokens.new_empty((t, permuted_tokens.shape[1]))]
    if permuted_probs is not None:
        outs.append(permuted_probs.new_empty((t, probs_width)))
    return outs


@torch.library.custom_op("turbo::moe_unpermute_bwd", mutates_args=())
def _unpermute_bwd_op(grad_tokens: torch.Tensor, permuted_tokens: torch.Tensor, row_id_map: torch.Tensor,
                      merging_probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return call("moe_unpermute_bwd", MoeUnpermuteBwdArgs(grad_tokens, permuted_tokens, row_id_map, merging_probs))


@_unpermute_bwd_op.register_fake
def _unpermute_bwd_fake(grad_tokens, permuted_tokens, row_id_map, merging_probs):
    return (grad_tokens.new_empty((permuted_tokens.shape[0], grad_tokens.shape[1])),
            torch.empty_like(merging_probs))


def moe_permute_preprocess(expert_map, num_local_experts, *, pad_multiple=0, num_permuted_tokens=-1,
                           probs_layout="routing_map", expert_capacity=-1):
    """Run ``moe_permute_preprocess``: ``(row_id_map, tokens_per_expert, overflow_flag, num_dispatched)``."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.moe_permute_preprocess(expert_map, num_local_experts, pad_multiple,
                                                      num_permuted_tokens, probs_layout, expert_capacity)
    return call("moe_permute_preprocess", MoePermutePreprocessArgs(
        expert_map, num_local_experts, pad_multiple, num_permuted_tokens, probs_layout, expert_capacity))


def moe_permute(tokens, row_id_map, num_out, *, scaling_factor=None, probs=None):
    """Run ``moe_permute``: ``(permuted, permuted_scaling_factor or None, permuted_probs or None)``."""
    if torch.compiler.is_compiling():
        outs = list(torch.ops.turbo.moe_permute(tokens, row_id_map, num_out, scaling_factor, probs))
        out = outs.pop(0)
        scales = outs.pop(0) if scaling_factor is not None else None
        pprobs = outs.pop(0) if probs is not None else None
        return out, scales, pprobs
    return call("moe_permute", MoePermuteArgs(tokens, row_id_map, num_out, scaling_factor, probs))


def moe_unpermute(permuted_tokens, row_id_map, *, permuted_probs=None, probs_width=0, merging_probs=None):
    """Run ``moe_unpermute``: ``(tokens, unpermuted_probs or None)``."""
    if torch.compiler.is_compiling():
        outs = torch.ops.turbo.moe_unpermute(permuted_tokens, row_id_map, permuted_probs, probs_width, merging_probs)
        return outs[0], (outs[1] if permuted_probs is not None else None)
    return call("moe_unpermute", MoeUnpermuteArgs(permuted_tokens, row_id_map, permuted_probs, probs_width,
                                                  merging_probs))


def moe_unpermute_bwd(grad_tokens, permuted_tokens, row_id_map, merging_probs):
    """Run ``moe_unpermute_bwd``: ``(grad_permuted, grad_merging_probs)``."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.moe_unpermute_bwd(grad_tokens, permuted_tokens, row_id_map, merging_probs)
    return call("moe_unpermute_bwd", MoeUnpermuteBwdArgs(grad_tokens, permuted_tokens, row_id_map, merging_probs))
