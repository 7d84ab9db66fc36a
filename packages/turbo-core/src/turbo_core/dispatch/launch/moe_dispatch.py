"""Launchers of ``moe_dispatch`` / ``moe_combine`` and their custom ops for ``torch.compile``.

Eager mode calls the dispatcher directly; combine and cached dispatch are pinned (``use_backend``)
to the backend named in the handle, so a dispatch and its combine always pair.

Under ``torch.compile`` a process group cannot cross a custom op, nor can an opaque handle: the
ops ``turbo::moe_dispatch``, ``turbo::moe_dispatch_cached`` and ``turbo::moe_combine`` take the
group's name (``""`` = no group) and the handle's fields, and the handle's state must be just
``(src_token,)`` (the reference layout). A backend with private handle state (turbo-deepep) raises
there: run its dispatch/combine outside the compiled region. The compiled handle's backend is
``""`` (chosen again by the same settings at run time). The received row count is static for a
single process (``max(T, num_worst_tokens)``) or with ``num_worst_tokens > 0``; otherwise the
fake output has a data-dependent size.
"""

from __future__ import annotations

import contextlib

import torch
from torch.distributed import distributed_c10d

from turbo_core.dispatch.dispatcher import call
from turbo_core.dispatch.manager import use_backend
from turbo_core.dispatch.specs.moe import MoeCombineArgs, MoeDispatchArgs, MoeDispatchHandle, group_size

__all__ = ["group_from_name", "group_name", "moe_combine", "moe_dispatch", "moe_dispatch_cached"]


def group_name(group: object) -> str:
    return "" if group is None else str(group.group_name)


def group_from_name(name: str):
    if not name:
        return None

    return distributed_c10d._resolve_process_group(name)


def _pinned(backend: str):
    return use_backend(backend) if backend else contextlib.nullcontext()


def _src_token(handle: MoeDispatchHandle) -> torch.Tensor:
    state = handle.state
    if len(state) != 1 or not isinstance(state[0], torch.Tensor) or tuple(state[0].shape) != (handle.num_recv,):
        raise RuntimeError(
            f"moe_dispatch: backend {handle.backend} keeps private handle state, which cannot cross torch.compile;"
            " call moe_dispatch/moe_combine outside the compiled region"
        )
    return state[0]


@torch.library.custom_op("turbo::moe_dispatch", mutates_args=())
def _dispatch_op(x: torch.Tensor, x_scales: torch.Tensor | None, token_indices: torch.Tensor,
                 token_probs: torch.Tensor, num_experts: int, group: str, num_worst_tokens: int,
                 async_finish: bool, allocate_on_comm_stream: bool) -> list[torch.Tensor]:
    pg = group_from_name(group)
    args = MoeDispatchArgs(x, x_scales, token_indices, token_probs, num_experts, pg, None,
                           async_finish, allocate_on_comm_stream, num_worst_tokens)
    # A compiled region carries the handle as its source-token tensor alone. In one process that is
    # TORCH's handle (row t holds token t), so TORCH serves the dispatch there whichever backend would
    # be chosen eagerly; across ranks the chosen backend must keep its state in that tensor.
    with _pinned("TORCH" if group_size(pg) == 1 else ""):
        recv_x, recv_scales, recv_idx, recv_probs, tpe, handle = call("moe_dispatch", args)
    outs = [recv_x] + ([recv_scales] if recv_scales is not None else [])
    return outs + [recv_idx, recv_probs, tpe, _src_token(handle).clone()]


@_dispatch_op.register_fake
def _dispatch_fake(x, x_scales, token_indices, token_probs, num_experts, group, num_worst_tokens, async_finish,
                   allocate_on_comm_stream):
    t = x.shape[0]
    world = group_size(group_from_name(group))
    if num_worst_tokens > 0:
        r = max(num_worst_tokens, t) if world == 1 else num_worst_tokens
    elif world == 1:
        r = t
    else:
        r = torch.library.get_ctx().new_dynamic_size()
    outs = [x.new_empty((r, x.shape[1]))]
    if x_scales is not None:
        outs.append(x_scales.new_empty((r, x_scales.shape[1])))
    k = token_indices.shape[1]
    return outs + [token_indices.new_empty((r, k)), token_probs.new_empty((r, k)),
                   x.new_empty((num_experts // world,), dtype=torch.int64), x.new_empty((r,), dtype=torch.int64)]


def _handle(backend: str, group: str, num_tokens: int, num_local_experts: int, src: torch.Tensor) -> MoeDispatchHandle:
    return MoeDispatchHandle(backend, group_from_name(group), num_tokens, src.shape[0], num_local_experts, (src,))


@torch.library.custom_op("turbo::moe_dispatch_cached", mutates_args=())
def _dispatch_cached_op(x: torch.Tensor, x_scales: torch.Tensor | None, src_token: torch.Tensor, num_tokens: int,
                        num_local_experts: int, backend: str, group: str) -> list[torch.Tensor]:
    handle = _handle(backend, group, num_tokens, num_local_experts, src_token)
    with _pinned(backend):
        recv_x, recv_scales, *_ = call("moe_dispatch", MoeDispatchArgs(x, x_scales, None, None, 0, handle.group,
                                                                       handle))
    return [recv_x] if recv_scales is None else [recv_x, recv_scales]


@_dispatch_cached_op.register_fake
def _dispatch_cached_fake(x, x_scales, src_token, num_tokens, num_local_experts, backend, group):
    r = src_token.shape[0]
    outs = [x.new_empty((r, x.shape[1]))]
    if x_scales is not None:
        outs.append(x_scales.new_empty((r, x_scales.shape[1])))
    return outs


@torch.library.custom_op("turbo::moe_combine", mutates_args=())
def _combine_op(x: torch.Tensor, probs: torch.Tensor | None, src_token: torch.Tensor, num_tokens: int,
                num_local_experts: int, backend: str, group: str) -> list[torch.Tensor]:
    handle = _handle(backend, group, num_tokens, num_local_experts, src_token)
    with _pinned(backend):
        combined, cprobs = call("moe_combine", MoeCombineArgs(x, handle, handle.group, probs))
    return [combined] if cprobs is None else [combined, cprobs]


@_combine_op.register_fake
def _combine_fake(x, probs, src_token, num_tokens, num_local_experts, backend, group):
    outs = [x.new_empty((num_tokens, x.shape[1]))]
    if probs is not None:
        outs.append(probs.new_empty((num_tokens, probs.shape[1])))
    return outs


def moe_dispatch(x, x_scales, token_indices, token_probs, num_experts, group=None, *, async_finish=False,
                 allocate_on_comm_stream=False, num_worst_tokens=0):
    """Run a fresh ``moe_dispatch``: ``(recv_x, recv_x_scales, recv_token_indices, recv_token_probs,
    tokens_per_expert, handle)``."""
    if torch.compiler.is_compiling():
        outs = list(torch.ops.turbo.moe_dispatch(x, x_scales, token_indices, token_probs, num_experts,
                                                 group_name(group), num_worst_tokens, async_finish,
                                                 allocate_on_comm_stream))
        recv_x = outs.pop(0)
        recv_scales = outs.pop(0) if x_scales is not None else None
        recv_idx, recv_probs, tpe, src = outs
        world = group_size(group)
        backend = "TORCH" if world == 1 else ""  # the backend _dispatch_op pins in one process
        handle = MoeDispatchHandle(backend, group, x.shape[0], src.shape[0], num_experts // world, (src,))
        return recv_x, recv_scales, recv_idx, recv_probs, tpe, handle
    return call("moe_dispatch", MoeDispatchArgs(x, x_scales, token_indices, token_probs, num_experts, group, None,
                                                async_finish, allocate_on_comm_stream, num_worst_tokens))


def moe_dispatch_cached(x, x_scales, handle: MoeDispatchHandle, *, async_finish=False, allocate_on_comm_stream=False):
    """Re-send ``x`` along ``handle``'s layout (the backward of combine): ``(recv_x, recv_x_scales)``."""
    if torch.compiler.is_compiling():
        outs = torch.ops.turbo.moe_dispatch_cached(x, x_scales, _src_token(handle), handle.num_tokens,
                                                   handle.num_local_experts, handle.backend, group_name(handle.group))
        return outs[0], (outs[1] if x_scales is not None else None)
    with _pinned(handle.backend):
        recv_x, recv_scales, *_ = call("moe_dispatch", MoeDispatchArgs(
            x, x_scales, None, None, 0, handle.group, handle, async_finish, allocate_on_comm_stream))
    return recv_x, recv_scales


def moe_combine(x, handle: MoeDispatchHandle, *, probs=None, async_finish=False, allocate_on_comm_stream=False):
    """Run ``moe_combine`` on the handle's backend: ``(combined, combined_probs or None)``."""
    if torch.compiler.is_compiling():
        outs = torch.ops.turbo.moe_combine(x, probs, _src_token(handle), handle.num_tokens, handle.num_local_experts,
                                           handle.backend, group_name(handle.group))
        return outs[0], (outs[1] if probs is not None else None)
    with _pinned(handle.backend):
        return call("moe_combine", MoeCombineArgs(x, handle, handle.group, probs, async_finish,
                                                  allocate_on_comm_stream))
