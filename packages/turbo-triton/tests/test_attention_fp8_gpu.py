"""The TRITON FP8 attention kernels (``attention_fp8_fwd`` / ``attention_fp8_bwd``) compiled, on the
GPU (``@pytest.mark.gpu``; see ``gpu_support``).

``out``, ``dq``, ``dk``, ``dv`` against unquantized float64 attention computed on the GPU (explicit
score matrices per batch and head), as SNR: at least 20 dB, the spec's gate
(``turbo_core.testing.cases.attention.FP8_ATTENTION_SNR_DB``). ``lse``: -inf exactly where float64's
is, and no further from float64's than the TORCH reference's FP8 emulation is (1.25x + 0.01; the
kernel's scores differ from the emulation's fp32 ones by Hopper's reduced-precision FP8 MMA sums, as
``_scaled_mm(use_fast_accum=True)`` does, so an exact match is not expected). Outputs come from
NaN-poisoned memory; the backward run twice is bit-identical.

Why this grid: the issue's B2 H16 S2048 D128 causal and not; odd lengths, s_q != s_kv both ways (rows
that see no key), GQA, a sliding window, head dims 64/80/256 and MLA's 192/128, fp16 and fp32
inputs; and two cases whose 64-row blocks differ in magnitude (each block of q/k times 2^U{-2..0}, of
v/dout times 2^U{-3..3}, per head), where a scale read from the wrong block costs tens of dB.
"""

from __future__ import annotations

import pytest
import torch
from gpu_support import COMPILED, DEV, poison_free_memory

from turbo_core.dispatch.specs.attention import AttentionFp8BwdArgs, AttentionFp8FwdArgs
from turbo_core.reference import attention as ref
from turbo_core.testing.numerics import snr_db

pytestmark = [pytest.mark.gpu, COMPILED]

GATE_DB = 20.0

# name -> (b, s_q, s_k, h_q, h_k, d_qk, d_v, kwargs)
CASES = {
    "b2-h16-s2048-d128-causal": (2, 2048, 2048, 16, 16, 128, 128, dict(causal=True)),
    "b2-h16-s2048-d128-full": (2, 2048, 2048, 16, 16, 128, 128, {}),
    "s1000-gqa8x2-d128-full": (2, 1000, 1000, 8, 2, 128, 128, {}),
    "s333x1001-causal-gqa16x4-d64": (1, 333, 1001, 16, 4, 64, 64, dict(causal=True)),
    "s1001x333-causal-empty-rows": (1, 1001, 333, 4, 4, 128, 128, dict(causal=True)),
    "s4100-swa128-gqa8x1-d64": (1, 4100, 4100, 8, 1, 64, 64, dict(causal=True, window=(128, 0))),
    "s1500-win64-32-d128": (1, 1500, 1500, 4, 2, 128, 128, dict(window=(64, 32))),
    "s2048-causal-d256": (1, 2048, 2048, 4, 2, 256, 256, dict(causal=True)),
    "s1024-mla192x128-causal": (1, 1024, 1024, 8, 8, 192, 128, dict(causal=True)),
    "s777-d80-full": (1, 777, 777, 4, 4, 80, 80, {}),
    "s2048-causal-fp16": (1, 2048, 2048, 8, 8, 128, 128, dict(causal=True, dtype=torch.float16)),
    "s64-causal-fp32": (2, 64, 64, 4, 4, 64, 64, dict(causal=True, dtype=torch.float32)),
    "s2048-causal-blocky": (1, 2048, 2048, 8, 2, 128, 128, dict(causal=True, blocky=True)),
    "s1000x1500-full-blocky-d64": (2, 1000, 1500, 4, 4, 64, 64, dict(blocky=True)),
}


@pytest.fixture(scope="module")
def launch():
    from turbo_triton.attention import fp8_launch

    return fp8_launch


def f64_attention(q, k, v, dout, scale, causal, window):
    """float64 ``out, lse, dq, dk, dv`` of ``[b, s, h, d]`` inputs (GQA by head groups, bottom-right
    masks: query ``i`` sees key ``j`` iff ``i + s_k - s_q - left <= j <= i + s_k - s_q + right``, causal
    sets ``right = 0``, -1 is unbounded; rows that see no key give 0 and lse -inf), per batch and head."""
    b, s_q, h_q, _ = q.shape
    s_k, h_k = k.shape[1], k.shape[2]
    group = h_q // h_k
    i = torch.arange(s_q, device=q.device)[:, None] + (s_k - s_q)
    j = torch.arange(s_k, device=q.device)[None, :]
    left, right = window
    right = 0 if causal else right
    ok = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device)
    if right >= 0:
        ok &= j <= i + right
    if left >= 0:
        ok &= j >= i - left
    f64 = dict(dtype=torch.float64, device=q.device)
    out, lse = torch.zeros(b, s_q, h_q, v.shape[-1], **f64), torch.full((b, h_q, s_q), float("-inf"), **f64)
    dq, dk, dv = torch.zeros(q.shape, **f64), torch.zeros(k.shape, **f64), torch.zeros(v.shape, **f64)
    for bi in range(b):
        for h in range(h_q):
            hk = h // group
            qh, kh, vh, doh = (t[bi, :, x].double() for t, x in ((q, h), (k, hk), (v, hk), (dout, h)))
            s = (qh @ kh.T * scale).masked_fill(~ok, float("-inf"))
            lse_h = torch.logsumexp(s, -1)
            finite = torch.isfinite(lse_h)
            p = torch.where(finite[:, None], torch.exp(s - torch.where(finite, lse_h, 0.0)[:, None]), 0.0)
            out[bi, :, h], lse[bi, h] = p @ vh, lse_h
            dp = doh @ vh.T
            ds = p * (dp - (p * dp).sum(-1, keepdim=True))
            dq[bi, :, h] = ds @ kh * scale
            dk[bi, :, hk] += ds.T @ qh * scale
            dv[bi, :, hk] += p.T @ doh
    return out, lse, dq, dk, dv


def _blocky(x, g, lo, hi):
    """``x [b, s, h, d]`` times ``2**e`` per (batch, 64-row block, head), ``e`` uniform in ``lo..hi``."""
    b, s, h, _ = x.shape
    e = torch.randint(lo, hi + 1, (b, (s + 63) // 64, h, 1), device=DEV, generator=g)
    return x * torch.pow(2.0, e.float()).repeat_interleave(64, dim=1)[:, :s]


@pytest.mark.parametrize("name", list(CASES))
def test_against_float64_and_the_emulation(launch, name):
    b, s_q, s_k, h_q, h_k, d_qk, d_v, kw = CASES[name]
    kw = dict(kw)
    causal, window = kw.pop("causal", False), kw.pop("window", (-1, -1))
    dtype, blocky = kw.pop("dtype", torch.bfloat16), kw.pop("blocky", False)
    g = torch.Generator(device=DEV).manual_seed(0)
    q = torch.randn(b, s_q, h_q, d_qk, device=DEV, generator=g)
    k = torch.randn(b, s_k, h_k, d_qk, device=DEV, generator=g)
    v = torch.randn(b, s_k, h_k, d_v, device=DEV, generator=g)
    dout = torch.randn(b, s_q, h_q, d_v, device=DEV, generator=g)
    if blocky:
        q, k = _blocky(q, g, -2, 0), _blocky(k, g, -2, 0)
        v, dout = _blocky(v, g, -3, 3), _blocky(dout, g, -3, 3)
    q, k, v, dout = (t.to(dtype) for t in (q, k, v, dout))
    fa = AttentionFp8FwdArgs(q, k, v, causal=causal, window_size=window)
    assert launch.can_handle(fa) is None
    poison_free_memory()
    out, lse = launch.attention_fp8_fwd(fa)
    ba = AttentionFp8BwdArgs(dout, q, k, v, out, lse, causal=causal, window_size=window)
    poison_free_memory()
    grads = launch.attention_fp8_bwd(ba)
    again = launch.attention_fp8_bwd(ba)
    for what, a, c in zip(("dq", "dk", "dv"), grads, again, strict=True):
        assert torch.equal(a, c), f"{what}: the backward is not bit-identical across runs"
    w_out, w_lse, *w_grads = f64_attention(q, k, v, dout, d_qk ** -0.5, causal, window)
    e_lse = ref.attention_fp8_fwd(fa)[1]
    for what, got, want in (("out", out, w_out), *zip(("dq", "dk", "dv"), grads, w_grads, strict=True)):
        assert bool(torch.isfinite(got).all()), f"{what}: non-finite elements"
        snr = snr_db(want, got)
        assert snr >= GATE_DB, f"{what}: SNR {snr:.1f} dB against float64, gate {GATE_DB}"
    fin = torch.isfinite(w_lse)
    assert torch.equal(torch.isfinite(lse), fin), "lse: -inf rows differ from float64's"
    if fin.any():
        err = (lse.double()[fin] - w_lse[fin]).abs().max().item()
        emu = (e_lse.double()[fin] - w_lse[fin]).abs().max().item()
        assert err <= 1.25 * emu + 0.01, f"lse: {err:.3g} from float64, the emulation {emu:.3g}"
