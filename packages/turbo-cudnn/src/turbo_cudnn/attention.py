"""``attention_fwd`` / ``attention_bwd`` over cuDNN's fused flash attention, reached through the
PyTorch operators that ``scaled_dot_product_attention`` runs on NVIDIA GPUs:

* forward: ``aten._scaled_dot_product_cudnn_attention(q, k, v, attn_bias=None,
  compute_log_sumexp=True, dropout_p=0, is_causal, return_debug_mask=False, scale=)`` ->
  ``(out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed, philox_offset, debug_mask)``
  on ``[b, h, s, d]`` views; ``out`` comes back in q's memory order, ``logsumexp`` fp32
  ``[b, h_q, s_q, 1]``, natural log;
* backward: ``aten._scaled_dot_product_cudnn_attention_backward(dout, q, k, v, out, logsumexp,
  philox_seed, philox_offset, attn_bias=None, cum_seq_q=None, cum_seq_k=None, max_q, max_k,
  dropout_p=0, is_causal, scale=)`` -> ``(dq, dk, dv)``. cuDNN recomputes ``P`` from the given
  ``logsumexp`` and takes ``D = rowsum(dout * out)`` from the given ``out``, which is turbo's
  ``attention_bwd`` contract (also for the merged ``out``/``lse`` of a ring step).

Layouts are turbo's: ``[b, s, h, d]`` in, the same out; ``lse`` fp32 ``[b, h_q, s_q]``. Inputs are
made contiguous in that layout (a copy only where they are not) and handed to cuDNN as transposed
views, so no layout copy is made on the way in or out. GQA/MQA go to cuDNN as they are (cuDNN
reads each key/value head for its query group and sums the group's dk/dv).

Served: fp16/bf16, dense, non-causal or causal with ``s_q == s_kv``, GQA/MQA, and whatever else
PyTorch's own ``can_use_cudnn_attention`` admits for the shapes (head dims, alignment, cuDNN
version, the ``enable_cudnn_sdp`` switch), asked with gradients required so the forward is only
taken where the backward runs too. Declined: fp32, varlen, sink, dropout, sliding windows, causal
with ``s_q != s_kv`` (PyTorch's causal mask is aligned top-left, turbo's bottom-right), and
``deterministic=True`` (cuDNN's backward is not promised to be bit-reproducible).
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.attention import AttentionBwdArgs, AttentionFwdArgs

__all__ = ["attention_bwd", "attention_fwd", "can_handle", "decline_reason"]

_DTYPES = (torch.float16, torch.bfloat16)


def forward_op():
    """The cuDNN attention forward operator (tests replace it with a CPU model of its contract)."""
    return torch.ops.aten._scaled_dot_product_cudnn_attention.default


def backward_op():
    """The cuDNN attention backward operator (tests replace it with a CPU model of its contract)."""
    return torch.ops.aten._scaled_dot_product_cudnn_attention_backward.default


#: The leading arguments of each operator, by name, in the order the adapters pass them positionally.
FORWARD_ARGS = ("query", "key", "value", "attn_bias", "compute_log_sumexp", "dropout_p", "is_causal",
                "return_debug_mask")
BACKWARD_ARGS = ("grad_out", "query", "key", "value", "out", "logsumexp", "philox_seed", "philox_offset",
                 "attn_bias", "cum_seq_q", "cum_seq_k", "max_q", "max_k", "dropout_p", "is_causal")


def schema_reason() -> str | None:
    """``None`` when this PyTorch's two operators take the arguments the adapters pass (the names
    above in that order, and a keyword ``scale``), else what differs: a PyTorch whose private
    operators changed makes the backend unavailable, with the reason, instead of failing in a call."""
    for what, op, expected in (("forward", forward_op, FORWARD_ARGS), ("backward", backward_op, BACKWARD_ARGS)):
        try:
            args = op()._schema.arguments
        except (AttributeError, RuntimeError) as exc:
            return f"this PyTorch has no cuDNN attention {what} operator ({type(exc).__name__}: {exc})"
        names = tuple(a.name for a in args if not a.kwarg_only)[:len(expected)]
        keywords = {a.name for a in args if a.kwarg_only}
        if names != expected or "scale" not in keywords:
            return (f"this PyTorch's cuDNN attention {what} operator takes ({', '.join(a.name for a in args)}); "
                    f"turbo-cudnn passes ({', '.join(expected)}, *, scale)")
    return None


def _empty(args: AttentionFwdArgs | AttentionBwdArgs) -> bool:
    return args.q.shape[0] == 0 or args.q.shape[1] == 0 or args.k.shape[1] == 0


def decline_reason(args: AttentionFwdArgs | AttentionBwdArgs) -> str | None:
    """Why this backend declines the call, from its flags and shapes alone (no device check), or ``None``."""
    if args.is_varlen:
        return "CUDNN attention: dense calls only (varlen is served by other backends)"
    q = args.q
    if q.dtype not in _DTYPES:
        return f"CUDNN attention: cuDNN's fused attention takes fp16/bf16, got {q.dtype}"
    if args.sink is not None:
        return "CUDNN attention: cuDNN's fused attention has no attention sink"
    if args.dropout_p != 0.0:
        return f"CUDNN attention: dropout_p={args.dropout_p} not served (cuDNN's dropout RNG is not turbo's contract)"
    if args.deterministic:
        return "CUDNN attention: cuDNN's backward is not promised to be bit-reproducible (deterministic=True)"
    left, right = tuple(args.window_size)
    if args.causal:
        if left != -1:
            return f"CUDNN attention: no sliding window (window_size={tuple(args.window_size)})"
        if q.shape[1] != args.k.shape[1]:
            return (f"CUDNN attention: causal with s_q={q.shape[1]} != s_kv={args.k.shape[1]} (PyTorch aligns "
                    "cuDNN's causal mask top-left, turbo bottom-right)")
    elif (left, right) != (-1, -1):
        return f"CUDNN attention: no sliding window (window_size={tuple(args.window_size)})"
    return None


def _torch_admits(args: AttentionFwdArgs | AttentionBwdArgs) -> str | None:
    """PyTorch's own verdict on cuDNN attention for these shapes, with gradients required, asked of
    the layout the kernels pass (a non-contiguous input is represented by an uninitialized
    contiguous one: no copy, no kernel)."""
    dense = [t if t.is_contiguous() else torch.empty_like(t, memory_format=torch.contiguous_format)
             for t in (args.q, args.k, args.v)]
    views = [t.detach().transpose(1, 2).requires_grad_() for t in dense]
    gqa = args.q.shape[2] != args.k.shape[2]
    params = torch.backends.cuda.SDPAParams(*views, None, 0.0, bool(args.causal), gqa)
    if torch.backends.cuda.can_use_cudnn_attention(params, False):
        return None
    b, s_q, h_q, d_qk = args.q.shape
    return (f"CUDNN attention: PyTorch's can_use_cudnn_attention declines b={b} s_q={s_q} s_kv={args.k.shape[1]} "
            f"h_q={h_q} h_kv={args.k.shape[2]} d_qk={d_qk} d_v={args.v.shape[-1]} {args.q.dtype} "
            f"causal={bool(args.causal)} (head dim, alignment or cuDNN version)")


def can_handle(args: AttentionFwdArgs | AttentionBwdArgs) -> str | None:
    q = args.q
    if q.device.type != "cuda" or torch.version.hip:
        return f"CUDNN attention runs on NVIDIA GPU tensors only (got {q.device.type})"
    reason = decline_reason(args)
    if reason is not None or _empty(args):
        return reason
    return _torch_admits(args)


def _bhsd(t: torch.Tensor) -> torch.Tensor:
    """A ``[b, h, s, d]`` view of ``t [b, s, h, d]``, contiguous in turbo's layout underneath."""
    return (t if t.is_contiguous() else t.contiguous()).transpose(1, 2)


def _bshd(t: torch.Tensor) -> torch.Tensor:
    """``t [b, h, s, d]`` back to a contiguous ``[b, s, h, d]`` (free when cuDNN kept q's memory order)."""
    t = t.transpose(1, 2)
    return t if t.is_contiguous() else t.contiguous()


def attention_fwd(args: AttentionFwdArgs) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out [b, s_q, h_q, d_v], lse fp32 [b, h_q, s_q])`` (see the module doc)."""
    q, k, v = args.q, args.k, args.v
    b, s_q, h_q, _ = q.shape
    if _empty(args):  # no rows, or no keys: out 0, lse -inf (turbo's rule for rows that see nothing)
        out = torch.zeros((b, s_q, h_q, v.shape[-1]), dtype=q.dtype, device=q.device)
        return out, torch.full((b, h_q, s_q), float("-inf"), dtype=torch.float32, device=q.device)
    out, lse = forward_op()(_bhsd(q), _bhsd(k), _bhsd(v), None, True, 0.0, bool(args.causal), False,
                            scale=args.scale)[:2]
    lse = lse.reshape(b, h_q, s_q)
    return _bshd(out), (lse if lse.is_contiguous() else lse.contiguous())


def attention_bwd(args: AttentionBwdArgs):
    """``(dq, dk, dv, None)`` in the inputs' shapes and dtypes (no sink)."""
    q, k, v = args.q, args.k, args.v
    if _empty(args):
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v), None
    b, s_q, h_q, _ = q.shape
    lse = args.lse.reshape(b, h_q, s_q, 1)
    if not lse.is_contiguous():
        lse = lse.contiguous()
    # Dropout is declined, so cuDNN never reads its RNG state: one-element placeholders.
    seed = q.new_empty((), dtype=torch.int64)
    dq, dk, dv = backward_op()(_bhsd(args.dout), _bhsd(q), _bhsd(k), _bhsd(v), _bhsd(args.out), lse, seed, seed,
                               None, None, None, s_q, k.shape[1], 0.0, bool(args.causal), scale=args.scale)
    return _bshd(dq), _bshd(dk), _bshd(dv), None
