"""``moe_dispatch`` / ``moe_combine``: expert-parallel token exchange with DeepEP semantics.

The backward of dispatch is a combine (gradients of the received rows summed back to their tokens,
and of the received probs to their top-k slots); the backward of combine is a dispatch that reuses
the handle. The multi-rank backends come from turbo-deepep; turbo-core's reference backend TORCH
serves a single process (``group=None`` or a group of world size 1) and declines larger groups.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from turbo_core.dispatch.launch import moe_dispatch as launch
from turbo_core.dispatch.specs.moe import (
    MOE_COMBINE,
    MOE_DISPATCH,
    MoeCombineArgs,
    MoeDispatchArgs,
    MoeDispatchHandle,
)
from turbo_core.low_precision import FP8_DTYPES

__all__ = ["MoeDispatchHandle", "MoeDispatchResult", "moe_combine", "moe_dispatch"]


class MoeDispatchResult(NamedTuple):
    """What :func:`moe_dispatch` returns (Primus-Turbo's 5-tuple order, with names)."""

    recv_x: torch.Tensor | tuple[torch.Tensor, torch.Tensor]
    recv_token_indices: torch.Tensor
    recv_token_probs: torch.Tensor
    tokens_per_expert: torch.Tensor
    handle: MoeDispatchHandle


class _DispatchFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, token_probs, x_scales, token_indices, num_experts, group, async_finish, alloc, worst):
        recv_x, recv_scales, recv_idx, recv_probs, tpe, handle = launch.moe_dispatch(
            x, x_scales, token_indices, token_probs, num_experts, group, async_finish=async_finish,
            allocate_on_comm_stream=alloc, num_worst_tokens=worst)
        ctx.save_for_backward(recv_idx)
        ctx.handle, ctx.async_finish, ctx.alloc = handle, async_finish, alloc
        # No None outputs (see ops.moe_permute): an absent recv_x_scales is an empty placeholder.
        if recv_scales is None:
            recv_scales = torch.empty((0,), dtype=torch.float32, device=recv_x.device)
        ctx.mark_non_differentiable(recv_idx, tpe, recv_scales)
        return recv_x, recv_scales, recv_idx, recv_probs, tpe, handle

    @staticmethod
    def backward(ctx, grad_x, _scales, _idx, grad_probs, _tpe, _handle):
        (recv_idx,) = ctx.saved_tensors
        need_x, need_p = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if not (need_x or need_p):
            return (None,) * 9
        # A received prob is 0 (constant) where its index is -1: no gradient flows from there.
        gp = torch.where(recv_idx >= 0, grad_probs, torch.zeros_like(grad_probs)).contiguous() if need_p else None
        x = grad_x.contiguous() if need_x else gp.new_zeros((gp.shape[0], 0))
        gx, gprobs = launch.moe_combine(x, ctx.handle, probs=gp, async_finish=ctx.async_finish,
                                        allocate_on_comm_stream=ctx.alloc)
        return (gx if need_x else None), gprobs, None, None, None, None, None, None, None


class _CombineFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, handle, async_finish, alloc):
        combined, _ = launch.moe_combine(x, handle, async_finish=async_finish, allocate_on_comm_stream=alloc)
        ctx.handle, ctx.async_finish, ctx.alloc = handle, async_finish, alloc
        return combined

    @staticmethod
    def backward(ctx, grad):
        recv, _ = launch.moe_dispatch_cached(grad.contiguous(), None, ctx.handle, async_finish=ctx.async_finish,
                                             allocate_on_comm_stream=ctx.alloc)
        return recv, None, None, None


def moe_dispatch(x: torch.Tensor | tuple[torch.Tensor, torch.Tensor], token_indices: torch.Tensor,
                 token_probs: torch.Tensor, num_experts: int, group: Any = None, async_finish: bool = False,
                 allocate_on_comm_stream: bool = False, num_worst_tokens: int = 0) -> MoeDispatchResult:
    """Send each token once to every rank that holds at least one of its top-k experts.

    Args:
        x: ``[T, H]`` fp16/bf16/fp32, or ``(x, x_scales)`` with fp8 ``x`` and fp32 ``[T, S]`` scales.
        token_indices: int32/int64 ``[T, K]`` global expert ids, -1 = none.
        token_probs: fp32 ``[T, K]``.
        num_experts: all experts, a multiple of the group's world size ``W``; rank ``r`` holds
            ``[r * E_l, (r + 1) * E_l)`` with ``E_l = num_experts / W``.
        group: a ``torch.distributed.ProcessGroup`` or ``None`` (single process).
        async_finish, allocate_on_comm_stream: stream hints for asynchronous backends.
        num_worst_tokens: ``> 0`` fixes the received row count (zero padding rows, indices -1): no
            host sync, CUDA-graph friendly.

    Returns:
        :class:`MoeDispatchResult` ``(recv_x [R, H] (or (recv_x, recv_x_scales)),
        recv_token_indices [R, K] local expert ids (-1 for experts held elsewhere and padding rows),
        recv_token_probs fp32 [R, K] (0 where the index is -1), tokens_per_expert int64 [E_l],
        handle)``. ``tokens_per_expert`` stays on the device (Primus-Turbo built it from a host
        list: a sync). The handle (:class:`MoeDispatchHandle`) is for :func:`moe_combine`. On one
        process ``R = max(T, num_worst_tokens)`` and row ``t`` is token ``t``. Gradients flow to
        ``x`` (a combine of the received rows' gradients) and ``token_probs``.

    The backend comes from ``GlobalBackendManager.set_moe_dispatch_combine_backend`` /
    ``TURBO_MOE_DISPATCH_COMBINE_BACKEND`` (never auto-tuned); TORCH runs a single process only.
    """
    x_scales = None
    if isinstance(x, (tuple, list)):
        if len(x) != 2:
            raise ValueError(f"x: expected a tensor or (x, x_scales), got a sequence of {len(x)}")
        x, x_scales = x
    args = MoeDispatchArgs(x, x_scales, token_indices, token_probs, num_experts, group, None, async_finish,
                           allocate_on_comm_stream, num_worst_tokens)
    MOE_DISPATCH.check_args(args)
    if x.dtype in FP8_DTYPES and x.requires_grad:
        raise ValueError("x: fp8 tokens have no backward; pass an x that does not require grad")
    recv_x, recv_scales, recv_idx, recv_probs, tpe, handle = _DispatchFunction.apply(
        x.contiguous(), token_probs.contiguous(), None if x_scales is None else x_scales.contiguous(),
        token_indices.contiguous(), num_experts, group, async_finish, allocate_on_comm_stream, num_worst_tokens)
    recv = recv_x if x_scales is None else (recv_x, recv_scales)
    return MoeDispatchResult(recv, recv_idx, recv_probs, tpe, handle)


def moe_combine(x: torch.Tensor, group: Any, handle: MoeDispatchHandle, async_finish: bool = False,
                allocate_on_comm_stream: bool = False) -> torch.Tensor:
    """Return each token's rows to its rank and sum them (the inverse of :func:`moe_dispatch`).

    Args:
        x: ``[R, H]`` fp16/bf16/fp32 in the received layout of the dispatch that made ``handle``.
        group: that dispatch's process group (or ``None``).
        handle: the :class:`MoeDispatchHandle` it returned; combine runs on the same backend.
        async_finish, allocate_on_comm_stream: stream hints.

    Returns:
        ``[T, H]`` in x's dtype: for each token, the sum (fp32 or wider, rounded once) of the rows
        returned for it by the ranks it was sent to; 0 for a token sent nowhere. The backward
        re-dispatches the gradient along the handle.
    """
    MOE_COMBINE.check_args(MoeCombineArgs(x, handle, group, None, async_finish, allocate_on_comm_stream))
    return _CombineFunction.apply(x.contiguous(), handle, async_finish, allocate_on_comm_stream)
