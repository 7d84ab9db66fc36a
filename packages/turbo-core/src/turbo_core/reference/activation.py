"""Reference SwiGLU/GeGLU with per-token probs (``swiglu_fwd/bwd``, ``geglu_fwd/bwd``).

Computed in float64 and rounded once (``out``/``grad_x`` to x's dtype, ``grad_probs`` to fp32).
Inactive rows (``row_mask == 0``) are selected away with ``torch.where``, so whatever they hold
(NaN included) never reaches the result: they come out as zeros.
"""

from __future__ import annotations

import math

import torch

from turbo_core.backend import BackendType
from turbo_core.dispatch.specs.activation import GluBwdArgs, GluFwdArgs
from turbo_core.plugins.types import Kernel

_F64 = torch.float64
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _act(kind: str, a: torch.Tensor) -> torch.Tensor:
    if kind == "swiglu":
        return a * torch.sigmoid(a)
    return 0.5 * a * (1.0 + torch.erf(a * _INV_SQRT2))


def _act_grad(kind: str, a: torch.Tensor) -> torch.Tensor:
    if kind == "swiglu":
        s = torch.sigmoid(a)
        return s * (1.0 + a * (1.0 - s))
    return 0.5 * (1.0 + torch.erf(a * _INV_SQRT2)) + a * torch.exp(-0.5 * a * a) * _INV_SQRT_2PI


def _split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x64 = x.to(_F64)
    h = x.shape[1] // 2
    return x64[:, :h], x64[:, h:]


def _active(row_mask: torch.Tensor | None) -> torch.Tensor | None:
    return None if row_mask is None else (row_mask != 0).unsqueeze(1)


def _masked(value: torch.Tensor, active: torch.Tensor | None) -> torch.Tensor:
    return value if active is None else torch.where(active, value, 0.0)


def _fwd(kind: str, args: GluFwdArgs) -> torch.Tensor:
    a, b = _split(args.x)
    out = _act(kind, a) * b * args.probs.to(_F64).unsqueeze(1)
    return _masked(out, _active(args.row_mask)).to(args.x.dtype)


def _bwd(kind: str, args: GluBwdArgs) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = _split(args.x)
    g = args.grad_out.to(_F64)
    p = args.probs.to(_F64).unsqueeze(1)
    act = _act(kind, a)
    grad_a = g * b * p * _act_grad(kind, a)
    grad_b = g * act * p
    grad_p = (g * act * b).sum(dim=1, keepdim=True)
    active = _active(args.row_mask)
    grad_x = _masked(torch.cat([grad_a, grad_b], dim=1), active)
    grad_p = _masked(grad_p, active)
    return grad_x.to(args.x.dtype), grad_p.squeeze(1).to(torch.float32)


def swiglu_fwd(args: GluFwdArgs) -> torch.Tensor:
    return _fwd("swiglu", args)


def swiglu_bwd(args: GluBwdArgs) -> tuple[torch.Tensor, torch.Tensor]:
    return _bwd("swiglu", args)


def geglu_fwd(args: GluFwdArgs) -> torch.Tensor:
    return _fwd("geglu", args)


def geglu_bwd(args: GluBwdArgs) -> tuple[torch.Tensor, torch.Tensor]:
    return _bwd("geglu", args)


_VARIANTS = ("fp32", "fp16", "bf16")

KERNELS = [
    Kernel(name, BackendType.TORCH, fn, variants=_VARIANTS, priority=-100)
    for name, fn in (("swiglu_fwd", swiglu_fwd), ("swiglu_bwd", swiglu_bwd),
                     ("geglu_fwd", geglu_fwd), ("geglu_bwd", geglu_bwd))
]
