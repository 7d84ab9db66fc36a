"""``turbo::attention_fwd``/``attention_bwd``/``attention_fp8_fwd``/``attention_fp8_bwd`` custom ops
and their launchers.

Backward pinning: the backward of an attention call runs on the backend its forward ran on. In
eager mode the autograd layer runs the forward through :func:`attention_fwd_eager`, which returns the
backend that ran, and hands that name to the backward launcher (``backend=``).
Without a name (and always inside a compiled graph, where the choice is made at run time inside the
custom op), the backward resolves the *forward* primitive's selection for the forward's arguments
and runs the backward primitive pinned to it; with unchanged settings that is the backend the
forward used. A backend that serves the forward but not the backward is then an error, never a
silent swap.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.catalog import get_primitive
from turbo_core.dispatch.dispatcher import BackendError, KernelError, call, call_with_backend, checked_select
from turbo_core.dispatch.manager import use_backend
from turbo_core.dispatch.specs.attention import (
    AttentionBwdArgs,
    AttentionFp8BwdArgs,
    AttentionFp8FwdArgs,
    AttentionFwdArgs,
    lse_shape,
    out_shape,
)

__all__ = ["attention_bwd", "attention_fp8_bwd", "attention_fp8_fwd", "attention_fp8_fwd_eager", "attention_fwd",
           "attention_fwd_eager", "resolve_backend"]

Tensor = torch.Tensor


def resolve_backend(primitive: str, args) -> str:
    """Validate ``args`` and return the backend name that ``primitive`` selects for them (through
    the selection cache, as ``call`` selects)."""
    return checked_select(get_primitive(primitive), args)[0].backend


def _pinned(primitive: str, args, backend: str):
    with use_backend(backend):
        return call(primitive, args)


def _backward(primitive: str, fwd_primitive: str, args, backend: str | None):
    if backend is None:
        backend = resolve_backend(fwd_primitive, args.forward_args())
    try:
        return _pinned(primitive, args, backend)
    except KernelError:
        raise  # the backend failed while running it: not a matter of which backend runs the backward
    except BackendError as exc:
        raise BackendError(f"{exc} (a backward runs on the backend of its forward, {backend})") from exc


def _no_sink(q: Tensor) -> Tensor:
    return q.new_empty(0, dtype=torch.float32)


# -- attention_fwd / attention_bwd ---------------------------------------------------------------

@torch.library.custom_op("turbo::attention_fwd", mutates_args=())
def _attention_fwd_op(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor | None, cu_seqlens_k: Tensor | None,
                      max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float, causal: bool,
                      window_left: int, window_right: int, sink: Tensor | None, dropout_p: float,
                      deterministic: bool) -> tuple[Tensor, Tensor]:
    return call("attention_fwd", AttentionFwdArgs(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal,
        (window_left, window_right), sink, dropout_p, deterministic))


@_attention_fwd_op.register_fake
def _attention_fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                        causal, window_left, window_right, sink, dropout_p, deterministic):
    varlen = cu_seqlens_q is not None
    return q.new_empty(out_shape(q, v)), q.new_empty(lse_shape(q, varlen), dtype=torch.float32)


@torch.library.custom_op("turbo::attention_bwd", mutates_args=())
def _attention_bwd_op(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                      cu_seqlens_q: Tensor | None, cu_seqlens_k: Tensor | None, max_seqlen_q: int,
                      max_seqlen_k: int, softmax_scale: float, causal: bool, window_left: int,
                      window_right: int, sink: Tensor | None, dropout_p: float,
                      deterministic: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    args = AttentionBwdArgs(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            softmax_scale, causal, (window_left, window_right), sink, dropout_p, deterministic)
    dq, dk, dv, dsink = _backward("attention_bwd", "attention_fwd", args, None)
    return dq, dk, dv, (dsink if dsink is not None else _no_sink(q))


@_attention_bwd_op.register_fake
def _attention_bwd_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        softmax_scale, causal, window_left, window_right, sink, dropout_p, deterministic):
    dsink = q.new_empty(sink.shape, dtype=torch.float32) if sink is not None else _no_sink(q)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dsink


def _fwd_op_args(a: AttentionFwdArgs) -> tuple:
    left, right = a.window_size
    return (a.q, a.k, a.v, a.cu_seqlens_q, a.cu_seqlens_k, int(a.max_seqlen_q), int(a.max_seqlen_k),
            a.scale, a.causal, int(left), int(right), a.sink, float(a.dropout_p), a.deterministic)


def attention_fwd(args: AttentionFwdArgs, *, backend: str | None = None) -> tuple[Tensor, Tensor]:
    """Run ``attention_fwd`` (on ``backend`` when given): ``(out, lse)``."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.attention_fwd(*_fwd_op_args(args))
    if backend is None:
        return call("attention_fwd", args)
    return _pinned("attention_fwd", args, backend)


def attention_fwd_eager(args: AttentionFwdArgs) -> tuple[Tensor, Tensor, str]:
    """Run ``attention_fwd`` eagerly on the backend selected for ``args``: ``(out, lse, backend)``;
    the backward is pinned to ``backend``."""
    (out, lse), backend = call_with_backend("attention_fwd", args)
    return out, lse, backend


def attention_bwd(args: AttentionBwdArgs, *, backend: str | None = None):
    """Run ``attention_bwd`` on ``backend`` (default: the forward's selection for these arguments):
    ``(dq, dk, dv, dsink | None)``."""
    if torch.compiler.is_compiling():
        dq, dk, dv, dsink = torch.ops.turbo.attention_bwd(
            args.dout, args.q, args.k, args.v, args.out, args.lse, *_fwd_op_args(args.forward_args())[3:])
        return dq, dk, dv, (dsink if args.sink is not None else None)
    return _backward("attention_bwd", "attention_fwd", args, backend)


# -- attention_fp8_fwd / attention_fp8_bwd -------------------------------------------------------

@torch.library.custom_op("turbo::attention_fp8_fwd", mutates_args=())
def _attention_fp8_fwd_op(q: Tensor, k: Tensor, v: Tensor, softmax_scale: float, causal: bool,
                          window_left: int, window_right: int, dropout_p: float,
                          deterministic: bool) -> tuple[Tensor, Tensor]:
    return call("attention_fp8_fwd", AttentionFp8FwdArgs(
        q, k, v, softmax_scale, causal, (window_left, window_right), dropout_p, deterministic))


@_attention_fp8_fwd_op.register_fake
def _attention_fp8_fwd_fake(q, k, v, softmax_scale, causal, window_left, window_right, dropout_p, deterministic):
    return q.new_empty(out_shape(q, v)), q.new_empty(lse_shape(q, False), dtype=torch.float32)


@torch.library.custom_op("turbo::attention_fp8_bwd", mutates_args=())
def _attention_fp8_bwd_op(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                          softmax_scale: float, causal: bool, window_left: int, window_right: int,
                          dropout_p: float, deterministic: bool) -> tuple[Tensor, Tensor, Tensor]:
    args = AttentionFp8BwdArgs(dout, q, k, v, out, lse, softmax_scale, causal, (window_left, window_right),
                               dropout_p, deterministic)
    return tuple(_backward("attention_fp8_bwd", "attention_fp8_fwd", args, None))


@_attention_fp8_bwd_op.register_fake
def _attention_fp8_bwd_fake(dout, q, k, v, out, lse, softmax_scale, causal, window_left, window_right,
                            dropout_p, deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _fp8_op_args(a: AttentionFp8FwdArgs) -> tuple:
    left, right = a.window_size
    return (a.scale, a.causal, int(left), int(right), float(a.dropout_p), a.deterministic)


def attention_fp8_fwd_eager(args: AttentionFp8FwdArgs) -> tuple[Tensor, Tensor, str]:
    """Run ``attention_fp8_fwd`` eagerly on the backend selected for ``args``: ``(out, lse, backend)``."""
    (out, lse), backend = call_with_backend("attention_fp8_fwd", args)
    return out, lse, backend


def attention_fp8_fwd(args: AttentionFp8FwdArgs, *, backend: str | None = None) -> tuple[Tensor, Tensor]:
    """Run ``attention_fp8_fwd`` (on ``backend`` when given): ``(out, lse)``."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.attention_fp8_fwd(args.q, args.k, args.v, *_fp8_op_args(args))
    if backend is None:
        return call("attention_fp8_fwd", args)
    return _pinned("attention_fp8_fwd", args, backend)


def attention_fp8_bwd(args: AttentionFp8BwdArgs, *, backend: str | None = None):
    """Run ``attention_fp8_bwd`` on ``backend`` (default: the forward's selection): ``(dq, dk, dv)``."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.attention_fp8_bwd(args.dout, args.q, args.k, args.v, args.out, args.lse,
                                                 *_fp8_op_args(args.forward_args()))
    return _backward("attention_fp8_bwd", "attention_fp8_fwd", args, backend)
