"""Reference ``swiglu_fwd_fp8`` / ``geglu_fwd_fp8``: the reference ``<kind>_fwd`` and then the
reference ``quantize_fp8`` of its ``y`` along the last dim, which is the primitives' definition."""

from __future__ import annotations

import torch

from turbo_core.backend import BackendType
from turbo_core.dispatch.specs.activation_fp8 import GluFwdFp8Args
from turbo_core.plugins.types import Kernel
from turbo_core.reference.activation import geglu_fwd, swiglu_fwd
from turbo_core.reference.quantization import quantize_fp8


def _fp8(fwd, args: GluFwdFp8Args) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    y = fwd(args.glu_args())
    q, scale_inv = quantize_fp8(args.quant_args(y))
    return q, scale_inv, (y if args.store_y else None)


def swiglu_fwd_fp8(args: GluFwdFp8Args) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    return _fp8(swiglu_fwd, args)


def geglu_fwd_fp8(args: GluFwdFp8Args) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    return _fp8(geglu_fwd, args)


_VARIANTS = ("fp32", "fp16", "bf16", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE")

KERNELS = [
    Kernel("swiglu_fwd_fp8", BackendType.TORCH, swiglu_fwd_fp8, variants=_VARIANTS, priority=-100),
    Kernel("geglu_fwd_fp8", BackendType.TORCH, geglu_fwd_fp8, variants=_VARIANTS, priority=-100),
]
