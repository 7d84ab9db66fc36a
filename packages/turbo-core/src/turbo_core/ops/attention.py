"""Flash attention with autograd: ``flash_attn_func``, ``flash_attn_varlen_func`` and
``flash_attn_fp8_func`` (Primus-Turbo's names and arguments).

Layout convention: every tensor is taken by its *logical* shape, ``[b, s, h, d]`` (dense) or
``[total, h, d]`` (varlen). Primus-Turbo infers bshd/sbhd/bhsd from the strides; here any strided
view with that logical shape works (e.g. ``x.transpose(0, 1)`` of an sbhd buffer, or
``x.transpose(1, 2)`` of a bhsd one): views with unit stride in the head dim go to the kernels as
they are, others are made contiguous first. The output has q's logical shape (with ``d_v``) and
q's memory order (an sbhd q gives an sbhd-strided output), as in Primus-Turbo.

Autograd: the forward's backend is resolved once (``dispatch.select`` of ``attention_fwd`` for
the call) and stored on the autograd context; the backward primitive runs pinned to it
(``use_backend``), so forward and backward never run on different backends. Inside a compiled
graph the choice happens at run time in the custom op, and the backward re-resolves the forward's
selection for the same arguments (identical unless the settings changed in between; see
``turbo_core.dispatch.launch.attention``). Only ``out`` and ``lse`` are saved; the backward
recomputes the probabilities. ``lse`` is not differentiable.

Not supported (clear ``ValueError`` naming the argument): ``bias``, ``alibi_slopes``,
``return_attn_probs=True``. ``dropout_p != 0`` is served only by backends that implement dropout
(the reference does not: such a call raises ``BackendError`` with the reason).
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.launch import attention as launch
from turbo_core.dispatch.specs.attention import (
    ATTENTION_FP8_FWD,
    ATTENTION_FWD,
    AttentionBwdArgs,
    AttentionFp8BwdArgs,
    AttentionFp8FwdArgs,
    AttentionFwdArgs,
    check_window_size,
)
from turbo_core.dispatch.specs.validate import require_tensor
from turbo_core.low_precision import Float8QuantConfig
from turbo_core.ops._autograd import grad_needed

__all__ = ["flash_attn_fp8_func", "flash_attn_func", "flash_attn_varlen_func"]


class _FlashAttnFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sink, cu_q, cu_k, max_q, max_k, scale, causal, window, dropout_p, deterministic):
        args = AttentionFwdArgs(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, window, sink, dropout_p,
                                deterministic)
        if torch.compiler.is_compiling():
            backend = None
            out, lse = launch.attention_fwd(args)
        else:
            out, lse, backend = launch.attention_fwd_eager(args)
        ctx.save_for_backward(q, k, v, out, lse, sink, cu_q, cu_k)
        ctx.backend = backend
        ctx.attrs = (max_q, max_k, scale, causal, window, dropout_p, deterministic)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, sink, cu_q, cu_k = ctx.saved_tensors
        max_q, max_k, scale, causal, window, dropout_p, deterministic = ctx.attrs
        args = AttentionBwdArgs(dout.contiguous(), q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, causal,
                                window, sink, dropout_p, deterministic)
        dq, dk, dv, dsink = launch.attention_bwd(args, backend=ctx.backend)
        if not ctx.needs_input_grad[3]:
            dsink = None
        return dq, dk, dv, dsink, None, None, None, None, None, None, None, None, None


class _FlashAttnFp8Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal, window, dropout_p, deterministic):
        args = AttentionFp8FwdArgs(q, k, v, scale, causal, window, dropout_p, deterministic)
        if torch.compiler.is_compiling():
            backend = None
            out, lse = launch.attention_fp8_fwd(args)
        else:
            out, lse, backend = launch.attention_fp8_fwd_eager(args)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.backend = backend
        ctx.attrs = (scale, causal, window, dropout_p, deterministic)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        args = AttentionFp8BwdArgs(dout.contiguous(), q, k, v, out, lse, *ctx.attrs)
        dq, dk, dv = launch.attention_fp8_bwd(args, backend=ctx.backend)
        return dq, dk, dv, None, None, None, None, None


# -- argument handling ---------------------------------------------------------------------------

def _reject_unsupported(bias, alibi_slopes, return_attn_probs) -> None:
    if bias is not None:
        raise ValueError("bias: attention bias is not supported by turbo's flash attention (pass None)")
    if alibi_slopes is not None:
        raise ValueError("alibi_slopes: ALiBi is not supported by turbo's flash attention (pass None)")
    if return_attn_probs:
        raise ValueError("return_attn_probs: not supported (the kernels never materialize the "
                         "probabilities); use return_lse=True for the log-sum-exp")


def _qkv(q, k, v, ndim: int, layout: str):
    """Rank checks, then unit stride in the head dim (a copy only where it is missing)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        require_tensor(name, t)
        if t.dim() != ndim:
            raise ValueError(f"{name}: expected a {ndim}-D tensor {layout}, got shape {tuple(t.shape)}")
    return tuple(t if t.shape[-1] <= 1 or t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))


def _distinct(*tensors):
    """The same tensor passed twice (k is v, cu_seqlens_k is cu_seqlens_q) becomes a view of itself:
    torch.compile cannot trace an autograd.Function taking one tensor in two inputs."""
    seen: list = []
    out = []
    for t in tensors:
        if t is not None and any(t is s for s in seen):
            t = t.view_as(t)
        seen.append(t)
        out.append(t)
    return out


def _scale(softmax_scale, q: torch.Tensor):
    if softmax_scale is None:
        return float(q.shape[-1]) ** -0.5
    return softmax_scale  # validated (finite real) by the spec


def _like_layout(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``out`` (contiguous) re-laid in ``ref``'s memory order (same logical shape)."""
    if ref.is_contiguous():
        return out
    order = sorted(range(ref.dim()), key=lambda i: (-ref.stride(i), i))
    if order == list(range(ref.dim())):
        return out
    inverse = [order.index(i) for i in range(ref.dim())]
    return out.permute(order).contiguous().permute(inverse)


def _finish(out, lse, q, return_lse):
    out = _like_layout(out, q)
    return (out, lse) if return_lse else out


# -- public ops ----------------------------------------------------------------------------------

def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                    softmax_scale: float | None = None, causal: bool = False,
                    window_size: tuple[int, int] = (-1, -1), bias: torch.Tensor | None = None,
                    alibi_slopes: torch.Tensor | None = None, deterministic: bool = False,
                    return_lse: bool = False, return_attn_probs: bool = False,
                    sink: torch.Tensor | None = None):
    """Softmax attention over dense batches, with autograd.

    Args:
        q: ``[b, s_q, h_q, d_qk]`` (logical shape; any strides, see the module docstring), fp16/bf16/fp32.
        k: ``[b, s_kv, h_kv, d_qk]``, q's dtype; ``h_q % h_kv == 0`` (GQA/MQA).
        v: ``[b, s_kv, h_kv, d_v]``, q's dtype (``d_v`` may differ from ``d_qk``, e.g. 192/128).
        dropout_p: probability of dropping an attention weight (0.0 on the reference backend).
        softmax_scale: scale of ``q @ k^T``; ``None`` means ``d_qk ** -0.5``.
        causal: mask aligned to the bottom-right corner (query ``i`` sees keys ``j <= i + s_kv - s_q``).
        window_size: ``(left, right)`` sliding window around the diagonal ``i + s_kv - s_q``;
            -1 = unbounded. ``causal`` forces ``right = 0``.
        bias, alibi_slopes, return_attn_probs: not supported (``ValueError``).
        deterministic: require a bit-reproducible backward.
        return_lse: also return the log-sum-exp.
        sink: optional fp32 ``[h_q]`` learned logit per head that joins the softmax denominator
            (GPT-OSS); it gets a gradient like any input.

    Returns:
        ``out`` ``[b, s_q, h_q, d_v]`` in q's dtype and memory order, or ``(out, lse)`` with
        ``return_lse``, ``lse`` fp32 ``[b, h_q, s_q]`` (contiguous). Rows that see no key (and have
        no sink) give ``out = 0`` and ``lse = -inf``. Scores, softmax and ``P @ v`` are computed
        with fp32 (or wider) accumulation and the output is rounded once.
    """
    _reject_unsupported(bias, alibi_slopes, return_attn_probs)
    qc, kc, vc = _qkv(q, k, v, 4, "[b, s, h, d]")
    window = check_window_size(window_size)
    scale = _scale(softmax_scale, qc)
    if torch.compiler.is_compiling() or not (sink is None or isinstance(sink, torch.Tensor)):
        # Eagerly the dispatcher validates these very arguments before any kernel runs (its verdict
        # cached per signature); at trace time, and before autograd reads sink, the check runs here.
        ATTENTION_FWD.check_args(AttentionFwdArgs(qc, kc, vc, None, None, 0, 0, scale, causal, window, sink,
                                                  dropout_p, deterministic))
    if not grad_needed(qc, kc, vc, sink):
        out, lse = launch.attention_fwd(AttentionFwdArgs(qc, kc, vc, None, None, 0, 0, scale, causal, window, sink,
                                                         dropout_p, deterministic))
        return _finish(out, lse, q, return_lse)
    qc, kc, vc = _distinct(qc, kc, vc)
    out, lse = _FlashAttnFunction.apply(qc, kc, vc, sink, None, None, 0, 0, scale, causal, window,
                                        dropout_p, deterministic)
    return _finish(out, lse, q, return_lse)


def flash_attn_varlen_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                           dropout_p: float = 0.0, softmax_scale: float | None = None, causal: bool = False,
                           window_size: tuple[int, int] = (-1, -1), bias: torch.Tensor | None = None,
                           alibi_slopes: torch.Tensor | None = None, deterministic: bool = False,
                           return_lse: bool = False, return_attn_probs: bool = False,
                           sink: torch.Tensor | None = None):
    """Softmax attention over packed variable-length sequences (THD), with autograd.

    Args:
        q: ``[total_q, h_q, d_qk]``: the sequences' query rows back to back; fp16/bf16/fp32.
        k: ``[total_k, h_kv, d_qk]``; v: ``[total_k, h_kv, d_v]``; q's dtype; ``h_q % h_kv == 0``.
        cu_seqlens_q, cu_seqlens_k: int32 ``[B + 1]`` on q's device, ``[0, l_0, l_0 + l_1, ...]``;
            sequence ``i`` is rows ``cu[i]:cu[i+1]``. Rows past ``cu[-1]`` get out 0 / lse -inf.
        max_seqlen_q, max_seqlen_k: at least the longest sequence (checked on CPU only: on a GPU
            that check would be a host sync).
        Other arguments as :func:`flash_attn_func`; masks apply per sequence (bottom-right
        aligned with that sequence's own lengths).

    Returns:
        ``out`` ``[total_q, h_q, d_v]``, or ``(out, lse)`` with ``return_lse``, ``lse`` fp32
        ``[h_q, total_q]`` (the one varlen lse layout, head-major).
    """
    _reject_unsupported(bias, alibi_slopes, return_attn_probs)
    qc, kc, vc = _qkv(q, k, v, 3, "[total, h, d]")
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if cu is None:
            raise ValueError(f"{name}: required (int32 [B + 1] offsets of the packed sequences)")
    window = check_window_size(window_size)
    scale = _scale(softmax_scale, qc)
    ATTENTION_FWD.check_args(AttentionFwdArgs(qc, kc, vc, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                              scale, causal, window, sink, dropout_p, deterministic))
    qc, kc, vc, cu_q, cu_k = _distinct(qc, kc, vc, cu_seqlens_q, cu_seqlens_k)
    out, lse = _FlashAttnFunction.apply(qc, kc, vc, sink, cu_q, cu_k, max_seqlen_q, max_seqlen_k,
                                        scale, causal, window, dropout_p, deterministic)
    return _finish(out, lse, q, return_lse)


def _check_fp8_config(fp8_config) -> None:
    """Duck-typed: any config whose ``granularity`` is BLOCKWISE, ``block_size`` 64 and ``format`` E4M3."""
    if fp8_config is None:
        return
    if isinstance(fp8_config, Float8QuantConfig):
        fp8_config.validate("fp8_config")

    def name(x):
        return str(getattr(x, "name", x)).upper()

    gran = getattr(fp8_config, "granularity", None)
    if gran is not None and name(gran) != "BLOCKWISE":
        raise ValueError(f"fp8_config: flash_attn_fp8_func quantizes BLOCKWISE (64-row blocks) only, got {gran}")
    block = getattr(fp8_config, "block_size", None)
    if block not in (None, 64):
        raise ValueError(f"fp8_config: flash_attn_fp8_func uses block_size 64 only, got {block}")
    fmt = getattr(fp8_config, "format", None)
    if fmt is not None and name(fmt) != "E4M3":
        raise ValueError(f"fp8_config: flash_attn_fp8_func computes in E4M3 only, got format {fmt}")


def flash_attn_fp8_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                        softmax_scale: float | None = None, causal: bool = False,
                        window_size: tuple[int, int] = (-1, -1), bias: torch.Tensor | None = None,
                        alibi_slopes: torch.Tensor | None = None, deterministic: bool = False,
                        return_lse: bool = False, return_attn_probs: bool = False, fp8_config=None):
    """Dense attention computed in FP8 (E4M3), with autograd.

    Shapes, masks and returns as :func:`flash_attn_func` (no ``sink``). q, k, v (and the output
    gradient in the backward) are quantized per (batch, head, 64-row block) with scale
    ``amax / 448``; P is quantized with the fixed scale 448 before ``P @ v``; scores, softmax and
    accumulations are fp32; the output is q's dtype. The numerics are specified in
    ``turbo_core.dispatch.specs.attention``; accuracy is judged by SNR (>= 20 dB against float64).

    ``fp8_config``: ``None`` (the default: BLOCKWISE, block 64, E4M3) or a config object with
    ``granularity`` BLOCKWISE, ``block_size`` 64 and ``format`` E4M3; anything else is rejected.
    """
    _reject_unsupported(bias, alibi_slopes, return_attn_probs)
    _check_fp8_config(fp8_config)
    qc, kc, vc = _qkv(q, k, v, 4, "[b, s, h, d]")
    window = check_window_size(window_size)
    scale = _scale(softmax_scale, qc)
    ATTENTION_FP8_FWD.check_args(AttentionFp8FwdArgs(qc, kc, vc, scale, causal, window, dropout_p, deterministic))
    qc, kc, vc = _distinct(qc, kc, vc)
    out, lse = _FlashAttnFp8Function.apply(qc, kc, vc, scale, causal, window, dropout_p, deterministic)
    return _finish(out, lse, q, return_lse)
