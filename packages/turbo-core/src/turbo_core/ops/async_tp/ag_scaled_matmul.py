"""``fused_all_gather_scaled_matmul``: all-gather + FP8 GEMM, overlapped, on pre-quantized FP8
operands or on a high-precision A quantized once before the exchange (``A_quant_config``)."""

from __future__ import annotations

import torch

from turbo_core.dispatch.launch import gemm_fp8 as launch_fp8
from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity, fp8_dtype_for, is_fp8_dtype
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
from turbo_core.ops.async_tp.fp8 import quantize_shard
from turbo_core.ops.async_tp.gather import all_gather_chunks
from turbo_core.ops.async_tp.layout import blocks, place
from turbo_core.ops.async_tp.select import plan_call

__all__ = ["fused_all_gather_scaled_matmul"]

G = ScalingGranularity


def _check_quant(A_shard, A_scale, config) -> tuple[bool, torch.dtype]:
    """``(rowwise, the FP8 dtype of A)`` from the pre-quantized ``A_shard`` / ``A_scale``, or from
    ``A_quant_config`` for a high-precision ``A_shard``."""
    if config is None:
        if not isinstance(A_shard, torch.Tensor) or not is_fp8_dtype(A_shard.dtype) or A_shard.dim() < 2:
            got = f"{A_shard.dtype} tensor of {A_shard.dim()} dims" if isinstance(A_shard, torch.Tensor) else \
                type(A_shard).__name__
            raise ValueError("A_shard: expected an FP8 tensor [..., K] with a leading dim to gather along (or a "
                             f"fp16/bf16/fp32 one with A_quant_config), got {got}")
        if not isinstance(A_scale, torch.Tensor) or A_scale.dtype != torch.float32 or A_scale.device != A_shard.device:
            raise ValueError(f"A_scale: expected an fp32 tensor on {A_shard.device}")
        rowwise_shape = (*A_shard.shape[:-1], 1)
        if A_scale.numel() == 1 and tuple(A_scale.shape) != rowwise_shape:
            return False, A_shard.dtype
        if tuple(A_scale.shape) == rowwise_shape:
            return True, A_shard.dtype
        raise ValueError(f"A_scale: expected one value (TENSORWISE) or {rowwise_shape} (ROWWISE), "
                         f"got {tuple(A_scale.shape)}")
    if not isinstance(config, Float8QuantConfig):
        raise ValueError(f"A_quant_config: expected None or a Float8QuantConfig, got {type(config).__name__}")
    config.validate()
    if config.granularity not in (G.TENSORWISE, G.ROWWISE):
        raise ValueError(f"A_quant_config: the quantize-once all-gather supports TENSORWISE and ROWWISE, got "
                         f"{config.granularity.value}")
    check_a("A_shard", A_shard, "a leading dim to gather along (A_quant_config quantizes it)")
    if A_scale is not None:
        raise ValueError("A_scale: expected None with A_quant_config (the op computes A's scales)")
    return config.granularity == G.ROWWISE, fp8_dtype_for(config.format, A_shard.device)


def _check_weights(Bs, layouts, B_scales, biases, A_shard, rowwise: bool) -> list[int]:
    ns = []
    for i, (b, lay, sc) in enumerate(zip(Bs, layouts, B_scales, strict=True)):
        n = check_b(f"Bs[{i}]", b, lay, A_shard, fp8=True)
        want = ((1, n) if lay == "NN" else (n, 1)) if rowwise else None
        ok = isinstance(sc, torch.Tensor) and sc.dtype == torch.float32 and sc.device == A_shard.device and \
            (tuple(sc.shape) == want if rowwise else sc.numel() == 1)
        if not ok:
            raise ValueError(f"B_scales[{i}]: expected an fp32 tensor of " + (f"shape {want} (ROWWISE, like A)"
                             if rowwise else "one value (TENSORWISE, like A)"))
        bias = biases[i]
        if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (n,)
                                 or bias.device != A_shard.device):
            raise ValueError(f"biases[{i}]: expected None or a [{n}] tensor on {A_shard.device}")
        ns.append(n)
    return ns


def _check_scale_out(t, rowwise: bool, a_shape: tuple, device: torch.device) -> None:
    if t is None:
        return
    if rowwise:
        check_out("A_scale_out", t, (*a_shape[:-1], 1), torch.float32, device)
    elif not isinstance(t, torch.Tensor) or t.numel() != 1 or t.dtype != torch.float32 or t.device != device:
        raise ValueError(f"A_scale_out: expected one fp32 value on {device} (TENSORWISE)")


def fused_all_gather_scaled_matmul(A_shard, Bs, layouts, A_scale, B_scales, gather_dim, group_name, biases=None,
                                   result_scales=None, out_dtypes=None, use_fast_accum=False, gemm_streams=None,
                                   comm_streams=None, copy_streams=None, *, comm_method="pipeline", num_splits=None,
                                   order=None, skip_copy_local_ag_out=False, enable_sdma=False, A_out=None,
                                   mm_out=None, A_quant_config=None, A_scale_out=None):
    """``A = all_gather(A_shard, gather_dim)``; ``C_i = (A * A_scale) @ op(B_i * B_scales[i]) (+ biases[i])``.

    Two ways in:

    * pre-quantized (``A_quant_config=None``): ``A_shard`` is FP8 and ``A_scale`` its dequantization
      multipliers: one value (TENSORWISE: the scale of the whole gathered A, so every rank passes the
      same value, e.g. from an all-reduced amax), or ``[*lead, 1]`` (ROWWISE: one per row of the
      shard, gathered with it);
    * quantize-once (``A_quant_config`` a ``Float8QuantConfig``, TENSORWISE or ROWWISE, E4M3 / E5M2 /
      HYBRID's forward E4M3): ``A_shard`` is fp16/bf16/fp32 and ``A_scale`` None. Each rank quantizes
      its shard once (TENSORWISE after one all-reduce of the amax, so that all ranks share the scale;
      ROWWISE locally) and only the FP8 bytes and scales travel
      (``turbo_core.ops.async_tp.fp8``).

    Args:
        Bs: FP8 2-D weights: ``[K, N_i]`` (``"NN"``) or ``[N_i, K]`` (``"NT"``).
        layouts: ``"NN"`` / ``"NT"`` per weight.
        B_scales: per weight, one value (TENSORWISE) or one per output column (ROWWISE, like A):
            ``[1, N_i]`` for ``"NN"``, ``[N_i, 1]`` for ``"NT"``.
        gather_dim, group_name, num_splits, order, skip_copy_local_ag_out: as
            ``fused_all_gather_matmul`` (the tuning key: the FP8 dtype, the layouts and the granularity).
        biases: None, or per weight None or ``[N_i]`` (taken in the output dtype), added to the fp32 sums
            before their one rounding to the output dtype.
        result_scales: None (or all None): FP8 outputs are not supported.
        out_dtypes: per weight fp16/bf16/fp32 (None: bf16).
        use_fast_accum: accepted; the ``gemm_fp8`` backend's accumulation is used either way.
        A_out: the gathered FP8 ``A`` buffer (the gathered A is returned either way).
        mm_out: optional ``C_i`` buffers, ``[*A.shape[:-1], N_i]`` in ``out_dtypes[i]`` (None entries:
            allocated).
        A_scale_out: optional fp32 buffer for the gathered A's multipliers: one value (TENSORWISE) or
            ``[*A.shape[:-1], 1]`` (ROWWISE).

    Returns:
        ``(A, [C_i])``: the gathered FP8 A and one result per weight (fp32 sums, rounded once).
    """
    check_common(comm_method, num_splits, order, enable_sdma,
                 {"gemm_streams": gemm_streams, "comm_streams": comm_streams, "copy_streams": copy_streams})
    rowwise, fp8_dtype = _check_quant(A_shard, A_scale, A_quant_config)
    n_w = weight_count(Bs, "FP8 weights")
    layouts = per_weight("layouts", layouts, n_w, optional=False, noun="layout")
    B_scales = per_weight("B_scales", B_scales, n_w, optional=False)
    biases = per_weight("biases", biases, n_w)
    if any(r is not None for r in per_weight("result_scales", result_scales, n_w)):
        raise ValueError("result_scales: FP8 outputs are not supported here; pass None")
    if not isinstance(use_fast_accum, bool) or not isinstance(skip_copy_local_ag_out, bool):
        raise ValueError("use_fast_accum, skip_copy_local_ag_out: expected bools")
    dim = row_dim("gather_dim", gather_dim, A_shard)
    dtypes = result_dtypes(out_dtypes, n_w, torch.bfloat16)
    ns = _check_weights(Bs, layouts, B_scales, biases, A_shard, rowwise)
    group, world, rank = resolve_group(group_name)
    device = A_shard.device
    a_shape = gathered_shape(A_shard, dim, world)
    c_shapes = [(*a_shape[:-1], n) for n in ns]
    check_out("A_out", A_out, a_shape, fp8_dtype, device)
    mm_out = check_outs("mm_out", mm_out, c_shapes, dtypes, device)
    _check_scale_out(A_scale_out, rowwise, a_shape, device)

    gran = G.ROWWISE if rowwise else G.TENSORWISE
    with torch.no_grad():
        if A_quant_config is not None:  # the only communication before the exchange: TENSORWISE's amax
            A_shard, A_scale = quantize_shard(A_shard, fp8_dtype, gran, group)
        k = A_shard.shape[-1]
        plan = plan_call("fused_all_gather_scaled_matmul", group, world, device,
                         m=A_shard.numel() // max(k, 1) * world, n=sum(ns), k=k, dtype=fp8_dtype, out_dtype=dtypes[0],
                         layout=f"{','.join(layouts)}/{gran.value.lower()}", num_splits=num_splits, order=order)
        cs = [o if o is not None else torch.empty(s, dtype=d, device=device)
              for o, s, d in zip(mm_out, c_shapes, dtypes, strict=True)]
        a_full = A_out if A_out is not None else torch.empty(a_shape, dtype=fp8_dtype, device=device)
        a_sc = None if rowwise else A_scale.reshape(())
        if A_scale_out is not None and not rowwise:
            A_scale_out.copy_(A_scale.reshape(A_scale_out.shape))
        b_scs = [s if rowwise else s.reshape(()) for s in B_scales]
        biases = [b.to(d) if b is not None else None for b, d in zip(biases, dtypes, strict=True)]

        def consume(r0, r1, lo, hi, rows, row_scales):
            for b, lay, c, b_sc, bias in zip(Bs, layouts, cs, b_scs, biases, strict=True):
                # with a bias: accumulate into it (one rounding of bias + sum, beta = 1)
                acc = bias.expand(rows.shape[0], c.shape[-1]).contiguous() if bias is not None else None
                part = launch_fp8.gemm_fp8(rows, row_scales if rowwise else a_sc, b, b_sc, trans_b=lay == "NT",
                                           out_dtype=None if acc is not None else c.dtype, granularity=gran, out=acc)
                place(c, dim, world, r0, r1, lo, hi, part)

        s_blocks = blocks(A_scale_out, dim, world) if rowwise and A_scale_out is not None else None
        all_gather_chunks(A_shard.movedim(dim, 0).contiguous(),
                          A_scale.movedim(dim, 0).contiguous() if rowwise else None, group=group, world=world,
                          rank=rank, num_splits=plan.num_splits, order=plan.order, transport_name=plan.transport,
                          consume=consume, a_blocks=blocks(a_full, dim, world), s_blocks=s_blocks)
    return a_full, cs
