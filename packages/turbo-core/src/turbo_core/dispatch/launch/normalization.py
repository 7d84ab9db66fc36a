"""``turbo::rmsnorm_fwd`` / ``turbo::rmsnorm_bwd`` custom ops and their launchers.

A custom op cannot return an optional tensor, so both return a list whose length follows from the
arguments (never from data): ``rmsnorm_fwd`` gives ``[y, rstd]``, or ``[y, rstd, x_plus_r]``
with a residual; ``rmsnorm_bwd`` gives ``[dx, dgamma]``, or ``[dx]`` without gamma. The launchers
turn those back into the primitives' fixed-arity tuples.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.dispatcher import call
from turbo_core.dispatch.specs.normalization import RmsNormBwdArgs, RmsNormFwdArgs

__all__ = ["rmsnorm_bwd", "rmsnorm_fwd"]


@torch.library.custom_op("turbo::rmsnorm_fwd", mutates_args=())
def _rmsnorm_fwd_op(x: torch.Tensor, gamma: torch.Tensor | None, residual: torch.Tensor | None,
                    eps: float, zero_centered: bool) -> list[torch.Tensor]:
    y, rstd, x_plus_r = call("rmsnorm_fwd", RmsNormFwdArgs(x, gamma, eps, zero_centered, residual))
    return [y, rstd] if x_plus_r is None else [y, rstd, x_plus_r]


@_rmsnorm_fwd_op.register_fake
def _rmsnorm_fwd_fake(x, gamma, residual, eps, zero_centered):
    outs = [torch.empty_like(x), x.new_empty((x.shape[0],), dtype=torch.float32)]
    if residual is not None:
        outs.append(torch.empty_like(x))
    return outs


@torch.library.custom_op("turbo::rmsnorm_bwd", mutates_args=())
def _rmsnorm_bwd_op(dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor | None, rstd: torch.Tensor,
                    zero_centered: bool, dresidual: torch.Tensor | None = None) -> list[torch.Tensor]:
    dx, dgamma = call("rmsnorm_bwd", RmsNormBwdArgs(dy, x, gamma, rstd, zero_centered, dresidual))
    return [dx] if dgamma is None else [dx, dgamma]


@_rmsnorm_bwd_op.register_fake
def _rmsnorm_bwd_fake(dy, x, gamma, rstd, zero_centered, dresidual=None):
    outs = [torch.empty_like(x)]
    if gamma is not None:
        outs.append(torch.empty_like(gamma))
    return outs


def rmsnorm_fwd(x: torch.Tensor, gamma: torch.Tensor | None, *, eps: float, zero_centered: bool = False,
                residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Run ``rmsnorm_fwd`` (see :class:`RmsNormFwdArgs`): ``(y, rstd, x_plus_r or None)``."""
    if torch.compiler.is_compiling():
        outs = torch.ops.turbo.rmsnorm_fwd(x, gamma, residual, eps, zero_centered)
        return outs[0], outs[1], (outs[2] if residual is not None else None)
    return call("rmsnorm_fwd", RmsNormFwdArgs(x, gamma, eps, zero_centered, residual))


def rmsnorm_bwd(dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor | None, rstd: torch.Tensor, *,
                zero_centered: bool = False,
                dresidual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run ``rmsnorm_bwd`` (see :class:`RmsNormBwdArgs`): ``(dx (+ dresidual), dgamma or None)``."""
    if torch.compiler.is_compiling():
        outs = torch.ops.turbo.rmsnorm_bwd(dy, x, gamma, rstd, zero_centered, dresidual)
        return outs[0], (outs[1] if gamma is not None else None)
    return call("rmsnorm_bwd", RmsNormBwdArgs(dy, x, gamma, rstd, zero_centered, dresidual))
