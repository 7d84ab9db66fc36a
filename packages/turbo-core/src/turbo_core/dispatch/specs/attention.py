"""Flash-attention primitives: ``attention_fwd``/``attention_bwd`` (fp16/bf16/fp32, dense or
varlen) and ``attention_fp8_fwd``/``attention_fp8_bwd`` (FP8 E4M3 compute, dense).

One primitive pair serves both layouts: the varlen (THD) form is the same call with
``cu_seqlens_q``/``cu_seqlens_k`` set; a backend that only does dense attention declines calls with
``args.is_varlen``. All four share the family ``attn`` (``set_attn_backend``, ``TURBO_ATTN_BACKEND``).

Layouts (logical shapes; any strides with unit stride in the head dim ``d``):

- dense: ``q [b, s_q, h_q, d_qk]``, ``k [b, s_kv, h_kv, d_qk]``, ``v [b, s_kv, h_kv, d_v]``;
  ``out [b, s_q, h_q, d_v]`` (contiguous, q's dtype); ``lse`` fp32 ``[b, h_q, s_q]`` (contiguous).
- varlen (THD packing): ``q [total_q, h_q, d_qk]``, ``k [total_k, h_kv, d_qk]``,
  ``v [total_k, h_kv, d_v]``; ``cu_seqlens_q``/``cu_seqlens_k`` int32 ``[B + 1]`` (exclusive prefix
  sums of the sequence lengths, ``cu[0] == 0``, non-decreasing); ``out [total_q, h_q, d_v]``;
  ``lse`` fp32 ``[h_q, total_q]`` (head-major, the layout of flash-attn's varlen kernels).
  Rows at or past ``cu_seqlens_q[-1]`` belong to no sequence: out 0, lse -inf, no gradient.
  ``max_seqlen_q``/``max_seqlen_k`` must be at least the longest segment (backends size their grids
  with them; checked on CPU only, never on a GPU, where it would be a host sync).

Semantics (what every backend computes; the TORCH reference is the oracle):

- GQA/MQA: query head ``i`` reads key/value head ``i // (h_q // h_kv)``.
- ``S = softmax_scale * q @ k^T`` (``softmax_scale`` defaults to ``d_qk ** -0.5``).
- Masking, per sequence with lengths ``(s_q, s_kv)``: query row ``i`` may see key ``j`` iff
  ``i + s_kv - s_q - left <= j <= i + s_kv - s_q + right`` where ``(left, right) = window_size`` and
  ``-1`` means unbounded on that side; ``causal=True`` sets ``right = 0`` (causal is aligned to the
  bottom-right corner, as flash-attn >= 2.1; a given right window is ignored, as flash-attn does).
- ``sink`` (optional fp32 ``[h_q]``): a learned per-head logit that joins the softmax denominator
  but carries no value (GPT-OSS): ``P_j = exp(S_j - lse)``, ``lse = log(sum_j exp(S_j) + exp(sink))``.
- ``out = P @ v``; ``lse = logsumexp`` over the visible keys (and the sink), in fp32.
- A row that sees no key and has no sink gives ``out = 0`` and ``lse = -inf`` (its gradients are 0).
- Backward (``attention_bwd``) takes the forward's ``out`` and ``lse`` (the only saved results),
  recomputes ``P = exp(scale q k^T - lse)`` over the visible keys from the given ``lse``, and with
  ``D = rowsum(dout * out)`` from the given ``out`` returns ``dS = P (dout v^T - D)``, ``dq = scale
  dS k``, ``dk = scale dS^T q``, ``dv = P^T dout`` (the inputs' shapes and dtypes; GQA gradients
  summed over each key/value head's query group) and ``dsink`` (fp32 ``[h_q]``,
  ``dsink_h = -sum_rows exp(sink_h - lse) * D``; ``None`` without a sink). With the call's own
  ``out``/``lse`` these are its forward's gradients; with the ``out``/``lse`` of a softmax over more
  keys (the merged result of several key blocks, as ring attention makes) they are this block's
  share of that softmax's gradients.
- ``dropout_p``: the probability of dropping an entry of P (the reference serves 0.0 only and
  declines anything else). ``deterministic=True`` asks for a bit-reproducible backward: a backend
  that cannot guarantee it declines.

FP8 (``attention_fp8_*``, dense only, no sink): q, k and v (and ``dout`` in the backward) are
quantized per (batch, head, block of 64 consecutive sequence rows) to OCP E4M3
(``torch.float8_e4m3fn``): ``scale = amax(|block|) / 448`` in fp32 (1 for an all-zero block; NaN,
which makes the whole block NaN, for a block holding a NaN),
``x_q = e4m3(clamp(x / scale, -448, 448))``, round to nearest even. The scores use the dequantized
q and k, accumulated in fp32; P (in [0, 1]) is quantized with the fixed scale 448 (``P_q =
e4m3(P * 448) / 448``) before ``P_q @ v_q``; lse is computed from the unquantized P. Backward: P is
recomputed from ``q_q, k_q`` and the saved lse; ``dv = P_q^T @ dout_q``, ``dP = dout_q @ v_q^T``,
``dS = P * (dP - rowsum(P * dP))`` stays fp32, ``dq = scale dS @ k_q``, ``dk = scale dS^T @ q_q``.
Accuracy is judged by SNR (>= 20 dB against unquantized float64 math), not by tolerances.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.backend import PrecisionType
from turbo_core.dispatch.primitives import Primitive, define_primitive
from turbo_core.dispatch.specs.validate import (
    FLOAT_DTYPES,
    require_bool,
    require_float,
    require_int,
    require_same_device,
    require_same_dtype,
    require_shape,
    require_tensor,
    values_readable,
)

__all__ = [
    "ATTENTION_BWD",
    "ATTENTION_FP8_BWD",
    "ATTENTION_FP8_FWD",
    "ATTENTION_FWD",
    "FP8_BLOCK",
    "FP8_MAX",
    "AttentionBwdArgs",
    "AttentionFp8BwdArgs",
    "AttentionFp8FwdArgs",
    "AttentionFwdArgs",
    "check_window_size",
    "lse_shape",
    "out_shape",
]

#: Rows per quantization block of the FP8 path, and the E4M3 (OCP) maximum used as P's scale.
FP8_BLOCK = 64
FP8_MAX = 448.0


@dataclass(frozen=True, eq=False)
class AttentionFwdArgs:
    """One flash-attention forward call (see the module docstring for shapes and semantics).

    ``softmax_scale=None`` means ``d_qk ** -0.5``; ``window_size = (left, right)``, -1 unbounded.
    The result is ``(out, lse)``.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    cu_seqlens_q: torch.Tensor | None = None
    cu_seqlens_k: torch.Tensor | None = None
    max_seqlen_q: int = 0
    max_seqlen_k: int = 0
    softmax_scale: float | None = None
    causal: bool = False
    window_size: tuple[int, int] = (-1, -1)
    sink: torch.Tensor | None = None
    dropout_p: float = 0.0
    deterministic: bool = False

    @property
    def is_varlen(self) -> bool:
        return self.cu_seqlens_q is not None

    @property
    def scale(self) -> float:
        return _scale(self.softmax_scale, self.q)


@dataclass(frozen=True, eq=False)
class AttentionBwdArgs:
    """One flash-attention backward call: the forward's arguments plus ``dout`` (out's shape and
    dtype), and the forward's ``out`` and ``lse`` (or those of a softmax over more key blocks: see
    the module doc). The result is ``(dq, dk, dv, dsink | None)``."""

    dout: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    out: torch.Tensor
    lse: torch.Tensor
    cu_seqlens_q: torch.Tensor | None = None
    cu_seqlens_k: torch.Tensor | None = None
    max_seqlen_q: int = 0
    max_seqlen_k: int = 0
    softmax_scale: float | None = None
    causal: bool = False
    window_size: tuple[int, int] = (-1, -1)
    sink: torch.Tensor | None = None
    dropout_p: float = 0.0
    deterministic: bool = False

    @property
    def is_varlen(self) -> bool:
        return self.cu_seqlens_q is not None

    @property
    def scale(self) -> float:
        return _scale(self.softmax_scale, self.q)

    def forward_args(self) -> AttentionFwdArgs:
        """The forward call these gradients belong to (used to pin the backward's backend)."""
        return AttentionFwdArgs(self.q, self.k, self.v, self.cu_seqlens_q, self.cu_seqlens_k,
                                self.max_seqlen_q, self.max_seqlen_k, self.softmax_scale, self.causal,
                                self.window_size, self.sink, self.dropout_p, self.deterministic)


@dataclass(frozen=True, eq=False)
class AttentionFp8FwdArgs:
    """FP8 flash-attention forward, dense only (shapes as ``AttentionFwdArgs``; inputs in
    fp16/bf16/fp32, quantized inside the kernel). The result is ``(out, lse)``."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    softmax_scale: float | None = None
    causal: bool = False
    window_size: tuple[int, int] = (-1, -1)
    dropout_p: float = 0.0
    deterministic: bool = False

    is_varlen = False

    @property
    def scale(self) -> float:
        return _scale(self.softmax_scale, self.q)


@dataclass(frozen=True, eq=False)
class AttentionFp8BwdArgs:
    """FP8 flash-attention backward, dense only. The result is ``(dq, dk, dv)``."""

    dout: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    out: torch.Tensor
    lse: torch.Tensor
    softmax_scale: float | None = None
    causal: bool = False
    window_size: tuple[int, int] = (-1, -1)
    dropout_p: float = 0.0
    deterministic: bool = False

    is_varlen = False

    @property
    def scale(self) -> float:
        return _scale(self.softmax_scale, self.q)

    def forward_args(self) -> AttentionFp8FwdArgs:
        return AttentionFp8FwdArgs(self.q, self.k, self.v, self.softmax_scale, self.causal,
                                   self.window_size, self.dropout_p, self.deterministic)


def _scale(softmax_scale: float | None, q: torch.Tensor) -> float:
    return float(softmax_scale) if softmax_scale is not None else float(q.shape[-1]) ** -0.5


def out_shape(q: torch.Tensor, v: torch.Tensor) -> tuple[int, ...]:
    """Shape of ``out``: q's shape with v's head dim."""
    return (*q.shape[:-1], v.shape[-1])


def lse_shape(q: torch.Tensor, varlen: bool) -> tuple[int, ...]:
    """``[b, h_q, s_q]`` (dense) or ``[h_q, total_q]`` (varlen)."""
    if varlen:
        return (q.shape[1], q.shape[0])
    return (q.shape[0], q.shape[2], q.shape[1])


# -- validation ----------------------------------------------------------------------------------

def check_window_size(window_size: object) -> tuple[int, int]:
    if (not isinstance(window_size, (tuple, list)) or len(window_size) != 2
            or not all(isinstance(w, int) and not isinstance(w, bool) for w in window_size)):
        raise TypeError(f"window_size: expected a pair of ints (left, right), got {window_size!r}")
    left, right = window_size
    if left < -1 or right < -1:
        raise ValueError(f"window_size: expected values >= -1 (-1 = unbounded), got {tuple(window_size)}")
    return int(left), int(right)


def _check_unit_stride(name: str, t: torch.Tensor) -> None:
    if t.numel() and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(
            f"{name}: expected unit stride in the last (head) dim, got strides {tuple(t.stride())}"
            " (call .contiguous())"
        )


def _check_scalars(args) -> None:
    # While tracing, scalars may be symbolic; the custom op re-validates them with real values.
    if not torch.compiler.is_compiling():
        require_float("softmax_scale", args.softmax_scale, optional=True)
    require_bool("causal", args.causal)
    require_bool("deterministic", args.deterministic)
    check_window_size(args.window_size)
    p = args.dropout_p
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"dropout_p: expected a float in [0, 1), got {p!r}")


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ndim: int | tuple[int, ...]) -> bool:
    """Shared checks of q, k and v; returns whether they are THD (3-D)."""
    require_tensor("q", q, ndim=ndim, dtypes=FLOAT_DTYPES)
    varlen = q.dim() == 3
    layout = "[total, h, d]" if varlen else "[b, s, h, d]"
    for name, t in (("k", k), ("v", v)):
        require_tensor(name, t, ndim=q.dim())
        require_same_dtype(name, t, "q", q)
    require_same_device(q=q, k=k, v=v)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.shape[-1] < 1 or t.shape[-2] < 1:
            raise ValueError(f"{name}: expected at least one head and a head dim >= 1 ({layout}), "
                             f"got shape {tuple(t.shape)}")
        _check_unit_stride(name, t)
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k: expected the head dim of q ({q.shape[-1]}), got shape {tuple(k.shape)}")
    if v.shape[:-1] != k.shape[:-1]:
        raise ValueError(f"v: expected the batch, sequence and head dims of k {tuple(k.shape[:-1])}, "
                         f"got shape {tuple(v.shape)}")
    if not varlen and k.shape[0] != q.shape[0]:
        raise ValueError(f"k: expected the batch size of q ({q.shape[0]}), got shape {tuple(k.shape)}")
    h_q, h_kv = q.shape[-2], k.shape[-2]
    if h_q % h_kv != 0:
        raise ValueError(f"k: the number of query heads ({h_q}) must be a multiple of the number of "
                         f"key/value heads ({h_kv})")
    return varlen


def _check_cu_seqlens(name: str, cu: object, total: int, max_name: str, max_seqlen: object,
                      q: torch.Tensor) -> None:
    require_tensor(name, cu, ndim=1, dtypes=(torch.int32,))
    if cu.numel() < 1:
        raise ValueError(f"{name}: expected [B + 1] offsets (at least one element), got shape {tuple(cu.shape)}")
    require_same_device(q=q, **{name: cu})
    if torch.compiler.is_compiling():
        return  # possibly symbolic: the custom op re-validates with real values
    require_int(max_name, max_seqlen, minimum=0)
    if not values_readable(cu):
        return
    vals = cu.tolist()
    if vals[0] != 0:
        raise ValueError(f"{name}: expected cu_seqlens[0] == 0, got {vals[0]}")
    lengths = [b - a for a, b in zip(vals, vals[1:], strict=False)]
    if any(n < 0 for n in lengths):
        raise ValueError(f"{name}: expected non-decreasing offsets, got {vals}")
    if vals[-1] > total:
        raise ValueError(f"{name}: the last offset ({vals[-1]}) exceeds the {total} packed tokens")
    longest = max(lengths, default=0)
    if longest > max_seqlen:
        raise ValueError(f"{max_name}: {max_seqlen} is shorter than the longest sequence ({longest})")


def _check_varlen(args, varlen: bool) -> None:
    given = (args.cu_seqlens_q is not None, args.cu_seqlens_k is not None)
    if not varlen:
        if any(given):
            raise ValueError("cu_seqlens_q: given with 4-D (dense) q; varlen calls take q [total_q, h_q, d]")
        return
    if not all(given):
        missing = "cu_seqlens_q" if not given[0] else "cu_seqlens_k"
        raise ValueError(f"{missing}: required with 3-D (varlen THD) q, k, v")
    _check_cu_seqlens("cu_seqlens_q", args.cu_seqlens_q, args.q.shape[0], "max_seqlen_q",
                      args.max_seqlen_q, args.q)
    _check_cu_seqlens("cu_seqlens_k", args.cu_seqlens_k, args.k.shape[0], "max_seqlen_k",
                      args.max_seqlen_k, args.q)
    if args.cu_seqlens_k.shape != args.cu_seqlens_q.shape:
        raise ValueError(f"cu_seqlens_k: expected the shape of cu_seqlens_q {tuple(args.cu_seqlens_q.shape)}, "
                         f"got {tuple(args.cu_seqlens_k.shape)}")


def _check_sink(sink: object, q: torch.Tensor) -> None:
    if sink is None:
        return
    require_tensor("sink", sink, ndim=1, dtypes=(torch.float32,))
    require_shape("sink", sink, (q.shape[-2],), "one logit per query head")
    require_same_device(q=q, sink=sink)


def _check_grad_inputs(args, varlen: bool) -> None:
    want_out = out_shape(args.q, args.v)
    for name in ("dout", "out"):
        t = getattr(args, name)
        require_tensor(name, t, ndim=args.q.dim())
        require_shape(name, t, want_out, "q's with v's head dim")
        require_same_dtype(name, t, "q", args.q)
        _check_unit_stride(name, t)
    require_tensor("lse", args.lse, dtypes=(torch.float32,))
    require_shape("lse", args.lse, lse_shape(args.q, varlen), "[h_q, total_q]" if varlen else "[b, h_q, s_q]")
    require_same_device(q=args.q, dout=args.dout, out=args.out, lse=args.lse)


def _validate_fwd(args: AttentionFwdArgs) -> None:
    varlen = _check_qkv(args.q, args.k, args.v, (3, 4))
    _check_varlen(args, varlen)
    _check_sink(args.sink, args.q)
    _check_scalars(args)


def _validate_bwd(args: AttentionBwdArgs) -> None:
    _validate_fwd(args.forward_args())
    _check_grad_inputs(args, args.q.dim() == 3)


def _validate_fp8_fwd(args: AttentionFp8FwdArgs) -> None:
    _check_qkv(args.q, args.k, args.v, 4)
    _check_scalars(args)


def _validate_fp8_bwd(args: AttentionFp8BwdArgs) -> None:
    _validate_fp8_fwd(args.forward_args())
    _check_grad_inputs(args, False)


ATTENTION_FWD = define_primitive(Primitive(
    name="attention_fwd",
    args_type=AttentionFwdArgs,
    precision=PrecisionType.BF16_FP16_FP32,
    family="attn",
    validate=_validate_fwd,
    doc="Flash-attention forward (dense bshd or varlen THD): causal bottom-right, window, GQA, sink; "
        "returns (out, lse).",
))

ATTENTION_BWD = define_primitive(Primitive(
    name="attention_bwd",
    args_type=AttentionBwdArgs,
    precision=PrecisionType.BF16_FP16_FP32,
    family="attn",
    validate=_validate_bwd,
    doc="Flash-attention backward from (dout, q, k, v, out, lse): returns (dq, dk, dv, dsink | None).",
))

ATTENTION_FP8_FWD = define_primitive(Primitive(
    name="attention_fp8_fwd",
    args_type=AttentionFp8FwdArgs,
    precision=PrecisionType.FP8,
    family="attn",
    validate=_validate_fp8_fwd,
    doc="FP8 (E4M3, per (b, h, 64-row) block scales; P at the fixed scale 448) flash-attention forward, "
        "dense; returns (out, lse).",
))

ATTENTION_FP8_BWD = define_primitive(Primitive(
    name="attention_fp8_bwd",
    args_type=AttentionFp8BwdArgs,
    precision=PrecisionType.FP8,
    family="attn",
    validate=_validate_fp8_bwd,
    doc="FP8 flash-attention backward, dense: returns (dq, dk, dv).",
))
