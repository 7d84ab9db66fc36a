"""Conformance cases for ``flash_attn_func``, ``flash_attn_varlen_func`` and ``flash_attn_fp8_func``:
forward (out, lse) and backward (dq, dk, dv, dsink) against float64 math written here, independently
of the reference backend (per-head loops, masks from ``tril``/``triu``, gradients by autograd).

Why this grid: tile edges break at odd sizes (s=37, s=13/29, d=24), decode has s_q=1, bottom-right
causal alignment differs from top-left only when s_q != s_kv (both directions; s_q > s_kv leaves
fully masked rows: out 0, lse -inf), GQA/MQA map heads 4->2 and 3->1, d_qk != d_v (24/16) is the
MLA-style split, windows cover left-only (5, 0) and two-sided (3, 2), the sink joins the
denominator, strided sbhd/bhsd views must give q's layout back, and varlen packs 3 sequences of
lengths 1, 7, 13 (also against other key lengths and with an empty sequence).
"""

from __future__ import annotations

import functools
import itertools

import torch

from turbo_core.ops import flash_attn_fp8_func, flash_attn_func, flash_attn_varlen_func
from turbo_core.testing.case import Case
from turbo_core.testing.numerics import assert_close_normwise, assert_close_to_reference, snr_db

#: FP8 attention gate (Primus-Turbo's): SNR of out, dq, dk, dv against unquantized float64 math.
FP8_ATTENTION_SNR_DB = 20.0

# (b, s_q, s_kv, h_q, h_kv, d_qk, d_v)
DENSE_SHAPES = [
    (2, 37, 37, 4, 2, 16, 16),
    (1, 1, 37, 3, 1, 24, 24),
    (3, 13, 29, 4, 2, 24, 16),
    (2, 29, 13, 3, 1, 16, 16),
]
# name -> (causal, window_size, sink)
MASKS = {
    "full": (False, (-1, -1), False),
    "causal": (True, (-1, -1), False),
    "win5-0": (False, (5, 0), False),
    "win3-2": (False, (3, 2), False),
    "sink": (False, (-1, -1), True),
    "causal-sink": (True, (-1, -1), True),
    "causal-win3-sink": (True, (3, -1), True),
}
# (q lengths, k lengths)
VARLEN = [((1, 7, 13), (1, 7, 13)), ((1, 7, 13), (3, 7, 11)), ((4, 0, 6), (0, 3, 6))]


# -- independent float64 math --------------------------------------------------------------------

def _visible(s_q: int, s_kv: int, causal: bool, window: tuple[int, int]) -> torch.Tensor:
    """bool [s_q, s_kv]: key j is visible from query i (bottom-right aligned diagonal)."""
    left, right = window
    if causal:
        right = 0
    vis = torch.ones(s_q, s_kv, dtype=torch.bool)
    if right >= 0:
        vis = vis.tril(diagonal=s_kv - s_q + right)
    if left >= 0:
        vis = vis.triu(diagonal=s_kv - s_q - left)
    return vis


def _attend(q, k, v, scale, causal, window, sink):
    """One sequence: q [s_q, h_q, d], k/v [s_kv, h_kv, d] (float64) -> out [s_q, h_q, d_v], lse [h_q, s_q]."""
    s_q, h_q, _ = q.shape
    s_kv, h_kv, _ = k.shape
    vis = _visible(s_q, s_kv, causal, window)
    outs, lses = [], []
    for h in range(h_q):
        g = h // (h_q // h_kv)
        scores = (q[:, h] @ k[:, g].t()) * scale
        scores = scores.masked_fill(~vis, float("-inf"))
        m = scores.max(dim=-1).values if s_kv else scores.new_full((s_q,), float("-inf"))
        if sink is not None:
            m = torch.maximum(m, sink[h].expand(s_q))
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
        e = torch.exp(scores - m[:, None])
        den = e.sum(-1) + (torch.exp(sink[h] - m) if sink is not None else 0.0)
        den_safe = torch.where(den > 0, den, torch.ones_like(den))
        outs.append((e @ v[:, g]) / den_safe[:, None])
        lses.append(torch.where(den > 0, torch.log(den_safe) + m, torch.full_like(m, float("-inf"))))
    out = torch.stack(outs, dim=1) if outs else q.new_zeros(s_q, 0, v.shape[-1])
    return out, torch.stack(lses, dim=0)


def dense_reference(q, k, v, scale, causal, window, sink):
    """Dense float64 attention: out [b, s_q, h_q, d_v], lse [b, h_q, s_q]."""
    res = [_attend(q[i], k[i], v[i], scale, causal, window, sink) for i in range(q.shape[0])]
    return torch.stack([r[0] for r in res]), torch.stack([r[1] for r in res])


def varlen_reference(q, k, v, lens_q, lens_k, scale, causal, window, sink):
    """Packed float64 attention: out [total_q, h_q, d_v], lse [h_q, total_q]."""
    outs, lses = [], []
    oq = ok = 0
    for lq, lk in zip(lens_q, lens_k, strict=True):
        o, lse = _attend(q[oq:oq + lq], k[ok:ok + lk], v[ok:ok + lk], scale, causal, window, sink)
        outs.append(o)
        lses.append(lse)
        oq, ok = oq + lq, ok + lk
    return torch.cat(outs, dim=0), torch.cat(lses, dim=1)


# -- cases ---------------------------------------------------------------------------------------

def _randn(shape, dtype, gen, layout="bshd"):
    """A tensor of logical shape ``shape`` ([b, s, h, d]) stored as ``layout``."""
    if layout == "sbhd":
        b, s, h, d = shape
        return torch.randn(s, b, h, d, generator=gen).to(dtype).transpose(0, 1)
    if layout == "bhsd":
        b, s, h, d = shape
        return torch.randn(b, h, s, d, generator=gen).to(dtype).transpose(1, 2)
    return torch.randn(*shape, generator=gen).to(dtype)


def _leaves64(*tensors):
    return [t.detach().to(torch.float64).requires_grad_() if t is not None else None for t in tensors]


def _check_grads(dtype, pairs) -> None:
    for what, got, want in pairs:
        if want is None:
            continue
        assert got is not None, f"{what}: no gradient"
        assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
        if dtype == torch.float32:
            assert_close_to_reference(got.cpu(), want, dtype=dtype, what=what)
        else:  # flash kernels round P and dS to the input dtype: normwise gate (see numerics)
            assert_close_normwise(got.cpu(), want, dtype=dtype, what=what)


def _memory_order(t: torch.Tensor) -> list[int]:
    return sorted(range(t.dim()), key=lambda i: (-t.stride(i), i))


def _run_dense(shape, mask, dtype, layout="bshd", seed=0, *, device="cpu"):
    """Inputs drawn on the CPU, the op on ``device``, float64 math and comparisons on the CPU."""
    b, s_q, s_kv, h_q, h_kv, d_qk, d_v = shape
    causal, window, with_sink = MASKS[mask]
    gen = torch.Generator().manual_seed(seed)
    q = _randn((b, s_q, h_q, d_qk), dtype, gen, layout)
    k = _randn((b, s_kv, h_kv, d_qk), dtype, gen, layout)
    v = _randn((b, s_kv, h_kv, d_v), dtype, gen, layout)
    sink = torch.randn(h_q, generator=gen) if with_sink else None
    dout = torch.randn(b, s_q, h_q, d_v, generator=gen).to(dtype)
    scale = 0.3 if mask == "full" else None  # an explicit scale once, the default d^-0.5 elsewhere

    q64, k64, v64, sink64 = _leaves64(q, k, v, sink)
    out64, lse64 = dense_reference(q64, k64, v64, scale if scale is not None else d_qk ** -0.5,
                                   causal, window, sink64)
    out64.backward(dout.double())

    q, k, v = (t.detach().to(device).requires_grad_() for t in (q, k, v))
    sink = sink.detach().to(device).requires_grad_() if sink is not None else None
    out, lse = flash_attn_func(q, k, v, softmax_scale=scale, causal=causal, window_size=window,
                               return_lse=True, sink=sink)
    assert out.dtype == dtype and lse.dtype == torch.float32, (out.dtype, lse.dtype)
    assert tuple(lse.shape) == (b, h_q, s_q), f"lse: shape {tuple(lse.shape)}"
    assert _memory_order(out) == _memory_order(q) or q.is_contiguous(), "out: not in q's memory order"
    assert_close_to_reference(out.cpu(), out64, dtype=dtype, what="out")
    assert_close_to_reference(lse.cpu(), lse64, dtype=dtype, what="lse")
    out.backward(dout.to(device))
    _check_grads(dtype, [("dq", q.grad, q64.grad), ("dk", k.grad, k64.grad), ("dv", v.grad, v64.grad),
                         ("dsink", sink.grad if sink is not None else None,
                          sink64.grad if sink64 is not None else None)])


def _cu(lengths):
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)


def _run_varlen(lens_q, lens_k, heads, mask, dtype, seed=0, *, device="cpu"):
    """Inputs drawn on the CPU, the op on ``device``, float64 math and comparisons on the CPU."""
    h_q, h_kv = heads
    d_qk, d_v = 24, 16
    causal, window, with_sink = MASKS[mask]
    gen = torch.Generator().manual_seed(seed)
    tq, tk = sum(lens_q), sum(lens_k)
    q = torch.randn(tq, h_q, d_qk, generator=gen).to(dtype)
    k = torch.randn(tk, h_kv, d_qk, generator=gen).to(dtype)
    v = torch.randn(tk, h_kv, d_v, generator=gen).to(dtype)
    sink = torch.randn(h_q, generator=gen) if with_sink else None
    dout = torch.randn(tq, h_q, d_v, generator=gen).to(dtype)

    q64, k64, v64, sink64 = _leaves64(q, k, v, sink)
    out64, lse64 = varlen_reference(q64, k64, v64, lens_q, lens_k, d_qk ** -0.5, causal, window, sink64)
    out64.backward(dout.double())

    q, k, v = (t.detach().to(device).requires_grad_() for t in (q, k, v))
    sink = sink.detach().to(device).requires_grad_() if sink is not None else None
    cu_q, cu_k = _cu(lens_q).to(device), _cu(lens_k).to(device)
    out, lse = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k),
                                      causal=causal, window_size=window, return_lse=True, sink=sink)
    assert tuple(lse.shape) == (h_q, tq), f"lse: shape {tuple(lse.shape)}"
    assert_close_to_reference(out.cpu(), out64, dtype=dtype, what="out")
    assert_close_to_reference(lse.cpu(), lse64, dtype=dtype, what="lse")
    out.backward(dout.to(device))
    _check_grads(dtype, [("dq", q.grad, q64.grad), ("dk", k.grad, k64.grad), ("dv", v.grad, v64.grad),
                         ("dsink", sink.grad if sink is not None else None,
                          sink64.grad if sink64 is not None else None)])


def _run_fp8(shape, mask, dtype, seed=0, *, device="cpu"):
    """Inputs drawn on the CPU, the op on ``device``, float64 math and comparisons on the CPU."""
    b, s_q, s_kv, h_q, h_kv, d_qk, d_v = shape
    causal, window, _ = MASKS[mask]
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, s_q, h_q, d_qk, generator=gen).to(dtype)
    k = torch.randn(b, s_kv, h_kv, d_qk, generator=gen).to(dtype)
    v = torch.randn(b, s_kv, h_kv, d_v, generator=gen).to(dtype)
    dout = torch.randn(b, s_q, h_q, d_v, generator=gen).to(dtype)

    q64, k64, v64 = _leaves64(q, k, v)
    out64, _ = dense_reference(q64, k64, v64, d_qk ** -0.5, causal, window, None)
    out64.backward(dout.double())

    q, k, v = (t.detach().to(device).requires_grad_() for t in (q, k, v))
    out = flash_attn_fp8_func(q, k, v, causal=causal, window_size=window)
    assert out.dtype == dtype and out.shape == out64.shape
    out.backward(dout.to(device))
    for what, got, want in (("out", out, out64), ("dq", q.grad, q64.grad), ("dk", k.grad, k64.grad),
                            ("dv", v.grad, v64.grad)):
        snr = snr_db(want, got.cpu())
        assert snr >= FP8_ATTENTION_SNR_DB, f"{what}: SNR {snr:.1f} dB < {FP8_ATTENTION_SNR_DB} dB"


def _shape_id(shape) -> str:
    b, s_q, s_kv, h_q, h_kv, d_qk, d_v = shape
    return f"b{b}-sq{s_q}-skv{s_kv}-h{h_q}x{h_kv}-d{d_qk}x{d_v}"


_PRIMS = ("attention_fwd", "attention_bwd")
_FP8_PRIMS = ("attention_fp8_fwd", "attention_fp8_bwd")

CASES = [
    Case(f"attn-{_shape_id(shape)}-{mask}-{str(dt)[6:]}", _PRIMS, functools.partial(_run_dense, shape, mask, dt))
    for shape, mask, dt in itertools.product(DENSE_SHAPES, MASKS, [torch.float32, torch.bfloat16])
] + [
    Case(f"attn-{_shape_id(DENSE_SHAPES[2])}-{mask}-float16", _PRIMS,
         functools.partial(_run_dense, DENSE_SHAPES[2], mask, torch.float16))
    for mask in ("causal", "win3-2", "causal-sink")
] + [
    Case(f"attn-{layout}-{_shape_id(DENSE_SHAPES[2])}-causal-sink-{str(dt)[6:]}", _PRIMS,
         functools.partial(_run_dense, DENSE_SHAPES[2], "causal-sink", dt, layout))
    for layout, dt in itertools.product(("sbhd", "bhsd"), [torch.float32, torch.bfloat16])
] + [
    Case(f"attn-varlen-q{'_'.join(map(str, lq))}-k{'_'.join(map(str, lk))}-h{hq}x{hkv}-{mask}-{str(dt)[6:]}",
         _PRIMS, functools.partial(_run_varlen, lq, lk, (hq, hkv), mask, dt))
    for (lq, lk), (hq, hkv), mask, dt in itertools.product(
        VARLEN, [(4, 2), (3, 1)], ("full", "causal", "win3-2", "causal-sink"), [torch.float32, torch.bfloat16])
] + [
    Case(f"attn-fp8-{_shape_id(shape)}-{mask}-bfloat16", _FP8_PRIMS,
         functools.partial(_run_fp8, shape, mask, torch.bfloat16))
    for shape, mask in [((2, 70, 70, 4, 2, 64, 64), "full"), ((2, 70, 70, 4, 2, 64, 64), "causal"),
                        ((1, 37, 130, 3, 1, 32, 32), "win5-0"), ((2, 29, 13, 3, 1, 16, 16), "causal")]
]
