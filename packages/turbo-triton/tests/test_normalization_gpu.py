"""The TRITON RMSNorm kernels compiled, on the GPU (``@pytest.mark.gpu``; see ``gpu_support``), against
float64 math on the GPU (computed in row slices, so 65536 x 32768 fits).

Forward (``y``, ``rstd``, the fused residual sum ``x_plus_r``) and backward (``dx``, ``dgamma``) with gamma,
zero-centred gamma with the fused residual, and no gamma. Gate per element: ``|out - ref| <= tol *
(1 + |ref|)`` with the dtype's tolerance (``rstd``: fp32's, relative 1e-5; ``x_plus_r``: the rounding of
the exact sum, absolute only); a NaN where the reference is finite fails. Both row paths (the whole row
and the chunked walk) forced on a few shapes; NaN/Inf inputs give the TORCH reference's NaN/Inf and
values; the forward and backward pinned to TRITON through the dispatcher replay from a CUDA graph
bit for bit.

Why this grid: hidden sizes from 1 over the model sizes (4096 ... 32768) with odd neighbours (7169,
8193, 16385: partial chunks), 1 / 7 / 4096 tokens, 65536 tokens at 4096 and 32768 (grids of many waves)
and 16384 x 16384; fp16 and fp32 on a subset; zero tokens.
"""

from __future__ import annotations

import pytest
import torch
from gpu_support import COMPILED, DEV, assert_within, capture, replay, row_slices

from turbo_core.dispatch.specs.normalization import RmsNormBwdArgs, RmsNormFwdArgs
from turbo_core.testing import assert_same_bits

pytestmark = [pytest.mark.gpu, COMPILED]

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
TOL = {FP32: 1e-4, FP16: 1e-2, BF16: 1e-2}
EPS = 1e-5


@pytest.fixture(scope="module")
def norm():
    from turbo_triton.normalization import launch

    return launch


def _within(what, out, ref, tol, rtol=None):
    assert_within(what, out, ref, tol, tol if rtol is None else rtol)


def _check(norm, tokens, hidden, dtype, variant, cfg=None):
    gen = torch.Generator(device=DEV).manual_seed(tokens * 7 + hidden)
    x = torch.randn(tokens, hidden, device=DEV, generator=gen).to(dtype)
    zc = variant == "zc_residual"
    residual = torch.randn(tokens, hidden, device=DEV, generator=gen).to(dtype) if zc else None
    gamma = None
    if variant != "no_gamma":
        gamma = ((0.0 if zc else 1.0) + 0.5 * torch.randn(hidden, device=DEV, generator=gen)).to(dtype)
    dy = torch.randn(tokens, hidden, device=DEV, generator=gen).to(dtype)
    y, rstd, s = norm.rmsnorm_fwd(RmsNormFwdArgs(x, gamma, EPS, zc, residual), cfg)
    dx, dgamma = norm.rmsnorm_bwd(RmsNormBwdArgs(dy, s if s is not None else x, gamma, rstd, zc), cfg)
    tol = TOL[dtype]
    g64 = None if gamma is None else gamma.double() + (1.0 if zc else 0.0)
    dg64 = torch.zeros(hidden, dtype=torch.float64, device=DEV)
    for sl in row_slices(tokens, hidden):
        s64 = x[sl].double()
        if residual is not None:
            s64 = (s64 + residual[sl].double()).to(dtype).double()
            _within("x_plus_r", s[sl], s64, tol, rtol=0.0)
        r64 = torch.rsqrt(s64.square().mean(1, keepdim=True) + EPS)
        n = s64 * r64
        _within("y", y[sl], n * g64 if g64 is not None else n, tol)
        _within("rstd", rstd[sl], r64.squeeze(1), TOL[FP32], rtol=1e-5)
        d = dy[sl].double()
        dn = d * g64 if g64 is not None else d
        _within("dx", dx[sl], r64 * (dn - n * (dn * n).mean(1, keepdim=True)), tol)
        dg64 += (d * n).sum(0)
    if gamma is None:
        assert dgamma is None
    else:
        _within("dgamma", dgamma, dg64, tol)


GRID = ([(t, h, BF16, v) for h in (1, 1000, 1024, 4096, 7168, 7169, 8192, 8193, 16384, 16385, 32768)
         for t in (1, 7, 4096) for v in ("gamma", "zc_residual", "no_gamma")]
        + [(65536, 4096, BF16, v) for v in ("gamma", "zc_residual")]
        + [(65536, 32768, BF16, "gamma"), (16384, 16384, BF16, "zc_residual")]
        + [(4096, h, dt, v) for dt in (FP16, FP32) for h in (1000, 4096, 16385) for v in ("gamma", "zc_residual")]
        + [(0, 64, BF16, "zc_residual")])


@pytest.mark.parametrize("tokens,hidden,dtype,variant", GRID,
                         ids=[f"t{t}-h{h}-{str(d)[6:]}-{v}" for t, h, d, v in GRID])
def test_against_float64(norm, tokens, hidden, dtype, variant):
    _check(norm, tokens, hidden, dtype, variant)


@pytest.mark.parametrize("variant", ["gamma", "zc_residual"])
@pytest.mark.parametrize("path,hidden", [("chunked", 4096), ("whole", 16384)])
def test_both_row_paths_forced(norm, path, hidden, variant):
    cfg = norm.RowConfig(1, 1024, 4) if path == "chunked" else norm.RowConfig(1, 16384, 16)
    _check(norm, 4096, hidden, BF16, variant, cfg)


@pytest.mark.parametrize("path", ["whole", "chunked"])
def test_nan_and_inf_like_the_reference(norm, path):
    from turbo_core.reference import normalization as ref

    g = torch.Generator(device=DEV).manual_seed(3)
    x = torch.randn(6, 3000, device=DEV, generator=g)
    x[1, 7], x[2, 100], x[3, 5], x[4, 9] = float("nan"), float("inf"), -float("inf"), -100.0
    gamma, dy = torch.randn(3000, device=DEV, generator=g), torch.randn(6, 3000, device=DEV, generator=g)
    cfg = norm.RowConfig(1, 4096, 8) if path == "whole" else norm.RowConfig(1, 1024, 4)
    fa = RmsNormFwdArgs(x, gamma, 1e-6)
    got, want = norm.rmsnorm_fwd(fa, cfg), ref.rmsnorm_fwd(fa)
    ba = RmsNormBwdArgs(dy, x, gamma, want[1])
    for what, a, b in zip(("y", "rstd", "dx", "dgamma"), (*got[:2], *norm.rmsnorm_bwd(ba, cfg)),
                          (*want[:2], *ref.rmsnorm_bwd(ba)), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, equal_nan=True, msg=lambda m, w=what: f"{w}: {m}")


def test_graph_replays_bit_for_bit():
    from turbo_core.dispatch import use_backend
    from turbo_core.dispatch.dispatcher import call

    g = torch.Generator(device=DEV).manual_seed(4)
    x = torch.randn(4096, 4096, device=DEV, generator=g).to(BF16)
    gamma = torch.randn(4096, device=DEV, generator=g).to(BF16)
    dy = torch.randn(4096, 4096, device=DEV, generator=g).to(BF16)

    def work():
        with use_backend("TRITON"):
            y, rstd, _ = call("rmsnorm_fwd", RmsNormFwdArgs(x, gamma, 1e-6))
            dx, dg = call("rmsnorm_bwd", RmsNormBwdArgs(dy, x, gamma, rstd))
        return y, rstd, dx, dg

    graph, outs = capture(work)
    x.copy_(torch.randn(x.shape, device=DEV, generator=g))
    dy.copy_(torch.randn(dy.shape, device=DEV, generator=g))
    replay(graph)
    assert_same_bits(outs, work(), what="replayed rmsnorm fwd + bwd vs eager")
