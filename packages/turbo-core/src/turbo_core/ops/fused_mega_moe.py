"""``fused_mega_moe``: a whole mixture-of-experts SwiGLU layer from external routing, forward and
backward, expert-parallel over a process group (Primus-Turbo's "Mega MoE" names and arguments);
``fused_mega_moe_fp8`` with turbo's FP8 recipes; the split form ``fused_mega_moe_stage1`` /
``fused_mega_moe_stage2`` and its FP8 form ``fused_mega_moe_fp8_stage1`` /
``fused_mega_moe_fp8_stage2``; ``FusedMegaMoEFunction``; ``advance_weight_generation`` (drops the
cached FP8 weight copies).

Semantics (every rank, its ``T`` tokens)::

    y[t] = sum over slots k with e = topk_idx[t, k] in [0, E) of
           topk_weights[t, k] * (silu(x[t] @ w1_e[:I].T) * (x[t] @ w1_e[I:].T)) @ w2_e.T

``w1 [G, 2I, H]`` holds each local expert's gate rows ``[:I]`` then its up rows ``[I:]`` (split
halves, not interleaved), ``w2 [G, H, I]``; both are applied NT (``x @ w.T``), as Primus-Turbo's.
``group``: the expert-parallel process group of ``W`` ranks (``None`` or a group of one: one
process); rank ``r`` holds experts ``[r G, (r + 1) G)`` of ``E = G W``, and ``topk_idx`` holds global
ids (-1 = no expert; an id repeated in a row counts once with the repeats' weights summed).

The forward is turbo's primitives through the dispatcher, no host sync on one process:
``moe_dispatch`` (``W > 1``) -> ``moe_permute_preprocess`` + ``moe_permute`` (static cap ``N = R
min(K, G)`` rows, ``R`` the received rows) -> ``grouped_gemm`` (L1) -> ``swiglu_fwd`` weighted by
``topk_weights`` (fp32) -> ``grouped_gemm`` (L2) -> ``moe_unpermute`` -> ``moe_combine``. The
backward is their conjugates: ``moe_dispatch_cached`` of ``dy`` -> ``moe_permute`` -> L2 dgrad (NN)
and variable-K wgrad -> ``swiglu_bwd`` (the weights' gradient per row) -> L1 dgrad and wgrad ->
``moe_unpermute`` (each token's rows summed, the weights' gradients scattered to their slots) ->
``moe_combine``. It saves ``x``, the L1 output and the row weights, and makes the dispatched and
permuted ``x`` (a second dispatch with ``W > 1``) and the activation again (Primus-Turbo recomputes
the dispatched ``x`` too).

Expert parallel (``W > 1``): the dispatch and combine are those of the ``moe_dispatch_combine``
backends (turbo-deepep). With ``num_worst_tokens=None`` every rank receives ``R = W T`` rows (the
worst case, as Primus-Turbo's symmetric buffer): no host sync, and every rank must pass the same
``T``; the permuted tensors then have ``W T min(K, G)`` rows, most of them zero (memory, and the
bandwidth of writing the zero tail, scale with that bound). ``num_worst_tokens=0`` sizes the
exchange and the permuted rows from the data (two host reads; ``T`` may differ per rank); a
positive value fixes the received rows (rows past it are dropped: a bound too small loses tokens).

Numerics: each GEMM accumulates in fp32 (or wider) and rounds its output to x's dtype; SwiGLU and
its weighting in fp32, rounded once; the unpermute and combine sums in fp32, rounded once.
Primus-Turbo's FlyDSL kernel weights the L2 output in its fp32 top-k reduce instead and clamps the
SwiGLU inputs to ±10; the two agree within bf16 rounding when the inputs stay inside the clamp.
"""

from __future__ import annotations

from typing import Any

import torch

from turbo_core.dispatch.specs.moe import _same_group
from turbo_core.dispatch.specs.validate import require_same_dtype, require_shape, require_tensor
from turbo_core.low_precision import Float8QuantConfig, ScalingGranularity
from turbo_core.ops import _mega_moe_fp8 as fp8
from turbo_core.ops import _mega_moe_steps as steps
from turbo_core.ops._autograd import grad_needed
from turbo_core.ops.gemm_fp8 import fp8_config

__all__ = ["FusedMegaMoEFunction", "MegaMoEFP8State", "MegaMoEHandle", "advance_weight_generation", "fused_mega_moe",
           "fused_mega_moe_fp8", "fused_mega_moe_fp8_stage1", "fused_mega_moe_fp8_stage2", "fused_mega_moe_stage1",
           "fused_mega_moe_stage2"]

Tensor = torch.Tensor


def _layer(x, topk_idx, topk_weights, w1, w2, group, num_worst_tokens):
    """The forward of the whole layer in x's precision: ``(y, h, row weights, layout)``."""
    dims = steps.check_inputs(x, topk_idx, topk_weights, w1, w2, group, num_worst_tokens)
    h, row_w, lay = steps.stage1_forward(x, topk_idx, topk_weights, w1, group, dims, num_worst_tokens)
    return steps.stage2_forward(h, row_w, w2, lay), h, row_w, lay


class FusedMegaMoEFunction(torch.autograd.Function):
    """The whole layer in x's precision as one autograd node: ``apply(x, topk_idx, topk_weights, w1,
    w2, group, num_worst_tokens=None)`` (Primus-Turbo's arguments, then turbo's optional one).
    Gradients: x, topk_weights, w1, w2. Saves x, the weights, the L1 output and the row weights."""

    @staticmethod
    def forward(ctx, x, topk_idx, topk_weights, w1, w2, group, num_worst_tokens=None):
        y, h, row_w, lay = _layer(x, topk_idx, topk_weights, w1, w2, group, num_worst_tokens)
        ctx.save_for_backward(x, w1, w2, h, row_w)
        ctx.lay, ctx.weights_dtype = lay, topk_weights.dtype
        return y

    @staticmethod
    def backward(ctx, grad_y):
        x, w1, w2, h, row_w = ctx.saved_tensors
        need_x, need_w, need_w1, need_w2 = (ctx.needs_input_grad[i] for i in (0, 2, 3, 4))
        grad_h, grad_row_w, grad_w2 = steps.stage2_backward(grad_y, h, row_w, w2, ctx.lay, need_x or need_w or need_w1,
                                                            need_w2)
        grad_x, grad_w, grad_w1 = steps.stage1_backward(grad_h, grad_row_w, x, w1, ctx.lay, need_x, need_w, need_w1)
        grad_w = None if grad_w is None else grad_w.to(ctx.weights_dtype)
        return grad_x, None, grad_w, grad_w1, grad_w2, None, None


def fused_mega_moe(group: Any, x: Tensor, topk_idx: Tensor, topk_weights: Tensor, w1: Tensor, w2: Tensor, *,
                   num_worst_tokens: int | None = None) -> Tensor:
    """The MoE SwiGLU layer (module docstring) in the inputs' precision.

    Args:
        group: the expert-parallel ``ProcessGroup``, or ``None`` (one process).
        x: ``[T, H]`` fp16/bf16/fp32 (Primus-Turbo: bf16 only).
        topk_idx: int32/int64 ``[T, K]`` global expert ids in ``[0, E)``, -1 = none (on a GPU an
            id outside the range counts as -1; on the CPU it raises).
        topk_weights: ``[T, K]`` fp16/bf16/fp32, used in fp32; its gradient comes back in its dtype.
        w1: ``[G, 2I, H]`` in x's dtype (gate rows, then up rows); w2: ``[G, H, I]`` in x's dtype.
        num_worst_tokens: expert parallel only (see the module docstring); ``None``: ``W T``.

    Returns:
        ``y [T, H]`` in x's dtype. Gradients flow to x, topk_weights, w1 and w2.

    Raises:
        TypeError / ValueError naming the argument, before any kernel runs.
    """
    if not grad_needed(x, topk_weights, w1, w2):  # no graph: the forward alone, nothing kept for a backward
        return _layer(x, topk_idx, topk_weights, w1, w2, group, num_worst_tokens)[0]
    return FusedMegaMoEFunction.apply(x, topk_idx, topk_weights, w1, w2, group, num_worst_tokens)


def fused_mega_moe_fp8(group: Any, x: Tensor, topk_idx: Tensor, topk_weights: Tensor, w1: Tensor, w2: Tensor,
                       config: Float8QuantConfig | None = None, *, num_worst_tokens: int | None = None) -> Tensor:
    """:func:`fused_mega_moe` with both expert GEMMs (forward, dgrad, wgrad) through
    ``grouped_gemm_fp8`` with ``config`` (``None``: TENSORWISE E4M3; ROWWISE; BLOCKWISE, block 128:
    H and I multiples of 128; MX_BLOCKWISE: multiples of 32; HYBRID: E5M2 gradients), the recipe
    of that op. Composed of turbo's ops, each with its own autograd (``moe_dispatch``,
    ``moe_permute``, ``grouped_gemm_fp8``, ``swiglu_with_probs``, ``moe_unpermute``,
    ``moe_combine``); routing, SwiGLU, permutation and communication stay in x's precision.

    ``w1`` / ``w2`` given as ``torch.nn.Parameter`` are quantized once per weight version: a later
    call with the weight unchanged reuses its FP8 copies (forward and dgrad), and an optimizer step
    or an in-place write makes new ones (the rules of ``turbo_core.ops.weight_cache``; a write
    through ``.data`` outside an optimizer step needs :func:`advance_weight_generation`). Other
    tensors are quantized on every call."""
    config = fp8_config(config)
    dims = steps.check_inputs(x, topk_idx, topk_weights, w1, w2, group, num_worst_tokens)
    h, row_w, lay = fp8.fp8_stage1(x, topk_idx, topk_weights, w1, group, dims, num_worst_tokens, config)
    return fp8.fp8_stage2(h, row_w, w2, lay, config)


class MegaMoEHandle:
    """What :func:`fused_mega_moe_stage1` hands to :func:`fused_mega_moe_stage2`: the routing
    layout (the row map, the group lengths, the dispatch handle) and the FP8 config (None: x's
    precision). Opaque; one handle serves one stage-2 call and its backward."""

    def __init__(self, config: Float8QuantConfig | None) -> None:
        self.config = config
        self.layout: steps.Layout | None = None


class _Stage1Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, topk_idx, topk_weights, w1, group, num_worst_tokens, handle):
        dims = steps.check_inputs(x, topk_idx, topk_weights, w1, None, group, num_worst_tokens)
        h, row_w, handle.layout = steps.stage1_forward(x, topk_idx, topk_weights, w1, group, dims, num_worst_tokens)
        ctx.save_for_backward(x, w1)
        ctx.lay, ctx.weights_dtype = handle.layout, topk_weights.dtype
        return h, row_w

    @staticmethod
    def backward(ctx, grad_h, grad_row_w):
        x, w1 = ctx.saved_tensors
        need_x, need_w, need_w1 = (ctx.needs_input_grad[i] for i in (0, 2, 3))
        grad_x, grad_w, grad_w1 = steps.stage1_backward(grad_h, grad_row_w, x, w1, ctx.lay, need_x, need_w, need_w1)
        grad_w = None if grad_w is None else grad_w.to(ctx.weights_dtype)
        return grad_x, None, grad_w, grad_w1, None, None, None


class _Stage2Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, row_w, w2, lay):
        ctx.save_for_backward(h, row_w, w2)
        ctx.lay = lay
        return steps.stage2_forward(h, row_w, w2, lay)

    @staticmethod
    def backward(ctx, grad_y):
        h, row_w, w2 = ctx.saved_tensors
        need_h, need_w, need_w2 = ctx.needs_input_grad[:3]
        grad_h, grad_row_w, grad_w2 = steps.stage2_backward(grad_y, h, row_w, w2, ctx.lay, need_h or need_w, need_w2)
        return (grad_h if need_h else None), (grad_row_w if need_w else None), grad_w2, None


def fused_mega_moe_stage1(x: Tensor, topk_idx: Tensor, topk_weights: Tensor, w1: Tensor, group: Any, *,
                          num_worst_tokens: int | None = None, config: Float8QuantConfig | None = None
                          ) -> tuple[Tensor, Tensor, MegaMoEHandle]:
    """Stage 1 of :func:`fused_mega_moe` (the w1 half, a gradient boundary of its own): dispatch,
    permute and the L1 GEMM.

    Arguments as :func:`fused_mega_moe`; ``config``: ``None`` (x's precision: one autograd node
    per stage) or a :class:`Float8QuantConfig` (both stages' GEMMs in FP8, composed of ops as
    :func:`fused_mega_moe_fp8`).

    Returns:
        ``(l1_out [N, 2I] in x's dtype, dispatch_weights fp32 [N], handle)``: the L1 output of
        every permuted row (expert segments in order, zero rows past the used ones), each row's
        routing weight, and the :class:`MegaMoEHandle` for :func:`fused_mega_moe_stage2`. The
        gradient that stage 2 returns for ``dispatch_weights`` flows to ``topk_weights``.
    """
    handle = MegaMoEHandle(None if config is None else fp8_config(config))
    if handle.config is not None:
        dims = steps.check_inputs(x, topk_idx, topk_weights, w1, None, group, num_worst_tokens)
        h, row_w, handle.layout = fp8.fp8_stage1(x, topk_idx, topk_weights, w1, group, dims, num_worst_tokens,
                                                 handle.config)
        return h, row_w, handle
    h, row_w = _Stage1Function.apply(x, topk_idx, topk_weights, w1, group, num_worst_tokens, handle)
    return h, row_w, handle


def fused_mega_moe_stage2(l1_out: Tensor, dispatch_weights: Tensor, handle: MegaMoEHandle, topk_idx: Tensor,
                          topk_weights: Tensor, w2: Tensor, group: Any) -> Tensor:
    """Stage 2 of :func:`fused_mega_moe` (the w2 half): weighted SwiGLU, the L2 GEMM, unpermute and
    combine. ``l1_out``, ``dispatch_weights`` and ``handle`` are stage 1's results; ``topk_idx``,
    ``topk_weights`` and ``group`` are the ones given to stage 1 (Primus-Turbo's signature: the
    weights enter through ``dispatch_weights``, so only their shapes are checked here). ``w2``:
    ``[G, H, I]`` in l1_out's dtype. Returns ``y [T, H]``; gradients flow to l1_out,
    dispatch_weights and w2."""
    if not isinstance(handle, MegaMoEHandle) or handle.layout is None:
        raise TypeError(f"handle: expected the MegaMoEHandle returned by fused_mega_moe_stage1, got {type(handle).__name__}")
    lay = handle.layout
    d = lay.dims
    require_tensor("l1_out", l1_out, ndim=2)
    require_shape("l1_out", l1_out, (lay.rows, 2 * d.inter), "stage 1's l1_out")
    require_tensor("dispatch_weights", dispatch_weights, ndim=1, dtypes=(torch.float32,))
    require_shape("dispatch_weights", dispatch_weights, (lay.rows,), "stage 1's dispatch_weights")
    for name, v in (("topk_idx", topk_idx), ("topk_weights", topk_weights)):
        require_tensor(name, v, ndim=2)
        require_shape(name, v, (d.tokens, d.topk), "stage 1's")
    if not _same_group(group, lay.group):
        raise ValueError("group: expected the process group given to fused_mega_moe_stage1")
    require_tensor("w2", w2, ndim=3)
    require_same_dtype("w2", w2, "l1_out", l1_out)
    require_shape("w2", w2, (d.local_experts, d.hidden, d.inter), "[G, H, I] of stage 1's w1 and x")
    if handle.config is not None:
        return fp8.fp8_stage2(l1_out, dispatch_weights, w2, lay, handle.config)
    return _Stage2Function.apply(l1_out.contiguous(), dispatch_weights.contiguous(), w2, lay)


class MegaMoEFP8State:
    """The ``state`` that :func:`fused_mega_moe_fp8_stage1` returns and
    :func:`fused_mega_moe_fp8_stage2` takes (Primus-Turbo's side channel between its FP8 stages,
    which carries the quantized gradient of ``l1_out`` from stage 2's backward to stage 1's). turbo's
    FP8 stages are composed of ops, so every gradient, ``l1_out``'s included, flows through autograd;
    the state holds only the handle of its stage-1 call, which stage 2 checks it is given with. Opaque."""

    __slots__ = ("handle",)

    def __init__(self, handle: MegaMoEHandle) -> None:
        self.handle = handle


def fused_mega_moe_fp8_stage1(x: Tensor, topk_idx: Tensor, topk_weights: Tensor, w1: Tensor, group: Any, *,
                              config: Float8QuantConfig | None = None, num_worst_tokens: int | None = None
                              ) -> tuple[Tensor, Tensor, MegaMoEHandle, MegaMoEFP8State]:
    """Stage 1 of the FP8 split form (Primus-Turbo's ``fused_mega_moe_fp8_stage1``): dispatch,
    permute and the L1 GEMM through ``grouped_gemm_fp8``, composed of ops as :func:`fused_mega_moe_fp8`
    (``w1`` quantized once per weight version when it is a ``torch.nn.Parameter``).

    Arguments as :func:`fused_mega_moe_stage1`, except ``config``: ``None`` is MX_BLOCKWISE E4M3
    (Primus-Turbo's MXFP8 recipe: H and I multiples of 32); any :class:`Float8QuantConfig` of
    :func:`fused_mega_moe_fp8` may be given instead.

    Returns:
        ``(l1_out [N, 2I] in x's dtype, dispatch_weights fp32 [N], handle, state)``: as
        :func:`fused_mega_moe_stage1`, then the :class:`MegaMoEFP8State` for
        :func:`fused_mega_moe_fp8_stage2`. Gradients flow to x, topk_weights and w1.
    """
    if config is None:
        config = Float8QuantConfig(granularity=ScalingGranularity.MX_BLOCKWISE)
    l1_out, dispatch_weights, handle = fused_mega_moe_stage1(x, topk_idx, topk_weights, w1, group,
                                                             num_worst_tokens=num_worst_tokens, config=config)
    return l1_out, dispatch_weights, handle, MegaMoEFP8State(handle)


def fused_mega_moe_fp8_stage2(l1_out: Tensor, dispatch_weights: Tensor, handle: MegaMoEHandle, state: MegaMoEFP8State,
                              topk_idx: Tensor, topk_weights: Tensor, w2: Tensor, group: Any) -> Tensor:
    """Stage 2 of the FP8 split form (Primus-Turbo's ``fused_mega_moe_fp8_stage2``, its argument
    order): weighted SwiGLU, the L2 GEMM through ``grouped_gemm_fp8`` with stage 1's recipe,
    unpermute and combine. ``l1_out``, ``dispatch_weights``, ``handle`` and ``state`` are
    :func:`fused_mega_moe_fp8_stage1`'s results; the other arguments as
    :func:`fused_mega_moe_stage2`. Returns ``y [T, H]`` in l1_out's dtype; gradients flow to
    l1_out, dispatch_weights and w2 (``w2`` quantized once per weight version when it is a
    ``torch.nn.Parameter``)."""
    if not isinstance(handle, MegaMoEHandle) or handle.config is None:
        raise TypeError("handle: expected the MegaMoEHandle returned by fused_mega_moe_fp8_stage1, got "
                        + ("one of fused_mega_moe_stage1 in x's precision" if isinstance(handle, MegaMoEHandle)
                           else type(handle).__name__))
    if not isinstance(state, MegaMoEFP8State) or state.handle is not handle:
        raise ValueError("state: expected the MegaMoEFP8State that fused_mega_moe_fp8_stage1 returned with this "
                         f"handle, got {type(state).__name__}" + (" of another call" if isinstance(state, MegaMoEFP8State)
                                                                  else ""))
    return fused_mega_moe_stage2(l1_out, dispatch_weights, handle, topk_idx, topk_weights, w2, group)


def advance_weight_generation() -> None:
    """Drop every FP8 weight copy that the FP8 Mega MoE ops keep (Primus-Turbo's
    ``kernels.fused_mega_moe.advance_weight_generation``, which must be called after every optimizer
    step there). Here the copies are already made again after an optimizer step or an in-place write
    to the weight (``turbo_core.ops.weight_cache``), so calling it after each step is harmless and
    optional: it frees the copies at once, and it is what makes a write through ``weight.data``
    outside an optimizer step seen. A pending backward keeps the copies its forward used."""
    fp8.drop_weights()
