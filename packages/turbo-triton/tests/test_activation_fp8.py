"""TRITON ``swiglu_fwd_fp8`` / ``geglu_fwd_fp8`` (CPU interpreter, tiny sizes): ``y`` bit for bit
TRITON's ``<kind>_fwd`` of the same rows, and ``q`` / ``scale_inv`` bit for bit ``quantize_fp8`` of
that ``y``, both the reference's and TRITON's (ROWWISE, BLOCKWISE 16/32, MX; E4M3/E5M2;
bf16/fp16/fp32 inputs; GeGLU; a row mask with NaN in inactive rows; several row and column blocks
with ragged last ones, a partial BLOCKWISE block and MX padding), with and without ``store_y``, on
two different tiles (the activation is elementwise: the tile cannot change a bit); rows with
NaN/Inf and all-zero rows as TRITON's own ``quantize_fp8`` of that ``y``; zero tokens and zero width;
what the capability check declines."""

import pytest
import torch

from turbo_core.dispatch.specs.activation import GluFwdArgs
from turbo_core.dispatch.specs.activation_fp8 import GluFwdFp8Args
from turbo_core.dispatch.specs.quantization import QuantizeFp8Args
from turbo_core.reference.quantization import quantize_fp8 as ref_quantize
from turbo_triton.activation.fp8_launch import GluFp8Config, can_handle, glu_fwd_fp8
from turbo_triton.activation.launch import glu_fwd
from turbo_triton.quantization.quantize import quantize_fp8 as triton_quantize

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
GRANS = {"rowwise": ("ROWWISE", None), "block16": ("BLOCKWISE", 16), "block32": ("BLOCKWISE", 32),
         "mx": ("MX_BLOCKWISE", 32)}
# Two rows and 32 columns a program (ROWWISE: the whole row): 5 rows give three row blocks, the last
# one ragged; 100 columns give four column blocks, the last one ragged (MX: the padding to 128).
SMALL = {"rowwise": GluFp8Config(2, 128, 4), "block16": GluFp8Config(2, 32, 4), "block32": GluFp8Config(2, 32, 4),
         "mx": GluFp8Config(2, 32, 4)}


def _bits(t):
    """Raw bits (NaN payloads included), so NaN rows compare too."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def _inputs(t, h, dtype, *, masked=False, seed=0):
    gen = torch.Generator().manual_seed(seed + 7 * h + t)
    x = (torch.randn(t, 2 * h, generator=gen) * 2).to(dtype)
    probs = torch.rand(t, generator=gen)
    mask = None
    if masked:
        mask = (torch.arange(t) % 3 != 1).to(torch.int64)
        x[mask == 0] = float("nan")
        probs[mask == 0] = float("nan")
    return x, probs, mask


def _check(x, probs, mask, gran_id, fp8, kind="swiglu", config=None, reference=True):
    gran, bs = GRANS[gran_id]
    args = GluFwdFp8Args(x, probs, fp8, gran, bs, mask, store_y=True)
    assert can_handle(args) is None
    q, s, y = glu_fwd_fp8(kind, args, config)
    y_n = glu_fwd(kind, GluFwdArgs(x, probs, mask))
    assert _same(y, y_n), f"y differs from {kind}_fwd"
    quantizers = [("TRITON", triton_quantize)] + ([("reference", ref_quantize)] if reference else [])
    for name, quantize in quantizers:
        wq, ws = quantize(QuantizeFp8Args(y_n, fp8, gran, -1, bs))
        assert _same(q, wq), f"q differs from the {name} quantize_fp8 of y"
        assert _same(s, ws), f"scale_inv differs from the {name} quantize_fp8 of y"
    q2, s2, y2 = glu_fwd_fp8(kind, GluFwdFp8Args(x, probs, fp8, gran, bs, mask), config)
    assert y2 is None and _same(q2, q) and _same(s2, s), "without store_y"
    return q, s, y


@pytest.mark.parametrize(("gran_id", "dtype"), [*[(g, torch.bfloat16) for g in GRANS], ("rowwise", torch.float16),
                                                  ("mx", torch.float32)], ids=lambda v: str(v).replace("torch.", ""))
def test_bit_for_bit_against_glu_then_quantize(gran_id, dtype):
    _check(*_inputs(5, 100, dtype), gran_id, E4M3)


@pytest.mark.parametrize("gran_id", list(GRANS))
def test_small_tiles_row_mask_and_e5m2(gran_id):
    """Several row and column blocks: the same checks, and the bits of the default tile (one program
    here)."""
    x, p, m = _inputs(5, 100, torch.bfloat16, masked=True)
    small = _check(x, p, m, gran_id, E5M2, config=SMALL[gran_id])
    default = glu_fwd_fp8("swiglu", GluFwdFp8Args(x, p, E5M2, *GRANS[gran_id], m, store_y=True))
    assert all(_same(a, b) for a, b in zip(default, small, strict=True)), "the tile changed a bit"


def test_geglu():
    _check(*_inputs(5, 100, torch.bfloat16, masked=True), "block32", E4M3, "geglu", config=SMALL["block32"])


def test_special_values_zero_rows_and_empty():
    x, p, _ = _inputs(4, 64, torch.float32)
    x[0] = 0.0  # an all-zero row: finite scales, zero data
    x[1, 3] = float("nan")
    x[2, 5] = float("-inf")  # silu(-inf) = -inf * 0: NaN
    x[3, 70] = float("inf")  # an infinite "up" value: an infinite y
    for gran_id in GRANS:
        _check(x, p, None, gran_id, E4M3, reference=False)
    for gran_id in ("rowwise", "mx"):
        _check(*_inputs(0, 64, torch.bfloat16), gran_id, E4M3)
        _check(*_inputs(3, 0, torch.bfloat16), gran_id, E4M3)


def test_declines_and_config_errors():
    x, p = torch.randn(4, 96), torch.rand(4)
    assert "power-of-two block_size" in can_handle(GluFwdFp8Args(x, p, E4M3, "BLOCKWISE", 24))
    assert "ROWWISE rows whole" in can_handle(GluFwdFp8Args(torch.empty(1, 2 * 40000), torch.rand(1), E4M3,
                                                            "ROWWISE"))
    assert can_handle(GluFwdFp8Args(torch.empty(1, 2 * 40000), torch.rand(1), E4M3, "BLOCKWISE", 128)) is None
    assert "contiguous" in can_handle(GluFwdFp8Args(torch.randn(96, 4).t(), p, E4M3, "ROWWISE"))
    with pytest.raises(ValueError, match=r"^config.block_n: "):
        glu_fwd_fp8("swiglu", GluFwdFp8Args(x, p, E4M3, "ROWWISE"), GluFp8Config(1, 32, 4))
    with pytest.raises(ValueError, match=r"^config.block_n: "):
        glu_fwd_fp8("swiglu", GluFwdFp8Args(x, p, E4M3, "BLOCKWISE", 32), GluFp8Config(1, 16, 4))
