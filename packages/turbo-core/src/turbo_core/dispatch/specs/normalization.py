"""RMSNorm primitives: ``rmsnorm_fwd`` (with the optional fused residual add) and ``rmsnorm_bwd``.

Both belong to the selection family ``rmsnorm`` (``TURBO_RMSNORM_BACKEND`` selects the backend of
both; ``TURBO_RMSNORM_FWD_BACKEND`` / ``TURBO_RMSNORM_BWD_BACKEND`` one of them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.backend import PrecisionType
from turbo_core.dispatch.primitives import Primitive, define_primitive
from turbo_core.dispatch.specs.validate import (
    FLOAT_DTYPES,
    require_bool,
    require_contiguous,
    require_eps,
    require_nonempty_last_dim,
    require_same_device,
    require_same_dtype,
    require_shape,
    require_tensor,
)

__all__ = [
    "RMSNORM_BWD",
    "RMSNORM_FWD",
    "RmsNormBwdArgs",
    "RmsNormFwdArgs",
]


@dataclass(frozen=True, eq=False)
class RmsNormFwdArgs:
    """``y = s * rsqrt(mean(s^2) + eps) * g`` over the last dim, row by row.

    Shapes and dtypes (every tensor contiguous, all on one device):

    * ``x``: ``[T, H]``, fp16/bf16/fp32, ``H >= 1``, ``T >= 0``.
    * ``gamma``: ``[H]``, fp16/bf16/fp32 (need not be x's dtype), or ``None`` (no affine: ``g = 1``).
    * ``residual``: ``None``, or ``[T, H]`` in x's dtype: the fused residual add.
    * ``eps``: a finite float ``> 0``. ``zero_centered``: ``g = 1 + gamma`` instead of ``gamma``
      (no effect when ``gamma`` is ``None``).

    Numerics: ``s = x``, or, with ``residual``, ``s = x + residual`` computed in fp32 (or wider)
    and rounded once to x's dtype; the normalization reads that rounded ``s``, so ``y`` is exactly
    ``rmsnorm(s)`` and the backward (which sees only ``s``) is its derivative. The mean of squares,
    ``rstd``, ``g`` and the products are computed in fp32 (or wider) and ``y`` is rounded once to
    x's dtype.

    Result: a 3-tuple ``(y, rstd, x_plus_r)``: ``y`` ``[T, H]`` in x's dtype; ``rstd`` ``[T]`` fp32
    (``1 / sqrt(mean(s^2) + eps)``, what the backward needs); ``x_plus_r`` = ``s`` ``[T, H]`` in
    x's dtype when ``residual`` is given, else ``None``. No output aliases an input.
    """

    x: torch.Tensor
    gamma: torch.Tensor | None
    eps: float = 1e-6
    zero_centered: bool = False
    residual: torch.Tensor | None = None


@dataclass(frozen=True, eq=False)
class RmsNormBwdArgs:
    """Gradients of ``y = rmsnorm(x)`` (see :class:`RmsNormFwdArgs`) given ``dy``.

    Shapes and dtypes (every tensor contiguous, all on one device):

    * ``dy``: ``[T, H]``, x's dtype. ``x``: ``[T, H]``, fp16/bf16/fp32 (with the fused residual,
      the forward's ``x_plus_r``). ``gamma``: ``[H]`` or ``None``, as in the forward.
      ``rstd``: ``[T]`` fp32, the forward's. ``zero_centered``: as in the forward.
    * ``dresidual``: ``None``, or ``[T, H]`` in x's dtype: a gradient added into ``dx`` in the same
      pass (``rmsnorm_residual``'s backward passes ``x_plus_r``'s own gradient here, so x and
      residual receive ``dx + grad_x_plus_r`` without a second pass over ``[T, H]``).

    Numerics, in fp32 (or wider), with ``n = x * rstd`` and ``dn = dy * g``::

        dx     = rstd * (dn - n * mean(dn * n))          (row-wise mean over H)
                 (+ dresidual, when given)
        dgamma = sum over rows of dy * n                 (same for zero_centered: d(1+gamma) = dgamma)

    ``dx`` (the sum, with ``dresidual``) is rounded once to x's dtype. ``dgamma`` is accumulated in
    fp32 (or wider), e.g. per block of rows then reduced, and rounded once to gamma's dtype. A kernel
    that does not implement ``dresidual`` must decline calls that pass it (its capability check),
    never ignore it.

    Result: a 2-tuple ``(dx, dgamma)``: ``dx`` ``[T, H]``; ``dgamma`` ``[H]``, or ``None`` when
    ``gamma`` is ``None``. For ``T == 0``, ``dgamma`` is zeros.
    """

    dy: torch.Tensor
    x: torch.Tensor
    gamma: torch.Tensor | None
    rstd: torch.Tensor
    zero_centered: bool = False
    dresidual: torch.Tensor | None = None


def _check_x(name: str, x: object) -> torch.Tensor:
    require_tensor(name, x, ndim=2, dtypes=FLOAT_DTYPES)
    require_nonempty_last_dim(name, x)
    require_contiguous(name, x)
    return x


def _check_gamma(gamma: object, hidden: int) -> None:
    if gamma is None:
        return
    require_tensor("gamma", gamma, ndim=1, dtypes=FLOAT_DTYPES)
    require_shape("gamma", gamma, (hidden,), "x's last dim")
    require_contiguous("gamma", gamma)


def _check_like_x(name: str, value: object, x: torch.Tensor) -> None:
    require_tensor(name, value, ndim=2, dtypes=FLOAT_DTYPES)
    require_same_dtype(name, value, "x", x)
    require_shape(name, value, tuple(x.shape), "x's")
    require_contiguous(name, value)


def _validate_fwd(args: RmsNormFwdArgs) -> None:
    x = _check_x("x", args.x)
    _check_gamma(args.gamma, x.shape[1])
    require_eps(args.eps)
    require_bool("zero_centered", args.zero_centered)
    if args.residual is not None:
        _check_like_x("residual", args.residual, x)
    require_same_device(x=x, gamma=args.gamma, residual=args.residual)


def _validate_bwd(args: RmsNormBwdArgs) -> None:
    x = _check_x("x", args.x)
    _check_like_x("dy", args.dy, x)
    _check_gamma(args.gamma, x.shape[1])
    require_tensor("rstd", args.rstd, ndim=1, dtypes=(torch.float32,))
    require_shape("rstd", args.rstd, (x.shape[0],), "one per row of x")
    require_contiguous("rstd", args.rstd)
    require_bool("zero_centered", args.zero_centered)
    if args.dresidual is not None:
        _check_like_x("dresidual", args.dresidual, x)
    require_same_device(x=x, dy=args.dy, gamma=args.gamma, rstd=args.rstd, dresidual=args.dresidual)


RMSNORM_FWD = define_primitive(Primitive(
    name="rmsnorm_fwd",
    args_type=RmsNormFwdArgs,
    precision=PrecisionType.BF16_FP16_FP32,
    family="rmsnorm",
    validate=_validate_fwd,
    doc="RMSNorm forward over the last dim of [T, H] (fp32 math, one rounding), optional zero-centred"
        " gamma and fused residual add; returns (y, rstd fp32 [T], x_plus_r or None).",
))

RMSNORM_BWD = define_primitive(Primitive(
    name="rmsnorm_bwd",
    args_type=RmsNormBwdArgs,
    precision=PrecisionType.BF16_FP16_FP32,
    family="rmsnorm",
    validate=_validate_bwd,
    doc="RMSNorm backward from the forward's rstd: (dx, dgamma or None), dgamma accumulated in fp32;"
        " an optional dresidual [T, H] is added into dx before its one rounding.",
))
