"""Ring attention over the ring group: forward with log-sum-exp merging, backward with the key/value
gradients travelling around the ring.

Forward. Ring step ``s`` on rank ``r`` holds the key/value block of rank ``j = r - s`` (mod ``R``)
and runs the step's attention call (``steps.step_call``), which returns ``(O_j, lse_j)``, while the
block moves on to rank ``r + 1``. The merge keeps the exact softmax over all blocks:
``L = log sum_j exp(lse_j)`` and ``O = sum_j w_j O_j`` with ``w_j = exp(lse_j - L)`` (fp32; a row
that sees no key of a block has ``lse_j = -inf``, ``w_j = 0``).

Backward. With ``P^j`` the block's own softmax, the global probabilities are ``w_j P^j`` and
``dS = w_j P^j (dP - D)``, ``D = rowsum(dout * O)``. ``attention_bwd`` recomputes P from the ``lse``
it is given and D from the ``out`` it is given (its spec), so one call a step, with the merged ``O``
and ``L`` of the step's rows, returns exactly the block's share: ``attention_bwd(dout, q, k_j, v_j,
O, L)``.

The FP8 backward's spec takes D as ``rowsum(P dP)`` over the block's own (quantized) keys, so there
each step runs calls whose inputs are consistent with their own forward and adds the term they
cannot see:

- the step's forward again, ``(O_j, lse_j)``, then ``attention_bwd(w_j dout, q, k_j, v_j, O_j, lse_j)``:
  the gradient of ``w_j O_j`` through ``O_j``, i.e. ``w_j P^j (dP - D_j)``, ``D_j = rowsum(dout * O_j)``;
- the rest, ``c P^j`` with ``c = w_j (D_j - D)``, is the gradient of ``sum_i c_i lse_j[i]``:
  ``dq += scale c (P^j k_j)`` (``P^j k_j``: an ``attention_fwd`` with ``v = k_j``) and
  ``dk_j += scale P^j^T (c q)`` (the ``dv`` of an ``attention_bwd`` with ``v = 0``, ``out = 0``).

Four primitive calls a step for FP8, one otherwise, each on its own forward's backend. The ``dk_j``/``dv_j`` accumulator
(fp32) of a block travels with it: rank ``r`` adds its share of block ``j`` to the accumulator that
rank ``r - 1`` sent, and passes it on; after ``R`` shifts every rank holds its own block's.
"""

from __future__ import annotations

import torch

from turbo_core.ops.attention_cp.comm import Ring
from turbo_core.ops.attention_cp.layout import SKIP, step_kind
from turbo_core.ops.attention_cp.steps import Call, Kernels, step_call, with_v

__all__ = ["RingPlan", "ring_backward", "ring_forward"]

_TAG_KV, _TAG_DKV = 0, 1


class RingPlan:
    """The per-call constants of a ring pass: layout, mask, and the ring-local varlen offsets."""

    def __init__(self, *, causal: bool, layout: str, cu_q=None, cu_k=None, max_q: int = 0, max_k: int = 0) -> None:
        self.causal, self.layout = causal, layout
        self.cu_q, self.cu_k, self.max_q, self.max_k = cu_q, cu_k, max_q, max_k

    def kind(self, rank: int, src: int) -> str:
        return step_kind(self.causal, self.layout, rank, src)

    def call(self, kind: str, q, k, v) -> Call:
        return step_call(kind, q, k, v, cu_q=self.cu_q, cu_k=self.cu_k, max_q=self.max_q, max_k=self.max_k)


def lse_rows(lse: torch.Tensor) -> torch.Tensor:
    """``lse`` (dense ``[b, h, s]``, varlen ``[h, t]``) in the rows' layout of ``out`` without ``d``:
    ``[b, s, h]`` / ``[t, h]`` (a view)."""
    return lse.transpose(-1, -2)


def weight(part: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    """``exp(part - total)``, 0 where both are ``-inf`` (a row that sees no key at all); NaN stays NaN."""
    w = torch.exp(part - total)
    return torch.where(torch.isneginf(total), torch.zeros_like(w), w)


def _pick(x: torch.Tensor, rows: slice | None, seq_dim: int) -> torch.Tensor:
    if rows is None:
        return x
    return x.narrow(seq_dim, rows.start, (rows.stop if rows.stop is not None else x.shape[seq_dim]) - rows.start)


def _merge(out_acc: torch.Tensor, lse_acc: torch.Tensor, out_j: torch.Tensor, lse_j: torch.Tensor) -> None:
    """In place: ``(out_acc, lse_acc)`` (fp32, rows layout ``[..., h]`` for lse) absorb one block."""
    lse_j = lse_j.to(torch.float32)
    new = torch.logaddexp(lse_acc, lse_j)
    w_old = weight(lse_acc, new).unsqueeze(-1)
    w_new = weight(lse_j, new).unsqueeze(-1)
    out_acc.mul_(w_old).add_(w_new * out_j.to(torch.float32))
    lse_acc.copy_(new)


def _pack(*xs: torch.Tensor) -> torch.Tensor:
    return torch.cat([x.reshape(-1) for x in xs])


def _unpack(flat: torch.Tensor, likes: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    parts = flat.split([x.numel() for x in likes])
    return tuple(p.view(x.shape) for p, x in zip(parts, likes, strict=True))


def ring_forward(kern: Kernels, ring: Ring, plan: RingPlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """Ring attention forward on the ring-local ``q, k, v``: ``(out, lse, backends)``; ``out`` in q's
    dtype, ``lse`` fp32 in the primitive's layout, ``backends[j]`` the backend of block ``j``'s step."""
    seq_dim = q.dim() - 3
    rows_shape = (*q.shape[:-1],)
    out_acc = q.new_zeros((*q.shape[:-1], v.shape[-1]), dtype=torch.float32)
    lse_acc = q.new_full(rows_shape, float("-inf"), dtype=torch.float32)  # rows layout [b, s, h] / [t, h]
    backends: list[str | None] = [None] * ring.size
    kv = _pack(k, v) if ring.size > 1 else None
    for s in range(ring.size):
        src = (ring.rank - s) % ring.size
        shift = ring.start(kv, _TAG_KV) if s + 1 < ring.size else None
        kind = plan.kind(ring.rank, src)
        if kind != SKIP:
            call = plan.call(kind, q, k, v)
            out_j, lse_j, backends[src] = kern.fwd(call)
            _merge(_pick(out_acc, call.rows, seq_dim), _pick(lse_acc, call.rows, seq_dim), out_j, lse_rows(lse_j))
        if shift is not None:
            kv = shift.wait()
            k, v = _unpack(kv, (k, v))
    return out_acc.to(q.dtype), lse_rows(lse_acc).contiguous(), backends


def _step_grads(kern: Kernels, call: Call, backend: str | None, dout: torch.Tensor, out: torch.Tensor,
                lse_total: torch.Tensor, delta: torch.Tensor):
    """One step's share of ``(dq, dk, dv)`` (fp32, the call's rows): see the module docstring.
    ``out``/``lse_total``/``delta``: the merged output, lse and ``rowsum(dout * out)`` of the call's
    rows (lse and delta ``[..., h]``)."""
    if not kern.fp8:
        dq, dk, dv = kern.bwd(call, dout, out, lse_rows(lse_total).contiguous(), backend)
        return dq.float(), dk.float(), dv.float()
    out_j, lse_j, _ = kern.fwd(call, backend)
    w = weight(lse_rows(lse_j), lse_total)
    c = w * ((dout.float() * out_j.float()).sum(-1) - delta)
    dq, dk, dv = kern.bwd(call, (dout.float() * w.unsqueeze(-1)).to(dout.dtype), out_j, lse_j, backend)
    pk, _, pk_backend = kern.fwd(with_v(call, call.k))
    zero_v = torch.zeros_like(call.k)
    lse_q = (kern.scale * c.unsqueeze(-1) * call.q.float()).to(call.q.dtype)
    _, _, dk_lse = kern.bwd(with_v(call, zero_v), lse_q, torch.zeros_like(call.q), lse_j, pk_backend)
    dq = dq.float() + kern.scale * c.unsqueeze(-1) * pk.float()
    return dq, dk.float() + dk_lse.float(), dv.float()


def ring_backward(kern: Kernels, ring: Ring, plan: RingPlan, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, backends: list[str | None]):
    """``(dq, dk, dv)`` of :func:`ring_forward` (the inputs' dtypes) from the output gradient ``dout``."""
    seq_dim = q.dim() - 3
    delta = (dout.float() * out.float()).sum(-1)  # [b, s, h] / [t, h]
    lse_r = lse_rows(lse)
    dq = torch.zeros_like(q, dtype=torch.float32)
    kv = _pack(k, v) if ring.size > 1 else None
    pending = None  # the accumulator shift started at the previous step
    acc = None
    for s in range(ring.size):
        src = (ring.rank - s) % ring.size
        shift = ring.start(kv, _TAG_KV) if s + 1 < ring.size else None
        kind = plan.kind(ring.rank, src)
        share = torch.zeros(k.numel() + v.numel(), dtype=torch.float32, device=k.device)
        if kind != SKIP:
            call = plan.call(kind, q, k, v)
            g_q, g_k, g_v = _step_grads(kern, call, backends[src], _pick(dout, call.rows, seq_dim),
                                        _pick(out, call.rows, seq_dim), _pick(lse_r, call.rows, seq_dim),
                                        _pick(delta, call.rows, seq_dim))
            _pick(dq, call.rows, seq_dim).add_(g_q)
            dk_share, dv_share = _unpack(share, (k, v))
            _pick(dk_share, call.kv_rows, seq_dim).add_(g_k)
            _pick(dv_share, call.kv_rows, seq_dim).add_(g_v)
        acc = share if pending is None else pending.wait().add_(share)
        pending = ring.start(acc, _TAG_DKV) if ring.size > 1 else None
        if shift is not None:
            kv = shift.wait()
            k, v = _unpack(kv, (k, v))
    if pending is not None:
        acc = pending.wait()
    dk, dv = _unpack(acc, (k, v))
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
