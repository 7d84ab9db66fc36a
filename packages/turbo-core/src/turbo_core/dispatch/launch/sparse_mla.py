"""``turbo::sparse_mla_fwd`` / ``turbo::sparse_mla_bwd`` custom ops and their launchers.

Backward pinning, as for flash attention (``turbo_core.dispatch.launch.attention``): in eager mode
the autograd layer runs the forward through :func:`sparse_mla_fwd_eager`, which returns the backend
that ran, and the backward runs pinned to it. Without a name (and always inside a compiled graph)
the backward resolves the forward primitive's selection for the forward's arguments and runs pinned
to that backend; a backend that serves the forward but not the backward is an error, never a swap.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.dispatcher import call, call_with_backend
from turbo_core.dispatch.launch.attention import _backward, _no_sink, _pinned
from turbo_core.dispatch.specs.sparse_mla import SparseMlaBwdArgs, SparseMlaFwdArgs, lse_shape, out_shape

__all__ = ["sparse_mla_bwd", "sparse_mla_fwd", "sparse_mla_fwd_eager"]

Tensor = torch.Tensor


@torch.library.custom_op("turbo::sparse_mla_fwd", mutates_args=())
def _sparse_mla_fwd_op(q: Tensor, kv: Tensor, topk_indices: Tensor, attn_sink: Tensor | None, kv_lora_rank: int,
                       scale: float) -> tuple[Tensor, Tensor]:
    return call("sparse_mla_fwd", SparseMlaFwdArgs(q, kv, topk_indices, attn_sink, kv_lora_rank, scale))


@_sparse_mla_fwd_op.register_fake
def _sparse_mla_fwd_fake(q, kv, topk_indices, attn_sink, kv_lora_rank, scale):
    return q.new_empty(out_shape(q, kv_lora_rank)), q.new_empty(lse_shape(q), dtype=torch.float32)


@torch.library.custom_op("turbo::sparse_mla_bwd", mutates_args=())
def _sparse_mla_bwd_op(dout: Tensor, q: Tensor, kv: Tensor, out: Tensor, lse: Tensor, topk_indices: Tensor,
                       attn_sink: Tensor | None, kv_lora_rank: int, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    args = SparseMlaBwdArgs(dout, q, kv, out, lse, topk_indices, attn_sink, kv_lora_rank, scale)
    dq, dkv, dsink = _backward("sparse_mla_bwd", "sparse_mla_fwd", args, None)
    return dq, dkv, (dsink if dsink is not None else _no_sink(q))


@_sparse_mla_bwd_op.register_fake
def _sparse_mla_bwd_fake(dout, q, kv, out, lse, topk_indices, attn_sink, kv_lora_rank, scale):
    dsink = q.new_empty(attn_sink.shape, dtype=torch.float32) if attn_sink is not None else _no_sink(q)
    return q.new_empty(q.shape), kv.new_empty(kv.shape), dsink


def _op_args(a: SparseMlaFwdArgs) -> tuple:
    return (a.q, a.kv, a.topk_indices, a.attn_sink, int(a.kv_lora_rank), a.softmax_scale)


def sparse_mla_fwd(args: SparseMlaFwdArgs, *, backend: str | None = None) -> tuple[Tensor, Tensor]:
    """Run ``sparse_mla_fwd`` (on ``backend`` when given): ``(out, lse)``."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.sparse_mla_fwd(*_op_args(args))
    if backend is None:
        return call("sparse_mla_fwd", args)
    return _pinned("sparse_mla_fwd", args, backend)


def sparse_mla_fwd_eager(args: SparseMlaFwdArgs) -> tuple[Tensor, Tensor, str]:
    """Run ``sparse_mla_fwd`` eagerly on the backend selected for ``args``: ``(out, lse, backend)``;
    the backward is pinned to ``backend``."""
    (out, lse), backend = call_with_backend("sparse_mla_fwd", args)
    return out, lse, backend


def sparse_mla_bwd(args: SparseMlaBwdArgs, *, backend: str | None = None):
    """Run ``sparse_mla_bwd`` on ``backend`` (default: the forward's selection for these arguments):
    ``(dq, dkv, dsink | None)``."""
    if torch.compiler.is_compiling():
        fwd = _op_args(args.forward_args())
        dq, dkv, dsink = torch.ops.turbo.sparse_mla_bwd(args.dout, fwd[0], fwd[1], args.out, args.lse, *fwd[2:])
        return dq, dkv, (dsink if args.attn_sink is not None else None)
    return _backward("sparse_mla_bwd", "sparse_mla_fwd", args, backend)
