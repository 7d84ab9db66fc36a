"""``indices_to_multihot`` / ``indices_to_multihot_bwd`` and ``tokens_per_expert_to_mask`` on
Triton (see ``multihot_kernels``): bit-exact copies, no host sync."""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.moe import IndicesToMultihotArgs, IndicesToMultihotBwdArgs, TokensPerExpertToMaskArgs
from turbo_triton.intmath import cdiv, next_power_of_2
from turbo_triton.launcher import fast_kernel
from turbo_triton.moe import common

__all__ = ["can_handle", "can_handle_tpe_mask", "indices_to_multihot", "indices_to_multihot_bwd",
           "tokens_per_expert_to_mask"]

_MAX_TOPK = 64
_BWD_BLOCK = 128


def can_handle(args: IndicesToMultihotArgs | IndicesToMultihotBwdArgs) -> str | None:
    if isinstance(args, IndicesToMultihotArgs):
        named, e = {"indices": args.indices, "probs": args.probs}, args.num_experts
    else:
        named, e = {"indices": args.indices, "grad_multihot": args.grad_multihot}, args.grad_multihot.shape[1]
    if args.indices.shape[1] > _MAX_TOPK:
        return f"TRITON indices_to_multihot serves top-k up to {_MAX_TOPK}, got {args.indices.shape[1]}"
    return common.tensors_reason("indices_to_multihot", named) or common.experts_reason("indices_to_multihot", e)


def can_handle_tpe_mask(args: TokensPerExpertToMaskArgs) -> str | None:
    return common.tensors_reason("tokens_per_expert_to_mask", {"tokens_per_expert": args.tokens_per_expert})


def _block_t(width: int) -> int:
    return max(1, min(128, 4096 // next_power_of_2(max(width, 1))))


def indices_to_multihot(args: IndicesToMultihotArgs):
    """``(routing_map bool [T, E], multihot_probs [T, E] probs' dtype)``."""
    from turbo_triton.moe import multihot_kernels as kern

    idx, probs, e = args.indices, args.probs, args.num_experts
    t, k = idx.shape
    rmap = torch.empty((t, e), dtype=torch.bool, device=idx.device)
    dense = torch.empty((t, e), dtype=probs.dtype, device=idx.device)
    if t:
        bt = _block_t(e)
        be = next_power_of_2(e)
        fast_kernel(kern.multihot_kernel)[(cdiv(t, bt),)](
            idx, common.bits(probs) if k else common.bits(dense), rmap.view(torch.uint8), common.bits(dense),
            t, e, K=k, BLOCK_T=bt, BLOCK_E=be,
            num_warps=common.warps(bt * be))
    return rmap, dense


def indices_to_multihot_bwd(args: IndicesToMultihotBwdArgs):
    """``grad_probs [T, K]`` in grad_multihot's dtype."""
    from turbo_triton.moe import multihot_kernels as kern

    idx, gd = args.indices, args.grad_multihot
    t, k = idx.shape
    out = torch.empty((t, k), dtype=gd.dtype, device=gd.device)
    if t and k:  # one slot a lane, 128 a program on 4 warps (tuned on sm90: multihot_bwd_kernel)
        fast_kernel(kern.multihot_bwd_kernel)[(cdiv(t * k, _BWD_BLOCK),)](
            idx, common.bits(gd), common.bits(out), t * k, gd.shape[1], K=k, BLOCK=_BWD_BLOCK, num_warps=4)
    return out


def tokens_per_expert_to_mask(args: TokensPerExpertToMaskArgs):
    """int64 ``[num_tokens]``: 1 for ``i < sum(tokens_per_expert)``, else 0 (the sum stays on the device)."""
    from turbo_triton.moe import multihot_kernels as kern

    tpe, n = args.tokens_per_expert, args.num_tokens
    out = torch.empty((n,), dtype=torch.int64, device=tpe.device)
    if n:
        block = min(4096, next_power_of_2(n))
        be = min(1024, next_power_of_2(max(tpe.shape[0], 1)))
        fast_kernel(kern.tpe_mask_kernel)[(cdiv(n, block),)](tpe if tpe.numel() else out, out, tpe.shape[0], n,
                                                       BLOCK_E=be, BLOCK=block, num_warps=common.warps(block))
    return out
