"""The exactness gate of FP8/FP4 GEMM results (``turbo_core.testing.numerics.assert_close_fp8_gemm``):
strict fp32 on the CPU, the tensor cores' allowance (``FP8_MMA_ATOL * max |ref|``) elsewhere."""

import pytest
import torch

from turbo_core.testing.numerics import FP8_MMA_ATOL, assert_close_fp8_gemm, fp8_gemm_tolerance


def test_cpu_keeps_the_fp32_tolerance():
    assert fp8_gemm_tolerance(torch.float32, 40.0, "cpu") == (1e-4, 1e-4)
    assert fp8_gemm_tolerance(torch.bfloat16, 40.0, torch.device("cpu")) == (1e-2, 1e-2)


@pytest.mark.parametrize("device", ["cuda", "cuda:1", "meta"])
def test_an_accelerator_gets_the_mma_allowance(device):
    rtol, atol = fp8_gemm_tolerance(torch.float32, 40.0, device)
    assert rtol == 1e-4 and atol == pytest.approx(40.0 * 2.0 ** -9)
    # Results under 1 keep the allowance of a result of size 1; never below the dtype's own atol.
    assert fp8_gemm_tolerance(torch.float32, 0.01, device)[1] == pytest.approx(FP8_MMA_ATOL)
    assert fp8_gemm_tolerance(torch.bfloat16, 1.0, device)[1] == 1e-2


def test_cpu_gate_fails_an_error_the_accelerator_gate_allows():
    ref = torch.linspace(-4.0, 4.0, 64, dtype=torch.float64)
    off = ref.float() + 4.0 * 2.0 ** -11  # a quarter of the accelerator allowance, 40x the CPU's atol
    with pytest.raises(AssertionError, match="on cpu"):
        assert_close_fp8_gemm(off, ref, what="out")
    rtol, atol = fp8_gemm_tolerance(torch.float32, ref.abs().max().item(), "cuda")
    assert torch.isclose(off.double(), ref, rtol=rtol, atol=atol).all()
    # An error of a wrong scale (order 1 relative) fails everywhere.
    assert not torch.isclose(ref * 1.01 + 0.05, ref, rtol=rtol, atol=atol).all()


def test_shape_mismatch_fails():
    with pytest.raises(AssertionError):
        assert_close_fp8_gemm(torch.zeros(3, 4), torch.zeros(4, 3, dtype=torch.float64))
