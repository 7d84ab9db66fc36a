"""fp32 results of HIPBLASLT's FP8 GEMMs on the GPU (``@pytest.mark.gpu``; skipped with the backend's
reason where the extension cannot load): with the opt-in ``TURBO_HIPBLASLT_FP8_FP32_OUT=1`` they are
served, and land within the accelerator gate of FP8 GEMMs (``assert_close_fp8_gemm``: Hopper's FP8
tensor cores add the products of one MMA at reduced precision) of float64 math on the same operands,
as torch's own cuBLASLt calls (``torch._scaled_mm``, ``F.scaled_mm``) on the same operands do. The
library's precision, not turbo's mapping, is why fp32 results are declined by default on sm89/sm90.

Why these cases: each granularity the library serves (TENSORWISE, a HYBRID E4M3 x E5M2 pair, ROWWISE,
BLOCKWISE 1x128 x 128x128), at K = 512 and K = 4096 (many MMA steps), NT as a Linear calls it.
"""

from __future__ import annotations

import pytest
import torch

from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args
from turbo_core.reference.gemm_fp8 import gemm_fp8 as reference_gemm_fp8
from turbo_core.testing.numerics import assert_close_fp8_gemm

pytestmark = pytest.mark.gpu

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
CASES = [("TENSORWISE", E4, E4, (128, 256, 512)), ("TENSORWISE", E4, E4, (256, 512, 4096)),
         ("TENSORWISE", E4, E5, (128, 256, 512)), ("ROWWISE", E4, E4, (128, 256, 512)),
         ("ROWWISE", E4, E4, (256, 512, 4096)), ("BLOCKWISE", E4, E4, (128, 256, 512)),
         ("BLOCKWISE", E4, E4, (256, 512, 4096))]


@pytest.fixture(scope="module")
def available():
    from turbo_hipblaslt.probe import probe

    reason = probe()
    if reason:
        pytest.skip(f"HIPBLASLT unavailable: {reason}")


def _torch_scaled_mm(gran, a, sa, b, sb):
    """torch's cuBLASLt call on the same NT operands (b ``[N, K]``), or None where this torch has none."""
    try:
        if gran == "TENSORWISE":
            return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
        if gran == "ROWWISE":
            return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.float32)
        from torch.nn.functional import ScalingType, scaled_mm

        return scaled_mm(a, b.t(), sa.t().contiguous().t(), ScalingType.BlockWise1x128, sb.t(),
                         ScalingType.BlockWise128x128, output_dtype=torch.float32)
    except (RuntimeError, ImportError, AttributeError, TypeError):
        return None


@pytest.mark.usefixtures("available")
@pytest.mark.parametrize("gran,da,db,mnk", CASES, ids=lambda v: str(v).removeprefix("torch.float8_"))
def test_opted_in_fp32_results_within_the_mma_floor(monkeypatch, gran, da, db, mnk):
    from turbo_hipblaslt import gemm_fp8 as kernel

    monkeypatch.setenv("TURBO_HIPBLASLT_FP8_FP32_OUT", "1")
    m, n, k = mnk
    g = torch.Generator().manual_seed(m + n + k)
    a, b = torch.randn(m, k, generator=g).to(da), torch.randn(n, k, generator=g).to(db)
    if gran == "TENSORWISE":
        sa, sb, bs = torch.rand((), generator=g) + 0.5, torch.rand((), generator=g) + 0.5, None
    elif gran == "ROWWISE":
        sa, sb, bs = torch.rand(m, 1, generator=g) + 0.5, torch.rand(n, 1, generator=g) + 0.5, None
    else:  # a: 1 x 128 blocks [M, K/128]; b (a weight): 128 x 128 tiles [N/128, K/128]
        sa, sb, bs = torch.rand(m, k // 128, generator=g) + 0.5, torch.rand(n // 128, k // 128, generator=g) + 0.5, 128
    want = reference_gemm_fp8(GemmFp8Args(a, sa, b, sb, trans_b=True, out_dtype=torch.float64, granularity=gran,
                                          block_size=bs))  # float64 on the CPU
    ac, sac, bc, sbc = a.cuda(), sa.cuda(), b.cuda(), sb.cuda()
    args = GemmFp8Args(ac, sac, bc, sbc, trans_b=True, out_dtype=torch.float32, granularity=gran, block_size=bs)
    reason = kernel.can_handle(args)
    if reason is not None and ("scale mode" in reason or "no algorithm" in reason):
        pytest.skip(reason)  # the loaded library lacks this mode
    assert reason is None, reason
    assert_close_fp8_gemm(kernel.gemm_fp8(args), want, what="HIPBLASLT")
    theirs = _torch_scaled_mm(gran, ac, sac, bc, sbc) if da == db else None
    if theirs is not None:
        assert_close_fp8_gemm(theirs, want, what="torch's cuBLASLt call on the same operands")
