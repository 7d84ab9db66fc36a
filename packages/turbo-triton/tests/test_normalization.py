"""The TRITON RMSNorm kernels directly (CPU interpreter): both row paths (whole row in one tile,
and the chunked walk forced by a small tile) against float64 math, the persistent backward with
several row blocks per program, edge sizes, NaN/Inf, and what the capability check declines."""

import pytest
import torch

from turbo_core.dispatch.specs.normalization import RmsNormBwdArgs, RmsNormFwdArgs
from turbo_core.reference.normalization import rmsnorm_bwd as ref_bwd
from turbo_core.reference.normalization import rmsnorm_fwd as ref_fwd
from turbo_triton.normalization.launch import RowConfig, can_handle, pick, rmsnorm_bwd, rmsnorm_fwd

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}

# whole-row tiles of 2 rows, one program per SM (so each program walks several row blocks), and
# the chunked walk: 128-wide chunks over rows of 300 (a ragged last chunk) or 1000, one row or
# (backward) two rows a step, with a ragged last row block.
WHOLE = RowConfig(block_m=2, block_n=1024, num_warps=4, programs_per_sm=1)
CHUNKED = RowConfig(block_m=1, block_n=128, num_warps=4, programs_per_sm=1)
CHUNKED_2ROWS = RowConfig(block_m=2, block_n=128, num_warps=4, programs_per_sm=1)  # backward: 2 rows a step
WHOLE_PIPELINED = RowConfig(block_m=2, block_n=1024, num_warps=4, programs_per_sm=1, stages=2)  # backward row loop
# backward split kernel: rows walked twice in 3 unrolled 128-wide chunks (300: a ragged last chunk), or
# 4 x 256 over 1000 two rows a step (the forward of these tiles takes the chunked walk)
SPLIT = RowConfig(block_m=1, block_n=128, num_warps=4, programs_per_sm=1, chunks=3)
SPLIT_2ROWS = RowConfig(block_m=2, block_n=256, num_warps=4, programs_per_sm=1, chunks=4)
CONFIGS = {"heuristic": None, "whole": WHOLE, "whole_pipelined": WHOLE_PIPELINED, "chunked": CHUNKED,
           "chunked_2rows": CHUNKED_2ROWS, "split": SPLIT, "split_2rows": SPLIT_2ROWS}


def _expected(x, residual, gamma, zero_centered, eps, dy):
    """float64 ``y``, ``rstd``, ``s`` and the gradients of ``sum(y * dy)`` w.r.t. ``s``, gamma."""
    s = x.double() if residual is None else (x.double() + residual.double()).to(x.dtype).double()
    s.requires_grad_()
    g = gamma.double().requires_grad_() if gamma is not None else None
    rstd = 1.0 / torch.sqrt((s * s).mean(dim=1, keepdim=True) + eps)
    y = s * rstd
    if g is not None:
        y = y * ((1.0 + g) if zero_centered else g)
    (y * dy.double()).sum().backward()
    return y.detach(), rstd.squeeze(1).detach(), s.detach(), s.grad, (g.grad if g is not None else None)


def _close(actual, expected, dtype, what):
    tol = TOL[dtype]
    torch.testing.assert_close(actual.double(), expected, rtol=tol, atol=tol, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("path,tokens,hidden", [("heuristic", 5, 1), ("heuristic", 9, 33), ("whole", 19, 1000),
                                                ("whole_pipelined", 19, 1000),
                                                ("chunked", 9, 300), ("chunked", 3, 1000),
                                                ("chunked_2rows", 19, 300), ("split", 9, 300), ("split", 3, 257),
                                ("split_2rows", 19, 1000)])
@pytest.mark.parametrize("variant", ["gamma", "zero_centered_residual_dres", "no_gamma", "no_gamma_dres"])
def test_forward_and_backward_against_float64(path, tokens, hidden, dtype, variant):
    """``*_dres``: the backward also gets ``dresidual`` (rmsnorm_residual's x_plus_r gradient),
    which ``dx`` must include: ``ds + dresidual`` in float64, rounded once."""
    torch.manual_seed(tokens * 1000 + hidden)
    cfg = CONFIGS[path]
    x = torch.randn(tokens, hidden).to(dtype)
    residual = torch.randn(tokens, hidden).to(dtype) if "residual" in variant else None
    zero_centered = variant.startswith("zero_centered")
    gamma = None if variant.startswith("no_gamma") else (0.5 * torch.randn(hidden) + (0.0 if zero_centered else 1.0)).to(dtype)
    dy = torch.randn(tokens, hidden).to(dtype)
    dres = torch.randn(tokens, hidden).to(dtype) if variant.endswith("_dres") else None
    eps = 1e-5
    y64, rstd64, s64, ds64, dg64 = _expected(x, residual, gamma, zero_centered, eps, dy)
    if dres is not None:
        ds64 = ds64 + dres.double()

    y, rstd, s = rmsnorm_fwd(RmsNormFwdArgs(x, gamma, eps, zero_centered, residual), cfg)
    assert y.dtype == dtype and rstd.dtype == torch.float32 and rstd.shape == (tokens,)
    _close(y, y64, dtype, "y")
    torch.testing.assert_close(rstd.double(), rstd64, rtol=1e-5, atol=1e-6)
    if residual is None:
        assert s is None
    else:
        assert s.dtype == dtype
        torch.testing.assert_close(s.double(), s64, rtol=0, atol=0)  # rounded once, like the spec

    s_in = s if s is not None else x
    bwd = RmsNormBwdArgs(dy, s_in, gamma, rstd, zero_centered, dres)
    dx, dgamma = rmsnorm_bwd(bwd, cfg)
    assert dx.dtype == dtype
    _close(dx, ds64, dtype, "dx")
    if dres is not None:  # the reference backend, from the same rstd: the same one rounding of the fp32 sum
        dx_ref, _ = ref_bwd(bwd)
        _close(dx, dx_ref.double(), dtype, "dx vs reference")
    if gamma is None:
        assert dgamma is None
    else:
        assert dgamma.dtype == gamma.dtype and dgamma.shape == gamma.shape
        _close(dgamma, dg64, dtype, "dgamma")


def test_fp32_gamma_under_bf16_input():
    torch.manual_seed(3)
    x, dy = torch.randn(6, 40).bfloat16(), torch.randn(6, 40).bfloat16()
    gamma = torch.randn(40)
    y64, _, _, dx64, dg64 = _expected(x, None, gamma, False, 1e-6, dy)
    y, rstd, _ = rmsnorm_fwd(RmsNormFwdArgs(x, gamma, 1e-6))
    dx, dgamma = rmsnorm_bwd(RmsNormBwdArgs(dy, x, gamma, rstd))
    _close(y, y64, torch.bfloat16, "y")
    _close(dx, dx64, torch.bfloat16, "dx")
    assert dgamma.dtype == torch.float32
    torch.testing.assert_close(dgamma.double(), dg64, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("path", ["whole", "chunked", "split"])
def test_zero_tokens(path):
    x = torch.empty(0, 300, dtype=torch.bfloat16)
    gamma = torch.randn(300).bfloat16()
    y, rstd, s = rmsnorm_fwd(RmsNormFwdArgs(x, gamma, 1e-6, False, torch.empty_like(x)), CONFIGS[path])
    assert y.shape == (0, 300) and rstd.shape == (0,) and s.shape == (0, 300)
    dx, dgamma = rmsnorm_bwd(RmsNormBwdArgs(torch.empty_like(x), x, gamma, rstd), CONFIGS[path])
    assert dx.shape == (0, 300)
    assert torch.equal(dgamma, torch.zeros_like(gamma))
    dx, dgamma = rmsnorm_bwd(RmsNormBwdArgs(torch.empty_like(x), x, gamma, rstd, False, torch.empty_like(x)),
                             CONFIGS[path])
    assert dx.shape == (0, 300) and torch.equal(dgamma, torch.zeros_like(gamma))


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # the interpreter's numpy sees inf * 0
@pytest.mark.parametrize("path", ["whole", "chunked", "split"])
def test_nan_and_inf_propagate_like_the_reference(path):
    torch.manual_seed(4)
    x = torch.randn(4, 300)
    x[1, 7] = float("nan")
    x[2, 100] = float("inf")
    gamma = torch.randn(300)
    args = RmsNormFwdArgs(x, gamma, 1e-6)
    y, rstd, _ = rmsnorm_fwd(args, CONFIGS[path])
    y_ref, rstd_ref, _ = ref_fwd(args)
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-4, equal_nan=True)
    torch.testing.assert_close(rstd, rstd_ref, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert torch.isfinite(y[[0, 3]]).all()  # one row's NaN stays in its row
    dy = torch.randn(4, 300)
    dres = torch.randn(4, 300)
    dres[0, 3] = float("nan")  # a NaN in the added gradient stays in its element
    bwd = RmsNormBwdArgs(dy, x, gamma, rstd_ref, False, dres)
    dx, dgamma = rmsnorm_bwd(bwd, CONFIGS[path])
    dx_ref, dgamma_ref = ref_bwd(bwd)
    torch.testing.assert_close(dx, dx_ref, rtol=1e-4, atol=1e-4, equal_nan=True)
    torch.testing.assert_close(dgamma, dgamma_ref, rtol=1e-4, atol=1e-4, equal_nan=True)


def test_heuristic_tiles():
    # whole rows up to the limits, chunks beyond; a chunked walk has one row per program
    assert pick(4096, False, False).block_n == 4096
    assert pick(7169, False, False).block_n == 8192
    assert pick(32768, False, False).block_n == 32768
    assert pick(65536, False, False).block_n < 65536 and pick(65536, False, False).block_m == 1
    wide = pick(16384, True, False)  # the split kernel: chunks covering the row
    assert wide.block_n * wide.chunks >= 16384
    assert pick(32768, True, False).block_n < 32768
    small = pick(1000, False, False)
    assert small.block_m * small.block_n >= 2048 and small.num_warps >= 4
    assert pick(1000, True, True).block_n == 1024  # interpreter: whole rows, large tiles


def test_declines_with_reasons(monkeypatch):
    x = torch.randn(4, 8)
    gamma = torch.randn(8)
    assert can_handle(RmsNormFwdArgs(x, gamma)) is None
    assert "float64" in can_handle(RmsNormFwdArgs(x.double(), gamma))
    assert "contiguous gamma" in can_handle(RmsNormFwdArgs(x, torch.randn(16)[::2]))
    rstd = torch.ones(4)
    assert can_handle(RmsNormBwdArgs(x, x, None, rstd)) is None
    assert "contiguous dy" in can_handle(RmsNormBwdArgs(torch.randn(8, 4).t(), x, None, rstd))
    assert can_handle(RmsNormBwdArgs(x, x, None, rstd, False, torch.randn(4, 8))) is None
    assert "contiguous dresidual" in can_handle(RmsNormBwdArgs(x, x, None, rstd, False, torch.randn(8, 4).t()))
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert "TRITON_INTERPRET=1" in can_handle(RmsNormFwdArgs(x, gamma))
