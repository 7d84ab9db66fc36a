"""Reference router and index conversions (``moe_routing_fwd/bwd``, ``indices_to_multihot(_bwd)``,
``tokens_per_expert_to_mask``).

Scores are computed in float64 on the CPU and fp32 on a GPU and rounded once to the output dtype.
Top-k selection uses a stable descending sort, so ties go to the lower index. No host syncs.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.moe import (
    IndicesToMultihotArgs,
    IndicesToMultihotBwdArgs,
    MoeRoutingBwdArgs,
    MoeRoutingFwdArgs,
    TokensPerExpertToMaskArgs,
)

__all__ = [
    "first_slots",
    "indices_to_multihot",
    "indices_to_multihot_bwd",
    "moe_routing_bwd",
    "moe_routing_fwd",
    "tokens_per_expert_to_mask",
]


def compute_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.device.type == "cpu" else torch.float32


def _top_indices(values: torch.Tensor, k: int) -> torch.Tensor:
    return torch.sort(values, dim=-1, descending=True, stable=True).indices[..., :k]


def moe_routing_fwd(args: MoeRoutingFwdArgs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    logits = args.logits
    t, e = logits.shape
    x = logits.to(compute_dtype(logits))
    if args.score_function == "sigmoid":
        raw = torch.sigmoid(x)
        scores = raw / raw.sum(dim=-1, keepdim=True)
    else:
        raw = torch.softmax(x, dim=-1)
        scores = raw
    per_group = e // args.groups
    k_group = args.topk // args.selected_groups
    grouped = raw.reshape(t, args.groups, per_group)
    group_score = torch.sort(grouped, dim=-1, descending=True, stable=True).values[..., :k_group].sum(-1)
    kept_groups = _top_indices(group_score, args.selected_groups)
    group_mask = torch.zeros((t, args.groups), dtype=torch.bool, device=logits.device)
    group_mask.scatter_(1, kept_groups, True)
    expert_mask = group_mask.repeat_interleave(per_group, dim=1)
    selected = _top_indices(raw.masked_fill(~expert_mask, float("-inf")), args.topk)
    routing_map = torch.zeros((t, e), dtype=torch.bool, device=logits.device)
    routing_map.scatter_(1, selected, True)
    values = raw.gather(1, selected)
    if args.score_function == "sigmoid":
        values = values / values.sum(dim=-1, keepdim=True)
    probs = torch.zeros_like(raw).scatter_(1, selected, values * float(args.scaling_factor))
    return scores.to(logits.dtype), probs.to(logits.dtype), routing_map


def moe_routing_bwd(args: MoeRoutingBwdArgs) -> torch.Tensor:
    ct = compute_dtype(args.logits)
    x = args.logits.to(ct)
    grad = torch.zeros_like(x)
    sigmoid = args.score_function == "sigmoid"
    if sigmoid:
        s = torch.sigmoid(x)
        dsig = s * (1 - s)
    else:
        s = torch.softmax(x, dim=-1)
    if args.grad_scores is not None:
        g = args.grad_scores.to(ct)
        if sigmoid:
            z = s.sum(dim=-1, keepdim=True)
            grad = grad + (g / z - (g * s).sum(dim=-1, keepdim=True) / (z * z)) * dsig
        else:
            grad = grad + s * (g - (g * s).sum(dim=-1, keepdim=True))
    if args.grad_probs is not None:
        m = args.routing_map.to(ct)
        g = args.grad_probs.to(ct) * m * float(args.scaling_factor)
        if sigmoid:
            z = (s * m).sum(dim=-1, keepdim=True)
            z = torch.where(z > 0, z, torch.ones_like(z))
            grad = grad + (g / z - (g * s).sum(dim=-1, keepdim=True) / (z * z)) * m * dsig
        else:
            grad = grad + s * (g - (g * s).sum(dim=-1, keepdim=True))
    return grad.to(args.logits.dtype)


def first_slots(indices: torch.Tensor, num_experts: int) -> torch.Tensor:
    """int64 ``[T, K]``: the expert id of each slot that is the first valid slot of its id in the
    row, else ``num_experts`` (a dump column)."""
    idx = indices.long()
    valid = (idx >= 0) & (idx < num_experts)
    k = idx.shape[1]
    same = idx.unsqueeze(2) == idx.unsqueeze(1)  # [T, K, K]: slot a and slot b hold the same id
    earlier = torch.ones((k, k), dtype=torch.bool, device=idx.device).tril(-1)  # b < a
    repeated = (same & earlier).any(dim=2)
    return torch.where(valid & ~repeated, idx, torch.full_like(idx, num_experts))


def indices_to_multihot(args: IndicesToMultihotArgs) -> tuple[torch.Tensor, torch.Tensor]:
    t = args.indices.shape[0]
    e = args.num_experts
    cols = first_slots(args.indices, e)
    dev = args.indices.device
    routing_map = torch.zeros((t, e + 1), dtype=torch.bool, device=dev).scatter_(1, cols, True)[:, :e]
    keep = cols < e
    values = torch.where(keep, args.probs, torch.zeros_like(args.probs))
    probs = torch.zeros((t, e + 1), dtype=args.probs.dtype, device=dev).scatter_(1, cols, values)[:, :e]
    return routing_map.contiguous(), probs.contiguous()


def indices_to_multihot_bwd(args: IndicesToMultihotBwdArgs) -> torch.Tensor:
    e = args.grad_multihot.shape[1]
    cols = first_slots(args.indices, e)
    keep = cols < e
    picked = args.grad_multihot.gather(1, cols.clamp(max=e - 1))
    return torch.where(keep, picked, torch.zeros_like(picked))


def tokens_per_expert_to_mask(args: TokensPerExpertToMaskArgs) -> torch.Tensor:
    tpe = args.tokens_per_expert
    total = tpe.to(torch.int64).sum()
    positions = torch.arange(args.num_tokens, dtype=torch.int64, device=tpe.device)
    return (positions < total).to(torch.int64)
