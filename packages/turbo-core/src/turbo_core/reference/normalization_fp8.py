"""Reference ``rmsnorm_fwd_fp8``: the reference ``rmsnorm_fwd`` and then the reference
``quantize_fp8`` of its ``y`` along the last dim, which is the primitive's definition."""

from __future__ import annotations

import torch

from turbo_core.backend import BackendType
from turbo_core.dispatch.specs.normalization_fp8 import RmsNormFwdFp8Args
from turbo_core.plugins.types import Kernel
from turbo_core.reference.normalization import rmsnorm_fwd
from turbo_core.reference.quantization import quantize_fp8


def rmsnorm_fwd_fp8(args: RmsNormFwdFp8Args) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None,
                                                       torch.Tensor, torch.Tensor | None]:
    y, rstd, x_plus_r = rmsnorm_fwd(args.norm_args())
    q, scale_inv = quantize_fp8(args.quant_args(y))
    return q, scale_inv, (y if args.store_y else None), rstd, x_plus_r


KERNELS = [
    Kernel("rmsnorm_fwd_fp8", BackendType.TORCH, rmsnorm_fwd_fp8,
           variants=("fp32", "fp16", "bf16", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE"), priority=-100),
]
