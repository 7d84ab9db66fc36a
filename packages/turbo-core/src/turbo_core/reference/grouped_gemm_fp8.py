"""Reference grouped FP8 / FP4 GEMM and their variable-K (wgrad) forms.

Each operand is dequantized as the spec says (helpers of ``turbo_core.reference.gemm_fp8``:
float64 on the CPU, fp32 on a GPU), then the groups are multiplied as in the bf16 grouped
reference: on the CPU each group is one matmul on its slice (``group_offs`` read on the host, free
there); on a GPU there is no host sync (CUDA-graph capturable): every row gets its group id on
the device and each group's GEMM runs over all rows with a ``torch.where`` mask (exact, ``G``
times the FLOPs: the price of a sync-free oracle). ``num_cu`` is a hint this backend ignores.
"""

from __future__ import annotations

import torch

from turbo_core.backend import BackendType
from turbo_core.dispatch.specs.grouped_gemm_fp8 import (
    GroupedGemmFp4Args,
    GroupedGemmFp4VariableKArgs,
    GroupedGemmFp8Args,
    GroupedGemmFp8VariableKArgs,
)
from turbo_core.low_precision import MXFP8_BLOCK_SIZE, ScalingGranularity
from turbo_core.plugins.types import Kernel
from turbo_core.reference.gemm_fp8 import compute_dtype, dequant_fp8, dequant_mx, expand_blocks, finish

G = ScalingGranularity


def _row_groups(group_offs: torch.Tensor, rows: int) -> torch.Tensor:
    """int64 ``[rows]``: the group of each row (``G`` for rows past ``group_offs[-1]``)."""
    r = torch.arange(rows, device=group_offs.device, dtype=group_offs.dtype)
    return torch.searchsorted(group_offs[1:].contiguous(), r, right=True)


def _on_host(group_offs: torch.Tensor) -> bool:
    """Whether the group offsets can be read without a device sync (the per-group path)."""
    return group_offs.device.type == "cpu"


def _bounds(group_offs: torch.Tensor) -> list[tuple[int, int]]:
    offs = group_offs.tolist()  # CPU tensors only: no device sync
    return list(zip(offs[:-1], offs[1:], strict=True))


def _grouped(a: torch.Tensor, b: torch.Tensor, group_offs: torch.Tensor) -> torch.Tensor:
    """``[M, N]``: rows of group g times ``b[g]`` (``[G, K, N]``); other rows zero."""
    out = a.new_zeros((a.shape[0], b.shape[2]))
    if _on_host(group_offs):
        for g, (start, end) in enumerate(_bounds(group_offs)):
            if end > start:
                out[start:end] = a[start:end] @ b[g]
        return out
    row_group = _row_groups(group_offs, a.shape[0]).unsqueeze(1)
    for g in range(b.shape[0]):
        out = torch.where(row_group == g, a @ b[g], out)
    return out


def _variable_k(a: torch.Tensor, b: torch.Tensor, group_offs: torch.Tensor) -> torch.Tensor:
    """``[G, K, N]``: ``a[rows of g].T @ b[rows of g]`` for ``a [M, K]``, ``b [M, N]``."""
    groups = group_offs.shape[0] - 1
    c = a.new_zeros((groups, a.shape[1], b.shape[1]))
    if _on_host(group_offs):
        for g, (start, end) in enumerate(_bounds(group_offs)):
            if end > start:
                c[g] = a[start:end].t() @ b[start:end]
        return c
    row_group = _row_groups(group_offs, a.shape[0]).unsqueeze(1)
    zero = a.new_zeros(())
    for g in range(groups):
        in_g = row_group == g
        c[g] = torch.where(in_g, a, zero).t() @ torch.where(in_g, b, zero)
    return c


def _block_size(gran: G, block_size: int | None) -> int | None:
    return MXFP8_BLOCK_SIZE if gran == G.MX_BLOCKWISE else block_size


def grouped_gemm_fp8(args: GroupedGemmFp8Args) -> torch.Tensor:
    ct = compute_dtype(args.a.device)
    gran = G(args.granularity)
    bs = _block_size(gran, args.block_size)
    if gran == G.BLOCKWISE:  # a's scales are stored transposed: [cdiv(K, bs), M]
        k = args.a.shape[1]
        a = args.a.to(ct) * expand_blocks(args.a_scale_inv.to(ct).t(), 1, bs, k)
    else:
        a = dequant_fp8(args.a, args.a_scale_inv, gran, -1, bs, ct)
    b = dequant_fp8(args.b, args.b_scale_inv, gran, -1 if args.trans_b else -2, bs, ct)
    b = b.transpose(1, 2) if args.trans_b else b
    return _grouped(a, b, args.group_offs).to(args.out_dtype).contiguous()


def grouped_gemm_fp8_variable_k(args: GroupedGemmFp8VariableKArgs) -> torch.Tensor:
    ct = compute_dtype(args.a.device)
    gran = G(args.granularity)
    if gran == G.MX_BLOCKWISE:  # [K, M] / [N, M], blocks along M
        a = dequant_mx(args.a, args.a_scale_inv, ct, packed=False).t()
        b = dequant_mx(args.b, args.b_scale_inv, ct, packed=False).t()
    elif gran == G.BLOCKWISE:  # bs x 1 blocks along M
        m = args.a.shape[0]
        a = args.a.to(ct) * expand_blocks(args.a_scale_inv.to(ct), 0, args.block_size, m)
        b = args.b.to(ct) * expand_blocks(args.b_scale_inv.to(ct), 0, args.block_size, m)
    else:
        a = dequant_fp8(args.a, args.a_scale_inv, gran, -2, None, ct)
        b = dequant_fp8(args.b, args.b_scale_inv, gran, -2, None, ct)
    c = _variable_k(a, b, args.group_offs)
    return finish(c, args.out_dtype, args.out, ct, args.trans_c)


def grouped_gemm_fp4(args: GroupedGemmFp4Args) -> torch.Tensor:
    ct = compute_dtype(args.a.device)
    a = dequant_mx(args.a, args.a_scale_inv, ct, packed=True)
    b = dequant_mx(args.b, args.b_scale_inv, ct, packed=True).transpose(1, 2)
    return _grouped(a, b, args.group_offs).to(args.out_dtype).contiguous()


def grouped_gemm_fp4_variable_k(args: GroupedGemmFp4VariableKArgs) -> torch.Tensor:
    ct = compute_dtype(args.a.device)
    a = dequant_mx(args.a, args.a_scale_inv, ct, packed=True).t()
    b = dequant_mx(args.b, args.b_scale_inv, ct, packed=True).t()
    c = _variable_k(a, b, args.group_offs)
    return finish(c, args.out_dtype, args.out, ct, args.trans_c)


_FP8_VARIANTS = ("TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE", "e4m3", "e5m2", "hybrid", "fnuz")

KERNELS = [
    Kernel("grouped_gemm_fp8", BackendType.TORCH, grouped_gemm_fp8, variants=_FP8_VARIANTS, priority=-100),
    Kernel("grouped_gemm_fp8_variable_k", BackendType.TORCH, grouped_gemm_fp8_variable_k, variants=_FP8_VARIANTS,
           priority=-100),
    Kernel("grouped_gemm_fp4", BackendType.TORCH, grouped_gemm_fp4, variants=("MX_BLOCKWISE", "e2m1"), priority=-100),
    Kernel("grouped_gemm_fp4_variable_k", BackendType.TORCH, grouped_gemm_fp4_variable_k,
           variants=("MX_BLOCKWISE", "e2m1"), priority=-100),
]
