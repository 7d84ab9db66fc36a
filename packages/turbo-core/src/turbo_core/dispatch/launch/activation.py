"""``turbo::{swiglu,geglu}_{fwd,bwd}`` custom ops and the launchers ``glu_fwd`` / ``glu_bwd``."""

from __future__ import annotations

import torch

from turbo_core.dispatch.dispatcher import call
from turbo_core.dispatch.specs.activation import GluBwdArgs, GluFwdArgs, glu_primitive

__all__ = ["glu_bwd", "glu_fwd"]


def _fwd_fake(x, probs, row_mask):
    return x.new_empty((x.shape[0], x.shape[1] // 2))


def _bwd_fake(grad_out, x, probs, row_mask):
    return torch.empty_like(x), torch.empty_like(probs)


@torch.library.custom_op("turbo::swiglu_fwd", mutates_args=())
def _swiglu_fwd_op(x: torch.Tensor, probs: torch.Tensor, row_mask: torch.Tensor | None) -> torch.Tensor:
    return call("swiglu_fwd", GluFwdArgs(x, probs, row_mask))


@torch.library.custom_op("turbo::swiglu_bwd", mutates_args=())
def _swiglu_bwd_op(grad_out: torch.Tensor, x: torch.Tensor, probs: torch.Tensor,
                   row_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    return call("swiglu_bwd", GluBwdArgs(grad_out, x, probs, row_mask))


@torch.library.custom_op("turbo::geglu_fwd", mutates_args=())
def _geglu_fwd_op(x: torch.Tensor, probs: torch.Tensor, row_mask: torch.Tensor | None) -> torch.Tensor:
    return call("geglu_fwd", GluFwdArgs(x, probs, row_mask))


@torch.library.custom_op("turbo::geglu_bwd", mutates_args=())
def _geglu_bwd_op(grad_out: torch.Tensor, x: torch.Tensor, probs: torch.Tensor,
                  row_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    return call("geglu_bwd", GluBwdArgs(grad_out, x, probs, row_mask))


for _op, _fake in ((_swiglu_fwd_op, _fwd_fake), (_geglu_fwd_op, _fwd_fake),
                   (_swiglu_bwd_op, _bwd_fake), (_geglu_bwd_op, _bwd_fake)):
    _op.register_fake(_fake)


def glu_fwd(kind: str, x: torch.Tensor, probs: torch.Tensor, row_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Run ``<kind>_fwd`` (``kind``: ``"swiglu"``/``"geglu"``; see :class:`GluFwdArgs`): ``out [T, H]``."""
    name = glu_primitive(kind, "fwd").name
    if torch.compiler.is_compiling():
        return getattr(torch.ops.turbo, name)(x, probs, row_mask)
    return call(name, GluFwdArgs(x, probs, row_mask))


def glu_bwd(kind: str, grad_out: torch.Tensor, x: torch.Tensor, probs: torch.Tensor,
            row_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``<kind>_bwd`` (see :class:`GluBwdArgs`): ``(grad_x [T, 2H], grad_probs [T] fp32)``."""
    name = glu_primitive(kind, "bwd").name
    if torch.compiler.is_compiling():
        return tuple(getattr(torch.ops.turbo, name)(grad_out, x, probs, row_mask))
    return call(name, GluBwdArgs(grad_out, x, probs, row_mask))
