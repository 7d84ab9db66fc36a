"""``FP4GemmMXFunction`` (Primus-Turbo's name for the MXFP4 GEMM's autograd Function), imported
from ``turbo_core.ops.gemm_fp4`` as Primus code imports it: ``apply`` with Primus-Turbo's
arguments gives ``gemm_fp4``'s output and gradients bit for bit."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
import torch

import turbo_core.ops as ops
from turbo_core import Float4QuantConfig, Format, QuantizedTensorPair
from turbo_core.ops.gemm_fp4 import FP4GemmMXFunction, gemm_fp4
from turbo_core.quantized_tensor import create_quantized_weight


def _grads(fn, a, b, g):
    a.grad = b.grad = None
    out = fn()
    out.backward(g)
    return out, a.grad.clone(), b.grad.clone()


@pytest.mark.parametrize("trans_a, trans_b", [(False, True), (False, False), (True, True)])
@pytest.mark.parametrize("sr", [False, True])
def test_apply_equals_gemm_fp4(trans_a, trans_b, sr):
    torch.manual_seed(0)
    m, n, k = 24, 40, 64
    a = torch.randn((k, m) if trans_a else (m, k), requires_grad=True)
    b = torch.randn((n, k) if trans_b else (k, n), requires_grad=True)
    g = torch.randn(m, n)
    cfg = Float4QuantConfig(use_gradient_sr=sr)
    torch.manual_seed(1)
    got = _grads(lambda: FP4GemmMXFunction.apply(a, b, None, None, trans_a, trans_b, None, cfg), a, b, g)
    torch.manual_seed(1)
    want = _grads(lambda: gemm_fp4(a, b, trans_a=trans_a, trans_b=trans_b, config=cfg), a, b, g)
    for x, y in zip(got, want, strict=True):
        assert torch.equal(x, y)
    # the FP4 product is near the float64 one (a sanity floor: E2M1 keeps ~1 bit of mantissa)
    ref = (a.t() if trans_a else a).double() @ (b.t() if trans_b else b).double()
    assert torch.linalg.norm(got[0].double() - ref) / torch.linalg.norm(ref) < 0.25


def test_apply_takes_pre_quantized_operands_with_their_transposed_copies():
    torch.manual_seed(2)
    a = torch.randn(32, 64, requires_grad=True)
    w = torch.randn(48, 64)
    qb, qb_t = create_quantized_weight(w, None, Float4QuantConfig(), need_weight_transpose_cache=True)
    g = torch.randn(32, 48)
    out = FP4GemmMXFunction.apply(a, qb, None, qb_t, False, True, torch.float32, None)
    out.backward(g)
    got_grad = a.grad.clone()
    a.grad = None
    want = gemm_fp4(a, QuantizedTensorPair(qb, qb_t), trans_b=True, out_dtype=torch.float32)
    want.backward(g)
    assert torch.equal(out, want) and torch.equal(got_grad, a.grad)


def test_fused_wgrad_accumulation():
    torch.manual_seed(3)
    a = torch.randn(32, 64, requires_grad=True)
    b = torch.randn(48, 64, requires_grad=True)
    b.main_grad = torch.zeros(48, 64)
    g = torch.randn(32, 48)
    FP4GemmMXFunction.apply(a, b, None, None, False, True, None, None, "megatron").backward(g)
    assert b.grad_added_to_main_grad is True
    b2 = b.detach().clone().requires_grad_()
    gemm_fp4(a.detach(), b2, trans_b=True).backward(g)
    assert torch.equal(b.main_grad, b2.grad)


def test_fp4_dtype_and_argument_errors():
    assert FP4GemmMXFunction.get_fp4_dtype(Format.E2M1_X2) is torch.float4_e2m1fn_x2
    with pytest.raises(ValueError, match="^format: FP4 is E2M1_X2"):
        FP4GemmMXFunction.get_fp4_dtype(Format.E4M3)
    a, b = torch.randn(8, 64), torch.randn(8, 64)
    with pytest.raises(TypeError, match="^config: expected a Float4QuantConfig"):
        FP4GemmMXFunction.apply(a, b, None, None, False, True, None, "MX")
    with pytest.raises(ValueError, match="^b: inner dimension mismatch"):
        FP4GemmMXFunction.apply(a, torch.randn(8, 32), None, None, False, True, None, None)
    assert issubclass(FP4GemmMXFunction, torch.autograd.Function)


def test_the_op_name_stays_the_function_whatever_is_imported_first():
    module = importlib.import_module("turbo_core.ops.gemm_fp4")
    assert callable(ops.gemm_fp4) and ops.gemm_fp4 is module.gemm_fp4 is gemm_fp4
    assert ops.FP4GemmMXFunction is FP4GemmMXFunction and ops.__all__.count("gemm_fp4") == 1
    script = ("from turbo_core.ops.gemm_fp4 import FP4GemmMXFunction\n"
              "import turbo_core.ops\n"
              "assert callable(turbo_core.ops.gemm_fp4), turbo_core.ops.gemm_fp4\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
