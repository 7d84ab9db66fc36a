"""Reference flash attention (the semantics of ``turbo_core.dispatch.specs.attention``).

Exact softmax attention with explicit score matrices: float64 on the CPU, fp32 on a GPU (inputs of
any float dtype are upcast; results are rounded once to the input dtype, lse and dsink stay fp32).
Query rows are processed in blocks so that one block's ``[b, h_q, rows, s_kv]`` scores stay below
2^26 elements; varlen calls build a ``[rows, total_k]`` mask from the segment ids (no host sync, so the
cost is quadratic in the packed length, not per sequence). The backward recomputes ``P`` from q, k
and the saved lse and uses ``rowsum(dout * out) = rowsum(P * dP)`` (exact, so it does not read the
rounded ``out``). GQA expands k/v over each query group and sums the gradients back.

Every product of a probability (or dS) matrix with values, keys, queries or dout sums over the
entries the mask allows only (:func:`_visible_mm`): a NaN or Inf in a key, value or row that a query
cannot see, in another sequence or in rows past the last one, never reaches it (``0 * NaN`` would),
while one it can see propagates as IEEE arithmetic says.

FP8: the same math on q, k, v (and dout) fake-quantized per (b, h, 64-row block) to E4M3, with P
quantized at the fixed scale 448 where it multiplies v (forward) or dout (dv); see the spec module.
Dropout is not implemented: calls with ``dropout_p != 0`` are declined.
"""

from __future__ import annotations

import torch

from turbo_core.backend import BackendType
from turbo_core.dispatch.specs.attention import (
    FP8_BLOCK,
    FP8_MAX,
    AttentionBwdArgs,
    AttentionFp8BwdArgs,
    AttentionFp8FwdArgs,
    AttentionFwdArgs,
)
from turbo_core.plugins.types import Kernel

__all__ = ["KERNELS", "attention_bwd", "attention_fp8_bwd", "attention_fp8_fwd", "attention_fwd",
           "fake_quant_e4m3_blocks"]

_SCORE_BUDGET = 1 << 26  # elements of one block of scores


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.device.type == "cpu" else torch.float32


def _bhsd(x: torch.Tensor, ct: torch.dtype) -> torch.Tensor:
    """``[b, s, h, d]`` -> ``[b, h, s, d]``; THD ``[t, h, d]`` -> ``[1, h, t, d]``."""
    if x.dim() == 3:
        x = x.unsqueeze(0)
    return x.permute(0, 2, 1, 3).to(ct)


def _unbhsd(x: torch.Tensor, varlen: bool, dtype: torch.dtype) -> torch.Tensor:
    x = x.permute(0, 2, 1, 3)
    if varlen:
        x = x[0]
    return x.to(dtype).contiguous()


def _decline(args) -> str | None:
    if args.dropout_p != 0.0:
        return f"the reference implements dropout_p=0.0 only (got {args.dropout_p})"
    return None


class _Mask:
    """Which keys each query row sees: ``allowed(r0, r1) -> bool [r1 - r0, s_kv]``."""

    def __init__(self, args, device: torch.device) -> None:
        left, right = args.window_size
        self.left, self.right = left, (0 if args.causal else right)
        self.device = device
        self.varlen = args.is_varlen
        if self.varlen:
            nq, nk = args.q.shape[0], args.k.shape[0]
            cu_q = args.cu_seqlens_q.to(device=device, dtype=torch.int64)
            cu_k = args.cu_seqlens_k.to(device=device, dtype=torch.int64)
            self.seg_q, self.pos_q, ok_q, self.len_q = self._segments(cu_q, nq)
            seg_k, self.pos_k, ok_k, _ = self._segments(cu_k, nk)
            nseg = cu_q.numel() - 1
            lens_k = (cu_k[1:] - cu_k[:-1]) if nseg > 0 else cu_k.new_zeros(1)
            self.len_kq = lens_k[self.seg_q]  # key length of each query row's sequence
            self.seg_q = torch.where(ok_q, self.seg_q, -1)
            self.seg_k = torch.where(ok_k, seg_k, -2)
        else:
            s_q, s_kv = args.q.shape[1], args.k.shape[1]
            self.pos_q = torch.arange(s_q, device=device)
            self.pos_k = torch.arange(s_kv, device=device)
            self.offset = s_kv - s_q

    @staticmethod
    def _segments(cu: torch.Tensor, total: int):
        idx = torch.arange(total, device=cu.device)
        nseg = cu.numel() - 1
        seg = torch.searchsorted(cu, idx, right=True) - 1
        ok = (seg >= 0) & (seg < nseg)
        seg = seg.clamp(0, max(nseg - 1, 0))
        if nseg == 0:
            zeros = torch.zeros_like(idx)
            return zeros, zeros, torch.zeros_like(ok), zeros
        pos = idx - cu[seg]
        return seg, pos, ok, cu[seg + 1] - cu[seg]

    def in_sequence(self, r0: int, r1: int) -> torch.Tensor | None:
        """bool ``[r1 - r0]``: whether each query row belongs to a sequence (varlen rows at or past
        ``cu_seqlens_q[-1]`` do not: out 0, lse -inf, the sink included); None when all do."""
        return self.seg_q[r0:r1] >= 0 if self.varlen else None

    def allowed(self, r0: int, r1: int) -> torch.Tensor:
        pos_q = self.pos_q[r0:r1, None]
        pos_k = self.pos_k[None, :]
        if self.varlen:
            diag = pos_q + (self.len_kq[r0:r1, None] - self.len_q[r0:r1, None])
            ok = self.seg_q[r0:r1, None] == self.seg_k[None, :]
        else:
            diag = pos_q + self.offset
            ok = torch.ones(pos_q.shape[0], pos_k.shape[1], dtype=torch.bool, device=self.device)
        if self.right >= 0:
            ok = ok & (pos_k <= diag + self.right)
        if self.left >= 0:
            ok = ok & (pos_k >= diag - self.left)
        return ok


def _row_blocks(b: int, h: int, s_q: int, s_kv: int):
    rows = max(1, _SCORE_BUDGET // max(1, b * h * s_kv))
    return [(r0, min(r0 + rows, s_q)) for r0 in range(0, s_q, rows)]


def _expand(x: torch.Tensor, group: int) -> torch.Tensor:
    return x if group == 1 else x.repeat_interleave(group, dim=1)


def _reduce(x: torch.Tensor, group: int) -> torch.Tensor:
    if group == 1:
        return x
    b, h, s, d = x.shape
    return x.view(b, h // group, group, s, d).sum(2)


def _finite(lse: torch.Tensor) -> torch.Tensor:
    """``lse`` with the ``-inf`` of rows that see nothing replaced by 0 (so ``s - lse`` is ``-inf``,
    not NaN, there); a NaN lse stays NaN and makes its row NaN."""
    return torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)


def _visible_mm(a: torch.Tensor, allowed: torch.Tensor, b: torch.Tensor, zeroed: bool = False) -> torch.Tensor:
    """``a @ b`` over the entries of ``a`` that ``allowed`` (broadcast to ``a``) marks, the others
    taken as zero and never multiplying ``b``: a NaN/Inf in a row of ``b`` that only masked
    entries meet does not reach the result (``0 * NaN`` would), one that an allowed entry meets
    propagates as IEEE arithmetic of the sum says (``x * Inf`` is ``±Inf`` by the signs, ``0 * Inf``
    and ``Inf - Inf`` are NaN). On the CPU the plain product serves a finite ``b``; elsewhere (no
    host sync) the non-finite entries are always accounted for, by boolean products. ``zeroed``:
    ``a`` is already zero outside ``allowed`` (a NaN lse fills a whole row of P, so P is not)."""
    if not zeroed:
        a = torch.where(allowed, a, torch.zeros((), dtype=a.dtype, device=a.device))
    fin = torch.isfinite(b)
    if b.device.type == "cpu" and bool(fin.all()):
        return a @ b
    out = a @ torch.where(fin, b, torch.zeros_like(b))
    ct = a.dtype

    def meets(sel: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        return (sel.to(ct) @ cond.to(ct)) > 0

    up, down = allowed & (a > 0), allowed & (a < 0)
    pos = meets(up, b == float("inf")) | meets(down, b == float("-inf"))
    neg = meets(up, b == float("-inf")) | meets(down, b == float("inf"))
    nan = (meets(allowed.expand_as(a), torch.isnan(b)) | meets(allowed & (a == 0), torch.isinf(b))) | (pos & neg)
    out = torch.where(pos, float("inf"), out)
    out = torch.where(neg, float("-inf"), out)
    return torch.where(nan, float("nan"), out)


def _probs(qb, k, scale, mask, lse_b):
    s = (qb @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~mask, float("-inf"))
    if lse_b is None:
        return s
    return torch.exp(s - _finite(lse_b).unsqueeze(-1))


def _forward(q, k, v, scale, mask: _Mask, sink, p_quant=None):
    """``q [b, h, s_q, d]``, ``k/v [b, h, s_kv, d]`` (already expanded) -> out, lse (compute dtype)."""
    b, h, s_q, _ = q.shape
    s_kv = k.shape[2]
    out = q.new_empty(b, h, s_q, v.shape[-1])
    lse = q.new_empty(b, h, s_q)
    for r0, r1 in _row_blocks(b, h, s_q, s_kv):
        allowed = mask.allowed(r0, r1)
        s = _probs(q[:, :, r0:r1], k, scale, allowed, None)
        lb = torch.logsumexp(s, dim=-1)
        if sink is not None:
            with_sink = torch.logaddexp(lb, sink.view(1, h, 1))
            rows = mask.in_sequence(r0, r1)
            lb = with_sink if rows is None else torch.where(rows.view(1, 1, -1), with_sink, lb)
        p = torch.exp(s - _finite(lb).unsqueeze(-1))
        out[:, :, r0:r1] = _visible_mm(p_quant(p) if p_quant else p, allowed, v)
        lse[:, :, r0:r1] = lb
    return out, lse


def _backward(dout, q, k, v, lse, scale, mask: _Mask, sink, p_quant=None, out=None):
    """Gradients in the compute dtype: dq, dk, dv (expanded heads) and dsink ``[h]`` or None.
    ``D = rowsum(dout * out)`` from ``out`` when given (``attention_bwd``), else ``rowsum(P * dP)`` over
    the visible keys (the FP8 spec's)."""
    b, h, s_q, _ = q.shape
    s_kv = k.shape[2]
    dq = torch.zeros_like(q)
    dk = torch.zeros_like(k)
    dv = torch.zeros_like(v)
    dsink = q.new_zeros(h) if sink is not None else None
    for r0, r1 in _row_blocks(b, h, s_q, s_kv):
        lb = lse[:, :, r0:r1]
        allowed = mask.allowed(r0, r1)
        p = _probs(q[:, :, r0:r1], k, scale, allowed, lb)
        do = dout[:, :, r0:r1]
        dp = do @ v.transpose(-1, -2)
        zero = torch.zeros((), dtype=p.dtype, device=p.device)
        if out is None:
            delta = torch.where(allowed, p * dp, zero).sum(-1, keepdim=True)
        else:
            delta = (do * out[:, :, r0:r1]).sum(-1, keepdim=True)
        ds = torch.where(allowed, p * (dp - delta), zero)
        allowed_t = allowed.transpose(-1, -2)
        dq[:, :, r0:r1] = _visible_mm(ds, allowed, k, zeroed=True) * scale
        dk += _visible_mm(ds.transpose(-1, -2), allowed_t, q[:, :, r0:r1], zeroed=True) * scale
        dv += _visible_mm((p_quant(p) if p_quant else p).transpose(-1, -2), allowed_t, do)
        if sink is not None:
            p_sink = torch.where(torch.isfinite(lb), torch.exp(sink.view(1, h, 1) - _finite(lb)),
                                 torch.zeros_like(lb))
            dsink -= (p_sink * delta.squeeze(-1)).sum(dim=(0, 2))
    return dq, dk, dv, dsink


def attention_fwd(args: AttentionFwdArgs) -> tuple[torch.Tensor, torch.Tensor]:
    reason = _decline(args)
    if reason:
        raise ValueError(f"dropout_p: {reason}")
    ct = _compute_dtype(args.q)
    varlen = args.is_varlen
    group = args.q.shape[-2] // args.k.shape[-2]
    q = _bhsd(args.q, ct)
    k, v = _expand(_bhsd(args.k, ct), group), _expand(_bhsd(args.v, ct), group)
    sink = args.sink.to(ct) if args.sink is not None else None
    out, lse = _forward(q, k, v, args.scale, _Mask(args, q.device), sink)
    lse = (lse[0] if varlen else lse).to(torch.float32).contiguous()
    return _unbhsd(out, varlen, args.q.dtype), lse


def attention_bwd(args: AttentionBwdArgs):
    reason = _decline(args)
    if reason:
        raise ValueError(f"dropout_p: {reason}")
    ct = _compute_dtype(args.q)
    varlen = args.is_varlen
    group = args.q.shape[-2] // args.k.shape[-2]
    q = _bhsd(args.q, ct)
    k, v = _expand(_bhsd(args.k, ct), group), _expand(_bhsd(args.v, ct), group)
    dout = _bhsd(args.dout, ct)
    lse = args.lse.to(ct)
    lse = lse.unsqueeze(0) if varlen else lse
    sink = args.sink.to(ct) if args.sink is not None else None
    out = _bhsd(args.out, ct)
    dq, dk, dv, dsink = _backward(dout, q, k, v, lse, args.scale, _Mask(args, q.device), sink, out=out)
    dk, dv = _reduce(dk, group), _reduce(dv, group)
    return (_unbhsd(dq, varlen, args.q.dtype), _unbhsd(dk, varlen, args.k.dtype),
            _unbhsd(dv, varlen, args.v.dtype), dsink.to(torch.float32) if dsink is not None else None)


# -- FP8 -----------------------------------------------------------------------------------------

def fake_quant_e4m3_blocks(x: torch.Tensor, block: int = FP8_BLOCK) -> torch.Tensor:
    """Quantize ``x [b, h, s, d]`` to E4M3 per (b, h, ``block`` rows along s) and dequantize (fp32).

    ``scale = amax / 448`` (1 for an all-zero block; NaN for a block holding a NaN, which makes the
    whole block NaN); ``e4m3(clamp(x / scale, -448, 448)) * scale``.
    """
    b, h, s, d = x.shape
    x = x.to(torch.float32)
    pad = (-s) % block
    xp = torch.nn.functional.pad(x, (0, 0, 0, pad)).view(b, h, (s + pad) // block, block, d)
    amax = xp.abs().amax(dim=(-1, -2), keepdim=True)
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / FP8_MAX)
    xq = (xp / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return (xq.to(torch.float32) * scale).view(b, h, s + pad, d)[:, :, :s]


def _quant_p(p: torch.Tensor) -> torch.Tensor:
    return (p.to(torch.float32) * FP8_MAX).clamp(0.0, FP8_MAX).to(torch.float8_e4m3fn).to(p.dtype) / FP8_MAX


def _fp8_inputs(args, ct):
    group = args.q.shape[-2] // args.k.shape[-2]
    q = fake_quant_e4m3_blocks(_bhsd(args.q, torch.float32)).to(ct)
    k = _expand(fake_quant_e4m3_blocks(_bhsd(args.k, torch.float32)).to(ct), group)
    v = _expand(fake_quant_e4m3_blocks(_bhsd(args.v, torch.float32)).to(ct), group)
    return q, k, v, group


def attention_fp8_fwd(args: AttentionFp8FwdArgs) -> tuple[torch.Tensor, torch.Tensor]:
    reason = _decline(args)
    if reason:
        raise ValueError(f"dropout_p: {reason}")
    ct = _compute_dtype(args.q)
    q, k, v, _ = _fp8_inputs(args, ct)
    out, lse = _forward(q, k, v, args.scale, _Mask(args, q.device), None, _quant_p)
    return _unbhsd(out, False, args.q.dtype), lse.to(torch.float32).contiguous()


def attention_fp8_bwd(args: AttentionFp8BwdArgs):
    reason = _decline(args)
    if reason:
        raise ValueError(f"dropout_p: {reason}")
    ct = _compute_dtype(args.q)
    q, k, v, group = _fp8_inputs(args, ct)
    dout = fake_quant_e4m3_blocks(_bhsd(args.dout, torch.float32)).to(ct)
    dq, dk, dv, _ = _backward(dout, q, k, v, args.lse.to(ct), args.scale, _Mask(args, q.device), None, _quant_p)
    dk, dv = _reduce(dk, group), _reduce(dv, group)
    return (_unbhsd(dq, False, args.q.dtype), _unbhsd(dk, False, args.k.dtype), _unbhsd(dv, False, args.v.dtype))


_VARIANTS = ("fp32", "fp16", "bf16", "dense", "varlen", "gqa", "causal", "window", "sink")

KERNELS = [
    Kernel("attention_fwd", BackendType.TORCH, attention_fwd, check=_decline, variants=_VARIANTS, priority=-100),
    Kernel("attention_bwd", BackendType.TORCH, attention_bwd, check=_decline, variants=_VARIANTS, priority=-100),
    Kernel("attention_fp8_fwd", BackendType.TORCH, attention_fp8_fwd, check=_decline,
           variants=("e4m3", "blockwise-64", "dense", "gqa", "causal", "window"), priority=-100),
    Kernel("attention_fp8_bwd", BackendType.TORCH, attention_fp8_bwd, check=_decline,
           variants=("e4m3", "blockwise-64", "dense", "gqa", "causal", "window"), priority=-100),
]
