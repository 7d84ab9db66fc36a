"""Properties of ``attention_fwd``/``attention_bwd`` (dense and varlen) and ``attention_fp8_fwd``/
``attention_fp8_bwd`` against float64 math (the conformance kit's, ``turbo_core.testing.cases.attention``,
with every head at once) and the conformance gates: out and lse at the input dtype's
tolerance, gradients at it (fp32) or at the normwise gate (bf16/fp16); FP8: SNR >= 20 dB of out and
every gradient against unquantized float64 math.

Drawn: batch 1-3, sequence lengths from 0 (s_q != s_kv both ways: fully masked rows), GQA/MQA
ratios 1-3, head dims from 1 (d_qk != d_v), causal, windows (left-only, right-only, two-sided,
zero-wide), a sink, an explicit ``softmax_scale``, ``deterministic``, bshd / sbhd / bhsd strided
layouts; varlen: 1-3 sequences with empty ones and rows past the last sequence.

FP8 cases stay where the 20 dB gate is a statement about the kernel rather than about E4M3: head
dims from 16, 16 queries and 16 visible keys or more, the default softmax scale or a smaller one
(a sharper softmax, or a dq made of one row, sits near 18 dB from quantizing the inputs alone).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from turbo_core.dispatch.specs.attention import (
    AttentionBwdArgs,
    AttentionFp8BwdArgs,
    AttentionFp8FwdArgs,
    AttentionFwdArgs,
)
from turbo_core.testing.cases.attention import FP8_ATTENTION_SNR_DB, _randn, _visible
from turbo_core.testing.numerics import assert_close_normwise, snr_db
from turbo_core.testing.properties.harness import Property, Target, backward_with_given_out, close, f64
from turbo_core.testing.properties.strategies import FLOAT_DTYPES, dims, generator, offsets, seeds

__all__ = ["PROPERTIES"]

_WINDOW = st.sampled_from((-1, -1, 0, 1, 2, 5))
_FP8_WINDOW = st.sampled_from((-1, -1, 16, 20))


@dataclass(frozen=True)
class AttnCase:
    batch: int  # varlen: the number of sequences
    lens_q: tuple[int, ...]  # dense: (s_q,)
    lens_k: tuple[int, ...]
    extra: int  # varlen: q/k rows past the last sequence
    h_kv: int
    ratio: int  # h_q = ratio * h_kv
    d_qk: int
    d_v: int
    causal: bool
    window: tuple[int, int]
    sink: bool
    scale: float | None
    deterministic: bool
    layout: str  # dense: bshd / sbhd / bhsd; varlen: thd / htd
    dtype: torch.dtype
    seed: int

    @property
    def varlen(self) -> bool:
        return self.layout in ("thd", "htd")


@st.composite
def _cases(draw, max_dim: int, fp8: bool):
    varlen = not fp8 and draw(st.booleans())
    batch = draw(st.integers(1, 2 if fp8 else 3))
    if varlen:
        lens_q = tuple(draw(st.lists(dims(0, max_dim), min_size=batch, max_size=batch)))
        lens_k = tuple(draw(st.lists(dims(0, max_dim), min_size=batch, max_size=batch)))
    elif fp8:  # the 20 dB gate is statistical: 16 queries or more, each seeing 16 keys or more (windows
        # included); one query row over 37 keys gives dq at 18 dB from E4M3 inputs alone
        lens_q, lens_k = (draw(dims(16, max(16, max_dim))),), (draw(dims(16, max(16, max_dim))),)
    else:
        lens_q, lens_k = (draw(dims(0, max_dim)),), (draw(dims(0, max_dim)),)
    # FP8: head dims from 16 (the 20 dB gate is a statement about sums of many E4M3 products; at
    # d_qk = 2 the quantization noise of q.k alone is about -16 dB)
    d_lo, d_hi = (16, max(16, min(64, max_dim // 2))) if fp8 else (1, min(max_dim, 64))
    d_qk = draw(dims(d_lo, d_hi))
    d_v = d_qk if draw(st.booleans()) else draw(dims(d_lo, d_hi))
    return AttnCase(batch, lens_q, lens_k, draw(st.sampled_from((0, 0, 2))) if varlen else 0,
                    draw(st.integers(1, 2 if fp8 else 3)), draw(st.integers(1, 2 if fp8 else 3)), d_qk, d_v,
                    draw(st.booleans()),
                    (draw(_WINDOW), draw(_WINDOW)) if not fp8 else (draw(_FP8_WINDOW), draw(_FP8_WINDOW)),
                    not fp8 and draw(st.booleans()),
                    # FP8: the gate holds for logits of the default scale's size; a larger scale sharpens
                    # the softmax until E4M3's 2**-4 score error moves P by more than 10 %
                    draw(st.one_of(st.none(), st.sampled_from((0.05,) if fp8 else (0.05, 0.3, 1.0)))),
                    draw(st.booleans()),
                    draw(st.sampled_from(("thd", "htd") if varlen else ("bshd", "sbhd", "bhsd"))),
                    draw(st.sampled_from(FLOAT_DTYPES)), draw(seeds()))


def _varlen_tensor(rows: int, heads: int, d: int, dtype, g, layout: str) -> torch.Tensor:
    if layout == "htd":  # head-major storage, still unit stride in d
        return torch.randn(heads, rows, d, generator=g).to(dtype).transpose(0, 1)
    return torch.randn(rows, heads, d, generator=g).to(dtype)


def _inputs(c: AttnCase):
    """(q, k, v, sink, dout) on the CPU, and (out64, lse64) with q/k/v/sink float64 leaves."""
    g = generator(c.seed)
    h_q = c.h_kv * c.ratio
    if c.varlen:
        tq, tk = sum(c.lens_q) + c.extra, sum(c.lens_k) + c.extra
        q = _varlen_tensor(tq, h_q, c.d_qk, c.dtype, g, c.layout)
        k = _varlen_tensor(tk, c.h_kv, c.d_qk, c.dtype, g, c.layout)
        v = _varlen_tensor(tk, c.h_kv, c.d_v, c.dtype, g, c.layout)
        dout = torch.randn(tq, h_q, c.d_v, generator=g).to(c.dtype)
    else:
        s_q, s_kv = c.lens_q[0], c.lens_k[0]
        q = _randn((c.batch, s_q, h_q, c.d_qk), c.dtype, g, c.layout)
        k = _randn((c.batch, s_kv, c.h_kv, c.d_qk), c.dtype, g, c.layout)
        v = _randn((c.batch, s_kv, c.h_kv, c.d_v), c.dtype, g, c.layout)
        dout = torch.randn(c.batch, s_q, h_q, c.d_v, generator=g).to(c.dtype)
    sink = torch.randn(h_q, generator=g) if c.sink else None
    return q, k, v, sink, dout


def _attend(q, k, v, scale: float, causal: bool, window, sink):
    """float64 attention of ``[B, s_q, h_q, d]`` queries over ``[B, s_kv, h_kv, d]`` keys/values, every
    head at once (the conformance kit's per-head loop, ``cases.attention._attend``, batched): out
    ``[B, s_q, h_q, d_v]``, lse ``[B, h_q, s_q]``; a row that sees nothing gives 0 and -inf."""
    ratio = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(ratio, dim=2), v.repeat_interleave(ratio, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    s = s.masked_fill(~_visible(q.shape[1], k.shape[1], causal, window), float("-inf"))
    m = s.amax(dim=-1) if k.shape[1] else s.new_full(s.shape[:-1], float("-inf"))
    if sink is not None:
        m = torch.maximum(m, sink.view(1, -1, 1).expand_as(m))
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    e = torch.exp(s - m.unsqueeze(-1))
    den = e.sum(-1) + (torch.exp(sink.view(1, -1, 1) - m) if sink is not None else 0.0)
    safe = torch.where(den > 0, den, torch.ones_like(den))
    out = torch.einsum("bhqk,bkhd->bqhd", e / safe.unsqueeze(-1), v)
    return out, torch.where(den > 0, torch.log(safe) + m, torch.full_like(m, float("-inf")))


def _reference(c: AttnCase, q, k, v, sink):
    """float64 (out, lse) with autograd leaves (q64, k64, v64, sink64)."""
    leaves = [t.detach().to(torch.float64).requires_grad_() if t is not None else None for t in (q, k, v, sink)]
    q64, k64, v64, s64 = leaves
    scale = c.scale if c.scale is not None else c.d_qk ** -0.5
    if c.varlen:
        outs, lses = [], []
        oq = ok = 0
        for lq, lk in zip(c.lens_q, c.lens_k, strict=True):
            o, lse = _attend(q64[None, oq:oq + lq], k64[None, ok:ok + lk], v64[None, ok:ok + lk], scale, c.causal,
                             c.window, s64)
            outs.append(o[0])
            lses.append(lse[0])
            oq, ok = oq + lq, ok + lk
        h_q = q.shape[1]
        outs.append(torch.zeros(c.extra, h_q, c.d_v, dtype=torch.float64))
        lses.append(torch.full((h_q, c.extra), float("-inf"), dtype=torch.float64))
        out, lse = torch.cat(outs, dim=0), torch.cat(lses, dim=1)
    else:
        out, lse = _attend(q64, k64, v64, scale, c.causal, c.window, s64)
    return out, lse, leaves


def _varlen_fields(c: AttnCase, target: Target) -> dict:
    if not c.varlen:
        return {}
    cu_q = target.put(torch.tensor(offsets(list(c.lens_q)), dtype=torch.int32))
    cu_k = target.put(torch.tensor(offsets(list(c.lens_k)), dtype=torch.int32))
    return {"cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k, "max_seqlen_q": max(c.lens_q), "max_seqlen_k": max(c.lens_k)}


def _flags(c: AttnCase) -> dict:
    return {"softmax_scale": c.scale, "causal": c.causal, "window_size": c.window, "deterministic": c.deterministic}


def _check_grads(dtype, pairs) -> None:
    for what, got, want in pairs:
        if want is None:
            if got is not None:
                raise AssertionError(f"{what}: a gradient where none is expected")
            continue
        if got is None or tuple(got.shape) != tuple(want.shape):
            raise AssertionError(f"{what}: {None if got is None else tuple(got.shape)}, expected {tuple(want.shape)}")
        if dtype == torch.float32:
            close(got, want, dtype, what)
        else:  # flash kernels round P and dS to the input dtype: the normwise gate
            assert_close_normwise(got.detach().cpu(), want, dtype=dtype, what=what)


def _check_fwd(c: AttnCase, target: Target) -> None:
    q, k, v, sink, _ = _inputs(c)
    out64, lse64, _ = _reference(c, q, k, v, sink)
    put = target.put
    out, lse = target.call(AttentionFwdArgs(put(q), put(k), put(v), sink=put(sink), **_varlen_fields(c, target),
                                            **_flags(c)))
    if out.dtype != c.dtype or lse.dtype != torch.float32:
        raise AssertionError(f"attention_fwd: dtypes {out.dtype}/{lse.dtype}, expected {c.dtype}/float32")
    close(out, out64.detach(), c.dtype, "attention_fwd: out")
    close(lse, lse64.detach(), c.dtype, "attention_fwd: lse")


def _check_bwd(c: AttnCase, target: Target) -> None:
    q, k, v, sink, dout = _inputs(c)
    out64, lse64, (q64, k64, v64, s64) = _reference(c, q, k, v, sink)
    out, lse = out64.detach().to(c.dtype), lse64.detach().float()
    backward_with_given_out(out64, lse64, out, dout, lse_transposed=True)
    put = target.put
    args = AttentionBwdArgs(put(dout), put(q), put(k), put(v), put(out), put(lse), sink=put(sink),
                            **_varlen_fields(c, target), **_flags(c))
    dq, dk, dv, dsink = target.call(args)
    for name, t in (("dq", dq), ("dk", dk), ("dv", dv)):
        if t.dtype != c.dtype:
            raise AssertionError(f"attention_bwd: {name} dtype {t.dtype}, expected {c.dtype}")
    _check_grads(c.dtype, [("dq", dq, q64.grad), ("dk", dk, k64.grad), ("dv", dv, v64.grad),
                           ("dsink", dsink, s64.grad if s64 is not None else None)])


def _snr(what: str, pairs) -> None:
    """The FP8 gate over one call's results ``[(name, got, want)]``: the same infinities as float64
    math, and each result's error energy at most -20 dB of its own signal, or, for a result whose
    own signal is under -20 dB of the call's total (a gradient that cancels to about zero, e.g. dq
    when every row sees one key), at most -40 dB of the total. The SNR of a result with no signal
    of its own says nothing about the kernel."""
    total = 0.0
    parts = []
    for name, got, want in pairs:
        if tuple(got.shape) != tuple(want.shape):
            raise AssertionError(f"{what}: {name}: shape {tuple(got.shape)} != expected {tuple(want.shape)}")
        got64, want = f64(got), want.detach().to(torch.float64)
        finite = want.isfinite()
        if not torch.equal(got64.isfinite(), finite) or not torch.equal(got64[~finite], want[~finite]):
            raise AssertionError(f"{what}: {name}: infinities differ from float64 math")
        sig, err = want[finite].pow(2).sum().item(), (got64[finite] - want[finite]).pow(2).sum().item()
        total += sig
        parts.append((name, sig, err, got64[finite], want[finite]))
    floor = 10 ** (-FP8_ATTENTION_SNR_DB / 10)
    for name, sig, err, got64, want in parts:
        if not err <= floor * max(sig, floor * total):
            raise AssertionError(f"{what}: {name}: SNR {snr_db(want, got64):.1f} dB < {FP8_ATTENTION_SNR_DB} dB")


def _check_fp8_lse(c: AttnCase, q, k, lse, lse64) -> None:
    """lse of FP8 attention: -inf exactly where float64 math has it, elsewhere within what E4M3 q
    and k can move the scores (lse is 1-Lipschitz in the max norm of the scores): each element moved
    by at most ``2**-4 |x| + 2**-18 max|x|`` (half an E4M3 step, or the subnormal step of a block
    scaled to 448), so ``|dS_ij| <= scale * sum_d (|q||dk| + |dq||k| + |dq||dk|)``."""
    got = f64(lse)
    if tuple(got.shape) != tuple(lse64.shape):
        raise AssertionError(f"attention_fp8_fwd: lse: shape {tuple(got.shape)} != expected {tuple(lse64.shape)}")
    finite = lse64.isfinite()
    if not torch.equal(got.isfinite(), finite) or not torch.equal(got[~finite], lse64[~finite]):
        raise AssertionError("attention_fp8_fwd: lse: infinities differ from float64 math")
    if not finite.any():
        return
    q64, k64 = q.double().abs(), k.double().abs()
    dq, dk = q64 * 2.0**-4 + q64.max() * 2.0**-18, k64 * 2.0**-4 + k64.max() * 2.0**-18
    k64, dk = (t.repeat_interleave(c.ratio, dim=2) for t in (k64, dk))
    scale = c.scale if c.scale is not None else c.d_qk ** -0.5

    def dots(a, b):  # [b, s_q, h, d] x [b, s_kv, h, d] -> [b, h, s_q, s_kv]
        return torch.einsum("bqhd,bkhd->bhqk", a, b)

    bound = scale * (dots(q64, dk) + dots(dq, k64) + dots(dq, dk))
    bound = bound.amax(-1) if bound.shape[-1] else torch.zeros(bound.shape[:-1], dtype=torch.float64)
    err = (got - lse64).abs()[finite]
    allowed = (bound[finite] * 1.01 + 1e-5 * (1 + lse64[finite].abs()))
    if not bool((err <= allowed).all()):
        worst = int((err - allowed).argmax())
        raise AssertionError(f"attention_fp8_fwd: lse: off by {float(err[worst]):.3g} where E4M3 q and k allow "
                             f"{float(allowed[worst]):.3g}")


def _check_fp8_fwd(c: AttnCase, target: Target) -> None:
    q, k, v, _, _ = _inputs(c)
    out64, lse64, _ = _reference(c, q, k, v, None)
    put = target.put
    out, lse = target.call(AttentionFp8FwdArgs(put(q), put(k), put(v), **_flags(c)))
    if out.dtype != c.dtype or lse.dtype != torch.float32:
        raise AssertionError(f"attention_fp8_fwd: dtypes {out.dtype}/{lse.dtype}, expected {c.dtype}/float32")
    _snr("attention_fp8_fwd", [("out", out, out64)])
    _check_fp8_lse(c, q, k, lse, lse64.detach())


def _check_fp8_bwd(c: AttnCase, target: Target) -> None:
    q, k, v, _, dout = _inputs(c)
    out64, _, (q64, k64, v64, _) = _reference(c, q, k, v, None)
    out64.backward(dout.double())
    put = target.put
    fwd = AttentionFp8FwdArgs(put(q), put(k), put(v), **_flags(c))
    out, lse = Target(target.backend, target.device, "attention_fp8_fwd").call(fwd)  # the forward it pairs with
    dq, dk, dv = target.call(AttentionFp8BwdArgs(put(dout), fwd.q, fwd.k, fwd.v, out, lse, **_flags(c)))
    _snr("attention_fp8_bwd", [("dq", dq, q64.grad), ("dk", dk, k64.grad), ("dv", dv, v64.grad)])


PROPERTIES = [
    Property("attention_fwd", lambda d: _cases(d, False), _check_fwd),
    Property("attention_bwd", lambda d: _cases(d, False), _check_bwd),
    Property("attention_fp8_fwd", lambda d: _cases(d, True), _check_fp8_fwd),
    Property("attention_fp8_bwd", lambda d: _cases(d, True), _check_fp8_bwd),
]
