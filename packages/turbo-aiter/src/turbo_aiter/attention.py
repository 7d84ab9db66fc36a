"""``attention_fwd`` / ``attention_bwd`` over aiter's CK flash attention (dense and varlen).

aiter functions called (amd-aiter 0.1.7.post2.dev18 signatures, positional):

* dense: ``aiter.mha_fwd(q, k, v, dropout_p, softmax_scale, is_causal, window_size_left,
  window_size_right, return_softmax_lse, return_dropout_randval)`` -> ``(out, lse, p, rng_state)``;
  ``aiter.mha_bwd(dout, q, k, v, out, softmax_lse, dropout_p, softmax_scale, is_causal,
  window_size_left, window_size_right, deterministic)`` -> ``(dq, dk, dv, softmax_d)``.
* varlen: ``aiter.mha_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
  min_seqlen_q, dropout_p, softmax_scale, logits_soft_cap, zero_tensors, is_causal,
  window_size_left, window_size_right, return_softmax_lse, return_dropout_randval)``;
  ``aiter.mha_varlen_bwd(dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k,
  max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, zero_tensors, is_causal,
  window_size_left, window_size_right, deterministic)``.

Layouts are turbo's (``[b, s, h, d]`` / ``[total, h, d]``; lse ``[b, h_q, s_q]`` / ``[h_q, total_q]``
fp32, natural log). Head dims are zero-padded to a multiple of 8 (exact; see
:mod:`turbo_aiter.attention_args`) and the softmax scale is always passed explicitly (turbo's
default ``d_qk ** -0.5`` of the *unpadded* head dim). Served: fp16/bf16, causal, sliding windows,
GQA/MQA, deterministic backward (aiter's ``deterministic`` flag). Declined: fp32, ``sink``,
``dropout_p > 0`` (aiter's dropout RNG is not turbo's contract), head dims above 256.
"""

from __future__ import annotations

import torch

from turbo_aiter import library
from turbo_aiter.attention_args import (
    MAX_HEAD_DIM,
    aiter_mask_args,
    clear_unowned_rows,
    pad_head_dim,
    padded_head_dim,
    unpad_head_dim,
    window_decline_reason,
)
from turbo_core.dispatch.specs.attention import AttentionBwdArgs, AttentionFwdArgs

__all__ = ["attention_bwd", "attention_fwd", "can_handle", "decline_reason"]

_DTYPES = (torch.float16, torch.bfloat16)


def decline_reason(args: AttentionFwdArgs | AttentionBwdArgs, arch: str | None) -> str | None:
    """Why aiter's CK attention declines these arguments on ``arch`` (metadata only), or ``None``.
    The same CK kernels serve gfx942 and gfx950, with the same limits."""
    if arch not in library.ARCHS:
        return f"AITER attention: no aiter kernels for arch {arch} (gfx942 and gfx950 only)"
    q, k, v = args.q, args.k, args.v
    if q.dtype not in _DTYPES:
        return f"AITER attention ({arch}): aiter's CK flash attention takes fp16/bf16, got {q.dtype}"
    if args.sink is not None:
        return "AITER attention: aiter's CK flash attention has no attention sink"
    if args.dropout_p != 0.0:
        return f"AITER attention: dropout_p={args.dropout_p} not served (aiter's dropout RNG is not turbo's contract)"
    for name, d in (("q", q.shape[-1]), ("v", v.shape[-1])):
        if padded_head_dim(d) > MAX_HEAD_DIM:
            return f"AITER attention ({arch}): {name} head dim {d} > {MAX_HEAD_DIM} (aiter's CK limit)"
    if args.is_varlen:
        if args.cu_seqlens_q.numel() < 2:
            return "AITER attention: aiter needs at least one sequence (cu_seqlens of B + 1 >= 2 entries)"
        s_q, s_kv = args.max_seqlen_q, args.max_seqlen_k
    else:
        if q.shape[0] == 0:
            return "AITER attention: aiter needs batch size > 0"
        s_q, s_kv = q.shape[1], k.shape[1]
    return window_decline_reason(args.causal, tuple(args.window_size), s_q, s_kv)


def can_handle(args: AttentionFwdArgs | AttentionBwdArgs) -> str | None:
    reason = library.gpu_reason(args.q, "attention")
    if reason:
        return reason
    return decline_reason(args, library.arch_of(args.q))


def _empty(args) -> bool:
    return args.q.shape[-3] == 0 if args.is_varlen else (args.q.shape[1] == 0 or args.k.shape[1] == 0)


def attention_fwd(args: AttentionFwdArgs) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, lse)`` in turbo's layouts (see the module docstring)."""
    q, k, v = args.q, args.k, args.v
    d_qk, d_v = q.shape[-1], v.shape[-1]
    lse_shape = (q.shape[1], q.shape[0]) if args.is_varlen else (q.shape[0], q.shape[2], q.shape[1])
    if _empty(args):  # no rows, or no keys: out 0, lse -inf (turbo's rule for rows that see nothing)
        out = torch.zeros((*q.shape[:-1], d_v), dtype=q.dtype, device=q.device)
        return out, torch.full(lse_shape, float("-inf"), dtype=torch.float32, device=q.device)
    aiter = library.load()
    dqk, dv = padded_head_dim(d_qk), padded_head_dim(d_v)
    qp, kp, vp = pad_head_dim(q, dqk), pad_head_dim(k, dqk), pad_head_dim(v, dv)
    causal, left, right = aiter_mask_args(args.causal, tuple(args.window_size))
    if args.is_varlen:
        out, lse, _, _ = aiter.mha_varlen_fwd(
            qp, kp, vp, args.cu_seqlens_q, args.cu_seqlens_k, int(args.max_seqlen_q), int(args.max_seqlen_k),
            0, 0.0, args.scale, 0.0, False, causal, left, right, True, False)
    else:
        out, lse, _, _ = aiter.mha_fwd(qp, kp, vp, 0.0, args.scale, causal, left, right, True, False)
    out = unpad_head_dim(out, d_v)
    if not out.is_contiguous():
        out = out.contiguous()
    lse = lse.view(lse_shape)
    if args.is_varlen:
        clear_unowned_rows(args.cu_seqlens_q, rows=out, lse=lse)
    return out, lse


def attention_bwd(args: AttentionBwdArgs):
    """``(dq, dk, dv, None)`` (no sink) in the inputs' shapes and dtypes."""
    q, k, v = args.q, args.k, args.v
    d_qk, d_v = q.shape[-1], v.shape[-1]
    if _empty(args):
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v), None
    aiter = library.load()
    dqk, dvp = padded_head_dim(d_qk), padded_head_dim(d_v)
    qp, kp, vp = pad_head_dim(q, dqk), pad_head_dim(k, dqk), pad_head_dim(v, dvp)
    outp, doutp = pad_head_dim(args.out, dvp), pad_head_dim(args.dout, dvp)
    if doutp.stride(-1) != 1:
        doutp = doutp.contiguous()
    lse = args.lse.contiguous()
    causal, left, right = aiter_mask_args(args.causal, tuple(args.window_size))
    if args.is_varlen:
        dq, dk, dv, _ = aiter.mha_varlen_bwd(
            doutp, qp, kp, vp, outp, lse, args.cu_seqlens_q, args.cu_seqlens_k, int(args.max_seqlen_q),
            int(args.max_seqlen_k), 0.0, args.scale, False, causal, left, right, bool(args.deterministic))
    else:
        dq, dk, dv, _ = aiter.mha_bwd(doutp, qp, kp, vp, outp, lse, 0.0, args.scale, causal, left, right,
                                      bool(args.deterministic))
    dq, dk, dv = (unpad_head_dim(g, d).contiguous() for g, d in ((dq, d_qk), (dk, d_qk), (dv, d_v)))
    if args.is_varlen:
        clear_unowned_rows(args.cu_seqlens_q, rows=dq)
        clear_unowned_rows(args.cu_seqlens_k, rows=dk)
        clear_unowned_rows(args.cu_seqlens_k, rows=dv)
    return dq, dk, dv, None
