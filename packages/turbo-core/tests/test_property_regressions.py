"""Regression tests of the defects the property tests found, each the shrunk example hypothesis
reported, checked against float64 math or the spec's exact values."""

from __future__ import annotations

import math

import pytest
import torch

from turbo_core.dispatch import call
from turbo_core.dispatch.manager import use_backend
from turbo_core.dispatch.specs.attention import AttentionBwdArgs, AttentionFwdArgs
from turbo_core.dispatch.specs.quantization import QuantizeFp8Args
from turbo_core.testing.cases.quantization import _check_fp32_scaled, _grid


@pytest.mark.parametrize("tail", [2, 0])
def test_varlen_rows_past_the_last_sequence_ignore_the_sink(tail):
    # TORCH gave such rows lse = sink (the sink joined a softmax with no keys); the spec, and TRITON,
    # give out 0 and lse -inf: the rows belong to no sequence.
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3 + tail, 2, 4, generator=g) for _ in range(3))
    sink = torch.randn(2, generator=g)
    cu = torch.tensor([0, 1, 3], dtype=torch.int32)
    with use_backend("TORCH"):
        out, lse = call("attention_fwd", AttentionFwdArgs(q, k, v, cu, cu, 2, 2, sink=sink))
    assert torch.equal(out[3:], torch.zeros_like(out[3:]))
    assert bool(torch.isneginf(lse[:, 3:]).all())
    # the rows inside a sequence: the sink joins their softmax (float64 math, sequence of length 2)
    s = (q[1:3, 0].double() @ k[1:3, 0].double().t()) * 0.5
    want = torch.logsumexp(torch.cat([s, sink[0].double().expand(2, 1)], dim=1), dim=1)
    torch.testing.assert_close(lse[0, 1:3].double(), want, rtol=1e-6, atol=1e-6)
    dout = torch.randn(out.shape, generator=g)
    with use_backend("TORCH"):
        dq, dk, dv, dsink = call("attention_bwd", AttentionBwdArgs(dout, q, k, v, out, lse, cu, cu, 2, 2, sink=sink))
    assert torch.equal(dq[3:], torch.zeros_like(dq[3:]))
    assert bool(torch.isfinite(dsink).all())


def test_the_quantizer_oracle_knows_e5m2fnuz_has_two_mantissa_bits():
    # torch.finfo(float8_e5m2fnuz).eps is 2**-3; the oracle read three mantissa bits from it and
    # rejected correctly rounded E5M2FNUZ data (10919 -> 10240, the nearest of 10240 / 12288).
    assert _grid(torch.float8_e5m2fnuz)[0] == 2 and _grid(torch.float8_e4m3fnuz)[0] == 3
    x = torch.tensor([4.6230, -0.8803])
    with use_backend("TORCH"):
        q, s = call("quantize_fp8", QuantizeFp8Args(x, torch.float8_e5m2fnuz, "TENSORWISE"))
    assert q.float().tolist() == [57344.0, -10240.0]
    _check_fp32_scaled(x, q, s, torch.float8_e5m2fnuz, "TENSORWISE")


@pytest.mark.parametrize("shape, gran, axis, bs", [((0,), "TENSORWISE", None, None), ((3, 0), "ROWWISE", -1, None),
                                                   ((0, 5), "BLOCKWISE", 0, 16)])
def test_the_quantizer_oracle_takes_empty_tensors(shape, gran, axis, bs):
    x = torch.zeros(shape)
    with use_backend("TORCH"):
        q, s = call("quantize_fp8", QuantizeFp8Args(x, torch.float8_e4m3fn, gran, axis, bs))
    _check_fp32_scaled(x, q, s, torch.float8_e4m3fn, gran, axis, bs)
    if gran == "ROWWISE":  # a row with no elements has amax 0: the all-zero scale
        assert s.shape == (3, 1) and math.isclose(float(s[0, 0]), 1e-12 / 448, rel_tol=1e-6)


def test_sparse_mla_bwd_takes_delta_from_the_out_it_is_given():
    # The spec's delta = rowsum(dout * out) is of the ``out`` argument (rounded to the input dtype in
    # training), as every flash backward computes it; TORCH took it from the recomputed P (the exact
    # out), so it disagreed with TRITON wherever P is near one and dP - delta cancels. Checked against
    # the contract written out in float64 with an ``out`` moved off the forward's.
    from turbo_core.dispatch.specs.sparse_mla import SparseMlaBwdArgs, SparseMlaFwdArgs

    g = torch.Generator().manual_seed(3)
    t, h, n, d, rank, scale = 4, 2, 5, 6, 4, 0.5
    q, kv = torch.randn(t, h, d, generator=g), torch.randn(n, d, generator=g)
    idx = torch.tensor([[0, 1], [2, -1], [4, 3], [1, 1]], dtype=torch.int32)
    dout = torch.randn(t, h, rank, generator=g)
    with use_backend("TORCH"):
        out, lse = call("sparse_mla_fwd", SparseMlaFwdArgs(q, kv, idx, None, rank, scale))
        given = out + 0.05 * torch.randn(out.shape, generator=g)
        dq, dkv, _ = call("sparse_mla_bwd", SparseMlaBwdArgs(dout, q, kv, given, lse, idx, None, rank, scale))
    q64, kv64, do64 = q.double(), kv.double(), dout.double()
    valid = idx >= 0
    keys = kv64[idx.clamp_min(0).long()]  # [t, 2, d]
    s = torch.einsum("thd,tkd->thk", q64, keys) * scale
    s = s.masked_fill(~valid[:, None, :], float("-inf"))
    p = torch.softmax(s, dim=-1)
    dp = torch.einsum("thr,tkr->thk", do64, keys[..., :rank])
    delta = (do64 * given.double()).sum(-1, keepdim=True)
    ds = torch.where(valid[:, None, :], p * (dp - delta), torch.zeros_like(p))
    torch.testing.assert_close(dq.double(), torch.einsum("thk,tkd->thd", ds, keys) * scale, rtol=1e-5, atol=1e-5)
    # the exact out's delta gives another dq: the test tells the two apart
    ds_exact = torch.where(valid[:, None, :], p * (dp - (p * dp).sum(-1, keepdim=True)), torch.zeros_like(p))
    assert not torch.allclose(dq.double(), torch.einsum("thk,tkd->thd", ds_exact, keys) * scale, atol=1e-3)
