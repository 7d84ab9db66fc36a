"""``fused_matmul_reduce_scatter``: GEMM + reduce-scatter, overlapped."""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.validate import FLOAT_DTYPES
from turbo_core.ops.async_tp.checks import check_a, check_b, check_common, check_out, resolve_group, row_dim
from turbo_core.ops.async_tp.layout import blocks
from turbo_core.ops.async_tp.scatter import reduce_scatter_chunks
from turbo_core.ops.async_tp.select import plan_call
from turbo_core.ops.gemm import gemm

__all__ = ["fused_matmul_reduce_scatter"]


def fused_matmul_reduce_scatter(A, B, layout, reduce_op, scatter_dim, group_name, gemm_streams=None,
                                comm_streams=None, *, comm_method="pipeline", num_splits=None, order=None,
                                enable_sdma=False, output=None, rs_out=None, out_dtype=None):
    """``C = A @ op(B)``, reduce-scattered (``"sum"`` or ``"avg"`` over the ranks) along ``scatter_dim``;
    each chunk's partial products travel and are summed while the next chunk's GEMM runs.

    Args:
        A: ``[*lead, K]`` (at least 2-D), fp16/bf16/fp32; ``lead[scatter_dim]`` divisible by the world size.
        B: ``[K, N]`` (layout ``"NN"``) or ``[N, K]`` (``"NT"``) in A's dtype.
        reduce_op: ``"sum"`` or ``"avg"`` (the sum divided by the world size, in the output dtype).
        scatter_dim: a leading dim of ``A`` (not the last); rank ``r`` gets its ``r``-th slice.
        group_name: the ProcessGroup, or the name it is registered under.
        num_splits: chunks of each destination's slice; None: the tuned choice for this shape, else
            the heuristic (``turbo_core.ops.async_tp.plan``).
        order: ``"rank"`` or ``"split"`` (``turbo_core.ops.async_tp.layout``); None: the tuned or
            heuristic order.
        output: optional buffer for this rank's full ``C`` ``[*lead, N]`` (written when given).
        rs_out: optional result buffer ``[*lead with lead[scatter_dim] / world, N]``.
        out_dtype: fp16/bf16/fp32 (None: A's dtype): the GEMM's output and the reduction's dtype.

    Returns:
        ``rs_out``: ``sum_r C_r[slice of this rank]`` (or its average), ``C_r`` being rank ``r``'s
        product. Each ``C_r`` is rounded once into ``out_dtype``; the sum over ranks is the
        collective's (``nccl``: in ``out_dtype``) or one fp32 sum rounded once (``symm``).
    """
    check_common(comm_method, num_splits, order, enable_sdma, {"gemm_streams": gemm_streams,
                                                              "comm_streams": comm_streams})
    check_a("A", A, "a leading dim to scatter along")
    n = check_b("B", B, layout, A)
    if reduce_op not in ("sum", "avg"):
        raise ValueError(f"reduce_op: expected 'sum' or 'avg', got {reduce_op!r}")
    dtype = A.dtype if out_dtype is None else out_dtype
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"out_dtype: expected fp16/bf16/fp32 or None, got {out_dtype}")
    dim = row_dim("scatter_dim", scatter_dim, A)
    group, world, rank = resolve_group(group_name)
    if A.shape[dim] % world:
        raise ValueError(f"A: dim {dim} has {A.shape[dim]} rows, not divisible by the world size {world}")
    c_shape = (*A.shape[:-1], n)
    per = A.shape[dim] // world
    rs_shape = (*A.shape[:dim], per, *A.shape[dim + 1:-1], n)
    check_out("output", output, c_shape, dtype, A.device)
    check_out("rs_out", rs_out, rs_shape, dtype, A.device)

    k = A.shape[-1]
    plan = plan_call("fused_matmul_reduce_scatter", group, world, A.device, m=A.numel() // max(k, 1), n=n, k=k,
                     dtype=A.dtype, out_dtype=dtype, layout=layout, num_splits=num_splits, order=order)
    with torch.no_grad():
        result = rs_out if rs_out is not None else torch.empty(rs_shape, dtype=dtype, device=A.device)
        reduce_scatter_chunks(
            A.movedim(dim, 0).unflatten(0, (world, per)),
            lambda rows: gemm(rows, B, trans_b=layout == "NT", out_dtype=dtype),
            group=group, world=world, rank=rank, num_splits=plan.num_splits, order=plan.order,
            transport_name=plan.transport, result=result.movedim(dim, 0), n=n, avg=reduce_op == "avg",
            output_blocks=None if output is None else blocks(output, dim, world))
    return result
