"""Conformance cases for ``sparse_mla_func``: forward (out, lse) and backward (dq, dkv, dsink) against
float64 math written here, independently of the reference backend: dense scores over every row of
``kv``, each row weighted by how many valid slots of the token select it (``log(count)`` added to
its logit, ``-inf`` for rows not selected), gradients by autograd.

Why this grid: tiles break at odd sizes (T = 7, 5 heads, topk = 7, 13 rows); the rope part is
present (24/16), narrow and not a power of two (20/16), or absent (16/16, keys = values); a tiny
copy of DeepSeek-V3.2's 576/512 layout runs the production head dims; index rows mix ``-1``
padding and out-of-range entries, hold only invalid entries (out 0, lse -inf; with a sink lse is
the sink), and repeat an index (each occurrence counts); the sink joins the denominator; an
explicit scale; ``kv`` as ``[num_kv, 1, d_qk]`` and ``[num_kv, d_qk]``; int64 indices.
"""

from __future__ import annotations

import functools
import itertools

import torch

from turbo_core.ops import sparse_mla_func
from turbo_core.testing.case import Case
from turbo_core.testing.numerics import assert_close_normwise, assert_close_to_reference

# (T, H, num_kv, topk, d_qk, kv_lora_rank)
SHAPES = {
    "t7-h4-n13-k8-d24x16": (7, 4, 13, 8, 24, 16),
    "t5-h5-n9-k7-d20x16": (5, 5, 9, 7, 20, 16),
    "t4-h2-n6-k5-d16x16": (4, 2, 6, 5, 16, 16),
    "dsv32-t3-h2-n11-k8-d576x512": (3, 2, 11, 8, 576, 512),
}
# name -> (index pattern, sink, explicit scale, 2-D kv, int64 indices)
VARIANTS = {
    "plain": ("full", False, False, False, False),
    "invalid": ("invalid", False, False, True, False),
    "empty-rows": ("empty", False, True, False, True),
    "sink": ("invalid", True, False, False, False),
    "sink-empty-rows": ("empty", True, False, True, False),
    "repeats": ("repeats", False, False, False, False),
}


def make_indices(t: int, num_kv: int, topk: int, pattern: str, gen: torch.Generator) -> torch.Tensor:
    """int64 ``[t, topk]``: ``full`` (distinct valid rows), ``invalid`` (``-1`` padding in a third of
    the slots, and one entry past ``num_kv``), ``empty`` (``invalid``, with rows 0 and ``t - 1`` all
    ``-1``), ``repeats`` (valid rows drawn with repetition)."""
    if pattern == "repeats":
        return torch.randint(0, num_kv, (t, topk), generator=gen)
    rows = torch.stack([torch.randperm(num_kv, generator=gen)[:topk] for _ in range(t)]) if t else \
        torch.zeros(0, topk, dtype=torch.int64)
    if rows.shape[1] < topk:
        rows = torch.cat([rows, rows.new_full((t, topk - rows.shape[1]), -1)], dim=1)
    if pattern == "full":
        return rows
    pad = torch.rand(t, topk, generator=gen) < 1 / 3
    rows = rows.masked_fill(pad, -1)
    if t and topk:
        rows[t // 2, 0] = num_kv + 3  # outside [0, num_kv): selects nothing
    if pattern == "empty" and t:
        rows[0] = -1
        rows[t - 1] = -1
    return rows


def causal_topk_indices(tokens: int, num_kv: int, topk: int, gen: torch.Generator) -> torch.Tensor:
    """int32 ``[tokens, topk]`` like DeepSeek-V3.2's indexer output over a causal prefix: token ``t``
    (the last ``tokens`` of ``num_kv`` positions) selects ``topk`` distinct random rows among the
    ``num_kv - tokens + t + 1`` it may see, or all of them followed by ``-1`` padding when there are
    fewer. On ``gen``'s device."""
    device = gen.device
    pos = torch.arange(tokens, device=device)[:, None] + (num_kv - tokens)
    scores = torch.rand(tokens, num_kv, generator=gen, device=device)
    scores = scores.masked_fill(torch.arange(num_kv, device=device)[None, :] > pos, -1.0)
    k = min(topk, num_kv)
    top, rows = scores.topk(k, dim=1)
    rows = torch.where(top >= 0, rows, -1)
    if k < topk:
        rows = torch.cat([rows, rows.new_full((tokens, topk - k), -1)], dim=1)
    return rows.to(torch.int32)


def counts(idx: torch.Tensor, num_kv: int) -> torch.Tensor:
    """float64 ``[t, num_kv]``: how many valid slots of each token select each row."""
    valid = (idx >= 0) & (idx < num_kv)
    out = torch.zeros(idx.shape[0], num_kv + 1, dtype=torch.float64)
    out.scatter_add_(1, torch.where(valid, idx, num_kv).long(), torch.ones_like(idx, dtype=torch.float64))
    return out[:, :num_kv]


def reference(q, kv, idx, sink, kv_lora_rank: int, scale: float):
    """float64 ``(out [T, H, kv_lora_rank], lse [T, H])`` from ``q [T, H, d]``, ``kv [num_kv, d]``
    (autograd flows to q, kv and sink)."""
    t, h, _ = q.shape
    num_kv = kv.shape[0]
    c = counts(idx, num_kv)
    logits = torch.einsum("thd,nd->thn", q, kv) * scale
    logw = torch.where(c > 0, torch.log(torch.where(c > 0, c, torch.ones_like(c))), float("-inf"))
    logits = torch.where((c > 0)[:, None, :], logits + logw[:, None, :], float("-inf"))
    if sink is not None:
        logits = torch.cat([logits, sink.view(1, h, 1).expand(t, h, 1)], dim=-1)
    m = logits.amax(-1) if logits.shape[-1] else logits.new_full((t, h), float("-inf"))
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    e = torch.exp(logits - m[..., None])
    den = e.sum(-1)
    safe = torch.where(den > 0, den, torch.ones_like(den))
    p = (e / safe[..., None])[..., :num_kv]
    out = p @ kv[:, :kv_lora_rank]
    lse = torch.where(den > 0, torch.log(safe) + m, torch.full_like(m, float("-inf")))
    return out, lse


def gathered_reference(q, kv, idx, sink, dout, kv_lora_rank: int, scale: float, *, block: int = 16):
    """float64 ``(out, lse, dq, dkv, dsink | None)`` on the inputs' device, by the spec's formula:
    ``block`` tokens at a time, each token's rows of ``kv [num_kv, d_qk]`` gathered by index (for
    shapes too large for :func:`reference`'s dense scores; ``dout=None`` skips the gradients, which
    are then ``None``). ``delta = rowsum(dout * out)`` uses the float64 ``out``."""
    t, h, d = q.shape
    dev = q.device
    kv64 = kv.double()
    num_kv = kv64.shape[0]
    f64 = dict(dtype=torch.float64, device=dev)
    out, lse = torch.zeros(t, h, kv_lora_rank, **f64), torch.full((t, h), float("-inf"), **f64)
    grads = dout is not None
    dq, dkv = (torch.zeros(t, h, d, **f64), torch.zeros(num_kv, d, **f64)) if grads else (None, None)
    s64 = sink.double() if sink is not None else None
    dsink = torch.zeros(h, **f64) if grads and sink is not None else None
    for r0 in range(0, t, block):
        r1 = min(r0 + block, t)
        ix = idx[r0:r1].long()
        valid = (ix >= 0) & (ix < num_kv)
        safe = torch.where(valid, ix, 0)
        keys = kv64[safe] * valid[..., None] if num_kv else torch.zeros(*ix.shape, d, **f64)
        qb = q[r0:r1].double()
        s = torch.einsum("nhd,nkd->nhk", qb, keys) * scale
        s = s.masked_fill(~valid[:, None, :], float("-inf"))
        lb = torch.logsumexp(s, -1) if s.shape[-1] else torch.full(s.shape[:-1], float("-inf"), **f64)
        if s64 is not None:
            lb = torch.logaddexp(lb, s64.expand_as(lb))
        fin = torch.where(torch.isinf(lb), 0.0, lb)
        p = torch.exp(s - fin[..., None])
        o = torch.einsum("nhk,nkd->nhd", p, keys[..., :kv_lora_rank])
        out[r0:r1], lse[r0:r1] = o, lb
        if not grads:
            continue
        do = dout[r0:r1].double()
        dp = torch.einsum("nhd,nkd->nhk", do, keys[..., :kv_lora_rank])
        delta = (o * do).sum(-1, keepdim=True)
        ds = p * (dp - delta)
        dq[r0:r1] = torch.einsum("nhk,nkd->nhd", ds, keys) * scale
        part = torch.einsum("nhk,nhd->nkd", ds, qb) * scale
        part[..., :kv_lora_rank] += torch.einsum("nhk,nhd->nkd", p, do)
        if num_kv:
            dkv.index_add_(0, safe.reshape(-1), (part * valid[..., None]).reshape(-1, d))
        if dsink is not None:
            dsink -= (torch.where(torch.isinf(lb), 0.0, torch.exp(s64 - fin)) * delta[..., 0]).sum(0)
    return out, lse, dq, dkv, dsink


def _check(dtype, what, got, want, normwise: bool) -> None:
    assert got is not None, f"{what}: no gradient"
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if normwise and dtype != torch.float32:  # P and dS are rounded to the input dtype: the normwise gate
        assert_close_normwise(got.cpu(), want, dtype=dtype, what=what)
    else:
        assert_close_to_reference(got.cpu(), want, dtype=dtype, what=what)


def run_case(shape, variant: str, dtype: torch.dtype, seed: int = 0, *, device="cpu") -> None:
    """Inputs drawn on the CPU, the op on ``device``, float64 math and comparisons on the CPU."""
    t, h, num_kv, topk, d_qk, rank = shape
    pattern, with_sink, with_scale, flat_kv, wide_idx = VARIANTS[variant]
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(t, h, d_qk, generator=gen).to(dtype)
    kv = torch.randn(num_kv, d_qk, generator=gen).to(dtype)
    idx = make_indices(t, num_kv, topk, pattern, gen)
    sink = torch.randn(h, generator=gen) if with_sink else None
    dout = torch.randn(t, h, rank, generator=gen).to(dtype)
    scale = 0.11 if with_scale else None

    q64, kv64 = (x.double().requires_grad_() for x in (q, kv))
    s64 = sink.double().requires_grad_() if sink is not None else None
    out64, lse64 = reference(q64, kv64, idx, s64, rank, scale if scale is not None else d_qk ** -0.5)
    out64.backward(dout.double())

    qd = q.to(device).requires_grad_()
    kv_in = kv if flat_kv else kv.unsqueeze(1)
    kvd = kv_in.to(device).requires_grad_()
    sd = sink.to(device).requires_grad_() if sink is not None else None
    idx_d = (idx if wide_idx else idx.to(torch.int32)).to(device)
    out, lse = sparse_mla_func(qd, kvd, idx_d, sd, kv_lora_rank=rank, scale=scale, return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32, (out.dtype, lse.dtype)
    assert tuple(lse.shape) == (t, h), f"lse: shape {tuple(lse.shape)}"
    assert_close_to_reference(out.cpu(), out64, dtype=dtype, what="out")
    assert_close_to_reference(lse.cpu(), lse64, dtype=dtype, what="lse")
    out.backward(dout.to(device))
    _check(dtype, "dq", qd.grad, q64.grad, True)
    dkv = kvd.grad
    assert dkv is not None and tuple(dkv.shape) == tuple(kv_in.shape), "dkv: not kv's shape"
    _check(dtype, "dkv", dkv.reshape(num_kv, d_qk), kv64.grad, True)
    if sink is not None:
        _check(dtype, "dsink", sd.grad, s64.grad, True)


_PRIMS = ("sparse_mla_fwd", "sparse_mla_bwd")

CASES = [
    Case(f"sparse-mla-{name}-{variant}-{str(dt)[6:]}", _PRIMS, functools.partial(run_case, shape, variant, dt))
    for (name, shape), variant, dt in itertools.product(SHAPES.items(), VARIANTS, [torch.float32, torch.bfloat16])
    if not (name.startswith("dsv32") and variant in ("repeats", "plain"))
] + [
    Case("sparse-mla-t7-h4-n13-k8-d24x16-sink-float16", _PRIMS,
         functools.partial(run_case, SHAPES["t7-h4-n13-k8-d24x16"], "sink", torch.float16)),
]
