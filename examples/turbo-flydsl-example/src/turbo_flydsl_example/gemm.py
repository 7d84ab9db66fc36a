"""A K-blocked GEMM: ``C = sum over K-blocks of op(A)[:, k] @ op(B)[k, :]``, accumulated in fp32.

Serves the ``gemm`` primitive (``turbo_core.dispatch.specs.gemm.GemmArgs``) except
accumulate-into-``out``, which it declines with a reason.
"""

from __future__ import annotations

import torch

BLOCK_K = 32


def can_handle(args) -> str | None:
    if args.out is not None:
        return "the FLYDSL example gemm does not accumulate into out"
    return None


def gemm(args) -> torch.Tensor:
    a = args.a.t() if args.trans_a else args.a
    b = args.b.t() if args.trans_b else args.b
    m, k = a.shape
    acc = torch.zeros(m, b.shape[1], dtype=torch.float32, device=a.device)
    for k0 in range(0, k, BLOCK_K):
        acc += a[:, k0:k0 + BLOCK_K].float() @ b[k0:k0 + BLOCK_K].float()
    out = acc.t() if args.trans_c else acc
    return out.to(args.out_dtype or args.a.dtype).contiguous()
