"""turbo-cudnn's attention adapters end to end on the CPU over a model of PyTorch's cuDNN attention
operators (fake_cudnn.py), checked against turbo's reference backend. What this proves: the layouts
(``[b, s, h, d]`` in and out, transposed views to cuDNN, no copies of contiguous inputs), the LSE
shape and convention, the scale, GQA, the causal alignment it admits, empty calls and the declines;
and, on meta tensors, that PyTorch's real operators take the arguments the adapters pass. Not that
cuDNN computes what its contract says (the GPU conformance test does that)."""

from __future__ import annotations

import pytest
import torch

from turbo_core.dispatch.specs.attention import AttentionBwdArgs, AttentionFwdArgs
from turbo_core.reference import attention as ref
from turbo_core.testing.numerics import assert_close_to_reference
from turbo_cudnn import attention


def _t(*shape, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


# MHA and GQA 4:1 / 4:2; causal only with s_q == s_kv (the case cuDNN serves); s_q != s_kv without causal.
CASES = [
    dict(hq=4, hkv=4, sq=9, skv=9, causal=True, dtype=torch.bfloat16),
    dict(hq=4, hkv=1, sq=7, skv=7, causal=True, dtype=torch.float16),
    dict(hq=4, hkv=2, sq=5, skv=11, causal=False, dtype=torch.bfloat16),
    dict(hq=2, hkv=2, sq=12, skv=6, causal=False, dtype=torch.float16),
]


def _ids(c):
    return f"h{c['hq']}-{c['hkv']}-s{c['sq']}-{c['skv']}-c{int(c['causal'])}-{str(c['dtype'])[6:]}"


@pytest.mark.parametrize("c", CASES, ids=_ids)
def test_fwd_bwd_match_reference(fake, c):
    b, d, dt = 2, 16, c["dtype"]
    q = _t(b, c["sq"], c["hq"], d, seed=1, dtype=dt)
    k = _t(b, c["skv"], c["hkv"], d, seed=2, dtype=dt)
    v = _t(b, c["skv"], c["hkv"], d, seed=3, dtype=dt)
    fa = AttentionFwdArgs(q, k, v, causal=c["causal"])
    assert attention.decline_reason(fa) is None
    out, lse = attention.attention_fwd(fa)
    rout, rlse = ref.attention_fwd(fa)
    assert out.shape == rout.shape and out.dtype == dt and out.is_contiguous()
    assert lse.shape == (b, c["hq"], c["sq"]) and lse.dtype == torch.float32 and lse.is_contiguous()
    assert_close_to_reference(out, rout, dtype=dt)
    torch.testing.assert_close(lse, rlse, rtol=1e-4, atol=1e-4)
    name, pos, kw = fake.calls[-1]
    assert name == "fwd" and kw["scale"] == pytest.approx(d ** -0.5)
    assert pos[0].shape == (b, c["hq"], c["sq"], d)  # [b, h, s, d] views ...
    assert pos[0].data_ptr() == q.data_ptr()  # ... of the caller's contiguous tensors, not copies
    assert pos[6] is bool(c["causal"])

    dout = _t(*out.shape, seed=4, dtype=dt)
    ba = AttentionBwdArgs(dout, q, k, v, out, lse, causal=c["causal"])
    dq, dk, dv, dsink = attention.attention_bwd(ba)
    rdq, rdk, rdv, _ = ref.attention_bwd(ba)
    assert dsink is None
    for got, want, like in ((dq, rdq, q), (dk, rdk, k), (dv, rdv, v)):
        assert got.shape == like.shape and got.dtype == dt and got.is_contiguous()
        assert_close_to_reference(got, want, dtype=dt)


def test_strided_inputs_and_an_explicit_scale(fake):
    """q, k and v as views of one fused qkv projection (unit stride in d only), softmax_scale given."""
    b, s, h, d, dt = 1, 8, 2, 16, torch.bfloat16
    qkv = _t(b, s, 3, h, d, seed=5, dtype=dt)
    q, k, v = qkv.unbind(2)
    assert not q.is_contiguous()
    fa = AttentionFwdArgs(q, k, v, softmax_scale=0.3, causal=True)
    out, lse = attention.attention_fwd(fa)
    rout, rlse = ref.attention_fwd(fa)
    assert_close_to_reference(out, rout, dtype=dt)
    torch.testing.assert_close(lse, rlse, rtol=1e-4, atol=1e-4)
    assert fake.calls[-1][2]["scale"] == pytest.approx(0.3)
    dout = _t(*out.shape, seed=6, dtype=dt)
    got = attention.attention_bwd(AttentionBwdArgs(dout, q, k, v, out, lse, softmax_scale=0.3, causal=True))
    want = ref.attention_bwd(AttentionBwdArgs(dout, q, k, v, out, lse, softmax_scale=0.3, causal=True))
    for g, w in zip(got[:3], want[:3], strict=True):
        assert_close_to_reference(g, w, dtype=dt)


def test_backward_takes_the_given_out_and_lse(fake):
    """A ring step's backward: ``out``/``lse`` of a softmax over more keys than this call sees.
    The gradients follow the spec (P from the given lse, D from the given out), as the reference's do."""
    b, s, h, d, dt = 1, 6, 2, 16, torch.float16
    q = _t(b, s, h, d, seed=7, dtype=dt)
    k_all = _t(b, 2 * s, h, d, seed=8, dtype=dt)
    v_all = _t(b, 2 * s, h, d, seed=9, dtype=dt)
    out, lse = ref.attention_fwd(AttentionFwdArgs(q, k_all, v_all))  # the merged result over both blocks
    k, v = k_all[:, :s].contiguous(), v_all[:, :s].contiguous()
    dout = _t(*out.shape, seed=10, dtype=dt)
    ba = AttentionBwdArgs(dout, q, k, v, out, lse)
    got, want = attention.attention_bwd(ba), ref.attention_bwd(ba)
    for g, w in zip(got[:3], want[:3], strict=True):
        assert_close_to_reference(g, w, dtype=dt)


@pytest.mark.parametrize("shape", [(0, 4, 2, 16, 4), (2, 0, 2, 16, 4), (2, 3, 2, 16, 0)], ids=["b0", "sq0", "skv0"])
def test_empty_calls_need_no_kernel(fake, shape):
    b, sq, h, d, skv = shape
    q = torch.zeros(b, sq, h, d, dtype=torch.bfloat16)
    k = v = torch.zeros(b, skv, h, d, dtype=torch.bfloat16)
    fa = AttentionFwdArgs(q, k, v)
    out, lse = attention.attention_fwd(fa)
    assert out.shape == (b, sq, h, d) and not out.any()
    assert lse.shape == (b, h, sq) and bool(torch.isneginf(lse).all())
    grads = attention.attention_bwd(AttentionBwdArgs(torch.ones_like(out), q, k, v, out, lse))
    assert [g.shape for g in grads[:3]] == [q.shape, k.shape, v.shape] and not any(g.any() for g in grads[:3])
    assert fake.calls == []


def _args(**kw):
    q = torch.zeros(1, kw.pop("sq", 4), 2, 16, dtype=kw.pop("dtype", torch.bfloat16))
    k = v = torch.zeros(1, kw.pop("skv", 4), 2, 16, dtype=q.dtype)
    return AttentionFwdArgs(q, k, v, **kw)


@pytest.mark.parametrize("kw, reason", [
    (dict(dtype=torch.float32), "takes fp16/bf16"),
    (dict(sink=torch.zeros(2)), "no attention sink"),
    (dict(dropout_p=0.1), "dropout_p=0.1 not served"),
    (dict(deterministic=True), "deterministic=True"),
    (dict(window_size=(2, 0)), "no sliding window"),
    (dict(causal=True, window_size=(3, -1)), "no sliding window"),
    (dict(causal=True, sq=3, skv=5), "causal with s_q=3 != s_kv=5"),
])
def test_declines_say_why(kw, reason):
    assert reason in attention.decline_reason(_args(**kw))


def test_declines_varlen():
    q = torch.zeros(6, 2, 16, dtype=torch.bfloat16)
    cu = torch.tensor([0, 6], dtype=torch.int32)
    fa = AttentionFwdArgs(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=6, max_seqlen_k=6)
    assert "dense calls only" in attention.decline_reason(fa)


def test_cpu_tensors_are_declined_first():
    assert attention.can_handle(_args()) == "CUDNN attention runs on NVIDIA GPU tensors only (got cpu)"


@pytest.mark.parametrize("causal", [False, True])
def test_the_real_operators_take_what_the_adapters_pass(causal):
    """PyTorch's own cuDNN attention operators on meta tensors (their meta kernels; no GPU): the
    adapters' argument order, the ``None``s and placeholders they pass, and the layouts they expect
    back (``out`` in q's memory order, ``lse [b, h_q, s_q, 1]``, gradients in their inputs' order)."""
    b, s, hq, hkv, d = 2, 8, 4, 2, 16
    q, k, v = (torch.empty(b, s, h, d, device="meta", dtype=torch.bfloat16) for h in (hq, hkv, hkv))
    out, lse = attention.attention_fwd(AttentionFwdArgs(q, k, v, causal=causal))
    assert out.shape == (b, s, hq, d) and out.is_contiguous()
    assert lse.shape == (b, hq, s) and lse.dtype == torch.float32 and lse.is_contiguous()
    dq, dk, dv, dsink = attention.attention_bwd(AttentionBwdArgs(torch.empty_like(out), q, k, v, out, lse,
                                                                 causal=causal))
    assert dsink is None
    for g, like in ((dq, q), (dk, k), (dv, v)):
        assert g.shape == like.shape and g.dtype == like.dtype and g.is_contiguous()
