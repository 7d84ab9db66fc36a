"""Sparse MLA attention primitives: ``sparse_mla_fwd`` / ``sparse_mla_bwd`` (DeepSeek-V3.2's
sparse attention over top-k selected keys, in the absorbed MLA form that Primus-Turbo's
``sparse_mla_func`` takes). Both are in the family ``sparse_attn`` (``set_sparse_attn_backend``,
``TURBO_SPARSE_ATTN_BACKEND``).

Layout (logical shapes; any strides with unit stride in the last dim):

- ``q [T, H, d_qk]``: one row of ``H`` query heads per token (DeepSeek: ``d_qk = 576``, the 512
  latent channels then the 64 rope channels).
- ``kv [num_kv, d_qk]`` or ``[num_kv, 1, d_qk]``: a single latent shared by every head (MQA). Key
  ``j`` is ``kv[j]`` (all ``d_qk`` channels); value ``j`` is its first ``kv_lora_rank`` channels,
  ``kv[j, :kv_lora_rank]`` (``d_v = kv_lora_rank``, DeepSeek: 512).
- ``topk_indices [T, topk]`` int32 (or int64): the rows of ``kv`` that token ``t`` attends to. An
  entry outside ``[0, num_kv)`` selects nothing (``-1`` by convention, the padding of rows with
  fewer than ``topk`` keys); a row may repeat an index, and each occurrence counts as one key.
- ``attn_sink`` (optional fp32 ``[H]``): a per-head logit that joins the softmax denominator and
  carries no value (as the ``sink`` of ``attention_fwd``).
- results: ``out [T, H, kv_lora_rank]`` in q's dtype (contiguous); ``lse`` fp32 ``[T, H]``
  (contiguous, natural log, the sink included).

Semantics (what every backend computes; the TORCH reference is the oracle). For token ``t``, head
``h`` and the valid slots ``r`` of its row (``j_r = topk_indices[t, r]`` in ``[0, num_kv)``):

- ``S_r = scale * q[t, h] . kv[j_r]`` over all ``d_qk`` channels (``scale`` defaults to
  ``d_qk ** -0.5``);
- ``lse = log(sum_r exp(S_r) + exp(attn_sink[h]))`` (no sink term without a sink);
- ``P_r = exp(S_r - lse)``; ``out[t, h] = sum_r P_r kv[j_r, :kv_lora_rank]``;
- a row with no valid slot and no sink gives ``out = 0`` and ``lse = -inf`` (and no gradient);
  with a sink it gives ``out = 0`` and ``lse = attn_sink[h]``.

Backward (``sparse_mla_bwd``) takes the forward's ``out`` and ``lse`` and recomputes ``P``. With
``delta = rowsum(dout * out)`` (over the ``kv_lora_rank`` channels) and
``dS_r = P_r (dout[t, h] . kv[j_r, :kv_lora_rank] - delta)``:

- ``dq[t, h] = scale * sum_r dS_r kv[j_r]``;
- ``dkv[j] = sum over (t, h, r) with j_r = j of scale * dS_r q[t, h]``, plus ``P_r dout[t, h]`` on
  the first ``kv_lora_rank`` channels (keys and values share those channels);
- ``dsink[h] = -sum_t exp(attn_sink[h] - lse[t, h]) * delta[t, h]`` (fp32; ``None`` without a sink).

``dq`` has q's shape and dtype; ``dkv`` has kv's shape (2-D or 3-D) and dtype. Accumulation is fp32
(or wider); ``out``, ``dq`` and ``dkv`` are rounded once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.backend import PrecisionType
from turbo_core.dispatch.primitives import Primitive, define_primitive
from turbo_core.dispatch.specs.validate import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    require_float,
    require_int,
    require_same_device,
    require_same_dtype,
    require_shape,
    require_tensor,
)

__all__ = [
    "SPARSE_MLA_BWD",
    "SPARSE_MLA_FWD",
    "SparseMlaBwdArgs",
    "SparseMlaFwdArgs",
    "kv_rows",
    "lse_shape",
    "out_shape",
]


@dataclass(frozen=True, eq=False)
class SparseMlaFwdArgs:
    """One sparse MLA forward call (see the module docstring for shapes and semantics).

    ``q [T, H, d_qk]``, ``kv [num_kv, d_qk]`` or ``[num_kv, 1, d_qk]`` (q's dtype, fp16/bf16/fp32),
    ``topk_indices`` int32/int64 ``[T, topk]`` (entries outside ``[0, num_kv)`` select nothing),
    ``attn_sink`` fp32 ``[H]`` or None, ``1 <= kv_lora_rank <= d_qk``, ``scale=None`` meaning
    ``d_qk ** -0.5``. The result is ``(out [T, H, kv_lora_rank], lse fp32 [T, H])``.
    """

    q: torch.Tensor
    kv: torch.Tensor
    topk_indices: torch.Tensor
    attn_sink: torch.Tensor | None = None
    kv_lora_rank: int = 512
    scale: float | None = None

    @property
    def softmax_scale(self) -> float:
        return _scale(self.scale, self.q)


@dataclass(frozen=True, eq=False)
class SparseMlaBwdArgs:
    """One sparse MLA backward call: ``dout`` (out's shape and q's dtype), the forward's inputs and
    its ``out`` and ``lse``. The result is ``(dq, dkv, dsink | None)``: q's shape and dtype, kv's
    shape and dtype, fp32 ``[H]`` (None without ``attn_sink``)."""

    dout: torch.Tensor
    q: torch.Tensor
    kv: torch.Tensor
    out: torch.Tensor
    lse: torch.Tensor
    topk_indices: torch.Tensor
    attn_sink: torch.Tensor | None = None
    kv_lora_rank: int = 512
    scale: float | None = None

    @property
    def softmax_scale(self) -> float:
        return _scale(self.scale, self.q)

    def forward_args(self) -> SparseMlaFwdArgs:
        """The forward call these gradients belong to (used to pin the backward's backend)."""
        return SparseMlaFwdArgs(self.q, self.kv, self.topk_indices, self.attn_sink, self.kv_lora_rank, self.scale)


def _scale(scale: float | None, q: torch.Tensor) -> float:
    return float(scale) if scale is not None else float(q.shape[-1]) ** -0.5


def out_shape(q: torch.Tensor, kv_lora_rank: int) -> tuple[int, int, int]:
    """``[T, H, kv_lora_rank]``."""
    return (q.shape[0], q.shape[1], kv_lora_rank)


def lse_shape(q: torch.Tensor) -> tuple[int, int]:
    """``[T, H]``."""
    return (q.shape[0], q.shape[1])


def kv_rows(kv: torch.Tensor) -> torch.Tensor:
    """``kv`` as its 2-D ``[num_kv, d_qk]`` view (``[num_kv, 1, d_qk]`` loses its unit dim; no copy)."""
    return kv[:, 0] if kv.dim() == 3 else kv


# -- validation ----------------------------------------------------------------------------------

def _unit_stride(name: str, t: torch.Tensor) -> None:
    if t.numel() and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name}: expected unit stride in the last dim, got strides {tuple(t.stride())} "
                         "(call .contiguous())")


def _validate_fwd(args: SparseMlaFwdArgs) -> None:
    q, kv, idx = args.q, args.kv, args.topk_indices
    require_tensor("q", q, ndim=3, dtypes=FLOAT_DTYPES)
    require_tensor("kv", kv, ndim=(2, 3))
    require_same_dtype("kv", kv, "q", q)
    require_tensor("topk_indices", idx, ndim=2, dtypes=INDEX_DTYPES)
    t, h, d_qk = q.shape
    if h < 1 or d_qk < 1:
        raise ValueError(f"q: expected [T, H, d_qk] with H >= 1 and d_qk >= 1, got shape {tuple(q.shape)}")
    if kv.dim() == 3 and kv.shape[1] != 1:
        raise ValueError(f"kv: expected [num_kv, d_qk] or [num_kv, 1, d_qk] (one latent shared by every head), "
                         f"got shape {tuple(kv.shape)}")
    if kv.shape[-1] != d_qk:
        raise ValueError(f"kv: expected the head dim of q ({d_qk}) in the last dim, got shape {tuple(kv.shape)}")
    if idx.shape[0] != t:
        raise ValueError(f"topk_indices: expected [T, topk] with T = {t} (q's tokens), got shape {tuple(idx.shape)}")
    require_same_device(q=q, kv=kv, topk_indices=idx)
    for name, tensor in (("q", q), ("kv", kv), ("topk_indices", idx)):
        _unit_stride(name, tensor)
    if args.attn_sink is not None:
        require_tensor("attn_sink", args.attn_sink, ndim=1, dtypes=(torch.float32,))
        require_shape("attn_sink", args.attn_sink, (h,), "one logit per query head")
        require_same_device(q=q, attn_sink=args.attn_sink)
    rank = args.kv_lora_rank
    require_int("kv_lora_rank", rank, minimum=1)
    if rank > d_qk:
        raise ValueError(f"kv_lora_rank: expected at most the head dim of q ({d_qk}): the values are the first "
                         f"kv_lora_rank channels of kv, got {rank}")
    # While tracing, the scale may be symbolic; the custom op re-validates it with its real value.
    if not torch.compiler.is_compiling():
        require_float("scale", args.scale, optional=True)


def _validate_bwd(args: SparseMlaBwdArgs) -> None:
    _validate_fwd(args.forward_args())
    q = args.q
    want = out_shape(q, args.kv_lora_rank)
    for name in ("dout", "out"):
        t = getattr(args, name)
        require_tensor(name, t, ndim=3)
        require_shape(name, t, want, "[T, H, kv_lora_rank]")
        require_same_dtype(name, t, "q", q)
        _unit_stride(name, t)
    require_tensor("lse", args.lse, ndim=2, dtypes=(torch.float32,))
    require_shape("lse", args.lse, lse_shape(q), "[T, H]")
    require_same_device(q=q, dout=args.dout, out=args.out, lse=args.lse)


SPARSE_MLA_FWD = define_primitive(Primitive(
    name="sparse_mla_fwd",
    args_type=SparseMlaFwdArgs,
    precision=PrecisionType.BF16_FP16_FP32,
    family="sparse_attn",
    validate=_validate_fwd,
    doc="Sparse MLA attention forward (DeepSeek-V3.2): each token's H heads attend to its top-k rows of a "
        "single shared latent kv (values: its first kv_lora_rank channels), optional sink; returns (out, lse).",
))

SPARSE_MLA_BWD = define_primitive(Primitive(
    name="sparse_mla_bwd",
    args_type=SparseMlaBwdArgs,
    precision=PrecisionType.BF16_FP16_FP32,
    family="sparse_attn",
    validate=_validate_bwd,
    doc="Sparse MLA attention backward from (dout, q, kv, out, lse, topk_indices): returns (dq, dkv, dsink | None).",
))
