"""TRITON ``rmsnorm_fwd_fp8`` (CPU interpreter, tiny sizes): bit for bit the TRITON ``rmsnorm_fwd``
of the same rows (same tile) followed by ``quantize_fp8`` of its ``y``, both the reference's and
TRITON's (ROWWISE, BLOCKWISE 16/32, MX; E4M3/E5M2; bf16/fp16/fp32 inputs; residual, zero-centred
and absent gamma; several row blocks with a ragged last one, a partial MX/BLOCKWISE block), with
and without ``store_y``; rows with NaN/Inf and all-zero rows as TRITON's own ``quantize_fp8`` of
that ``y`` (the sign of a NaN made by ``inf * 0`` is where TRITON's and the reference's FP8 NaN
bytes can differ); what the capability check declines."""

import pytest
import torch

from turbo_core.dispatch.specs.normalization import RmsNormFwdArgs
from turbo_core.dispatch.specs.normalization_fp8 import RmsNormFwdFp8Args
from turbo_core.dispatch.specs.quantization import QuantizeFp8Args
from turbo_core.reference.quantization import quantize_fp8 as ref_quantize
from turbo_triton.normalization.fp8_launch import can_handle, rmsnorm_fwd_fp8
from turbo_triton.normalization.launch import RowConfig, rmsnorm_fwd
from turbo_triton.quantization.quantize import quantize_fp8 as triton_quantize

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
GRANS = {"rowwise": ("ROWWISE", None), "block16": ("BLOCKWISE", 16), "block32": ("BLOCKWISE", 32),
         "mx": ("MX_BLOCKWISE", 32)}
# two rows a program: 5 rows give three programs, the last one ragged
TILE2 = RowConfig(block_m=2, block_n=128, num_warps=4, programs_per_sm=1)


def _bits(t):
    """Raw bits (NaN payloads included), so NaN rows compare too."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def _inputs(t, h, dtype, *, residual=False, affine="gamma", seed=0):
    gen = torch.Generator().manual_seed(seed + 7 * h + t)
    x = (torch.randn(t, h, generator=gen) * 2).to(dtype)
    r = torch.randn(t, h, generator=gen).to(dtype) if residual else None
    g = None
    if affine != "none":
        g = ((0.0 if affine == "zero_centered" else 1.0) + 0.5 * torch.randn(h, generator=gen)).to(dtype)
    return x, r, g


def _check(x, r, g, gran_id, fp8, zero_centered=False, config=None, reference=True):
    gran, bs = GRANS[gran_id]
    args = RmsNormFwdFp8Args(x, g, fp8, gran, bs, 1e-5, zero_centered, r, store_y=True)
    assert can_handle(args) is None
    q, s, y, rstd, xr = rmsnorm_fwd_fp8(args, config)
    y_n, rstd_n, xr_n = rmsnorm_fwd(RmsNormFwdArgs(x, g, 1e-5, zero_centered, r), config)
    assert _same(y, y_n) and _same(rstd, rstd_n), "y/rstd differ from rmsnorm_fwd"
    assert (xr is None and xr_n is None) or _same(xr, xr_n)
    quantizers = [("TRITON", triton_quantize)] + ([("reference", ref_quantize)] if reference else [])
    for name, quantize in quantizers:
        wq, ws = quantize(QuantizeFp8Args(y_n, fp8, gran, -1, bs))
        assert _same(q, wq), f"q differs from the {name} quantize_fp8 of y"
        assert _same(s, ws), f"scale_inv differs from the {name} quantize_fp8 of y"
    q2, s2, y2, _, _ = rmsnorm_fwd_fp8(RmsNormFwdFp8Args(x, g, fp8, gran, bs, 1e-5, zero_centered, r), config)
    assert y2 is None and _same(q2, q) and _same(s2, s), "without store_y"


@pytest.mark.parametrize("gran_id", list(GRANS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
def test_bit_for_bit_against_rmsnorm_then_quantize(gran_id, dtype):
    _check(*_inputs(5, 100, dtype), gran_id, E4M3)


@pytest.mark.parametrize("gran_id", list(GRANS))
def test_e5m2_residual_and_several_row_blocks(gran_id):
    _check(*_inputs(5, 96, torch.bfloat16, residual=True), gran_id, E5M2, config=TILE2)


@pytest.mark.parametrize("affine", ["zero_centered", "none"])
def test_gamma_variants(affine):
    x, r, g = _inputs(3, 100, torch.bfloat16, affine=affine)
    _check(x, r, g, "block16", E4M3, zero_centered=affine == "zero_centered")
    _check(x, r, g, "mx", E4M3, zero_centered=affine == "zero_centered")


def test_special_values_and_zero_rows():
    x, _, g = _inputs(4, 64, torch.float32)
    x[0] = 0.0  # an all-zero row: finite scales, zero data
    x[1, 3] = float("nan")
    x[2, 5] = float("inf")  # rstd 0: the row is zeros and one NaN (inf * 0)
    for gran_id in ("rowwise", "block16", "block32"):
        _check(x, None, g, gran_id, E4M3, reference=False)
    x, _, g = _inputs(4, 100, torch.float32)
    x[0], x[1, 3], x[2, 5] = 0.0, float("nan"), float("inf")
    _check(x, None, g, "mx", E4M3, reference=False)
    _check(torch.empty(0, 64), None, g, "rowwise", E4M3)


def test_declines_with_reasons():
    x = torch.randn(4, 48)
    assert "power-of-two block_size" in can_handle(RmsNormFwdFp8Args(x, None, E4M3, "BLOCKWISE", 24))
    assert "power-of-two block_size" in can_handle(RmsNormFwdFp8Args(x, None, E4M3, "BLOCKWISE", 128))
    assert "pad to 128" in can_handle(RmsNormFwdFp8Args(x, None, E4M3, "MX_BLOCKWISE", 32))
    assert "walked in chunks" in can_handle(RmsNormFwdFp8Args(torch.empty(1, 40000), None, E4M3, "ROWWISE"))
    assert "contiguous" in can_handle(RmsNormFwdFp8Args(torch.randn(48, 4).t(), None, E4M3, "ROWWISE"))
