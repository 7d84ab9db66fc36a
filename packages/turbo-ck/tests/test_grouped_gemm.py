"""grouped_gemm / grouped_gemm_fp8 onto CK calls (``turbo_ck.grouped_gemm.run``), on CPU through the fake
extension, against float64 math per group; empty groups and the tail rows past the last group."""

from __future__ import annotations

import pytest
import torch
from fake_ck import FakeCk

from turbo_ck.grouped_gemm import fp8_scales, group_calls, reason, reason_fp8, run
from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs
from turbo_core.dispatch.specs.grouped_gemm_fp8 import GroupedGemmFp8Args

LENS = [5, 0, 9, 3]  # an empty group, and 3 rows past the last group (M_total = 20)


def groups():
    lens = torch.tensor(LENS, dtype=torch.int64)
    offs = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)])
    return lens, offs


def reference(a, b_nk, offs, m_total, sa=None, sb=None):
    out = torch.zeros(m_total, b_nk.shape[1], dtype=torch.float64)
    for g in range(len(offs) - 1):
        s, e = offs[g], offs[g + 1]
        ag = a[s:e].double() * (sa[s:e, None] if sa is not None else 1)
        bg = b_nk[g].double() * (sb[g][:, None] if sb is not None else 1)
        out[s:e] = ag @ bg.T
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("trans_b", [True, False])
def test_grouped_16bit(dtype, trans_b):
    g = torch.Generator().manual_seed(1)
    lens, offs = groups()
    a = torch.randn(20, 32, generator=g).to(dtype)
    b_nk = torch.randn(4, 16, 32, generator=g).to(dtype)
    b = b_nk if trans_b else b_nk.transpose(1, 2).contiguous()
    assert reason(GroupedGemmArgs(a, b, lens, offs, trans_b=trans_b), "gfx942") is None
    fake = FakeCk()
    got = run(a, b, trans_b, offs.tolist(), dtype, fake, "gfx942", 0)
    torch.testing.assert_close(got.double(), reference(a, b_nk, offs.tolist(), 20), rtol=1e-2, atol=1e-2)
    assert len(fake.calls) == 3  # the empty group launches nothing
    assert (got[18:] == 0).all()


@pytest.mark.parametrize("gran", ["TENSORWISE", "ROWWISE"])
def test_grouped_fp8(gran):
    g = torch.Generator().manual_seed(2)
    lens, offs = groups()
    dt = torch.float8_e4m3fn
    a = torch.randn(20, 32, generator=g).to(dt)
    b = torch.randn(4, 16, 32, generator=g).to(dt)
    if gran == "TENSORWISE":
        sa, sb = torch.tensor(0.5), torch.tensor(3.0)
    else:
        sa, sb = torch.rand(20, 1, generator=g) + 0.5, torch.rand(4, 16, 1, generator=g) + 0.5
    args = GroupedGemmFp8Args(a, sa, b, sb, lens, offs, trans_b=True, out_dtype=torch.bfloat16, granularity=gran)
    assert reason_fp8(args, "gfx950") is None
    got = run(a, b, True, offs.tolist(), torch.bfloat16, FakeCk(), "gfx950", 0, fp8_scales(args))
    sa_v, sb_v = fp8_scales(args)
    ref = reference(a, b, offs.tolist(), 20, sa_v.double(), sb_v.double())
    torch.testing.assert_close(got.double(), ref, rtol=1e-2, atol=1e-2)


def test_group_calls_pointers():
    calls = group_calls([0, 2, 2, 5], a_ptr=1000, a_row=64, b_ptr=9000, b_step=512, c_ptr=50000, c_row=32,
                        sa_ptr=700, sb_ptr=800, sb_step=16)
    assert calls == [(2, 1000, 9000, 50000, 700, 800), (3, 1128, 10024, 50064, 708, 832)]


def test_declines():
    lens, offs = groups()
    a = torch.zeros(20, 32, dtype=torch.float32)
    assert "serves bf16/fp16" in reason(GroupedGemmArgs(a, torch.zeros(4, 16, 32), lens, offs, trans_b=True), "gfx942")
    a16 = torch.zeros(20, 36, dtype=torch.bfloat16)
    b16 = torch.zeros(4, 12, 36, dtype=torch.bfloat16)
    assert "K must be a multiple of 8 (K=36)" in reason(GroupedGemmArgs(a16, b16, lens, offs, trans_b=True), "gfx942")
    assert "gfx942 and gfx950 only" in reason(GroupedGemmArgs(a16, b16, lens, offs, trans_b=True), None)
    dt = torch.float8_e4m3fn
    args = GroupedGemmFp8Args(torch.zeros(20, 32).to(dt), torch.zeros(1, 20), torch.zeros(4, 16, 32).to(dt),
                              torch.zeros(4, 16, 1), lens, offs, out_dtype=torch.bfloat16, granularity="BLOCKWISE",
                              block_size=128)
    assert reason_fp8(args, "gfx950") == "CK grouped_gemm_fp8 serves TENSORWISE and ROWWISE, not BLOCKWISE"
    assert "gfx942 reads float8_e4m3fnuz" in reason_fp8(args, "gfx942")
