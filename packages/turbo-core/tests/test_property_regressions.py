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
