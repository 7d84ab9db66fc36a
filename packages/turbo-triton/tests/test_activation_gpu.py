"""The TRITON SwiGLU / GeGLU kernels compiled, on the GPU (``@pytest.mark.gpu``; see ``gpu_support``),
against float64 math on the GPU (computed in row slices, so 65536 x 57344 fits).

Forward (``act(a) * b * probs``) and backward (``grad_x``, ``grad_probs``), with and without ``row_mask``:
masked rows full of NaN (x, probs and the gradient) must come out as exact zeros. Gate per element:
``|out - ref| <= tol * (1 + |ref|)`` with the dtype's tolerance; a NaN where the reference is finite
fails. NaN/Inf inputs give the TORCH reference's NaN/Inf and values; forward and backward pinned to
TRITON through the dispatcher replay from a CUDA graph bit for bit.

Why this grid: half widths from 1 over the model sizes (2048 ... 28672) with odd ones (1000, 16385),
1 / 7 / 4096 tokens, 65536 tokens at Mixtral's 14336 and Llama-70B's 28672 (masked), fp16 and fp32 on
a subset, zero tokens.
"""

from __future__ import annotations

import math

import pytest
import torch
from gpu_support import COMPILED, DEV, assert_within, capture, replay, row_slices

from turbo_core.dispatch.specs.activation import GluBwdArgs, GluFwdArgs
from turbo_core.testing import assert_same_bits

pytestmark = [pytest.mark.gpu, COMPILED]

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
TOL = {FP32: 1e-4, FP16: 1e-2, BF16: 1e-2}


@pytest.fixture(scope="module")
def glu():
    from turbo_triton.activation import launch

    return launch


def _act(kind, a):
    """``(act(a), act'(a))`` in float64."""
    if kind == "swiglu":
        sg = torch.sigmoid(a)
        return a * sg, sg * (1.0 + a * (1.0 - sg))
    cdf = 0.5 * (1.0 + torch.erf(a / math.sqrt(2.0)))
    return a * cdf, cdf + a * torch.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)


GRID = ([(k, t, h, BF16, m) for k in ("swiglu", "geglu") for h in (1, 1000, 1024, 2048, 14336, 16385, 28672)
         for t in (1, 7, 4096) for m in (False, True)]
        + [(k, 65536, h, BF16, True) for k in ("swiglu", "geglu") for h in (14336, 28672)]
        + [(k, 4096, h, dt, True) for k in ("swiglu", "geglu") for dt in (FP16, FP32) for h in (1000, 14336)]
        + [("swiglu", 0, 64, BF16, False)])


@pytest.mark.parametrize("kind,tokens,half,dtype,masked", GRID,
                         ids=[f"{k}-t{t}-h{h}-{str(d)[6:]}{'-masked' if m else ''}" for k, t, h, d, m in GRID])
def test_against_float64(glu, kind, tokens, half, dtype, masked):
    gen = torch.Generator(device=DEV).manual_seed(tokens * 3 + half + masked)
    x = (1.5 * torch.randn(tokens, 2 * half, device=DEV, generator=gen)).to(dtype)
    probs = torch.rand(tokens, device=DEV, generator=gen)
    grad = torch.randn(tokens, half, device=DEV, generator=gen).to(dtype)
    row_mask = None
    if masked:
        row_mask = (torch.rand(tokens, device=DEV, generator=gen) < 0.5).to(torch.int64)
        row_mask[0] = 1
        off = row_mask == 0
        x[off], probs[off], grad[off] = float("nan"), float("nan"), float("nan")
    out = glu.glu_fwd(kind, GluFwdArgs(x, probs, row_mask))
    gx, gp = glu.glu_bwd(kind, GluBwdArgs(grad, x, probs, row_mask))
    tol = TOL[dtype]
    for sl in row_slices(tokens, 2 * half):
        xs = x[sl].double()
        a, b = xs[:, :half], xs[:, half:]
        p, g = probs[sl].double().unsqueeze(1), grad[sl].double()
        act, act_grad = _act(kind, a)
        o64, gx64, gp64 = act * b * p, torch.cat([g * b * p * act_grad, g * act * p], dim=1), (g * act * b).sum(1)
        if masked:
            on = (row_mask[sl] != 0).unsqueeze(1)
            o64, gx64, gp64 = torch.where(on, o64, 0.0), torch.where(on, gx64, 0.0), torch.where(on[:, 0], gp64, 0.0)
            off = ~on[:, 0]
            assert (out[sl][off] == 0).all() and (gx[sl][off] == 0).all() and (gp[sl][off] == 0).all(), \
                "masked rows must come out as exact zeros"
        assert_within("out", out[sl], o64, tol, tol)
        assert_within("grad_x", gx[sl], gx64, tol, tol)
        assert_within("grad_probs", gp[sl], gp64, tol, tol)


@pytest.mark.parametrize("kind", ["swiglu", "geglu"])
def test_nan_and_inf_like_the_reference(glu, kind):
    from turbo_core.reference import activation as ref

    g = torch.Generator(device=DEV).manual_seed(3)
    x = torch.randn(6, 3000, device=DEV, generator=g)
    x[1, 7], x[2, 100], x[3, 5], x[4, 9] = float("nan"), float("inf"), -float("inf"), -100.0
    fa = GluFwdArgs(x, torch.rand(6, device=DEV, generator=g))
    ba = GluBwdArgs(torch.randn(6, 1500, device=DEV, generator=g), x, fa.probs)
    got = (glu.glu_fwd(kind, fa), *glu.glu_bwd(kind, ba))
    want = (getattr(ref, f"{kind}_fwd")(fa), *getattr(ref, f"{kind}_bwd")(ba))
    for what, a, b in zip(("out", "grad_x", "grad_probs"), got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, equal_nan=True, msg=lambda m, w=what: f"{w}: {m}")


def test_graph_replays_bit_for_bit():
    from turbo_core.dispatch import use_backend
    from turbo_core.dispatch.dispatcher import call

    g = torch.Generator(device=DEV).manual_seed(4)
    x = torch.randn(4096, 8192, device=DEV, generator=g).to(BF16)
    probs = torch.rand(4096, device=DEV, generator=g)
    mask = (torch.rand(4096, device=DEV, generator=g) < 0.5).long()
    dy = torch.randn(4096, 4096, device=DEV, generator=g).to(BF16)

    def work():
        with use_backend("TRITON"):
            o = call("swiglu_fwd", GluFwdArgs(x, probs, mask))
            gx, gp = call("swiglu_bwd", GluBwdArgs(dy, x, probs, mask))
        return o, gx, gp

    graph, outs = capture(work)
    x.copy_(torch.randn(x.shape, device=DEV, generator=g))
    dy.copy_(torch.randn(dy.shape, device=DEV, generator=g))
    replay(graph)
    assert_same_bits(outs, work(), what="replayed swiglu fwd + bwd vs eager")
