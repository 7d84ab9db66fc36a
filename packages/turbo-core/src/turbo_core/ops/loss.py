"""``cross_entropy``: the fused cross-entropy loss with autograd (``cross_entropy_fwd`` +
``cross_entropy_bwd``)."""

from __future__ import annotations

import torch

from turbo_core.dispatch.launch import loss as launch
from turbo_core.dispatch.specs.loss import CROSS_ENTROPY_FWD, CrossEntropyFwdArgs, check_label_smoothing
from turbo_core.dispatch.specs.validate import (
    FLOAT_DTYPES,
    require_choice,
    require_int,
    require_same_device,
    require_tensor,
)
from turbo_core.ops._autograd import grad_needed

__all__ = ["cross_entropy"]

#: The values of ``reduction``.
REDUCTIONS = ("mean", "sum", "none")


class _CrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, ignore_index, label_smoothing):
        loss, lse = launch.cross_entropy_fwd(logits, target, ignore_index=ignore_index,
                                             label_smoothing=label_smoothing)
        ctx.save_for_backward(logits, target, lse)
        ctx.ignore_index = ignore_index
        ctx.label_smoothing = label_smoothing
        return loss

    @staticmethod
    def backward(ctx, dloss):
        logits, target, lse = ctx.saved_tensors
        dlogits = launch.cross_entropy_bwd(dloss.float().contiguous(), logits, target, lse,
                                           ignore_index=ctx.ignore_index, label_smoothing=ctx.label_smoothing)
        return dlogits, None, None, None


def _flatten(logits: object, target: object) -> tuple[torch.Tensor, torch.Tensor]:
    """``logits [..., V]`` and ``target [...]`` as contiguous ``[N, V]`` and ``[N]``."""
    require_tensor("logits", logits, dtypes=FLOAT_DTYPES)
    if logits.dim() == 0:
        raise ValueError("logits: expected at least a 1-D tensor [..., V] (classes last), got a scalar")
    if logits.shape[-1] == 0:
        raise ValueError(f"logits: expected at least one class (a non-empty last dim), got shape {tuple(logits.shape)}")
    require_tensor("target", target, dtypes=(torch.int64,))
    if tuple(target.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"target: expected shape {tuple(logits.shape[:-1])} (logits' shape without its last, class"
                         f" dim), got {tuple(target.shape)}")
    require_same_device(logits=logits, target=target)
    classes = logits.shape[-1]
    return logits.reshape(-1, classes).contiguous(), target.reshape(-1).contiguous()


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, *, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> torch.Tensor:
    """Cross entropy of ``logits`` against class indices ``target``, fused: the logits are read once
    in the forward and once in the backward, which writes their gradient once; no fp32 copy of the
    logits, no log-softmax tensor.

    ``torch.nn.functional.cross_entropy(logits.float().reshape(-1, V), target.reshape(-1),
    ignore_index=..., reduction=..., label_smoothing=...)`` without class weights, with the classes
    in the LAST dim of ``logits`` (``F.cross_entropy`` takes them in dim 1).

    Args:
        logits: ``[..., V]``, fp16/bf16/fp32, ``V >= 1``; flattened to ``[N, V]`` (a non-contiguous
            tensor is copied to a contiguous one).
        target: ``[...]`` int64, logits' shape without the last dim: a class in ``[0, V)`` or
            ``ignore_index``. Checked where reading it is free (CPU tensors): ``ValueError`` for
            another value. On a GPU it is not checked (that would be a host sync): a row with an
            out-of-range target gets a NaN loss and NaN gradients, so a reduced loss is NaN.
        ignore_index: rows with this target count for nothing: loss 0, zero gradient, left out of
            the ``mean``'s count; their logits are never read.
        reduction: ``"mean"`` (the sum over the rows that count divided by their number, computed
            on the device without a host sync; NaN when every row is ignored, as ``F.cross_entropy``),
            ``"sum"`` or ``"none"`` (per row, target's shape).
        label_smoothing: ``eps`` in ``[0, 1]``: the row's loss is ``(1 - eps) * (lse - x[t]) + eps *
            (lse - mean_j x[j])``.

    Returns:
        fp32: a scalar, or target's shape for ``"none"``. All math in fp32 (``cross_entropy_fwd``);
        the backward (``cross_entropy_bwd``) gives ``dloss * (softmax - (1 - eps) onehot - eps / V)``
        in logits' dtype, rounded once.
    """
    require_int("ignore_index", ignore_index)
    require_choice("reduction", reduction, REDUCTIONS)
    eps = check_label_smoothing(label_smoothing)
    logits2d, target1d = _flatten(logits, target)
    if torch.compiler.is_compiling():
        # Eagerly the dispatcher validates these very arguments before any kernel runs; at trace time
        # the check runs here.
        CROSS_ENTROPY_FWD.check_args(CrossEntropyFwdArgs(logits2d, target1d, ignore_index, eps))
    if grad_needed(logits2d):
        loss = _CrossEntropyFunction.apply(logits2d, target1d, ignore_index, eps)
    else:
        loss = launch.cross_entropy_fwd(logits2d, target1d, ignore_index=ignore_index, label_smoothing=eps)[0]
    if reduction == "none":
        return loss.reshape(target.shape)
    total = loss.sum()
    if reduction == "sum":
        return total
    return total / (target1d != ignore_index).sum()
