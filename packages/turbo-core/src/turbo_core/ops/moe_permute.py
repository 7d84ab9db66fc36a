"""``moe_permute`` / ``moe_unpermute``: expert-sorted token permutation with autograd.

Forward of permute = ``moe_permute_preprocess`` + ``moe_permute``; its backward is
``moe_unpermute`` (each token's copies summed, probs scattered back). Forward of unpermute =
``moe_unpermute``; its backward is ``moe_permute`` on the gradients. The autograd Functions here are
shared with ``token_permute`` / ``token_unpermute``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from turbo_core.dispatch.launch import moe_permute as launch
from turbo_core.dispatch.specs.moe import (
    MOE_PERMUTE_PREPROCESS,
    PROBS_LAYOUTS,
    MoePermutePreprocessArgs,
    require_row_id_map,
)
from turbo_core.dispatch.specs.validate import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    dtype_name,
    require_bool,
    require_choice,
    require_int,
    require_rows,
    require_shape,
    require_tensor,
)
from turbo_core.low_precision import FP8_DTYPES

__all__ = ["MoePermuteResult", "moe_permute", "moe_unpermute"]


class MoePermuteResult(NamedTuple):
    """What :func:`moe_permute` returns (a 7-tuple, as in Primus-Turbo, with names)."""

    permuted_tokens: torch.Tensor
    row_id_map: torch.Tensor
    tokens_per_expert: torch.Tensor
    overflow_flag: torch.Tensor
    num_dispatched_tokens: torch.Tensor
    permuted_scaling_factor: torch.Tensor | None
    permuted_probs: torch.Tensor | None


def _placeholder(like: torch.Tensor) -> torch.Tensor:
    return torch.empty((0,), dtype=torch.float32, device=like.device)


def optional(tensor: torch.Tensor, present: bool) -> torch.Tensor | None:
    """An optional output of the Functions here: ``None`` when its input was absent."""
    return tensor if present else None


class PermuteFunction(torch.autograd.Function):
    """tokens (and probs) -> permuted rows; backward: unpermute (sum of copies, probs scattered)."""

    @staticmethod
    def forward(ctx, tokens, probs, expert_map, scaling_factor, num_local_experts, pad_multiple, num_permuted_tokens,
                probs_layout, expert_capacity):
        row_id_map, tpe, overflow, dispatched = launch.moe_permute_preprocess(
            expert_map, num_local_experts, pad_multiple=pad_multiple, num_permuted_tokens=num_permuted_tokens,
            probs_layout=probs_layout, expert_capacity=expert_capacity)
        if num_permuted_tokens >= 0:
            num_out = num_permuted_tokens
        else:
            num_out = int(tpe.sum().item())  # no cap: the one documented host sync
        permuted, scales, pprobs = launch.moe_permute(tokens, row_id_map, num_out, scaling_factor=scaling_factor,
                                                      probs=probs)
        ctx.save_for_backward(row_id_map)
        ctx.num_out = num_out
        ctx.probs_width = probs.shape[1] if probs is not None else 0
        # No None outputs (dynamo mis-assigns gradients after a None next to non-differentiable
        # outputs): absent optional outputs are empty placeholders, turned back into None outside.
        scales = _placeholder(tokens) if scales is None else scales
        pprobs = _placeholder(tokens) if pprobs is None else pprobs
        ctx.mark_non_differentiable(row_id_map, tpe, overflow, dispatched, scales)
        return permuted, row_id_map, tpe, overflow, dispatched, scales, pprobs

    @staticmethod
    def backward(ctx, grad_permuted, _map, _tpe, _overflow, _dispatched, _scales, grad_pprobs):
        (row_id_map,) = ctx.saved_tensors
        need_tokens, need_probs = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if not (need_tokens or need_probs):
            return (None,) * 9
        if need_tokens:
            x = grad_permuted.contiguous()
        else:  # probs only (e.g. FP8 tokens): an empty hidden dim
            x = grad_pprobs.new_zeros((ctx.num_out, 0))
        pp = grad_pprobs.contiguous() if need_probs else None
        grad_tokens, grad_probs = launch.moe_unpermute(x, row_id_map, permuted_probs=pp, probs_width=ctx.probs_width)
        return (grad_tokens if need_tokens else None, grad_probs, None, None, None, None, None, None, None)


class UnpermuteFunction(torch.autograd.Function):
    """permuted rows -> tokens (sum of copies), permuted probs -> dense; backward: permute."""

    @staticmethod
    def forward(ctx, permuted, permuted_probs, row_id_map, probs_width):
        out, probs = launch.moe_unpermute(permuted, row_id_map, permuted_probs=permuted_probs,
                                          probs_width=probs_width)
        ctx.save_for_backward(row_id_map)
        ctx.num_rows = permuted.shape[0]
        if probs is None:
            probs = _placeholder(permuted)
            ctx.mark_non_differentiable(probs)
        return out, probs

    @staticmethod
    def backward(ctx, grad_out, grad_probs):
        (row_id_map,) = ctx.saved_tensors
        need_x, need_p = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if not (need_x or need_p):
            return None, None, None, None
        x = grad_out.contiguous() if need_x else grad_probs.new_zeros((row_id_map.shape[0], 0))
        p = grad_probs.contiguous() if need_p else None
        grad_x, _, grad_p = launch.moe_permute(x, row_id_map, ctx.num_rows, probs=p)
        return (grad_x if need_x else None), grad_p, None, None


class MergeUnpermuteFunction(torch.autograd.Function):
    """Probs-weighted unpermute; backward: ``moe_unpermute_bwd``."""

    @staticmethod
    def forward(ctx, permuted, merging_probs, row_id_map):
        out, _ = launch.moe_unpermute(permuted, row_id_map, merging_probs=merging_probs)
        ctx.save_for_backward(permuted, merging_probs, row_id_map)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        permuted, merging_probs, row_id_map = ctx.saved_tensors
        grad_x, grad_m = launch.moe_unpermute_bwd(grad_out.contiguous(), permuted, row_id_map, merging_probs)
        return (grad_x if ctx.needs_input_grad[0] else None), (grad_m if ctx.needs_input_grad[1] else None), None


def _check_tokens(tokens: object, use_fp8: bool) -> torch.Tensor:
    require_tensor("tokens", tokens, ndim=2)
    if use_fp8 and tokens.dtype not in FP8_DTYPES:
        raise TypeError(f"tokens: use_fp8=True expects an fp8 dtype, got {dtype_name(tokens.dtype)}")
    if not use_fp8 and tokens.dtype not in FLOAT_DTYPES:
        hint = " (pass use_fp8=True for fp8 tokens)" if tokens.dtype in FP8_DTYPES else ""
        raise TypeError(f"tokens: expected dtype in (float16, bfloat16, float32){hint}, got {dtype_name(tokens.dtype)}")
    if use_fp8 and tokens.requires_grad:
        raise ValueError("tokens: fp8 tokens have no backward; pass tokens that do not require grad")
    return tokens


def moe_permute(tokens: torch.Tensor, expert_map: torch.Tensor, *, num_local_experts: int, num_topk: int = 0,
                pad_multiple: int = 0, num_permuted_tokens: int = -1, scaling_factor: torch.Tensor | None = None,
                probs: torch.Tensor | None = None, probs_layout: str = "topk", scales_per_token: int = 0,
                use_fp8: bool = False) -> MoePermuteResult:
    """Sort tokens by expert (grouped-GEMM layout), with padding, a static cap, FP8 scales and probs.

    Args:
        tokens: ``[T, H]`` fp16/bf16/fp32, or fp8 with ``use_fp8=True`` (copied bit-exactly, no
            backward).
        expert_map: a routing map bool ``[T, E]`` or a top-k index map int32/int64 ``[T, K]`` of
            local expert ids (-1 = none; an id repeated in a row counts once). Ids outside
            ``[-1, E)`` raise on CPU; on a GPU they count as -1 (no host sync).
        num_local_experts: ``E >= 1``.
        num_topk: ``K`` of an index map (0 = from its shape; otherwise it must match).
        pad_multiple: pad each expert's row count up to a multiple of this (the grouped-GEMM
            BLOCK_M); 0 = no padding. Padding rows are zero.
        num_permuted_tokens: ``>= 0``: the permuted tensor has exactly this many rows (a static cap:
            no host sync, CUDA-graph safe; rows past the cap are dropped and ``overflow_flag`` is 1,
            rows below it that nothing fills are zero). ``-1``: sized from the data, which reads
            ``tokens_per_expert.sum()`` back to the host (a sync; not capturable, and under
            ``torch.compile`` not traceable into one graph).
        scaling_factor: FP8 per-token scales ``[T, S]`` fp32, moved with their tokens (needs
            ``use_fp8=True``); ``scales_per_token`` is ``S`` (0 = from the shape).
        probs: ``[T, K]`` (``probs_layout="topk"``, index maps only) or ``[T, E]``
            (``"routing_map"``), fp16/bf16/fp32; each copy carries its token's probability.
            ``probs_layout`` only matters when probs are given, except that with an index map and
            ``"topk"`` the row map records top-k slots (what ``moe_unpermute(probs_topk_stride=K)``
            expects).

    Returns:
        :class:`MoePermuteResult` ``(permuted_tokens [N, H], row_id_map int32 [T, 2E + 1],
        tokens_per_expert int64 [E], overflow_flag int32 [1], num_dispatched_tokens int32 [1],
        permuted_scaling_factor [N, S] or None, permuted_probs [N] or None)``. Layout: expert
        segments in expert order, tokens in token order, then padding; ``tokens_per_expert`` is
        each segment's row count inside the cap (padded: the grouped-GEMM group lengths);
        ``num_dispatched_tokens`` counts tokens routed to at least one local expert. The row map
        (described in ``turbo_core.dispatch.specs.moe``) differs from Primus-Turbo's internal one
        (0-based, no padding rows) and is only meant for :func:`moe_unpermute`. Gradients flow to
        ``tokens`` (the sum of its copies' gradients) and ``probs``.

    No tokens (``T = 0``) follow the same rules: ``row_id_map`` is ``[0, 2E + 1]``,
    ``tokens_per_expert`` zeros, ``permuted_tokens`` ``[0, H]``, or ``[N, H]`` of zeros under a cap
    ``num_permuted_tokens = N`` (the cap's static shape). Primus-Turbo's map always has
    ``T + pad_multiple`` rows, so it returns ``[pad_multiple, 2E + 1]`` there, and its permuted
    tokens are ``[0, H]`` even under a cap. The maps are not interchangeable either way; every
    consumer of turbo's map (:func:`moe_unpermute`, ``token_unpermute``, the modules) takes it with
    no rows.
    """
    require_bool("use_fp8", use_fp8)
    tokens = _check_tokens(tokens, use_fp8)
    t = tokens.shape[0]
    require_tensor("expert_map", expert_map, ndim=2, dtypes=(torch.bool, *INDEX_DTYPES))
    require_rows("expert_map", expert_map, t, "tokens'")
    e = require_int("num_local_experts", num_local_experts, minimum=1)
    is_index_map = expert_map.dtype != torch.bool
    k = expert_map.shape[1]
    require_int("num_topk", num_topk, minimum=0)
    if is_index_map and num_topk and num_topk != k:
        raise ValueError(f"num_topk: expected 0 or the index map's width {k}, got {num_topk}")
    require_choice("probs_layout", probs_layout, PROBS_LAYOUTS)
    if probs is not None:
        require_tensor("probs", probs, ndim=2, dtypes=FLOAT_DTYPES)
        if probs_layout == "topk" and not is_index_map:
            raise ValueError("probs_layout: 'topk' needs a top-k index map; with a bool routing map use 'routing_map'")
        require_shape("probs", probs, (t, k) if probs_layout == "topk" else (t, e), f"probs_layout={probs_layout!r}")
        probs = probs.contiguous()
    require_int("scales_per_token", scales_per_token, minimum=0)
    if scaling_factor is not None:
        if not use_fp8:
            raise ValueError("scaling_factor: per-token scales travel with fp8 tokens only; pass use_fp8=True")
        require_tensor("scaling_factor", scaling_factor, ndim=2, dtypes=(torch.float32,))
        if scaling_factor.shape[0] != t or (scales_per_token and scaling_factor.shape[1] != scales_per_token):
            want = f"[{t}, {scales_per_token or 'S'}]"
            raise ValueError(f"scaling_factor: expected shape {want}, got {tuple(scaling_factor.shape)}")
        scaling_factor = scaling_factor.contiguous()
    layout = "topk" if (probs_layout == "topk" and is_index_map) else "routing_map"
    expert_map = expert_map.contiguous()
    MOE_PERMUTE_PREPROCESS.check_args(MoePermutePreprocessArgs(expert_map, e, pad_multiple, num_permuted_tokens,
                                                               layout))
    out = PermuteFunction.apply(tokens.contiguous(), probs, expert_map, scaling_factor, e, pad_multiple,
                                num_permuted_tokens, layout, -1)
    return MoePermuteResult(*out[:5], optional(out[5], scaling_factor is not None), optional(out[6], probs is not None))


def _restore_shape(restore_shape: object, want: tuple[int, int]) -> None:
    if not isinstance(restore_shape, Sequence) or tuple(restore_shape) != want:
        raise ValueError(f"restore_shape: expected {want} ([tokens, hidden] of the permute's input), got {restore_shape!r}")


def moe_unpermute(permuted_tokens: torch.Tensor, row_id_map: torch.Tensor, num_dispatched_tokens_tensor: torch.Tensor,
                  *, restore_shape: Sequence[int], num_local_experts: int, permuted_probs: torch.Tensor | None = None,
                  probs_topk_stride: int = 0, pad_multiple: int = 0):
    """Undo :func:`moe_permute`: sum each token's expert copies (Primus-Turbo's arguments).

    Args:
        permuted_tokens: ``[N, H]`` fp16/bf16/fp32 (the expert outputs in the permuted layout).
        row_id_map: the int32 ``[T, 2E + 1]`` map from :func:`moe_permute`.
        num_dispatched_tokens_tensor: int32/int64 tensor of one element from :func:`moe_permute`
            (accepted for compatibility; the row map already holds everything).
        restore_shape: ``(T, H)``, the permute input's shape.
        num_local_experts: ``E`` (must match the row map).
        permuted_probs: ``None`` or ``[N]`` fp16/bf16/fp32, scattered back to ``unpermuted_probs``.
        probs_topk_stride: the width of ``unpermuted_probs``: ``K`` for a top-k layout, 0 for
            ``[T, E]`` (must match the forward's ``probs_layout``).
        pad_multiple: accepted for compatibility (``>= 0``); padding rows are zero by construction
            and need nothing here.

    Returns:
        ``(tokens [T, H] in permuted_tokens' dtype, unpermuted_probs [T, K or E] or None)``.
        ``tokens[t]`` is the fp32 (or wider) sum of its copies, rounded once; rows dropped by a
        cap contribute nothing. Gradients flow to ``permuted_tokens`` and ``permuted_probs``.
    """
    require_tensor("permuted_tokens", permuted_tokens, ndim=2, dtypes=FLOAT_DTYPES)
    e = require_row_id_map(row_id_map)
    if require_int("num_local_experts", num_local_experts, minimum=1) != e:
        raise ValueError(f"num_local_experts: expected {e} (the row map's), got {num_local_experts}")
    _restore_shape(restore_shape, (row_id_map.shape[0], permuted_tokens.shape[1]))
    require_tensor("num_dispatched_tokens_tensor", num_dispatched_tokens_tensor, dtypes=INDEX_DTYPES)
    if num_dispatched_tokens_tensor.numel() != 1:
        raise ValueError(f"num_dispatched_tokens_tensor: expected one element, got shape"
                         f" {tuple(num_dispatched_tokens_tensor.shape)}")
    stride = require_int("probs_topk_stride", probs_topk_stride, minimum=0)
    require_int("pad_multiple", pad_multiple, minimum=0)
    width = 0
    if permuted_probs is not None:
        require_tensor("permuted_probs", permuted_probs, ndim=1, dtypes=FLOAT_DTYPES)
        require_shape("permuted_probs", permuted_probs, (permuted_tokens.shape[0],), "one per permuted row")
        permuted_probs = permuted_probs.contiguous()
        width = stride or e
    out, probs = UnpermuteFunction.apply(permuted_tokens.contiguous(), permuted_probs, row_id_map.contiguous(), width)
    return out, optional(probs, permuted_probs is not None)
