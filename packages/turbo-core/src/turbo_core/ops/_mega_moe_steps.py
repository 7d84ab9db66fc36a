"""The steps of :mod:`turbo_core.ops.fused_mega_moe` in x's precision: argument checks, the routing
layout, and the forward and backward of the two stages, each step a primitive through the
dispatcher (the FP8 form, composed of ops: :mod:`turbo_core.ops._mega_moe_fp8`).

Shapes: ``x [T, H]``, ``topk_idx`` / ``topk_weights [T, K]``, ``w1 [G, 2I, H]`` (gate rows
``[:I]``, up rows ``[I:]``), ``w2 [G, H, I]``; ``W`` ranks in the group, ``E = G W`` experts (rank
``r`` holds ``[r G, (r + 1) G)``), ``R`` received rows (``T`` on one process), ``N = R min(K, G)``
permuted rows (a static bound: no row is ever dropped, and no count is read on the host), or
exactly the routed rows with the exact exchange (``num_worst_tokens=0``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from turbo_core.dispatch.launch import activation as act_launch
from turbo_core.dispatch.launch import grouped_gemm as gg_launch
from turbo_core.dispatch.launch import moe as moe_launch
from turbo_core.dispatch.specs.moe import _require_group, check_expert_ids, group_size
from turbo_core.dispatch.specs.validate import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    require_int,
    require_rows,
    require_same_device,
    require_same_dtype,
    require_shape,
    require_tensor,
)
from turbo_core.ops.grouped_gemm import grouped_gemm_compute_offs

__all__ = ["Dims", "Layout", "check_inputs", "merge_repeats", "stage1_backward", "stage1_forward", "stage2_backward",
           "stage2_forward", "permuted_rows", "unmerge_grad", "worst_rows"]

Tensor = torch.Tensor


@dataclass(frozen=True)
class Dims:
    """The sizes of one call: ``T``, ``H``, ``K``, ``G`` (local experts), ``I``, ``W``."""

    tokens: int
    hidden: int
    topk: int
    local_experts: int
    inter: int
    world: int

    @property
    def experts(self) -> int:
        return self.local_experts * self.world


def check_inputs(x: object, topk_idx: object, topk_weights: object, w1: object, w2: object | None, group: object,
                 num_worst_tokens: object) -> Dims:
    """Every argument check, before any kernel (``w2`` None: stage 1 alone)."""
    _require_group("group", group)
    require_tensor("x", x, ndim=2, dtypes=FLOAT_DTYPES)
    t, h = x.shape
    require_tensor("topk_idx", topk_idx, ndim=2, dtypes=INDEX_DTYPES)
    require_rows("topk_idx", topk_idx, t, "x's")
    k = topk_idx.shape[1]
    if k < 1:
        raise ValueError(f"topk_idx: expected at least one slot per token ([T, K >= 1]), got {tuple(topk_idx.shape)}")
    require_tensor("topk_weights", topk_weights, ndim=2, dtypes=FLOAT_DTYPES)
    require_shape("topk_weights", topk_weights, tuple(topk_idx.shape), "topk_idx's shape")
    require_tensor("w1", w1, ndim=3, dtypes=FLOAT_DTYPES)
    require_same_dtype("w1", w1, "x", x)
    g, two_i, w1_h = w1.shape
    if w1_h != h or two_i < 2 or two_i % 2 or g < 1:
        raise ValueError(f"w1: expected [G >= 1, 2I >= 2 (even: gate rows, then up rows), H={h}], "
                         f"got {tuple(w1.shape)}")
    if w2 is not None:
        require_tensor("w2", w2, ndim=3, dtypes=FLOAT_DTYPES)
        require_same_dtype("w2", w2, "x", x)
        require_shape("w2", w2, (g, h, two_i // 2), "[G, H, I] of w1's G and I and x's H")
    require_same_device(x=x, topk_idx=topk_idx, topk_weights=topk_weights, w1=w1, w2=w2)
    world = group_size(group)
    check_expert_ids("topk_idx", topk_idx, g * world)
    if num_worst_tokens is not None:
        require_int("num_worst_tokens", num_worst_tokens, minimum=0)
    return Dims(t, h, k, g, two_i // 2, world)


def merge_repeats(topk_idx: Tensor, weights: Tensor, num_experts: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """A row's repeated expert id keeps its first slot, carrying the sum of the repeats' weights;
    the other repeats and the invalid slots (ids outside ``[0, E)``) become -1 with weight 0.

    Returns ``(idx int64 [T, K], weights fp32 [T, K], owner int64 [T, K], valid bool [T, K])``:
    ``owner[t, k]`` is the first slot with ``k``'s id (the slot whose gradient ``k`` takes). Torch
    ops over ``[T, K, K]``, no host sync."""
    k = topk_idx.shape[1]
    slots = torch.arange(k, device=topk_idx.device)
    idx = topk_idx.long()
    valid = (idx >= 0) & (idx < num_experts)
    key = torch.where(valid, idx, -1 - slots)  # invalid slots: distinct keys, never merged
    owner = (key.unsqueeze(2) == key.unsqueeze(1)).to(torch.uint8).argmax(dim=2)  # argmax: the first maximum
    first = owner == slots
    merged = torch.zeros_like(weights).scatter_add_(1, owner, torch.where(valid, weights, torch.zeros_like(weights)))
    return torch.where(first & valid, idx, torch.full_like(idx, -1)), merged, owner, valid


def unmerge_grad(grad_merged: Tensor, owner: Tensor, valid: Tensor) -> Tensor:
    """The gradient of :func:`merge_repeats`' weights with respect to the slot weights."""
    return torch.where(valid, grad_merged.gather(1, owner), torch.zeros_like(grad_merged))


@dataclass
class Layout:
    """Where the rows went: what stage 2 and the backwards read. ``owner`` / ``valid``: the merge of
    repeated ids (:func:`merge_repeats`; None where autograd differentiates it); ``dispatched``:
    the permute's count of dispatched tokens (the FP8 form's ``moe_unpermute`` takes it)."""

    dims: Dims
    group: Any
    dispatch: Any  # MoeDispatchHandle (W > 1) or None
    received: int  # R, the received rows
    rows: int  # N, the permuted rows
    row_id_map: Tensor
    tokens_per_expert: Tensor
    group_offs: Tensor
    row_mask: Tensor
    owner: Tensor | None = None
    valid: Tensor | None = None
    dispatched: Tensor | None = None


def worst_rows(dims: Dims, num_worst_tokens: int | None) -> int:
    """The dispatch's ``num_worst_tokens``: ``W T`` for None (0: the exact exchange)."""
    return dims.tokens * dims.world if num_worst_tokens is None else num_worst_tokens


def permuted_rows(dims: Dims, received: int, exact: bool) -> int:
    """``N = R min(K, G)`` (a static bound), or -1 (from the data) with the exact exchange."""
    return -1 if exact else received * min(dims.topk, dims.local_experts)


def stage1_forward(x: Tensor, topk_idx: Tensor, topk_weights: Tensor, w1: Tensor, group: Any, dims: Dims,
                   num_worst_tokens: int | None) -> tuple[Tensor, Tensor, Layout]:
    """Dispatch, permute, the L1 GEMM (NT). Returns ``(h [N, 2I], row weights fp32 [N], layout)``.
    ``N``: :func:`permuted_rows`; with the exact exchange (``num_worst_tokens=0``, which reads counts
    on the host anyway) exactly the routed rows."""
    idx, weights, owner, valid = merge_repeats(topk_idx, topk_weights.float(), dims.experts)
    handle, exact = None, False
    if dims.world > 1:
        worst = worst_rows(dims, num_worst_tokens)
        exact = worst == 0
        recv_x, _, recv_idx, recv_w, _, handle = moe_launch.moe_dispatch(
            x.contiguous(), None, idx, weights, dims.experts, group, num_worst_tokens=worst)
    else:
        recv_x, recv_idx, recv_w = x.contiguous(), idx, weights
    g, r = dims.local_experts, recv_x.shape[0]
    n = permuted_rows(dims, r, exact)
    row_id_map, lens, _, _ = moe_launch.moe_permute_preprocess(recv_idx, g, num_permuted_tokens=n,
                                                               probs_layout="topk")
    if n < 0:
        n = int(lens.sum())  # a host read, in the mode that syncs for its row counts already
    xp, _, row_w = moe_launch.moe_permute(recv_x, row_id_map, n, probs=recv_w)
    offs = grouped_gemm_compute_offs(lens)
    lay = Layout(dims, group, handle, r, n, row_id_map, lens, offs, moe_launch.tokens_per_expert_to_mask(lens, n),
                 owner, valid)
    return gg_launch.grouped_gemm(xp, w1.contiguous(), lens, offs, trans_b=True), row_w, lay


def stage2_forward(h: Tensor, row_w: Tensor, w2: Tensor, lay: Layout) -> Tensor:
    """Weighted SwiGLU, the L2 GEMM (NT), unpermute, combine: ``y [T, H]``."""
    act = act_launch.glu_fwd("swiglu", h, row_w, lay.row_mask)
    out = gg_launch.grouped_gemm(act, w2.contiguous(), lay.tokens_per_expert, lay.group_offs, trans_b=True)
    rows, _ = moe_launch.moe_unpermute(out, lay.row_id_map)
    if lay.dispatch is None:
        return rows
    return moe_launch.moe_combine(rows, lay.dispatch)[0]


def stage2_backward(grad_y: Tensor, h: Tensor, row_w: Tensor, w2: Tensor, lay: Layout, need_act: bool,
                    need_w2: bool) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """Returns ``(grad h [N, 2I], grad row weights fp32 [N], grad w2)`` (the first two None unless
    ``need_act``, the last unless ``need_w2``); the activation is made again for the wgrad."""
    lens, offs = lay.tokens_per_expert, lay.group_offs
    grad_y = grad_y.contiguous()
    if lay.dispatch is not None:
        grad_y, _ = moe_launch.moe_dispatch_cached(grad_y, None, lay.dispatch)
    grad_out, _, _ = moe_launch.moe_permute(grad_y, lay.row_id_map, lay.rows)
    grad_w2 = grad_h = grad_row_w = None
    if need_w2:
        act = act_launch.glu_fwd("swiglu", h, row_w, lay.row_mask)
        grad_w2 = gg_launch.grouped_gemm_variable_k(act, grad_out, lens, offs, trans_c=True)  # [G, H, I]
    if need_act:
        grad_act = gg_launch.grouped_gemm(grad_out, w2.contiguous(), lens, offs, trans_b=False)  # NN
        grad_h, grad_row_w = act_launch.glu_bwd("swiglu", grad_act, h, row_w, lay.row_mask)
    return grad_h, grad_row_w, grad_w2


def stage1_backward(grad_h: Tensor | None, grad_row_w: Tensor | None, x: Tensor, w1: Tensor, lay: Layout,
                    need_x: bool, need_weights: bool, need_w1: bool
                    ) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """Returns ``(grad x [T, H], grad topk_weights fp32 [T, K], grad w1)``, each None when not needed
    (or when no gradient reached stage 1). The permuted x of the wgrad is made again from ``x``
    (dispatched again along the handle with ``W > 1``: the received rows are not kept)."""
    lens, offs = lay.tokens_per_expert, lay.group_offs
    grad_xp = grad_w1 = None
    if grad_h is not None:
        grad_h = grad_h.contiguous()
        if need_w1:
            recv_x = x.contiguous()
            if lay.dispatch is not None:
                recv_x, _ = moe_launch.moe_dispatch_cached(recv_x, None, lay.dispatch)
            xp, _, _ = moe_launch.moe_permute(recv_x, lay.row_id_map, lay.rows)
            grad_w1 = gg_launch.grouped_gemm_variable_k(xp, grad_h, lens, offs, trans_c=True)  # [G, 2I, H]
        if need_x:
            grad_xp = gg_launch.grouped_gemm(grad_h, w1.contiguous(), lens, offs, trans_b=False)  # NN
    need_x = need_x and grad_xp is not None
    need_weights = need_weights and grad_row_w is not None
    if not (need_x or need_weights):
        return None, None, grad_w1
    rows = grad_xp if need_x else grad_row_w.new_zeros((lay.rows, 0))
    pw = grad_row_w.contiguous() if need_weights else None
    grad_recv, grad_recv_w = moe_launch.moe_unpermute(rows, lay.row_id_map, permuted_probs=pw,
                                                      probs_width=lay.dims.topk if need_weights else 0)
    if lay.dispatch is not None:
        grad_recv, grad_recv_w = moe_launch.moe_combine(grad_recv, lay.dispatch, probs=grad_recv_w)
    grad_w = unmerge_grad(grad_recv_w, lay.owner, lay.valid) if need_weights else None
    return (grad_recv if need_x else None), grad_w, grad_w1
