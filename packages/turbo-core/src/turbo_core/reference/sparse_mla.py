"""Reference sparse MLA attention (the semantics of ``turbo_core.dispatch.specs.sparse_mla``).

Exact softmax over each token's gathered keys: float64 on the CPU, fp32 on a GPU (inputs upcast;
``out``, ``dq`` and ``dkv`` rounded once to the input dtype, ``lse`` and ``dsink`` fp32). Tokens are
processed in blocks so that one block's gathered keys ``[tokens, topk, d_qk]`` stay below 2^26
elements. Slots that select nothing (an index outside ``[0, num_kv)``) gather row 0 and are then
zeroed before any product, so a NaN or Inf in a row a token does not select never reaches it, while
one it selects propagates as IEEE arithmetic says. The backward uses
``rowsum(dout * out) = rowsum(P * dP)`` (exact, so it does not read the rounded ``out``) and adds
each slot's ``dkv`` contribution with ``index_put_(accumulate=True)``, which is deterministic on the
CPU (float64) and on CUDA (sorted by row).
"""

from __future__ import annotations

import torch

from turbo_core.backend import BackendType
from turbo_core.dispatch.specs.sparse_mla import (
    SparseMlaBwdArgs,
    SparseMlaFwdArgs,
    kv_rows,
    lse_shape,
    out_shape,
)
from turbo_core.plugins.types import Kernel

__all__ = ["KERNELS", "sparse_mla_bwd", "sparse_mla_fwd"]

_GATHER_BUDGET = 1 << 26  # elements of one block's gathered keys


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.device.type == "cpu" else torch.float32


def _blocks(t: int, topk: int, d_qk: int):
    rows = max(1, _GATHER_BUDGET // max(1, topk * d_qk))
    return [(r0, min(r0 + rows, t)) for r0 in range(0, t, rows)]


def _gather(kv: torch.Tensor, idx: torch.Tensor):
    """``(keys [n, topk, d_qk], valid [n, topk], safe [n, topk])``: the selected rows of ``kv``
    (compute dtype), zero where the slot selects nothing."""
    num_kv = kv.shape[0]
    valid = (idx >= 0) & (idx < num_kv)
    safe = torch.where(valid, idx, torch.zeros_like(idx)).long()
    if num_kv == 0:
        keys = kv.new_zeros(*idx.shape, kv.shape[-1])
    else:
        keys = kv[safe.reshape(-1)].view(*idx.shape, kv.shape[-1])
    keys = torch.where(valid[..., None], keys, torch.zeros((), dtype=kv.dtype, device=kv.device))
    return keys, valid, safe


def _finite(lse: torch.Tensor) -> torch.Tensor:
    """``lse`` with ``-inf`` (rows that see nothing) replaced by 0, so ``s - lse`` stays ``-inf``."""
    return torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)


def _scores(qb: torch.Tensor, keys: torch.Tensor, valid: torch.Tensor, scale: float) -> torch.Tensor:
    """``[n, H, topk]``: ``scale * q . key`` where the slot is valid, ``-inf`` elsewhere."""
    s = torch.einsum("nhd,nkd->nhk", qb, keys) * scale
    return s.masked_fill(~valid[:, None, :], float("-inf"))


def sparse_mla_fwd(args: SparseMlaFwdArgs) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out [T, H, kv_lora_rank], lse fp32 [T, H])``."""
    ct = _compute_dtype(args.q)
    q = args.q.to(ct)
    kv = kv_rows(args.kv).to(ct)
    idx = args.topk_indices
    rank, scale = args.kv_lora_rank, args.softmax_scale
    t, h, d_qk = q.shape
    out = q.new_zeros(out_shape(q, rank))
    lse = q.new_full(lse_shape(q), float("-inf"))
    sink = args.attn_sink.to(ct) if args.attn_sink is not None else None
    for r0, r1 in _blocks(t, idx.shape[1], d_qk):
        keys, valid, _ = _gather(kv, idx[r0:r1])
        s = _scores(q[r0:r1], keys, valid, scale)
        lb = torch.logsumexp(s, dim=-1) if s.shape[-1] else s.new_full(s.shape[:-1], float("-inf"))
        if sink is not None:
            lb = torch.logaddexp(lb, sink.expand_as(lb))
        p = torch.exp(s - _finite(lb)[..., None])
        out[r0:r1] = torch.einsum("nhk,nkd->nhd", p, keys[..., :rank])
        lse[r0:r1] = lb
    return out.to(args.q.dtype), lse.to(torch.float32)


def sparse_mla_bwd(args: SparseMlaBwdArgs):
    """``(dq, dkv, dsink | None)``: q's shape and dtype, kv's shape and dtype, fp32 ``[H]``."""
    ct = _compute_dtype(args.q)
    q = args.q.to(ct)
    kv = kv_rows(args.kv).to(ct)
    dout = args.dout.to(ct)
    out = args.out.to(ct)
    lse = args.lse.to(ct)
    idx = args.topk_indices
    rank, scale = args.kv_lora_rank, args.softmax_scale
    t, h, d_qk = q.shape
    dq = torch.zeros_like(q)
    dkv = torch.zeros_like(kv)
    sink = args.attn_sink.to(ct) if args.attn_sink is not None else None
    dsink = q.new_zeros(h) if sink is not None else None
    zero = torch.zeros((), dtype=ct, device=q.device)
    for r0, r1 in _blocks(t, idx.shape[1], d_qk):
        keys, valid, safe = _gather(kv, idx[r0:r1])
        lb = lse[r0:r1]
        s = _scores(q[r0:r1], keys, valid, scale)
        p = torch.exp(s - _finite(lb)[..., None])
        do = dout[r0:r1]
        dp = torch.einsum("nhd,nkd->nhk", do, keys[..., :rank])
        vis = valid[:, None, :]
        delta = (do * out[r0:r1]).sum(-1, keepdim=True)  # the spec's rowsum(dout * out), of the given out
        ds = torch.where(vis, p * (dp - delta), zero)
        dq[r0:r1] = torch.einsum("nhk,nkd->nhd", ds, keys) * scale
        contrib = torch.einsum("nhk,nhd->nkd", ds, q[r0:r1]) * scale
        contrib[..., :rank] += torch.einsum("nhk,nhd->nkd", torch.where(vis, p, zero), do)
        contrib = torch.where(valid[..., None], contrib, zero)  # a slot that selects nothing adds nothing
        if kv.shape[0]:
            dkv.index_put_((safe.reshape(-1),), contrib.reshape(-1, d_qk), accumulate=True)
        if sink is not None:
            p_sink = torch.where(torch.isfinite(lb), torch.exp(sink[None, :] - _finite(lb)), torch.zeros_like(lb))
            dsink -= (p_sink * delta.squeeze(-1)).sum(0)
    return (dq.to(args.q.dtype), dkv.to(args.kv.dtype).view(args.kv.shape),
            dsink.to(torch.float32) if dsink is not None else None)


_VARIANTS = ("fp32", "fp16", "bf16", "sink", "mqa-latent")

KERNELS = [
    Kernel("sparse_mla_fwd", BackendType.TORCH, sparse_mla_fwd, variants=_VARIANTS, priority=-100),
    Kernel("sparse_mla_bwd", BackendType.TORCH, sparse_mla_bwd, variants=_VARIANTS, priority=-100),
]
