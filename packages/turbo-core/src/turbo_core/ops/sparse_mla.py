"""Sparse MLA attention with autograd: ``sparse_mla_func`` (Primus-Turbo's name and arguments) and
its autograd Function ``SparseMLAFunc``.

DeepSeek-V3.2's sparse attention in the absorbed MLA form: every token's ``H`` query heads attend
to the ``topk`` rows of one shared latent ``kv`` that an indexer picked for it; keys are the whole
``d_qk``-wide rows (DeepSeek: 512 latent + 64 rope channels), values their first ``kv_lora_rank``
channels. Shapes and numerics are specified in ``turbo_core.dispatch.specs.sparse_mla``.

Autograd: the forward's backend is resolved once and stored on the autograd context; the backward
primitive runs pinned to it (Primus-Turbo selects the two passes independently; here they never run
on different backends). Only ``out`` and ``lse`` are saved; the backward recomputes the
probabilities. ``lse`` is not differentiable. Backends are chosen in the family ``sparse_attn``:
``GlobalBackendManager.set_sparse_attn_backend`` or ``TURBO_SPARSE_ATTN_BACKEND``.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.launch import sparse_mla as launch
from turbo_core.dispatch.specs.sparse_mla import SPARSE_MLA_FWD, SparseMlaBwdArgs, SparseMlaFwdArgs
from turbo_core.dispatch.specs.validate import require_bool, require_tensor
from turbo_core.ops._autograd import grad_needed

__all__ = ["SparseMLAFunc", "sparse_mla_func"]


class SparseMLAFunc(torch.autograd.Function):
    """``SparseMLAFunc.apply(q, kv, topk_indices, attn_sink, kv_lora_rank, scale, return_lse,
    is_grad_enabled)``: Primus-Turbo's argument order; returns ``out``, or ``(out, lse)`` with
    ``return_lse``. Gradients flow to ``q``, ``kv`` and ``attn_sink``."""

    @staticmethod
    def forward(ctx, q, kv, topk_indices, attn_sink, kv_lora_rank, scale, return_lse, is_grad_enabled):
        args = SparseMlaFwdArgs(q, kv, topk_indices, attn_sink, kv_lora_rank, scale)
        if torch.compiler.is_compiling():
            backend = None
            out, lse = launch.sparse_mla_fwd(args)
        else:
            out, lse, backend = launch.sparse_mla_fwd_eager(args)
        ctx.save_for_backward(q, kv, out, lse, topk_indices, attn_sink)
        ctx.backend = backend
        ctx.attrs = (kv_lora_rank, scale)
        if not return_lse:
            return out
        ctx.mark_non_differentiable(lse)  # only an output may be marked (torch.compile asserts it)
        return out, lse

    @staticmethod
    def backward(ctx, dout, *_dlse):
        q, kv, out, lse, topk_indices, attn_sink = ctx.saved_tensors
        kv_lora_rank, scale = ctx.attrs
        args = SparseMlaBwdArgs(dout.contiguous(), q, kv, out, lse, topk_indices, attn_sink, kv_lora_rank, scale)
        dq, dkv, dsink = launch.sparse_mla_bwd(args, backend=ctx.backend)
        if not ctx.needs_input_grad[3]:
            dsink = None
        return dq, dkv, None, dsink, None, None, None, None


def _unit_last(name: str, t):
    require_tensor(name, t)
    return t if t.dim() == 0 or t.shape[-1] <= 1 or t.stride(-1) == 1 else t.contiguous()


def sparse_mla_func(q: torch.Tensor, kv: torch.Tensor, topk_indices: torch.Tensor,
                    attn_sink: torch.Tensor | None = None, kv_lora_rank: int = 512, scale: float | None = None,
                    return_lse: bool = False):
    """Sparse MLA attention over each token's top-k keys, with autograd.

    Args:
        q: ``[T, H, d_qk]`` fp16/bf16/fp32 (DeepSeek-V3.2: ``d_qk = 576``, 512 latent then 64 rope
            channels).
        kv: ``[num_kv, 1, d_qk]`` or ``[num_kv, d_qk]``, q's dtype: one latent row per key shared by
            every head. Keys are whole rows; values are their first ``kv_lora_rank`` channels.
        topk_indices: int32 (or int64) ``[T, topk]``: the rows of ``kv`` each token attends to. An
            entry outside ``[0, num_kv)`` selects nothing (``-1`` pads rows with fewer keys); a
            repeated index counts once per occurrence.
        attn_sink: optional fp32 ``[H]`` logit per head that joins the softmax denominator (no
            value); it gets a gradient like any input.
        kv_lora_rank: the value width ``d_v`` (``1 <= kv_lora_rank <= d_qk``; DeepSeek: 512).
        scale: the scale of ``q . k``; ``None`` means ``d_qk ** -0.5``.
        return_lse: also return the log-sum-exp.

    Returns:
        ``out`` ``[T, H, kv_lora_rank]`` in q's dtype, or ``(out, lse)`` with ``return_lse``, ``lse``
        fp32 ``[T, H]`` (natural log, the sink included). A token whose row selects nothing gets
        ``out = 0`` and ``lse = -inf`` (``lse = attn_sink[h]`` with a sink). Scores, softmax and
        ``P @ V`` accumulate in fp32 (or wider) and the output is rounded once.

    Arguments are checked before any kernel runs (``TypeError``/``ValueError`` naming the argument).
    """
    qc, kvc, idx = _unit_last("q", q), _unit_last("kv", kv), _unit_last("topk_indices", topk_indices)
    require_bool("return_lse", return_lse)
    args = SparseMlaFwdArgs(qc, kvc, idx, attn_sink, kv_lora_rank, scale)
    SPARSE_MLA_FWD.check_args(args)
    if not grad_needed(qc, kvc, attn_sink):
        out, lse = launch.sparse_mla_fwd(args)
        return (out, lse) if return_lse else out
    return SparseMLAFunc.apply(qc, kvc, idx, attn_sink, kv_lora_rank, scale, return_lse, torch.is_grad_enabled())
