"""``fused_all_gather_matmul``: all-gather + GEMM, overlapped."""

from __future__ import annotations

import torch

from turbo_core.ops.async_tp.checks import (
    check_a,
    check_b,
    check_common,
    check_out,
    check_outs,
    gathered_shape,
    per_weight,
    resolve_group,
    result_dtypes,
    row_dim,
    weight_count,
)
from turbo_core.ops.async_tp.gather import all_gather_chunks
from turbo_core.ops.async_tp.layout import blocks, place
from turbo_core.ops.async_tp.select import plan_call
from turbo_core.ops.gemm import gemm

__all__ = ["fused_all_gather_matmul"]


def fused_all_gather_matmul(A_shard, Bs, layouts, gather_dim, group_name, gemm_streams=None, comm_streams=None,
                            copy_streams=None, *, comm_method="pipeline", num_splits=None, order=None,
                            skip_copy_local_ag_out=False, enable_sdma=False, return_A=True, A_out=None,
                            outputs=None, out_dtypes=None):
    """``A = all_gather(A_shard, gather_dim)``; ``C_i = A @ op(B_i)``, each chunk's GEMMs starting as
    soon as its rows have arrived.

    Args:
        A_shard: ``[*lead, K]`` (at least 2-D), fp16/bf16/fp32; every rank's has the same shape.
        Bs: 2-D weights in A's dtype: ``[K, N_i]`` for layout ``"NN"``, ``[N_i, K]`` for ``"NT"``.
        layouts: one of ``"NN"`` / ``"NT"`` per weight (the first letter is A's: never transposed).
        gather_dim: a leading dim of ``A_shard`` (not the last); A has ``world`` times its size there.
        group_name: the ProcessGroup, or the name it is registered under.
        num_splits: chunks per rank's shard along ``gather_dim``; None: the tuned choice for this
            shape, else the heuristic (``turbo_core.ops.async_tp.plan``).
        order: ``"rank"`` or ``"split"`` (``turbo_core.ops.async_tp.layout``); None: with
            ``num_splits``, the tuned or heuristic order.
        skip_copy_local_ag_out: accepted for compatibility; no effect (A's local rows are written).
        return_A: return the gathered ``A`` (into ``A_out`` when given) or None.
        A_out: ``[*A shape]`` in A's dtype, written when ``return_A``.
        outputs: optional ``C_i`` buffers, ``[*A.shape[:-1], N_i]`` in ``out_dtypes[i]`` (None entries:
            allocated).
        out_dtypes: per-weight result dtypes (fp16/bf16/fp32; None: A's dtype).

    Returns:
        ``(A or None, [C_i])``. The rows of ``A`` and ``C_i`` along ``gather_dim`` are rank 0's
        shard, then rank 1's, ...; each ``C_i`` is one GEMM per chunk (fp32 sums, rounded once).
    """
    check_common(comm_method, num_splits, order, enable_sdma,
                 {"gemm_streams": gemm_streams, "comm_streams": comm_streams, "copy_streams": copy_streams})
    check_a("A_shard", A_shard, "a leading dim to gather along")
    count = weight_count(Bs, "weights")
    layouts = per_weight("layouts", layouts, count, optional=False, noun="layout")
    ns = [check_b(f"Bs[{i}]", b, lay, A_shard) for i, (b, lay) in enumerate(zip(Bs, layouts, strict=True))]
    dtypes = result_dtypes(out_dtypes, count, A_shard.dtype)
    dim = row_dim("gather_dim", gather_dim, A_shard)
    if not isinstance(skip_copy_local_ag_out, bool) or not isinstance(return_A, bool):
        raise ValueError("skip_copy_local_ag_out, return_A: expected bools")
    group, world, rank = resolve_group(group_name)
    device = A_shard.device
    a_shape = gathered_shape(A_shard, dim, world)
    c_shapes = [(*a_shape[:-1], n) for n in ns]
    check_out("A_out", A_out if return_A else None, a_shape, A_shard.dtype, device)
    outputs = check_outs("outputs", outputs, c_shapes, dtypes, device)

    k = A_shard.shape[-1]
    plan = plan_call("fused_all_gather_matmul", group, world, device, m=A_shard.numel() // max(k, 1) * world,
                     n=sum(ns), k=k, dtype=A_shard.dtype, out_dtype=dtypes[0], layout=",".join(layouts),
                     num_splits=num_splits, order=order)
    with torch.no_grad():
        cs = [o if o is not None else torch.empty(s, dtype=d, device=device)
              for o, s, d in zip(outputs, c_shapes, dtypes, strict=True)]
        a_full = None
        if return_A:
            a_full = A_out if A_out is not None else torch.empty(a_shape, dtype=A_shard.dtype, device=device)

        def consume(r0, r1, lo, hi, rows, _scales):
            for b, lay, c in zip(Bs, layouts, cs, strict=True):
                place(c, dim, world, r0, r1, lo, hi, gemm(rows, b, trans_b=lay == "NT", out_dtype=c.dtype))

        all_gather_chunks(A_shard.movedim(dim, 0).contiguous(), None, group=group, world=world, rank=rank,
                          num_splits=plan.num_splits, order=plan.order, transport_name=plan.transport,
                          consume=consume, a_blocks=None if a_full is None else blocks(a_full, dim, world))
    return a_full, cs
