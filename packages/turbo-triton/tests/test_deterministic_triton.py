"""The deterministic suite for the TRITON kernels (CPU interpreter, tiny shapes): each kernel runs
twice on fresh copies of its inputs and every output must be bit-identical; run 0 is also checked
against float64 math. Select it with ``pytest --turbo-only=deterministic``. (fp32/fp16 GEMM operands
only: under TRITON_INTERPRET=1 ``tl.dot`` on two bf16 operands is wrong, see shared/GPU.md.)"""

from __future__ import annotations

import pytest
import torch

from turbo_core.dispatch.specs.activation import GluBwdArgs, GluFwdArgs
from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args
from turbo_core.dispatch.specs.normalization import RmsNormBwdArgs, RmsNormFwdArgs
from turbo_core.testing import deterministic_check
from turbo_triton.activation.launch import glu_bwd, glu_fwd
from turbo_triton.gemm.launch import gemm
from turbo_triton.gemm_fp8.launch import gemm_fp8
from turbo_triton.normalization.launch import rmsnorm_bwd, rmsnorm_fwd

pytestmark = pytest.mark.deterministic

TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def _randn(*shape, seed, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_gemm(dtype):
    a, b = _randn(13, 37, seed=1, dtype=dtype), _randn(9, 37, seed=2, dtype=dtype)  # NT, odd sizes
    c = deterministic_check(gemm, GemmArgs(a, b, trans_b=True))
    torch.testing.assert_close(c.double(), a.double() @ b.double().t(), rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="no float8 dtype in this torch")
def test_gemm_fp8_tensorwise():
    a = (_randn(11, 40, seed=3) * 3).to(torch.float8_e4m3fn)
    b = (_randn(7, 40, seed=4) * 3).to(torch.float8_e4m3fn)
    sa, sb = torch.tensor(0.5), torch.tensor(1.25)
    c = deterministic_check(gemm_fp8, GemmFp8Args(a, sa, b, sb, False, True, torch.float32))
    want = (a.double() * 0.5) @ (b.double() * 1.25).t()
    torch.testing.assert_close(c.double(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rmsnorm_fwd_bwd(dtype):
    x, gamma, dy = _randn(5, 40, seed=5, dtype=dtype), _randn(40, seed=6, dtype=dtype), _randn(5, 40, seed=7, dtype=dtype)
    y, rstd, _ = deterministic_check(rmsnorm_fwd, RmsNormFwdArgs(x, gamma, eps=1e-6))
    dx, dgamma = deterministic_check(rmsnorm_bwd, RmsNormBwdArgs(dy, x, gamma, rstd))
    x64, g64 = x.double().requires_grad_(), gamma.double().requires_grad_()
    y64 = x64 * torch.rsqrt(x64.square().mean(dim=1, keepdim=True) + 1e-6) * g64
    (y64 * dy.double()).sum().backward()
    tol = TOL[dtype]
    torch.testing.assert_close(y.double(), y64.detach(), rtol=tol, atol=tol)
    torch.testing.assert_close(dx.double(), x64.grad, rtol=tol, atol=tol)
    torch.testing.assert_close(dgamma.double(), g64.grad, rtol=tol, atol=tol * 10)


def test_swiglu_fwd_bwd():
    x, probs, grad = _randn(6, 2 * 24, seed=8), _randn(6, seed=9).abs(), _randn(6, 24, seed=10)
    out = deterministic_check(glu_fwd, "swiglu", GluFwdArgs(x, probs))
    gx, gp = deterministic_check(glu_bwd, "swiglu", GluBwdArgs(grad, x, probs))
    x64, p64 = x.double().requires_grad_(), probs.double().requires_grad_()
    out64 = torch.nn.functional.silu(x64[:, :24]) * x64[:, 24:] * p64[:, None]
    (out64 * grad.double()).sum().backward()
    torch.testing.assert_close(out.double(), out64.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gx.double(), x64.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gp.double(), p64.grad, rtol=1e-4, atol=1e-4)
