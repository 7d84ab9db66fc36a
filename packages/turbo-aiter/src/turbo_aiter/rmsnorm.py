"""``rmsnorm_fwd`` over aiter's CK ``rmsnorm2d_fwd`` (forward only: aiter has no RMSNorm backward).

aiter function called (amd-aiter 0.1.7.post2.dev18): ``aiter.rmsnorm2d_fwd(input [M, N], weight
[N], epsilon)`` -> ``y [M, N]``: fp16/bf16 only (gamma in x's dtype), mean of squares, rstd and the
products in fp32, y rounded once (ck_tile ``rmsnorm2d`` one/two-pass pipelines). It does not
return rstd (``SaveRms`` is false in aiter's binding): rstd ``[T]`` fp32 is computed beside it
(one more read of x, in fp32).

The fused residual add is done before the call, ``s = x + residual`` in fp32 rounded once to x's
dtype, not by aiter's fused-add kernel: that kernel normalizes the unrounded fp32 sum, while
turbo's spec normalizes the rounded ``s`` it returns. Declined: fp32, gamma in another dtype than
x, ``zero_centered`` (``1 + gamma`` would be rounded to x's dtype before the product), T == 0
handled without aiter.
"""

from __future__ import annotations

import torch

from turbo_aiter import library
from turbo_core.dispatch.specs.normalization import RmsNormFwdArgs

__all__ = ["can_handle", "decline_reason", "residual_sum", "rmsnorm_fwd", "rstd_of"]

_DTYPES = (torch.float16, torch.bfloat16)


def decline_reason(args: RmsNormFwdArgs, arch: str | None) -> str | None:
    if arch not in library.ARCHS:
        return f"AITER rmsnorm_fwd: no aiter kernels for arch {arch} (gfx942 and gfx950 only)"
    if args.x.dtype not in _DTYPES:
        return f"AITER rmsnorm_fwd ({arch}): aiter's CK rmsnorm2d takes fp16/bf16, got {args.x.dtype}"
    if args.gamma is not None and args.gamma.dtype != args.x.dtype:
        return f"AITER rmsnorm_fwd: aiter takes gamma in x's dtype ({args.x.dtype}), got {args.gamma.dtype}"
    if args.zero_centered and args.gamma is not None:
        return "AITER rmsnorm_fwd: zero_centered not served (1 + gamma would be rounded before the product)"
    return None


def can_handle(args: RmsNormFwdArgs) -> str | None:
    reason = library.gpu_reason(args.x, "rmsnorm_fwd")
    if reason:
        return reason
    return decline_reason(args, library.arch_of(args.x))


def residual_sum(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """``s = x + residual`` added in fp32 and rounded once to x's dtype."""
    return (x.float() + residual.float()).to(x.dtype)


def rstd_of(s: torch.Tensor, eps: float) -> torch.Tensor:
    """``1 / sqrt(mean(s^2) + eps)`` per row, fp32 ``[T]``."""
    return torch.rsqrt(s.float().square().mean(dim=1) + eps)


def rmsnorm_fwd(args: RmsNormFwdArgs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(y, rstd, x_plus_r)`` as turbo's spec (see :class:`RmsNormFwdArgs`)."""
    x = args.x
    s = residual_sum(x, args.residual) if args.residual is not None else x
    x_plus_r = s if args.residual is not None else None
    if x.shape[0] == 0:
        return torch.empty_like(x), torch.empty(0, dtype=torch.float32, device=x.device), x_plus_r
    aiter = library.load()
    gamma = args.gamma if args.gamma is not None else torch.ones(x.shape[1], dtype=x.dtype, device=x.device)
    y = aiter.rmsnorm2d_fwd(s, gamma, float(args.eps))
    return y, rstd_of(s, float(args.eps)), x_plus_r
