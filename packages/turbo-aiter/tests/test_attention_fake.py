"""turbo-aiter's attention adapters end to end on the CPU over a fake aiter (float64 math with
aiter's preconditions: head dims a multiple of 8, fp16/bf16, contiguous last dim), checked against
turbo's reference backend. What this proves: the padding, argument order, mask translation and
LSE/row conventions of the adapter; not that aiter's kernels compute what their sources say."""

from __future__ import annotations

import pytest
import torch

from turbo_aiter import attention
from turbo_core.dispatch.specs.attention import AttentionBwdArgs, AttentionFwdArgs
from turbo_core.reference import attention as ref
from turbo_core.testing.numerics import assert_close_to_reference

DT = torch.float16


def _t(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(DT)


# Head dims 5 and 12 need padding (to 8 and 16), 16 does not; GQA 4:2 and MHA; causal with
# s_q > s_kv (rows that see nothing) and s_q < s_kv; a sliding window on both sides.
CASES = [
    dict(d=5, dv=5, hq=4, hkv=2, sq=7, skv=9, causal=False, window=(-1, -1)),
    dict(d=12, dv=5, hq=2, hkv=2, sq=9, skv=6, causal=True, window=(-1, -1)),
    dict(d=16, dv=16, hq=2, hkv=1, sq=6, skv=6, causal=False, window=(2, 1)),
    dict(d=8, dv=12, hq=2, hkv=2, sq=5, skv=8, causal=True, window=(3, -1)),
]


@pytest.mark.parametrize("c", CASES, ids=lambda c: f"d{c['d']}-dv{c['dv']}-c{int(c['causal'])}-w{c['window']}")
@pytest.mark.parametrize("deterministic", [False, True])
def test_dense_fwd_bwd_match_reference(fake, c, deterministic):
    b = 2
    q = _t(b, c["sq"], c["hq"], c["d"], seed=1)
    k = _t(b, c["skv"], c["hkv"], c["d"], seed=2)
    v = _t(b, c["skv"], c["hkv"], c["dv"], seed=3)
    fa = AttentionFwdArgs(q, k, v, causal=c["causal"], window_size=c["window"], deterministic=deterministic)
    out, lse = attention.attention_fwd(fa)
    rout, rlse = ref.attention_fwd(fa)
    assert out.shape == rout.shape and out.dtype == DT and out.is_contiguous()
    assert lse.shape == (b, c["hq"], c["sq"]) and lse.dtype == torch.float32
    assert_close_to_reference(out, rout, dtype=DT)
    assert torch.equal(torch.isinf(lse), torch.isinf(rlse))
    fin = torch.isfinite(rlse)
    torch.testing.assert_close(lse[fin], rlse[fin], rtol=1e-4, atol=1e-4)
    name, call = fake.calls[-1]
    assert name == "mha_fwd" and call[0].shape[-1] % 8 == 0
    assert call[4] == pytest.approx(c["d"] ** -0.5)  # the unpadded head dim's default scale

    dout = _t(*out.shape, seed=4)
    ba = AttentionBwdArgs(dout, q, k, v, out, lse, causal=c["causal"], window_size=c["window"],
                          deterministic=deterministic)
    dq, dk, dv, dsink = attention.attention_bwd(ba)
    rdq, rdk, rdv, _ = ref.attention_bwd(ba)
    assert dsink is None
    for got, want, like in ((dq, rdq, q), (dk, rdk, k), (dv, rdv, v)):
        assert got.shape == like.shape and got.dtype == like.dtype
        assert_close_to_reference(got, want, dtype=DT)
    name, call = fake.calls[-1]
    assert name == "mha_bwd" and call[11] is deterministic


def test_varlen_fwd_bwd_and_unowned_rows(fake):
    # Three sequences (one of length 0 in q) in 12 packed query rows, 2 of them past cu_q[-1]:
    # the fake leaves those as 777 (aiter never writes them); turbo wants out 0, lse -inf, dq 0.
    cu_q = torch.tensor([0, 4, 4, 10], dtype=torch.int32)
    cu_k = torch.tensor([0, 3, 8, 13], dtype=torch.int32)
    q, k, v = _t(12, 2, 6, seed=5), _t(14, 1, 6, seed=6), _t(14, 1, 6, seed=7)
    fa = AttentionFwdArgs(q, k, v, cu_q, cu_k, 6, 5, causal=True)
    out, lse = attention.attention_fwd(fa)
    rout, rlse = ref.attention_fwd(fa)
    assert lse.shape == (2, 12)
    assert torch.all(out[10:] == 0) and torch.all(lse[:, 10:] == float("-inf"))
    assert_close_to_reference(out, rout, dtype=DT)
    fin = torch.isfinite(rlse)
    assert torch.equal(fin, torch.isfinite(lse))
    torch.testing.assert_close(lse[fin], rlse[fin], rtol=1e-4, atol=1e-4)
    dout = _t(*out.shape, seed=8)
    ba = AttentionBwdArgs(dout, q, k, v, out, lse, cu_q, cu_k, 6, 5, causal=True)
    dq, dk, dv, _ = attention.attention_bwd(ba)
    rdq, rdk, rdv, _ = ref.attention_bwd(ba)
    assert torch.all(dq[10:] == 0) and torch.all(dk[13:] == 0) and torch.all(dv[13:] == 0)
    for got, want in ((dq, rdq), (dk, rdk), (dv, rdv)):
        assert_close_to_reference(got, want, dtype=DT)
    assert [c[0] for c in fake.calls] == ["mha_varlen_fwd", "mha_varlen_bwd"]


def test_empty_calls_never_load_aiter(monkeypatch):
    from turbo_aiter import library

    def boom():
        raise AssertionError("aiter loaded for an empty call")
    monkeypatch.setattr(library, "load", boom)
    q, k = torch.zeros(1, 0, 2, 8, dtype=DT), torch.zeros(1, 3, 2, 8, dtype=DT)
    out, lse = attention.attention_fwd(AttentionFwdArgs(q, k, k))
    assert out.shape == (1, 0, 2, 8) and lse.shape == (1, 2, 0)
    q = torch.zeros(1, 3, 2, 8, dtype=DT)
    out, lse = attention.attention_fwd(AttentionFwdArgs(q, k[:, :0], k[:, :0]))
    assert torch.all(out == 0) and torch.all(lse == float("-inf"))
