"""The steps of :mod:`turbo_core.ops.fused_mega_moe`: argument checks, the routing layout, the two
expert GEMMs (high precision or FP8) and the forward/backward of the two stages, each step a
primitive through the dispatcher (or, for FP8, the ``grouped_gemm_fp8`` op).

Shapes: ``x [T, H]``, ``topk_idx`` / ``topk_weights [T, K]``, ``w1 [G, 2I, H]`` (gate rows
``[:I]``, up rows ``[I:]``), ``w2 [G, H, I]``; ``W`` ranks in the group, ``E = G W`` experts (rank
``r`` holds ``[r G, (r + 1) G)``), ``R`` received rows (``T`` on one process), ``N = R min(K, G)``
permuted rows (a static cap: no row is ever dropped, and no count is read on the host).
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
from turbo_core.low_precision import Float8QuantConfig
from turbo_core.ops.grouped_gemm import grouped_gemm_compute_offs
from turbo_core.ops.grouped_gemm_fp8 import grouped_gemm_fp8

__all__ = ["HighPrecisionGemm", "Fp8Gemm", "Layout", "check_inputs", "stage1_backward", "stage1_forward",
           "stage2_backward", "stage2_forward"]

Tensor = torch.Tensor


@dataclass(frozen=True)
class Dims:
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
    """Where the rows went: what stage 2 and both backwards read."""

    dims: Dims
    group: Any
    dispatch: Any  # MoeDispatchHandle (W > 1) or None
    rows: int  # N, the permuted rows
    row_id_map: Tensor
    tokens_per_expert: Tensor
    group_offs: Tensor
    row_mask: Tensor
    owner: Tensor
    valid: Tensor


class HighPrecisionGemm:
    """``out_g = a_g @ w[g]^T`` (NT) through the ``grouped_gemm`` primitive; backward: dgrad (NN)
    and the variable-K wgrad, recomputing nothing (the caller keeps ``a``)."""

    keeps_inputs = False

    def forward(self, a: Tensor, w: Tensor, lay: Layout, need_a: bool, need_w: bool) -> tuple[Tensor, Any]:
        return gg_launch.grouped_gemm(a, w.contiguous(), lay.tokens_per_expert, lay.group_offs, trans_b=True), None

    def backward(self, state: Any, grad_c: Tensor, a: Tensor | None, w: Tensor, lay: Layout, need_a: bool,
                 need_w: bool) -> tuple[Tensor | None, Tensor | None]:
        lens, offs = lay.tokens_per_expert, lay.group_offs
        ga = gg_launch.grouped_gemm(grad_c, w.contiguous(), lens, offs, trans_b=False) if need_a else None
        gw = gg_launch.grouped_gemm_variable_k(a, grad_c, lens, offs, trans_c=True) if need_w else None
        return ga, gw


class Fp8Gemm:
    """The same GEMM through ``grouped_gemm_fp8`` with ``config`` (its recipe quantizes the tokens,
    the weight and the gradient). The op's own autograd is recorded on detached inputs inside the
    forward; the backward differentiates that small graph, whose nodes hold the FP8 copies."""

    keeps_inputs = True

    def __init__(self, config: Float8QuantConfig) -> None:
        self.config = config

    def forward(self, a: Tensor, w: Tensor, lay: Layout, need_a: bool, need_w: bool) -> tuple[Tensor, Any]:
        lens, offs = lay.tokens_per_expert, lay.group_offs
        if not (need_a or need_w):
            return grouped_gemm_fp8(a, w, lens, offs, trans_b=True, out_dtype=a.dtype, config=self.config), None
        with torch.enable_grad():
            a_in, w_in = a.detach().requires_grad_(need_a), w.detach().requires_grad_(need_w)
            c = grouped_gemm_fp8(a_in, w_in, lens, offs, trans_b=True, out_dtype=a.dtype, config=self.config)
        return c.detach(), (c, a_in, w_in)

    def backward(self, state: Any, grad_c: Tensor, a: Tensor | None, w: Tensor, lay: Layout, need_a: bool,
                 need_w: bool) -> tuple[Tensor | None, Tensor | None]:
        c, a_in, w_in = state
        wanted = [t for t, need in ((a_in, need_a), (w_in, need_w)) if need]
        grads = iter(torch.autograd.grad(c, wanted, grad_c))
        return (next(grads) if need_a else None), (next(grads) if need_w else None)


def stage1_forward(x: Tensor, topk_idx: Tensor, topk_weights: Tensor, w1: Tensor, group: Any, dims: Dims,
                   num_worst_tokens: int | None, gemm, need_x: bool, need_w1: bool
                   ) -> tuple[Tensor, Tensor, Layout, Any]:
    """Dispatch, permute, the L1 GEMM. Returns ``(h [N, 2I], row weights fp32 [N], layout, L1 GEMM
    state)``. ``N = R min(K, G)`` rows (static), or exactly the routed rows with the exact exchange
    (``num_worst_tokens=0``, which reads counts on the host anyway)."""
    idx, weights, owner, valid = merge_repeats(topk_idx, topk_weights.float(), dims.experts)
    handle, exact = None, False
    if dims.world > 1:
        worst = dims.tokens * dims.world if num_worst_tokens is None else num_worst_tokens
        exact = worst == 0
        recv_x, _, recv_idx, recv_w, _, handle = moe_launch.moe_dispatch(
            x.contiguous(), None, idx, weights, dims.experts, group, num_worst_tokens=worst)
    else:
        recv_x, recv_idx, recv_w = x.contiguous(), idx, weights
    g = dims.local_experts
    n = -1 if exact else recv_x.shape[0] * min(dims.topk, g)
    row_id_map, lens, _, _ = moe_launch.moe_permute_preprocess(recv_idx, g, num_permuted_tokens=n,
                                                               probs_layout="topk")
    if exact:
        n = int(lens.sum())  # a host read, in the mode that syncs for its row counts already
    xp, _, row_w = moe_launch.moe_permute(recv_x, row_id_map, n, probs=recv_w)
    lay = Layout(dims, group, handle, n, row_id_map, lens, grouped_gemm_compute_offs(lens),
                 moe_launch.tokens_per_expert_to_mask(lens, n), owner, valid)
    h, state = gemm.forward(xp, w1, lay, need_x, need_w1)
    return h, row_w, lay, state


def stage2_forward(h: Tensor, row_w: Tensor, w2: Tensor, lay: Layout, gemm, need_act: bool, need_w2: bool
                   ) -> tuple[Tensor, Any]:
    """Weighted SwiGLU, the L2 GEMM, unpermute, combine. Returns ``(y [T, H], L2 GEMM state)``."""
    act = act_launch.glu_fwd("swiglu", h, row_w, lay.row_mask)
    out, state = gemm.forward(act, w2, lay, need_act, need_w2)
    rows, _ = moe_launch.moe_unpermute(out, lay.row_id_map)
    if lay.dispatch is None:
        return rows, state
    y, _ = moe_launch.moe_combine(rows, lay.dispatch)
    return y, state


def stage2_backward(grad_y: Tensor, h: Tensor, row_w: Tensor, w2: Tensor, state: Any, lay: Layout, gemm,
                    need_act: bool, need_w2: bool) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """Returns ``(grad h [N, 2I], grad row weights fp32 [N], grad w2)`` (the first two None unless
    ``need_act``, the last unless ``need_w2``); the activation is recomputed for the wgrad."""
    grad_y = grad_y.contiguous()
    if lay.dispatch is not None:
        grad_y, _ = moe_launch.moe_dispatch_cached(grad_y, None, lay.dispatch)
    grad_out, _, _ = moe_launch.moe_permute(grad_y, lay.row_id_map, lay.rows)
    act = None
    if need_w2 and not gemm.keeps_inputs:
        act = act_launch.glu_fwd("swiglu", h, row_w, lay.row_mask)
    grad_act, grad_w2 = gemm.backward(state, grad_out, act, w2, lay, need_act, need_w2)
    if not need_act:
        return None, None, grad_w2
    grad_h, grad_row_w = act_launch.glu_bwd("swiglu", grad_act, h, row_w, lay.row_mask)
    return grad_h, grad_row_w, grad_w2


def stage1_backward(grad_h: Tensor | None, grad_row_w: Tensor | None, x: Tensor, w1: Tensor, state: Any,
                    lay: Layout, gemm, need_x: bool, need_weights: bool, need_w1: bool
                    ) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """Returns ``(grad x [T, H], grad topk_weights fp32 [T, K], grad w1)``, each None when not needed
    (or when no gradient reached stage 1). The permuted x of the wgrad is made again from ``x``
    (dispatched again along the handle with ``W > 1``: the received rows are not kept)."""
    grad_xp = grad_w1 = None
    if grad_h is not None and (need_x or need_w1):
        xp = None
        if need_w1 and not gemm.keeps_inputs:
            recv_x = x.contiguous()
            if lay.dispatch is not None:
                recv_x, _ = moe_launch.moe_dispatch_cached(recv_x, None, lay.dispatch)
            xp, _, _ = moe_launch.moe_permute(recv_x, lay.row_id_map, lay.rows)
        grad_xp, grad_w1 = gemm.backward(state, grad_h.contiguous(), xp, w1, lay, need_x, need_w1)
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
