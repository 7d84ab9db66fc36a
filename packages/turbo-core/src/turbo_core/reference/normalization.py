"""Reference RMSNorm (``rmsnorm_fwd``, ``rmsnorm_bwd``).

Everything is computed in float64 (elementwise work and row reductions: cheap on CPU and GPU) and
rounded once: ``y``/``dx``/``x_plus_r`` to x's dtype, ``rstd`` to fp32, ``dgamma`` to gamma's dtype.
The fused residual sum is rounded to x's dtype before it is normalized, as the spec says.
"""

from __future__ import annotations

import torch

from turbo_core.backend import BackendType
from turbo_core.dispatch.specs.normalization import RmsNormBwdArgs, RmsNormFwdArgs
from turbo_core.plugins.types import Kernel

_F64 = torch.float64


def _weight(gamma: torch.Tensor | None, zero_centered: bool) -> torch.Tensor | None:
    if gamma is None:
        return None
    g = gamma.to(_F64)
    return g + 1.0 if zero_centered else g


def rmsnorm_fwd(args: RmsNormFwdArgs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    x_plus_r = None
    if args.residual is not None:
        x_plus_r = (args.x.to(_F64) + args.residual.to(_F64)).to(args.x.dtype)
        s = x_plus_r.to(_F64)
    else:
        s = args.x.to(_F64)
    rstd = torch.rsqrt(s.square().mean(dim=1, keepdim=True) + args.eps)
    y = s * rstd
    g = _weight(args.gamma, args.zero_centered)
    if g is not None:
        y = y * g
    return y.to(args.x.dtype), rstd.squeeze(1).to(torch.float32), x_plus_r


def rmsnorm_bwd(args: RmsNormBwdArgs) -> tuple[torch.Tensor, torch.Tensor | None]:
    dy = args.dy.to(_F64)
    rstd = args.rstd.to(_F64).unsqueeze(1)
    n = args.x.to(_F64) * rstd
    g = _weight(args.gamma, args.zero_centered)
    dn = dy * g if g is not None else dy
    dx = rstd * (dn - n * (dn * n).mean(dim=1, keepdim=True))
    if args.dresidual is not None:
        dx = dx + args.dresidual.to(_F64)
    dgamma = None
    if args.gamma is not None:
        dgamma = (dy * n).sum(dim=0).to(args.gamma.dtype)
    return dx.to(args.x.dtype), dgamma


_VARIANTS = ("fp32", "fp16", "bf16")

KERNELS = [
    Kernel("rmsnorm_fwd", BackendType.TORCH, rmsnorm_fwd, variants=_VARIANTS, priority=-100),
    Kernel("rmsnorm_bwd", BackendType.TORCH, rmsnorm_bwd, variants=_VARIANTS, priority=-100),
]
