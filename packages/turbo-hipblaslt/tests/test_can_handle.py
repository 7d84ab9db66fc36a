"""Which calls the kernels decline, and why, decided from metadata only (no GPU here: the device
facts the FP8 checks read are stubbed with what an H200 with cuBLASLt 13 / an MI300 reports)."""

from __future__ import annotations

import pytest
import torch

from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp8Args
from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs, GroupedGemmVariableKArgs
from turbo_hipblaslt import gemm, gemm_fp8, grouped_gemm, runtime

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
H200 = {"platform": "cuda", "library": "cuBLASLt", "outer_vec": True, "block128": True, "ocp_fp8": True,
        "fnuz_fp8": False, "compute_capability": (9, 0)}
MI300 = {"platform": "rocm", "library": "hipBLASLt", "outer_vec": True, "block128": False, "ocp_fp8": True,
         "fnuz_fp8": True, "compute_capability": (9, 4)}


@pytest.fixture
def device(monkeypatch):
    """Stub the device facts; returns a setter ``device(caps, needs_tn)``."""
    def set_(caps, needs_tn):
        monkeypatch.setattr(runtime, "device_index", lambda t: 0)
        monkeypatch.setattr(runtime, "capabilities", lambda index: caps)
        monkeypatch.setattr(runtime, "fp8_needs_tn", lambda index: needs_tn)
    return set_


def fp8_args(gran="TENSORWISE", ta=False, tb=True, m=256, n=128, k=384, da=E4M3, db=E4M3, block_size=None,
             a2d=False, b2d=False, out_dtype=torch.bfloat16, out=None):
    a = torch.empty((k, m) if ta else (m, k), dtype=da)
    b = torch.empty((n, k) if tb else (k, n), dtype=db)
    if gran == "TENSORWISE":
        sa, sb = torch.ones(()), torch.ones(())
    elif gran == "MX_BLOCKWISE":  # NT, E8M0 bytes per 1x32 block along K
        sa, sb = torch.ones(m, k // 32, dtype=torch.uint8), torch.ones(n, k // 32, dtype=torch.uint8)
    elif gran == "ROWWISE":
        sa = torch.ones((1, m) if ta else (m, 1))
        sb = torch.ones((n, 1) if tb else (1, n))
    else:  # BLOCKWISE: 1-D along K, or 2-D tiles of the stored matrix
        bs = block_size
        sa = torch.ones(-(-a.shape[0] // bs), -(-a.shape[1] // bs)) if a2d else \
            torch.ones((k // bs, m) if ta else (m, k // bs))
        sb = torch.ones(-(-b.shape[0] // bs), -(-b.shape[1] // bs)) if b2d else \
            torch.ones((n, k // bs) if tb else (k // bs, n))
    return GemmFp8Args(a, sa, b, sb, ta, tb, out_dtype, gran, block_size, out=out)


def test_cpu_tensors_are_declined_by_every_kernel():
    a, b = torch.ones(4, 3), torch.ones(3, 5)
    assert gemm.can_handle(GemmArgs(a, b)) == "HIPBLASLT gemm runs on GPU tensors only (got cpu)"
    assert "GPU tensors only" in gemm_fp8.can_handle(fp8_args())
    lens = torch.tensor([2, 2])
    offs = torch.tensor([0, 2, 4])
    assert "GPU tensors only" in grouped_gemm.can_handle(GroupedGemmArgs(a, torch.ones(2, 3, 5), lens, offs))
    assert "GPU tensors only" in grouped_gemm.can_handle_variable_k(
        GroupedGemmVariableKArgs(a, torch.ones(4, 5), lens, offs))


def test_direct_result_dtypes():
    assert (torch.bfloat16, torch.float32) in gemm.DIRECT  # bf16 GEMM accumulating into an fp32 main_grad
    assert (torch.float32, torch.bfloat16) not in gemm.DIRECT  # served through an fp32 temporary
    assert (torch.bfloat16, torch.float16) not in gemm.DIRECT


@pytest.mark.parametrize("args,caps,needle", [
    (dict(gran="MX_BLOCKWISE"), H200, "does not serve MX_BLOCKWISE"),
    (dict(da=E5M2, db=E5M2), H200, "no E5M2 x E5M2 kernel"),
    (dict(da=torch.float8_e4m3fnuz, db=torch.float8_e4m3fnuz), H200, "FNUZ FP8 exists on AMD GPUs only"),
    (dict(gran="ROWWISE"), {**H200, "outer_vec": False}, "needs the OUTER_VEC_32F scale mode"),
    (dict(gran="BLOCKWISE", block_size=128), MI300, "needs the VEC128/BLK128x128 scale modes"),
    (dict(gran="BLOCKWISE", block_size=64), H200, "block_size=128 only"),
    (dict(gran="BLOCKWISE", block_size=128, k=320), H200, "K to be a multiple of 128"),
    (dict(gran="BLOCKWISE", block_size=128, a2d=True, b2d=True), H200, "no 128x128 x 128x128 kernel"),
    (dict(gran="BLOCKWISE", block_size=128, m=200, a2d=True), H200, "outer dim to be a multiple of 128"),
])
def test_fp8_declines_with_the_reason(device, args, caps, needle):
    device(caps, needs_tn=caps["platform"] == "cuda")
    reason = gemm_fp8._prepare(fp8_args(**args))
    assert isinstance(reason, str) and needle in reason


@pytest.mark.parametrize("gran,block_size,a2d,b2d", [
    ("TENSORWISE", None, False, False), ("ROWWISE", None, False, False), ("BLOCKWISE", 128, False, True),
    ("BLOCKWISE", 128, True, False), ("BLOCKWISE", 128, False, False),
])
@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_fp8_on_hopper_copies_the_operands_not_contiguous_along_k(device, gran, block_size, a2d, b2d, ta, tb):
    device(H200, needs_tn=True)
    prep = gemm_fp8._prepare(fp8_args(gran, ta, tb, block_size=block_size, a2d=a2d, b2d=b2d))
    assert not isinstance(prep, str), prep
    assert (prep.copy_a, prep.copy_b) == (ta, not tb)  # a [M, K] and b [N, K] row-major are K-contiguous
    assert prep.plan.tn


def test_fp8_modes_follow_the_scale_layouts(device):
    device(H200, needs_tn=True)
    prep = gemm_fp8._prepare(fp8_args("BLOCKWISE", block_size=128, b2d=True))
    assert (prep.a_kind, prep.b_kind) == ("1d", "2d")
    assert (prep.a_mode, prep.b_mode) == (2, 3)  # VEC128 for a's 1x128 blocks, BLK128x128 for b's tiles
    prep = gemm_fp8._prepare(fp8_args("ROWWISE"))
    assert (prep.a_mode, prep.b_mode) == (1, 1)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, True)])
def test_fp8_without_the_tn_rule_copies_nothing(device, ta, tb):
    device(MI300, needs_tn=False)
    prep = gemm_fp8._prepare(fp8_args("TENSORWISE", ta, tb, da=torch.float8_e4m3fnuz, db=torch.float8_e5m2fnuz))
    assert not isinstance(prep, str), prep
    assert (prep.copy_a, prep.copy_b) == (False, False)


BLACKWELL = {**H200, "compute_capability": (10, 0)}
FP32_NEEDLE = "no fp32 result (out_dtype=float32 or an fp32 out) on sm90 with cuBLASLt"


@pytest.mark.parametrize("gran,block_size,b2d", [("TENSORWISE", None, False), ("ROWWISE", None, False),
                                                 ("BLOCKWISE", 128, True)])
@pytest.mark.parametrize("how", ["out_dtype", "out"])
def test_fp8_fp32_results_are_declined_on_hopper(device, monkeypatch, gran, block_size, b2d, how):
    # Hopper's FP8 MMAs accumulate at reduced precision: an fp32 result (asked for, or an fp32 out to
    # accumulate into) would miss fp32's tolerance, so it is declined, naming the opt-in.
    monkeypatch.delenv("TURBO_HIPBLASLT_FP8_FP32_OUT", raising=False)
    device(H200, needs_tn=True)
    kw = dict(out_dtype=torch.float32) if how == "out_dtype" else dict(out_dtype=None, out=torch.zeros(256, 128))
    reason = gemm_fp8._prepare(fp8_args(gran, block_size=block_size, b2d=b2d, **kw))
    assert isinstance(reason, str) and FP32_NEEDLE in reason and "TURBO_HIPBLASLT_FP8_FP32_OUT=1" in reason
    for served in (dict(out_dtype=torch.bfloat16), dict(out_dtype=torch.float16),
                   dict(out_dtype=None, out=torch.zeros(256, 128, dtype=torch.bfloat16))):
        prep = gemm_fp8._prepare(fp8_args(gran, block_size=block_size, b2d=b2d, **served))
        assert not isinstance(prep, str), prep
    monkeypatch.setenv("TURBO_HIPBLASLT_FP8_FP32_OUT", "1")
    prep = gemm_fp8._prepare(fp8_args(gran, block_size=block_size, b2d=b2d, **kw))
    assert not isinstance(prep, str), prep


@pytest.mark.parametrize("caps,needs_tn,fnuz", [(BLACKWELL, False, False), (MI300, False, True)])
def test_fp8_fp32_results_are_served_where_fp8_accumulates_in_fp32(device, monkeypatch, caps, needs_tn, fnuz):
    monkeypatch.delenv("TURBO_HIPBLASLT_FP8_FP32_OUT", raising=False)
    device(caps, needs_tn=needs_tn)
    dt = torch.float8_e4m3fnuz if fnuz else E4M3
    prep = gemm_fp8._prepare(fp8_args(out_dtype=torch.float32, da=dt, db=dt))
    assert not isinstance(prep, str), prep


def test_fp8_fp32_opt_in_rejects_other_values(device, monkeypatch):
    device(H200, needs_tn=True)
    monkeypatch.setenv("TURBO_HIPBLASLT_FP8_FP32_OUT", "yes")
    with pytest.raises(ValueError, match="TURBO_HIPBLASLT_FP8_FP32_OUT: expected 0 or 1, got 'yes'"):
        gemm_fp8._prepare(fp8_args(out_dtype=torch.float32))
