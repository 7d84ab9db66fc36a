"""FP8/FP4 GEMM and RMSNorm adapters end to end on the CPU over a fake aiter (float64 math,
aiter's operand/scale layouts decoded by explicit index formulas), against turbo's reference."""

from __future__ import annotations

import pytest
import torch

from turbo_aiter import gemm_fp4, gemm_fp8, rmsnorm
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp4Args, GemmFp8Args
from turbo_core.dispatch.specs.normalization import RmsNormFwdArgs
from turbo_core.low_precision import FLOAT4_E2M1FN_X2
from turbo_core.reference import gemm_fp8 as ref_gemm
from turbo_core.reference import normalization as ref_norm
from turbo_core.testing.numerics import assert_close_to_reference

FNUZ = torch.float8_e4m3fnuz


def _fp8(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 2).to(FNUZ)


def _scale(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g) + 0.5


# Every layout (NN, NT, TN, TT) and trans_c; M=5, N=130 (a partial 128 tile), K=256 (two blocks).
@pytest.mark.parametrize("ta,tb,tc", [(False, True, False), (False, False, False), (True, True, False),
                                      (True, False, True)])
@pytest.mark.parametrize("gran,a2d", [("ROWWISE", False), ("BLOCKWISE", False), ("BLOCKWISE", True)])
def test_gemm_fp8_matches_reference(fake, ta, tb, tc, gran, a2d):
    m, n, k = 5, 130, 256
    a = _fp8(*((k, m) if ta else (m, k)), seed=1)
    b = _fp8(*((n, k) if tb else (k, n)), seed=2)
    if gran == "ROWWISE":
        sa = _scale(*((1, m) if ta else (m, 1)), seed=3)
        sb = _scale(*((n, 1) if tb else (1, n)), seed=4)
        bs = None
    else:
        bs = 128
        if a2d:
            sa = _scale(-(-a.shape[0] // bs), -(-a.shape[1] // bs), seed=3)
        else:
            sa = _scale(*((k // bs, m) if ta else (m, k // bs)), seed=3)
        sb = _scale(-(-b.shape[0] // bs), -(-b.shape[1] // bs), seed=4)  # 128x128 tiles of the stored b
    args = GemmFp8Args(a, sa, b, sb, ta, tb, torch.bfloat16, gran, bs, trans_c=tc)
    assert gemm_fp8.decline_reason(args, "gfx942") is None
    got = gemm_fp8.gemm_fp8(args)
    want = ref_gemm.gemm_fp8(args)
    assert got.shape == want.shape == ((n, m) if tc else (m, n))
    assert_close_to_reference(got, want, dtype=torch.bfloat16)
    assert fake.calls[-1][0] == ("gemm_a8w8" if gran == "ROWWISE" else "gemm_a8w8_blockscale")


@pytest.mark.skipif(FLOAT4_E2M1FN_X2 is None, reason="this torch has no float4_e2m1fn_x2")
@pytest.mark.parametrize("m,tc", [(3, False), (33, True)])
def test_gemm_fp4_matches_reference(fake, m, tc):
    n, k = 32, 128
    g = torch.Generator().manual_seed(5)
    a = torch.randint(0, 256, (m, k // 2), generator=g, dtype=torch.uint8).view(FLOAT4_E2M1FN_X2)
    b = torch.randint(0, 256, (n, k // 2), generator=g, dtype=torch.uint8).view(FLOAT4_E2M1FN_X2)
    sa = torch.randint(120, 134, (m, k // 32), generator=g, dtype=torch.uint8)
    sb = torch.randint(120, 134, (n, k // 32), generator=g, dtype=torch.uint8)
    args = GemmFp4Args(a, sa, b, sb, out_dtype=torch.bfloat16, trans_c=tc)
    assert gemm_fp4.decline_reason(args, "gfx950") is None
    got = gemm_fp4.gemm_fp4(args)
    want = ref_gemm.gemm_fp4(args)
    assert got.shape == want.shape
    assert_close_to_reference(got, want, dtype=torch.bfloat16)
    assert fake.calls[-1][1][4].shape[0] == 256  # out rows padded to 256


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("residual,gamma", [(False, True), (True, True), (False, False)])
def test_rmsnorm_fwd_matches_reference(fake, dtype, residual, gamma):
    g = torch.Generator().manual_seed(6)
    x = torch.randn(7, 123, generator=g).to(dtype)
    r = torch.randn(7, 123, generator=g).to(dtype) if residual else None
    w = torch.randn(123, generator=g).to(dtype) if gamma else None
    args = RmsNormFwdArgs(x, w, 1e-5, residual=r)
    assert rmsnorm.decline_reason(args, "gfx950") is None
    y, rstd, s = rmsnorm.rmsnorm_fwd(args)
    ry, rrstd, rs = ref_norm.rmsnorm_fwd(args)
    assert_close_to_reference(y, ry, dtype=dtype)
    torch.testing.assert_close(rstd, rrstd, rtol=1e-5, atol=1e-6)
    if residual:
        assert torch.equal(s, rs)  # fp32 add, one rounding: bit-identical to the reference
    else:
        assert s is None
    name, call = fake.calls[-1]
    assert name == "rmsnorm2d_fwd" and call[0] is (s if residual else x)
