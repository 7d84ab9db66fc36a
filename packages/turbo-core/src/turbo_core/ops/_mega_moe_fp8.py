"""The FP8 form of :mod:`turbo_core.ops.fused_mega_moe`: the same two stages composed of turbo's ops,
each with its own autograd (``moe_dispatch``, ``moe_permute``, ``grouped_gemm_fp8``,
``swiglu_with_probs``, ``moe_unpermute``, ``moe_combine``), so the backward is theirs and the FP8
recipe (quantized copies of the tokens, the weights and the gradients) is ``grouped_gemm_fp8``'s.
Routing, permutation, SwiGLU and communication stay in x's precision.

The expert weights go through one process-wide :class:`~turbo_core.ops.weight_cache.WeightQuantCache`
(:func:`weight_cache`): a ``w1`` / ``w2`` given as a ``torch.nn.Parameter`` is quantized once per
weight version (its ``_version``, data pointer, shape and recipe, and the update generation that
every ``torch.optim`` step and ``invalidate_weight_caches`` advance) and its copies are reused by
every later call until then, by the forward and by the dgrad of the backward. The rules of
``turbo_core.ops.weight_cache`` apply unchanged: other tensors, ``torch.compile`` tracing, CUDA-graph
capture and ``torch.inference_mode`` quantize on every call; the cache holds each weight weakly, so
an entry and its copies go when the weight is freed, at its next miss, or with :func:`drop_weights`."""

from __future__ import annotations

from typing import Any

import torch

from turbo_core.dispatch.launch import moe as moe_launch
from turbo_core.low_precision import Float8QuantConfig
from turbo_core.ops._mega_moe_steps import Dims, Layout, merge_repeats, permuted_rows, worst_rows
from turbo_core.ops.activation import swiglu_with_probs
from turbo_core.ops.grouped_gemm import grouped_gemm_compute_offs
from turbo_core.ops.grouped_gemm_fp8 import grouped_gemm_fp8
from turbo_core.ops.moe_dispatch import moe_combine, moe_dispatch
from turbo_core.ops.moe_permute import moe_permute, moe_unpermute
from turbo_core.ops.weight_cache import WeightQuantCache

__all__ = ["drop_weights", "fp8_stage1", "fp8_stage2", "weight_cache"]

Tensor = torch.Tensor

_cache: WeightQuantCache | None = None  # made on the first FP8 call (its optimizer hook with it)


def weight_cache() -> WeightQuantCache | None:
    """The FP8 copies of the expert weights of every FP8 Mega MoE call in this process; ``None``
    while ``torch.compile`` traces (the graph quantizes the weights itself)."""
    global _cache
    if torch.compiler.is_compiling():
        return None
    if _cache is None:
        _cache = WeightQuantCache()
    return _cache


def drop_weights() -> None:
    """Drop every cached weight copy (a pending backward keeps the copies its forward used)."""
    if _cache is not None:
        _cache.clear()


def fp8_stage1(x: Tensor, topk_idx: Tensor, topk_weights: Tensor, w1: Tensor, group: Any, dims: Dims,
               num_worst_tokens: int | None, config: Float8QuantConfig) -> tuple[Tensor, Tensor, Layout]:
    """Dispatch, permute, the L1 GEMM in FP8: ``(h [N, 2I] x's dtype, row weights fp32 [N], layout)``,
    differentiable in x, topk_weights and w1."""
    idx, weights, _, _ = merge_repeats(topk_idx, topk_weights.float(), dims.experts)  # autograd: the weights' merge
    handle, exact = None, False
    if dims.world > 1:
        worst = worst_rows(dims, num_worst_tokens)
        exact = worst == 0
        recv_x, recv_idx, recv_w, _, handle = moe_dispatch(x, idx, weights, dims.experts, group,
                                                           num_worst_tokens=worst)
    else:
        recv_x, recv_idx, recv_w = x, idx, weights
    g, r = dims.local_experts, recv_x.shape[0]
    res = moe_permute(recv_x, recv_idx, num_local_experts=g, num_permuted_tokens=permuted_rows(dims, r, exact),
                      probs=recv_w)  # -1 (exact exchange): sized from the data
    lens, n = res.tokens_per_expert, res.permuted_tokens.shape[0]
    offs = grouped_gemm_compute_offs(lens)
    lay = Layout(dims, group, handle, r, n, res.row_id_map, lens, offs, moe_launch.tokens_per_expert_to_mask(lens, n),
                 dispatched=res.num_dispatched_tokens)
    h = grouped_gemm_fp8(res.permuted_tokens, w1, lens, offs, trans_b=True, out_dtype=x.dtype, config=config,
                         weight_cache=weight_cache())
    return h, res.permuted_probs, lay


def fp8_stage2(h: Tensor, row_w: Tensor, w2: Tensor, lay: Layout, config: Float8QuantConfig) -> Tensor:
    """Weighted SwiGLU, the L2 GEMM in FP8, unpermute, combine: ``y [T, H]``, differentiable in h,
    the row weights and w2."""
    act = swiglu_with_probs(h, row_w, lay.row_mask)
    out = grouped_gemm_fp8(act, w2, lay.tokens_per_expert, lay.group_offs, trans_b=True, out_dtype=h.dtype,
                           config=config, weight_cache=weight_cache())
    d = lay.dims
    rows, _ = moe_unpermute(out, lay.row_id_map, lay.dispatched, restore_shape=(lay.received, d.hidden),
                            num_local_experts=d.local_experts)
    return rows if lay.dispatch is None else moe_combine(rows, lay.group, lay.dispatch)
