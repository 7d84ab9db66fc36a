"""``turbo::cross_entropy_fwd`` / ``turbo::cross_entropy_bwd`` custom ops and their launchers."""

from __future__ import annotations

import torch

from turbo_core.dispatch.dispatcher import call
from turbo_core.dispatch.specs.loss import CrossEntropyBwdArgs, CrossEntropyFwdArgs

__all__ = ["cross_entropy_bwd", "cross_entropy_fwd"]


@torch.library.custom_op("turbo::cross_entropy_fwd", mutates_args=())
def _cross_entropy_fwd_op(logits: torch.Tensor, target: torch.Tensor, ignore_index: int,
                          label_smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    return call("cross_entropy_fwd", CrossEntropyFwdArgs(logits, target, ignore_index, label_smoothing))


@_cross_entropy_fwd_op.register_fake
def _cross_entropy_fwd_fake(logits, target, ignore_index, label_smoothing):
    rows = (logits.shape[0],)
    return logits.new_empty(rows, dtype=torch.float32), logits.new_empty(rows, dtype=torch.float32)


@torch.library.custom_op("turbo::cross_entropy_bwd", mutates_args=())
def _cross_entropy_bwd_op(dloss: torch.Tensor, logits: torch.Tensor, target: torch.Tensor, lse: torch.Tensor,
                          ignore_index: int, label_smoothing: float) -> torch.Tensor:
    return call("cross_entropy_bwd", CrossEntropyBwdArgs(dloss, logits, target, lse, ignore_index, label_smoothing))


@_cross_entropy_bwd_op.register_fake
def _cross_entropy_bwd_fake(dloss, logits, target, lse, ignore_index, label_smoothing):
    return torch.empty_like(logits)


def cross_entropy_fwd(logits: torch.Tensor, target: torch.Tensor, *, ignore_index: int,
                      label_smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``cross_entropy_fwd`` (see :class:`CrossEntropyFwdArgs`): ``(loss [N] fp32, lse [N] fp32)``."""
    if torch.compiler.is_compiling():
        loss, lse = torch.ops.turbo.cross_entropy_fwd(logits, target, ignore_index, label_smoothing)
        return loss, lse
    return call("cross_entropy_fwd", CrossEntropyFwdArgs(logits, target, ignore_index, label_smoothing))


def cross_entropy_bwd(dloss: torch.Tensor, logits: torch.Tensor, target: torch.Tensor, lse: torch.Tensor, *,
                      ignore_index: int, label_smoothing: float) -> torch.Tensor:
    """Run ``cross_entropy_bwd`` (see :class:`CrossEntropyBwdArgs`): ``dlogits [N, V]`` in logits' dtype."""
    if torch.compiler.is_compiling():
        return torch.ops.turbo.cross_entropy_bwd(dloss, logits, target, lse, ignore_index, label_smoothing)
    return call("cross_entropy_bwd", CrossEntropyBwdArgs(dloss, logits, target, lse, ignore_index, label_smoothing))
