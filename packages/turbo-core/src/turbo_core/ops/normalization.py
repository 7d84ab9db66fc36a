"""``rmsnorm`` and ``rmsnorm_residual``: RMSNorm with autograd (``rmsnorm_fwd`` + ``rmsnorm_bwd``)."""

from __future__ import annotations

import torch

from turbo_core.dispatch.launch import normalization as launch
from turbo_core.dispatch.specs.normalization import RMSNORM_FWD, RmsNormFwdArgs
from turbo_core.dispatch.specs.validate import FLOAT_DTYPES, require_nonempty_last_dim, require_shape, require_tensor
from turbo_core.ops._autograd import grad_needed

__all__ = ["rmsnorm", "rmsnorm_residual"]


class _RmsNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gamma, eps, zero_centered):
        y, rstd, _ = launch.rmsnorm_fwd(x, gamma, eps=eps, zero_centered=zero_centered)
        ctx.save_for_backward(x, gamma, rstd)
        ctx.zero_centered = zero_centered
        return y

    @staticmethod
    def backward(ctx, grad_y):
        s, gamma, rstd = ctx.saved_tensors
        dx, dgamma = launch.rmsnorm_bwd(grad_y.contiguous(), s, gamma, rstd, zero_centered=ctx.zero_centered)
        return dx, (dgamma if ctx.needs_input_grad[1] else None), None, None


class _RmsNormResidualFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, gamma, eps, zero_centered):
        y, rstd, x_plus_r = launch.rmsnorm_fwd(x, gamma, eps=eps, zero_centered=zero_centered, residual=residual)
        ctx.save_for_backward(x_plus_r, gamma, rstd)
        ctx.zero_centered = zero_centered
        return y, x_plus_r

    @staticmethod
    def backward(ctx, grad_y, grad_x_plus_r):
        s, gamma, rstd = ctx.saved_tensors
        # x_plus_r's own consumers add their gradient; x and residual both receive the sum, which
        # the primitive adds into its dx in the same pass (dresidual) and rounds once.
        ds, dgamma = launch.rmsnorm_bwd(grad_y.contiguous(), s, gamma, rstd, zero_centered=ctx.zero_centered,
                                        dresidual=grad_x_plus_r.to(s.dtype).contiguous())
        return ds, ds, (dgamma if ctx.needs_input_grad[2] else None), None, None


def _rows(t: torch.Tensor, hidden: int) -> torch.Tensor:
    """``t`` as contiguous ``[T, hidden]`` rows (a 2-D input as it is when contiguous: a reshape
    costs microseconds of host time even when it returns a view)."""
    return (t if t.dim() == 2 else t.reshape(-1, hidden)).contiguous()


def _shaped(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``y`` in x's shape (2-D: already)."""
    return y if x.dim() == 2 else y.reshape(x.shape)


def _flatten(x: object, gamma: torch.Tensor | None, eps: float, zero_centered: bool, *, fused: bool = False,
             residual: object = None) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    require_tensor("x", x, dtypes=FLOAT_DTYPES)
    if x.dim() == 0:
        raise ValueError("x: expected at least a 1-D tensor (normalized over its last dim), got a scalar")
    require_nonempty_last_dim("x", x)
    if fused:
        require_tensor("residual", residual, dtypes=FLOAT_DTYPES)
        require_shape("residual", residual, tuple(x.shape), "x's")
    hidden = x.shape[-1]
    x2d = _rows(x, hidden)
    r2d = _rows(residual, hidden) if residual is not None else None
    if isinstance(gamma, torch.Tensor) and gamma.dim() == 1:
        gamma = gamma.contiguous()
    if (torch.compiler.is_compiling() or type(eps) is not float or type(zero_centered) is not bool
            or not (gamma is None or isinstance(gamma, torch.Tensor))):
        # Eagerly the dispatcher validates these very arguments before any kernel runs (its verdict
        # cached per signature); here the check runs where errors must come first: at trace time, and
        # before eps, zero_centered or gamma reach float() or autograd.
        RMSNORM_FWD.check_args(RmsNormFwdArgs(x2d, gamma, eps, zero_centered, r2d))
    return x2d, r2d, gamma


def rmsnorm(x: torch.Tensor, gamma: torch.Tensor | None, eps: float = 1e-6,
            zero_centered: bool = False) -> torch.Tensor:
    """RMSNorm over the last dim: ``y = x * rsqrt(mean(x^2) + eps) * g``.

    Args:
        x: ``[..., H]``, fp16/bf16/fp32, ``H >= 1``; leading dims are flattened to ``[T, H]``
            (non-contiguous input is copied to a contiguous one).
        gamma: ``[H]``, fp16/bf16/fp32 (need not be x's dtype), or ``None`` for no affine
            (``g = 1``).
        eps: a finite float ``> 0``.
        zero_centered: ``g = 1 + gamma`` instead of ``gamma`` (no effect without gamma).

    Returns:
        ``y``, x's shape and dtype. The mean of squares, ``rsqrt`` and the products are computed in
        fp32 (or wider) and rounded once. The backward is the ``rmsnorm_bwd`` primitive, from the
        forward's fp32 ``rstd``: ``dx`` in x's dtype, ``dgamma`` (fp32 accumulation over rows) in
        gamma's dtype.
    """
    x2d, _, gamma = _flatten(x, gamma, eps, zero_centered)
    if grad_needed(x2d, gamma):
        y = _RmsNormFunction.apply(x2d, gamma, float(eps), zero_centered)
    else:
        y = launch.rmsnorm_fwd(x2d, gamma, eps=float(eps), zero_centered=zero_centered)[0]
    return _shaped(y, x)


def rmsnorm_residual(x: torch.Tensor, residual: torch.Tensor, gamma: torch.Tensor | None, eps: float = 1e-6,
                     zero_centered: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused residual add + RMSNorm: ``s = x + residual``, ``y = rmsnorm(s, gamma, eps)``.

    Args:
        x: ``[..., H]``, fp16/bf16/fp32 (flattened to ``[T, H]`` as in :func:`rmsnorm`).
        residual: x's shape and dtype.
        gamma, eps, zero_centered: as in :func:`rmsnorm`.

    Returns:
        ``(y, x_plus_r)``, both x's shape and dtype. ``x_plus_r`` is ``x + residual`` added in fp32
        and rounded once to x's dtype; ``y`` normalizes exactly that rounded sum. In the backward,
        x and residual receive the same gradient: the norm's ``dx`` plus ``x_plus_r``'s own
        gradient, added in fp32 inside the ``rmsnorm_bwd`` primitive (its ``dresidual``) and
        rounded once.
    """
    x2d, r2d, gamma = _flatten(x, gamma, eps, zero_centered, fused=True, residual=residual)
    if grad_needed(x2d, r2d, gamma):
        y, x_plus_r = _RmsNormResidualFunction.apply(x2d, r2d, gamma, float(eps), zero_centered)
    else:
        y, _, x_plus_r = launch.rmsnorm_fwd(x2d, gamma, eps=float(eps), zero_centered=zero_centered, residual=r2d)
    return _shaped(y, x), _shaped(x_plus_r, x)
