"""Reference dense GEMM.

fp16/bf16 inputs are multiplied in fp32 (exact products, fp32 accumulation) and rounded once to
the output dtype; fp32 inputs are multiplied in float64 on the CPU and in fp32 (TF32 off) on a
GPU (honouring torch's TF32 setting, off by default). Accumulate-into-``out`` adds in fp32 and rounds once to ``out``'s dtype.
"""

from __future__ import annotations

import torch

from turbo_core.backend import BackendType
from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_core.plugins.types import Kernel


def _compute_dtype(args: GemmArgs) -> torch.dtype:
    if args.a.dtype == torch.float32 and args.a.device.type == "cpu":
        return torch.float64
    return torch.float32


def gemm(args: GemmArgs) -> torch.Tensor:
    ct = _compute_dtype(args)
    a = args.a.to(ct)
    b = args.b.to(ct)
    a = a.t() if args.trans_a else a
    b = b.t() if args.trans_b else b
    c = a @ b
    if args.trans_c:
        c = c.t()
    if args.out is not None:
        args.out.copy_(args.out.to(ct) + c)
        return args.out
    return c.to(args.result_dtype).contiguous()



KERNELS = [
    Kernel("gemm", BackendType.TORCH, gemm, variants=("fp32", "fp16", "bf16"), priority=-100),
]
