"""gemm_fp8's mapping onto the CK call (``turbo_ck.gemm_fp8.plan`` / ``run``), on CPU through the fake
extension (``fake_ck.py``), checked against float64 math on the dequantized operands; and every decline."""

from __future__ import annotations

import pytest
import torch
from fake_ck import FakeCk

from turbo_ck.gemm_fp8 import Plan, plan, run
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args

E4, E5 = torch.float8_e4m3fnuz, torch.float8_e5m2fnuz


def make(m, n, k, *, gran, ta=False, tb=True, tc=False, da=E4, db=E4, out=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g).to(da)
    b = torch.randn(n, k, generator=g).to(db)
    if gran == "TENSORWISE":
        sa, sb = torch.tensor(0.5), torch.tensor(2.0)
        ea, eb = sa.double(), sb.double()
        ea_full, eb_full = ea.expand(m, k), eb.expand(n, k)
    elif gran == "ROWWISE":
        sa, sb = torch.rand(m, 1, generator=g) + 0.5, torch.rand(n, 1, generator=g) + 0.5
        ea_full, eb_full = sa.double().expand(m, k), sb.double().expand(n, k)
    else:
        sa = torch.rand(m, k // 128, generator=g) + 0.5
        sb = torch.rand(-(-n // 128), k // 128, generator=g) + 0.5
        ea_full = sa.double().repeat_interleave(128, 1)
        eb_full = sb.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:n]
    ref = (a.double() * ea_full) @ (b.double() * eb_full).T
    # turbo's stored layouts for the requested transposes
    a_st, sa_st = (a.t().contiguous(), sa.t().contiguous()) if ta else (a, sa)
    if tb:
        b_st, sb_st = b, sb
    else:
        b_st = b.t().contiguous()
        sb_st = sb.t().contiguous()
    if gran == "TENSORWISE":
        sa_st, sb_st = sa, sb
    args = GemmFp8Args(a_st, sa_st, b_st, sb_st, trans_a=ta, trans_b=tb, out_dtype=out, granularity=gran,
                       block_size=128 if gran == "BLOCKWISE" else None, trans_c=tc)
    return args, (ref.T if tc else ref)


# The layouts (NT, NN, TN, TT), the transposed result, mixed FP8 pairs and both result dtypes.
@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE"])
@pytest.mark.parametrize("ta,tb,tc", [(False, True, False), (False, False, False), (True, True, False),
                                      (True, False, True), (False, True, True)])
@pytest.mark.parametrize("da,db,out", [(E4, E4, torch.bfloat16), (E4, E5, torch.float16), (E5, E4, torch.bfloat16)])
def test_rowwise_and_tensorwise(gran, ta, tb, tc, da, db, out):
    args, ref = make(24, 40, 48, gran=gran, ta=ta, tb=tb, tc=tc, da=da, db=db, out=out)
    p = plan(args, "gfx942")
    assert isinstance(p, Plan), p
    fake = FakeCk()
    got = run(args, p, fake, "gfx942", 0)
    assert got.dtype == out and got.shape == ref.shape
    torch.testing.assert_close(got.double(), ref, rtol=1e-2, atol=1e-2)
    assert fake.calls[0][1] == 942


@pytest.mark.parametrize("ta,tb", [(False, True), (True, False)])
def test_blockwise(ta, tb):
    args, ref = make(16, 136, 256, gran="BLOCKWISE", ta=ta, tb=tb)
    p = plan(args, "gfx942")
    assert isinstance(p, Plan), p
    got = run(args, p, FakeCk(), "gfx942", 0)
    torch.testing.assert_close(got.double(), ref, rtol=1e-2, atol=1e-2)


def test_ocp_on_gfx950():
    args, ref = make(8, 16, 32, gran="ROWWISE", da=torch.float8_e4m3fn, db=torch.float8_e5m2)
    p = plan(args, "gfx950")
    assert isinstance(p, Plan)
    fake = FakeCk()
    torch.testing.assert_close(run(args, p, fake, "gfx950", 0).double(), ref, rtol=1e-2, atol=1e-2)
    assert fake.calls[0][1] == 950 and fake.calls[0][3:5] == (3, 4)


@pytest.mark.parametrize("arch,da,needle", [
    (None, E4, "compiled for gfx942 and gfx950 only"),
    ("gfx942", torch.float8_e4m3fn, "gfx942 reads float8_e4m3fnuz, float8_e5m2fnuz only"),
    ("gfx950", E4, "gfx950 reads float8_e4m3fn, float8_e5m2 only"),
])
def test_arch_and_flavour_declined(arch, da, needle):
    args, _ = make(8, 16, 32, gran="ROWWISE", da=da, db=da)
    assert needle in plan(args, arch)


def test_shape_and_feature_declines():
    args, _ = make(8, 16, 40, gran="ROWWISE")
    assert "K must be a multiple of 16 (K=40)" in plan(args, "gfx942")
    args, _ = make(8, 12, 32, gran="ROWWISE")
    assert "multiple of 8 columns (got 12)" in plan(args, "gfx942")
    args, _ = make(8, 16, 32, gran="ROWWISE", out=torch.float32)
    assert "write bf16 or fp16" in plan(args, "gfx942")
    args, _ = make(8, 16, 128, gran="BLOCKWISE", tc=True)
    assert "trans_c" in plan(args, "gfx942")
    base, _ = make(8, 16, 32, gran="ROWWISE")
    out = torch.zeros(8, 16)
    acc = GemmFp8Args(base.a, base.a_scale_inv, base.b, base.b_scale_inv, trans_b=True, granularity="ROWWISE", out=out)
    assert "no accumulation into out" in plan(acc, "gfx942")
