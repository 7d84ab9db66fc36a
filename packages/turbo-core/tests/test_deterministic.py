"""The deterministic suite on the reference backend (TORCH, CPU): each primitive runs twice on fresh
copies of its inputs and every output must be bit-identical; run 0 is also checked against float64
math so a constant (wrong) output cannot pass. Select it with ``pytest --turbo-only=deterministic``."""

from __future__ import annotations

import pytest
import torch

from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs
from turbo_core.dispatch.specs.normalization import RmsNormBwdArgs, RmsNormFwdArgs
from turbo_core.dispatch.specs.quantization import QuantizeFp8Args
from turbo_core.low_precision import ScalingGranularity
from turbo_core.reference.gemm import gemm
from turbo_core.reference.grouped_gemm import grouped_gemm
from turbo_core.reference.normalization import rmsnorm_bwd, rmsnorm_fwd
from turbo_core.reference.quantization import quantize_fp8
from turbo_core.testing import deterministic_check

pytestmark = pytest.mark.deterministic

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def _randn(*shape, seed, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("trans_b", [False, True])
def test_gemm(dtype, trans_b):
    # odd sizes; NT and NN layouts
    a, b = _randn(13, 29, seed=1, dtype=dtype), _randn(*((7, 29) if trans_b else (29, 7)), seed=2, dtype=dtype)
    c = deterministic_check(gemm, GemmArgs(a, b, trans_b=trans_b))
    want = a.double() @ (b.double().t() if trans_b else b.double())
    torch.testing.assert_close(c.double(), want, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_grouped_gemm(dtype):
    # 3 groups (one empty) over 11 of 12 rows: the last row is outside every group
    lens = torch.tensor([4, 0, 7], dtype=torch.int64)
    offs = torch.tensor([0, 4, 4, 11], dtype=torch.int64)
    a, b = _randn(12, 9, seed=3, dtype=dtype), _randn(3, 9, 5, seed=4, dtype=dtype)
    out = deterministic_check(grouped_gemm, GroupedGemmArgs(a, b, lens, offs))
    want = torch.zeros(12, 5, dtype=torch.float64)
    want[:4] = a[:4].double() @ b[0].double()
    want[4:11] = a[4:11].double() @ b[2].double()
    torch.testing.assert_close(out.double(), want, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rmsnorm_fwd_bwd(dtype):
    x, gamma, dy = _randn(6, 33, seed=5, dtype=dtype), _randn(33, seed=6, dtype=dtype), _randn(6, 33, seed=7, dtype=dtype)
    y, rstd, _ = deterministic_check(rmsnorm_fwd, RmsNormFwdArgs(x, gamma, eps=1e-6))
    dx, dgamma = deterministic_check(rmsnorm_bwd, RmsNormBwdArgs(dy, x, gamma, rstd))
    x64 = x.double().requires_grad_()
    g64 = gamma.double().requires_grad_()
    y64 = x64 * torch.rsqrt(x64.square().mean(dim=1, keepdim=True) + 1e-6) * g64
    (y64 * dy.double()).sum().backward()
    tol = TOL[dtype]
    torch.testing.assert_close(y.double(), y64.detach(), rtol=tol, atol=tol)
    torch.testing.assert_close(dx.double(), x64.grad, rtol=tol, atol=tol)
    torch.testing.assert_close(dgamma.double(), g64.grad, rtol=tol, atol=tol * 10)


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="no float8 dtype in this torch")
@pytest.mark.parametrize("granularity", [ScalingGranularity.TENSORWISE, ScalingGranularity.ROWWISE])
def test_quantize_fp8(granularity):
    x = _randn(8, 40, seed=8)
    axis = -1 if granularity is ScalingGranularity.ROWWISE else None
    q, scale_inv = deterministic_check(quantize_fp8, QuantizeFp8Args(x, torch.float8_e4m3fn, granularity, axis=axis))
    # E4M3 keeps 3 mantissa bits: every element within 1/16 of its own magnitude (plus subnormal slack)
    back = q.double() * scale_inv.double()
    assert ((back - x.double()).abs() <= x.double().abs() / 16 + scale_inv.double() * 2.0**-9).all()
