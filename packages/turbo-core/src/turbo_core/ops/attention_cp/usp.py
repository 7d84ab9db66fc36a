"""``flash_attn_usp_func``, ``flash_attn_varlen_usp_func``, ``flash_attn_fp8_usp_func``: attention
over a sequence sharded across ranks (USP: Ulysses inside, ring outside), with autograd.

Forward: the Ulysses all-to-all (``comm.Ulysses``) turns the local shard with every head into the
ring-local sequence with ``h / U`` heads; ring attention (``ring``) runs over the ring group; the
output goes back through the inverse all-to-all. Backward: ``dout`` takes the same path, and
``dq, dk, dv`` come back through one all-to-all. With a ring of one rank the middle part is one
attention call (any mask or window) and its backward one ``attention_bwd`` call.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.attention import (
    ATTENTION_FP8_FWD,
    ATTENTION_FWD,
    AttentionFp8FwdArgs,
    AttentionFwdArgs,
    check_window_size,
)
from turbo_core.dispatch.specs.validate import require_int, require_same_device, require_tensor, values_readable
from turbo_core.ops._autograd import grad_needed
from turbo_core.ops.attention import _check_fp8_config, _like_layout, _reject_unsupported, _scale
from turbo_core.ops.attention_cp.comm import Ring, Ulysses
from turbo_core.ops.attention_cp.layout import RING_LAYOUTS
from turbo_core.ops.attention_cp.ring import RingPlan, ring_backward, ring_forward
from turbo_core.ops.attention_cp.steps import Call, Kernels

__all__ = ["flash_attn_fp8_usp_func", "flash_attn_usp_func", "flash_attn_varlen_usp_func"]

_QKV_FORMATS = ("bshd", "sbhd", "bhsd")


class _Setup:
    """Everything about one call that is not a tensor."""

    def __init__(self, kern: Kernels, ulysses: Ulysses, ring: Ring, plan: RingPlan, window: tuple[int, int],
                 return_lse: bool) -> None:
        self.kern, self.ulysses, self.ring, self.plan = kern, ulysses, ring, plan
        self.window, self.return_lse = window, return_lse

    def whole(self, q, k, v) -> Call:
        """The one attention call of a ring of one rank, on the head-sharded ``q, k, v``."""
        p = self.plan
        return Call(q, k, v, p.causal, self.window, p.cu_q, p.cu_k, p.max_q, p.max_k)


def _attend(st: _Setup, q, k, v):
    """Head-sharded attention: ``(out, lse, backends)``."""
    if st.ring.size == 1:
        out, lse, backend = st.kern.fwd(st.whole(q, k, v))
        return out, lse, [backend]
    return ring_forward(st.kern, st.ring, st.plan, q, k, v)


def _forward(st: _Setup, q, k, v):
    qh, kh, vh = st.ulysses.seq_to_head(q, k, v)
    out_h, lse_h, backends = _attend(st, qh, kh, vh)
    (out,) = st.ulysses.head_to_seq(out_h)
    lse = st.ulysses.lse_head_to_seq(lse_h) if st.return_lse else None
    return out, lse, (qh, kh, vh, out_h, lse_h, backends)


class _UspFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, st: _Setup):
        out, lse, (qh, kh, vh, out_h, lse_h, backends) = _forward(st, q, k, v)
        ctx.save_for_backward(qh, kh, vh, out_h, lse_h)
        ctx.st, ctx.backends = st, backends
        if lse is None:
            return out
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, *_dlse):
        qh, kh, vh, out_h, lse_h = ctx.saved_tensors
        st = ctx.st
        (dout_h,) = st.ulysses.seq_to_head(dout.contiguous())
        if st.ring.size == 1:
            dq, dk, dv = st.kern.bwd(st.whole(qh, kh, vh), dout_h, out_h, lse_h, ctx.backends[0])
        else:
            dq, dk, dv = ring_backward(st.kern, st.ring, st.plan, dout_h, qh, kh, vh, out_h, lse_h, ctx.backends)
        dq, dk, dv = st.ulysses.head_to_seq(dq, dk, dv)
        return dq, dk, dv, None


# -- argument handling ---------------------------------------------------------------------------

def _common_checks(dropout_p, bias, alibi_slopes, return_attn_probs, ring_layout) -> None:
    _reject_unsupported(bias, alibi_slopes, return_attn_probs)
    if dropout_p != 0.0:
        raise ValueError(f"dropout_p: context-parallel attention supports 0.0 only, got {dropout_p!r}")
    if ring_layout not in RING_LAYOUTS:
        raise ValueError(f"ring_layout: expected one of {RING_LAYOUTS}, got {ring_layout!r}")


def _check_heads(q: torch.Tensor, k: torch.Tensor, u: int) -> None:
    for name, t in (("q", q), ("k", k)):
        if t.shape[-2] % u:
            raise ValueError(f"{name}: {t.shape[-2]} heads do not split over the {u} ranks of ulysses_group")


def _check_ring_mask(causal: bool, window: tuple[int, int], r: int) -> None:
    left, right = window
    if r > 1 and (left != -1 or (right != -1 and not causal)):
        raise ValueError(f"window_size: a sliding window is not supported with a ring_group of {r} ranks "
                         f"(got {window}); use (-1, -1)")


def _setup(q, k, *, scale, causal, window, deterministic, fp8, ulysses_group, ring_group, ring_layout,
           return_lse, cu=None) -> _Setup:
    ulysses, ring = Ulysses(ulysses_group), Ring(ring_group)
    _check_heads(q, k, ulysses.size)
    _check_ring_mask(causal, window, ring.size)
    kern = Kernels(fp8=fp8, scale=scale, deterministic=deterministic)
    cu_q, cu_k, max_q, max_k = cu if cu is not None else (None, None, 0, 0)
    r = ring.size
    if cu is None and r > 1:
        s_q, s_k = q.shape[1] * ulysses.size, k.shape[1] * ulysses.size
        if causal and s_q != s_k:
            raise ValueError(f"k: a causal ring needs as many keys as queries per rank, got {s_k} keys for {s_q} "
                             "queries (ring-local)")
        if causal and ring_layout == "zigzag" and s_q % 2:
            raise ValueError(f"q: the zigzag layout needs an even ring-local sequence, got {s_q} rows")
    if cu is not None and r > 1:
        cu_q, cu_k = (torch.div(c, r, rounding_mode="floor").to(torch.int32) for c in (cu_q, cu_k))
        max_q, max_k = -(-max_q // r), -(-max_k // r)
    plan = RingPlan(causal=causal, layout=ring_layout, cu_q=cu_q, cu_k=cu_k, max_q=max_q, max_k=max_k)
    return _Setup(kern, ulysses, ring, plan, window, return_lse)


def _run(q, k, v, st: _Setup, ref: torch.Tensor):
    if grad_needed(q, k, v):
        res = _UspFunction.apply(q, k, v, st)
        out, lse = res if st.return_lse else (res, None)
    else:
        out, lse, _ = _forward(st, q, k, v)
    out = _like_layout(out, ref)
    return (out, lse) if st.return_lse else out


def _check_qkv_format(qkv_format) -> None:
    if qkv_format is not None and qkv_format not in _QKV_FORMATS:
        raise ValueError(f"qkv_format: expected None or one of {_QKV_FORMATS}, got {qkv_format!r}")


def _dense_qkv(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        require_tensor(name, t)
        if t.dim() != 4:
            raise ValueError(f"{name}: expected a 4-D tensor [b, s, h, d] (the local sequence shard), "
                             f"got shape {tuple(t.shape)}")
    return tuple(t if t.shape[-1] <= 1 or t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))


# -- public ops ----------------------------------------------------------------------------------

def flash_attn_usp_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                        softmax_scale: float | None = None, causal: bool = False,
                        window_size: tuple[int, int] = (-1, -1), bias: torch.Tensor | None = None,
                        alibi_slopes: torch.Tensor | None = None, deterministic: bool = False,
                        return_lse: bool = False, return_attn_probs: bool = False, ulysses_group=None,
                        ring_group=None, qkv_format: str | None = None, *, ring_layout: str = "contiguous"):
    """Context-parallel softmax attention over dense batches, with autograd.

    Args:
        q: ``[b, s, h_q, d_qk]``: this rank's shard of the sequence (logical shape, any strides;
            see :func:`~turbo_core.ops.usp_positions` for which global positions it holds).
        k: ``[b, s_kv, h_kv, d_qk]``; v: ``[b, s_kv, h_kv, d_v]``; q's dtype (fp16/bf16/fp32).
            ``h_q`` and ``h_kv`` must be divisible by the Ulysses group's size.
        ulysses_group: the process group whose ranks exchange heads for sequence (all-to-all);
            ``None``: one rank.
        ring_group: the process group around which key/value blocks travel; ``None``: one rank.
            Every rank of a Ulysses group has the same ring rank, in its own ring group.
        ring_layout: ``"contiguous"`` (Primus-Turbo's split) or ``"zigzag"`` (causal load balance);
            how the global sequence maps to ring ranks (``turbo_core.ops.attention_cp.layout``).
        qkv_format: ``None`` or ``"bshd"``/``"sbhd"``/``"bhsd"``: accepted for Primus-Turbo's
            signature; the layout is read from the strides of the logical ``[b, s, h, d]`` tensors.
        dropout_p: 0.0 only. bias, alibi_slopes, return_attn_probs: not supported (``ValueError``).
        softmax_scale, causal, deterministic: as :func:`~turbo_core.ops.flash_attn_func`; the
            causal mask is the global sequence's. window_size: with a ring of one rank as
            ``flash_attn_func``; with a longer ring ``(-1, -1)`` only.

    Returns:
        ``out`` ``[b, s, h_q, d_v]`` (this rank's rows, q's dtype and memory order), or
        ``(out, lse)`` with ``return_lse``, ``lse`` fp32 ``[b, h_q, s]`` (this rank's rows).
    """
    _common_checks(dropout_p, bias, alibi_slopes, return_attn_probs, ring_layout)
    _check_qkv_format(qkv_format)
    qc, kc, vc = _dense_qkv(q, k, v)
    window = check_window_size(window_size)
    scale = _scale(softmax_scale, qc)
    ATTENTION_FWD.check_args(AttentionFwdArgs(qc, kc, vc, None, None, 0, 0, scale, causal, window, None, 0.0,
                                              deterministic))
    st = _setup(qc, kc, scale=scale, causal=causal, window=window, deterministic=deterministic, fp8=False,
                ulysses_group=ulysses_group, ring_group=ring_group, ring_layout=ring_layout, return_lse=return_lse)
    return _run(qc, kc, vc, st, q)


def _check_global_cu(name: str, cu, total: int, max_name: str, max_seqlen, q: torch.Tensor, div: int,
                     why: str) -> None:
    require_tensor(name, cu, ndim=1, dtypes=(torch.int32,))
    if cu.numel() < 1:
        raise ValueError(f"{name}: expected [B + 1] offsets (at least one element), got shape {tuple(cu.shape)}")
    require_same_device(q=q, **{name: cu})
    require_int(max_name, max_seqlen, minimum=0)
    if not values_readable(cu):
        return
    vals = cu.tolist()
    lengths = [b - a for a, b in zip(vals, vals[1:], strict=False)]
    if vals[0] != 0 or any(n < 0 for n in lengths):
        raise ValueError(f"{name}: expected non-decreasing offsets from 0, got {vals}")
    if vals[-1] > total:
        raise ValueError(f"{name}: the last offset ({vals[-1]}) exceeds the {total} packed tokens of all ranks")
    if max(lengths, default=0) > max_seqlen:
        raise ValueError(f"{max_name}: {max_seqlen} is shorter than the longest sequence ({max(lengths)})")
    if div > 1 and any(n % div for n in lengths):
        raise ValueError(f"{name}: every sequence length must be divisible by {div} ({why}), got lengths {lengths}")


def flash_attn_varlen_usp_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                               cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                               dropout_p: float = 0.0, softmax_scale: float | None = None, causal: bool = False,
                               window_size: tuple[int, int] = (-1, -1), bias: torch.Tensor | None = None,
                               alibi_slopes: torch.Tensor | None = None, deterministic: bool = False,
                               return_lse: bool = False, return_attn_probs: bool = False, ulysses_group=None,
                               ring_group=None, *, ring_layout: str = "contiguous"):
    """Context-parallel softmax attention over packed variable-length sequences (THD), with autograd.

    Args:
        q: ``[t, h_q, d_qk]``, k: ``[t_k, h_kv, d_qk]``, v: ``[t_k, h_kv, d_v]``: this rank's rows
            (:func:`~turbo_core.ops.usp_varlen_positions` gives which global rows).
        cu_seqlens_q, cu_seqlens_k: int32 ``[B + 1]``: the **global** offsets of the packed sequences
            (of all ``t * U * R`` rows), the same on every rank. With a ring of ``R > 1`` ranks every
            sequence is split over the ring on its own: its length must be divisible by ``R``
            (``2 R`` for ``"zigzag"``); a causal ring needs ``cu_seqlens_k == cu_seqlens_q``.
        max_seqlen_q, max_seqlen_k: at least the longest global sequence.
        Other arguments as :func:`flash_attn_usp_func`. Offsets are checked on the CPU only (on a
        GPU reading them would be a host sync).

    Returns:
        ``out`` ``[t, h_q, d_v]``, or ``(out, lse)`` with ``return_lse``, ``lse`` fp32 ``[h_q, t]``.
    """
    _common_checks(dropout_p, bias, alibi_slopes, return_attn_probs, ring_layout)
    for name, t in (("q", q), ("k", k), ("v", v)):
        require_tensor(name, t)
        if t.dim() != 3:
            raise ValueError(f"{name}: expected a 3-D tensor [t, h, d] (the local packed rows), got shape "
                             f"{tuple(t.shape)}")
    qc, kc, vc = (t if t.shape[-1] <= 1 or t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    window = check_window_size(window_size)
    scale = _scale(softmax_scale, qc)
    ATTENTION_FWD.check_args(AttentionFwdArgs(qc[None], kc[None], vc[None], None, None, 0, 0, scale, causal, window,
                                              None, 0.0, deterministic))
    u, r = Ulysses(ulysses_group).size, Ring(ring_group).size
    div = r * (2 if ring_layout == "zigzag" else 1) if r > 1 else 1
    why = f"the ring size{' x 2 for zigzag' if ring_layout == 'zigzag' else ''}"
    _check_global_cu("cu_seqlens_q", cu_seqlens_q, qc.shape[0] * u * r, "max_seqlen_q", max_seqlen_q, qc, div, why)
    _check_global_cu("cu_seqlens_k", cu_seqlens_k, kc.shape[0] * u * r, "max_seqlen_k", max_seqlen_k, qc, div, why)
    if cu_seqlens_k.shape != cu_seqlens_q.shape:
        raise ValueError(f"cu_seqlens_k: expected the shape of cu_seqlens_q {tuple(cu_seqlens_q.shape)}, got "
                         f"{tuple(cu_seqlens_k.shape)}")
    if (r > 1 and causal and values_readable(cu_seqlens_q)
            and not torch.equal(cu_seqlens_q, cu_seqlens_k.to(cu_seqlens_q.device))):
        raise ValueError("cu_seqlens_k: a causal ring needs the key offsets equal to cu_seqlens_q")
    st = _setup(qc, kc, scale=scale, causal=causal, window=window, deterministic=deterministic, fp8=False,
                ulysses_group=ulysses_group, ring_group=ring_group, ring_layout=ring_layout, return_lse=return_lse,
                cu=(cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k)))
    return _run(qc, kc, vc, st, q)


def flash_attn_fp8_usp_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                            softmax_scale: float | None = None, causal: bool = False,
                            window_size: tuple[int, int] = (-1, -1), bias: torch.Tensor | None = None,
                            alibi_slopes: torch.Tensor | None = None, deterministic: bool = False,
                            return_lse: bool = False, return_attn_probs: bool = False, fp8_config=None,
                            ulysses_group=None, ring_group=None, *, ring_layout: str = "contiguous"):
    """Context-parallel attention computed in FP8 (E4M3), with autograd: :func:`flash_attn_usp_func`
    with every attention call on ``attention_fp8_fwd``/``attention_fp8_bwd`` (the numerics of
    :func:`~turbo_core.ops.flash_attn_fp8_func`: per (batch, head, 64-row block) scales, taken per
    call, so the blocks start at each call's first row). ``fp8_config``: ``None`` or BLOCKWISE,
    block 64, E4M3. Accuracy is judged by SNR (>= 20 dB against float64).
    """
    _common_checks(dropout_p, bias, alibi_slopes, return_attn_probs, ring_layout)
    _check_fp8_config(fp8_config)
    qc, kc, vc = _dense_qkv(q, k, v)
    window = check_window_size(window_size)
    scale = _scale(softmax_scale, qc)
    ATTENTION_FP8_FWD.check_args(AttentionFp8FwdArgs(qc, kc, vc, scale, causal, window, 0.0, deterministic))
    st = _setup(qc, kc, scale=scale, causal=causal, window=window, deterministic=deterministic, fp8=True,
                ulysses_group=ulysses_group, ring_group=ring_group, ring_layout=ring_layout, return_lse=return_lse)
    return _run(qc, kc, vc, st, q)
