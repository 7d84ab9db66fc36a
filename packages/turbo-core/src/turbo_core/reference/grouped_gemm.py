"""Reference grouped GEMM and variable-K grouped GEMM (the wgrad).

Compute dtype as in the dense reference: fp16/bf16 inputs are multiplied in fp32 (exact products,
fp32 accumulation) and rounded once to the output dtype; fp32 inputs in float64 on the CPU and in
fp32 on a GPU (honouring torch's TF32 setting, off by default). ``num_cu`` and ``schedule`` are
hints this backend ignores.

Two ways to find each group's rows, with the same result:

* CPU: ``group_offs`` is read on the host (free there) and each group is one GEMM on its slice.
* GPU: no host sync (so the call can be captured in a CUDA graph): every row gets its group id
  from ``group_offs`` on the device, and group ``g`` is a GEMM over all ``M_total`` rows whose
  result (forward) or operands (variable-K) are masked to the rows of ``g`` with ``torch.where``
  (a selection, so exact). This costs ``G`` times the FLOPs of the grouped GEMM: the price of a
  sync-free oracle; real backends are the fast path.
"""

from __future__ import annotations

import torch

from turbo_core.backend import BackendType
from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs, GroupedGemmVariableKArgs
from turbo_core.plugins.types import Kernel


def _compute_dtype(a: torch.Tensor) -> torch.dtype:
    if a.dtype == torch.float32 and a.device.type == "cpu":
        return torch.float64
    return torch.float32


def _row_groups(group_offs: torch.Tensor, m_total: int) -> torch.Tensor:
    """int64 ``[M_total]``: the group of each row (``G`` for rows past ``group_offs[-1]``)."""
    rows = torch.arange(m_total, device=group_offs.device, dtype=group_offs.dtype)
    return torch.searchsorted(group_offs[1:].contiguous(), rows, right=True)


def _on_host(group_offs: torch.Tensor) -> bool:
    """Whether the group offsets can be read without a device sync (the per-group path)."""
    return group_offs.device.type == "cpu"


def _bounds(group_offs: torch.Tensor) -> list[tuple[int, int]]:
    offs = group_offs.tolist()  # CPU tensors only: no device sync
    return list(zip(offs[:-1], offs[1:], strict=True))


def grouped_gemm(args: GroupedGemmArgs) -> torch.Tensor:
    ct = _compute_dtype(args.a)
    a = args.a.to(ct)
    b = args.b.to(ct)
    b = b.transpose(1, 2) if args.trans_b else b  # [G, K, N]
    out = a.new_zeros((a.shape[0], b.shape[2]))
    if _on_host(args.group_offs):
        for g, (start, end) in enumerate(_bounds(args.group_offs)):
            if end > start:
                out[start:end] = a[start:end] @ b[g]
    else:
        row_group = _row_groups(args.group_offs, a.shape[0]).unsqueeze(1)
        for g in range(b.shape[0]):
            out = torch.where(row_group == g, a @ b[g], out)
    return out.to(args.a.dtype)


def grouped_gemm_variable_k(args: GroupedGemmVariableKArgs) -> torch.Tensor:
    ct = _compute_dtype(args.a)
    a = args.a.to(ct)
    b = args.b.to(ct)
    groups = args.group_lens.shape[0]
    c = a.new_zeros((groups, a.shape[1], b.shape[1]))
    if _on_host(args.group_offs):
        for g, (start, end) in enumerate(_bounds(args.group_offs)):
            if end > start:
                c[g] = a[start:end].t() @ b[start:end]
    else:
        row_group = _row_groups(args.group_offs, a.shape[0]).unsqueeze(1)
        zero = a.new_zeros(())
        for g in range(groups):
            in_g = row_group == g
            c[g] = torch.where(in_g, a, zero).t() @ torch.where(in_g, b, zero)
    if args.trans_c:
        c = c.transpose(1, 2)
    if args.out is not None:
        args.out.copy_(args.out.to(ct) + c)
        return args.out
    return c.to(args.a.dtype).contiguous()


KERNELS = [
    Kernel("grouped_gemm", BackendType.TORCH, grouped_gemm, variants=("fp32", "fp16", "bf16"), priority=-100),
    Kernel("grouped_gemm_variable_k", BackendType.TORCH, grouped_gemm_variable_k,
           variants=("fp32", "fp16", "bf16"), priority=-100),
]
