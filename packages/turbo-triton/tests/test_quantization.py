"""The TRITON FP8 quantization kernels directly (CPU interpreter) against the TORCH reference
kernels (``turbo_core.reference.quantization``, plain torch ops) bit for bit, and against
float64 math: every granularity and axis, E4M3/E5M2 (and FNUZ), zero blocks, saturation,
subnormal results, NaN/Inf, non-contiguous and empty inputs, every kernel path (forced small
tiles so that programs cover several tiles with ragged edges; the two-pass amax path), the
fused with_trans outputs, dequantization, and what the capability checks decline.

"Bit for bit" compares raw bytes/bits everywhere except at NaN, where both sides must be NaN
(NaN payloads and signs are not part of the spec)."""

import math

import pytest
import torch
import triton
import triton.language as tl
from bit_compare import assert_same

from turbo_core.dispatch.specs.quantization import DequantizeFp8Args, QuantizeFp8Args, QuantizeFp8WithTransArgs
from turbo_core.low_precision import ScalingRecipe, fp8_max, mx_emax
from turbo_core.reference import quantization as ref
from turbo_triton.quantization import common, dequantize, quantize, quantize_with_trans
from turbo_triton.quantization.common import Tile
from turbo_triton.quantization.numerics import decode_fp8, encode_fp8, saturate

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FNUZ = (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
FP8 = (E4M3, E5M2)
R0, R2D = ScalingRecipe(), ScalingRecipe(use_2d_block=True)


def _input(shape, dtype=torch.bfloat16, seed=0):
    """Gaussian * 3 with: all-zero rows 0-1, an all-zero column 0 and a zero 16x16 tile (zero
    blocks of every shape), tiny values (subnormal FP8 results), and in the last row a -0 and
    500 (beyond E4M3's max: saturates under MX scales)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 3
    flat = x.view(-1)
    flat[::7] *= 1e-3
    if x.dim() >= 2:
        x[..., :2, :] = 0
        x[..., :, 0] = 0
        x[..., 16:32, 16:32] = 0
    if flat.numel() > 2:
        flat[-1] = 500.0
        flat[-2] = -0.0
    return x.to(dtype)


def _quant_args(x, dtype, gran, axis=None, bs=None, recipe=R0):
    return QuantizeFp8Args(x, dtype, gran, axis, bs, recipe)


def _check_quantize(args, tile=None):
    q, s = quantize.quantize_fp8(args, tile)
    rq, rs = ref.quantize_fp8(args)
    assert_same(q, rq, "q")
    assert_same(s, rs, "scale_inv")
    return q, s


# The FP8 conversion itself: every byte decodes like torch, and the encoder rounds exactly like
# torch's cast on every representable value, every midpoint (ties to even), just above/below each
# midpoint and random values, both signs, NaN, and for FNUZ no negative zero.
@triton.jit
def _codec_kernel(v_ptr, b_ptr, enc_ptr, dec_ptr, n, FMAX: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr,
                  FNUZ: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    v = tl.load(v_ptr + offs, mask=ok, other=0.0)
    tl.store(enc_ptr + offs, encode_fp8(saturate(v, FMAX), MB, BIAS, FNUZ).to(tl.uint8), mask=ok)
    byte = tl.load(b_ptr + (offs % 256), mask=ok, other=0).to(tl.int32)
    tl.store(dec_ptr + offs, decode_fp8(byte, MB, BIAS, FNUZ), mask=ok)


# The software FP8 conversion itself: every byte decodes like torch, and the encoder rounds like
# torch's cast on every representable value, every midpoint (ties to even), the floats next to
# each midpoint, random values, both signs, NaN/Inf, and FNUZ has no negative zero.
@pytest.mark.parametrize("dtype", FP8 + FNUZ, ids=str)
def test_fp8_codec_against_torch_casts(dtype):
    fmax = fp8_max(dtype)
    grid_vals = torch.arange(256, dtype=torch.uint8).view(dtype).float()
    finite = grid_vals[torch.isfinite(grid_vals)].unique()
    finite = finite[finite.abs() <= fmax].double()
    mids = (finite[1:] + finite[:-1]) / 2
    g = torch.Generator().manual_seed(1)
    rand = (torch.rand(4000, generator=g, dtype=torch.float64) * 2 - 1) * fmax * 1.5
    tiny = torch.rand(1000, generator=g, dtype=torch.float64) * 2 * finite.abs()[finite != 0].min()
    vals = torch.cat([finite, mids, torch.nextafter(mids.float(), torch.tensor(math.inf)).double(),
                      torch.nextafter(mids.float(), torch.tensor(-math.inf)).double(), rand, tiny, -tiny,
                      torch.tensor([0.0, -0.0, fmax * 4, -fmax * 4, math.inf, -math.inf, math.nan], dtype=torch.float64)])
    v = vals.float()
    n = v.numel()
    enc = torch.empty(n, dtype=torch.uint8)
    dec = torch.empty(n, dtype=torch.float32)
    fmt = common.fmt_constexprs(dtype)
    _codec_kernel[(triton.cdiv(n, 1024),)](v, torch.arange(256, dtype=torch.uint8), enc, dec, n, FMAX=fmt["FMAX"],
                                   MB=fmt["MB"], BIAS=fmt["BIAS"], FNUZ=fmt["FNUZ"], BLOCK=1024)
    # The reference path: clamp (NaN kept) then torch's cast.
    want = v.clamp(-fmax, fmax).to(dtype)
    assert_same(enc.view(dtype), want, f"encode {dtype}")
    bytes_ = torch.arange(n) % 256
    assert_same(dec, bytes_.to(torch.uint8).view(dtype).float(), f"decode {dtype}")


# Every granularity/axis of quantize_fp8 at odd 2-D and 3-D sizes, bf16 input, both OCP formats;
# block sizes 16, 32 and 128 (one ragged block) where the layout allows.
QUANT_CASES = [
    ("TENSORWISE", None, None, R0),
    ("ROWWISE", -1, None, R0),
    ("ROWWISE", 0, None, R0),
    ("BLOCKWISE", -1, 16, R0),
    ("BLOCKWISE", -1, 128, R0),
    ("BLOCKWISE", 0, 32, R0),
    ("BLOCKWISE", None, 16, R2D),
    ("BLOCKWISE", None, 32, R2D),
    ("MX_BLOCKWISE", -1, 32, R0),
    ("MX_BLOCKWISE", -2, 32, R0),
    ("MX_BLOCKWISE", -1, 32, R2D),
    ("MX_BLOCKWISE", 0, 32, R2D),
]
IDS = [f"{g}-{a}-{b}-{'2d' if r.use_2d_block else '1d'}" for g, a, b, r in QUANT_CASES]


@pytest.mark.parametrize("dtype", FP8, ids=str)
@pytest.mark.parametrize("gran,axis,bs,recipe", QUANT_CASES, ids=IDS)
@pytest.mark.parametrize("shape", [(37, 45), (3, 19, 70)], ids=lambda s: "x".join(map(str, s)))
def test_quantize_bit_identical_to_reference(shape, gran, axis, bs, recipe, dtype):
    _check_quantize(_quant_args(_input(shape, seed=len(shape)), dtype, gran, axis, bs, recipe))


# Axes in the middle of 3-D/4-D tensors and 1-D tensors (ROWWISE/BLOCKWISE take any axis).
@pytest.mark.parametrize("gran,bs", [("ROWWISE", None), ("BLOCKWISE", 16)])
@pytest.mark.parametrize("shape,axis", [((3, 19, 10), 1), ((2, 5, 3, 7), -3), ((2, 5, 3, 7), 2), ((45,), 0)],
                         ids=["3d-mid", "4d-1", "4d-2", "1d"])
def test_quantize_any_axis(shape, axis, gran, bs):
    _check_quantize(_quant_args(_input(shape, seed=3), E4M3, gran, axis, bs))


# fp16 and fp32 inputs (fp32 carries values bf16 cannot: the scaled products round differently).
@pytest.mark.parametrize("in_dtype", [torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("gran,axis,bs,recipe", [QUANT_CASES[i] for i in (0, 1, 5, 6, 8, 9)],
                         ids=[IDS[i] for i in (0, 1, 5, 6, 8, 9)])
def test_quantize_fp16_fp32_inputs(gran, axis, bs, recipe, in_dtype):
    _check_quantize(_quant_args(_input((33, 70), in_dtype, seed=5), E5M2, gran, axis, bs, recipe))


# Subnormal inputs: rows of values below each input dtype's smallest normal (MX blocks of them
# get X = -127 for bf16/fp32 and keep non-zero data).
@pytest.mark.parametrize("in_dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("gran,axis,bs,recipe", [QUANT_CASES[i] for i in (1, 7, 8, 9)], ids=[IDS[i] for i in (1, 7, 8, 9)])
def test_quantize_subnormal_inputs(gran, axis, bs, recipe, in_dtype):
    x = _input((37, 45), torch.float32, seed=6)
    x[2:20] = x[2:20] / x[2:20].abs().max() * (0.9 * torch.finfo(in_dtype).smallest_normal)
    x = x.to(in_dtype)
    assert (x[2:20] != 0).any() and (x[2:20].abs() < torch.finfo(in_dtype).smallest_normal).all()
    q, _ = _check_quantize(_quant_args(x, E4M3, gran, axis, bs, recipe))
    if gran == "MX_BLOCKWISE" and axis == -1:
        assert (q[2:20].float() != 0).any()


# Non-contiguous inputs: a transposed 2-D tensor (strided view, no copy), a column slice, and a
# permuted 3-D tensor (its dims cannot merge: the launcher copies).
NONCONTIG = {
    "transposed": lambda: _input((45, 37), seed=7).t(),
    "sliced": lambda: _input((37, 90), seed=8)[:, ::2],
    "permuted": lambda: _input((19, 3, 40), seed=9).permute(1, 0, 2),
}


@pytest.mark.parametrize("layout", list(NONCONTIG))
@pytest.mark.parametrize("gran,axis,bs,recipe", [QUANT_CASES[i] for i in (0, 1, 2, 3, 5, 6, 8, 9)],
                         ids=[IDS[i] for i in (0, 1, 2, 3, 5, 6, 8, 9)])
def test_quantize_non_contiguous(layout, gran, axis, bs, recipe):
    x = NONCONTIG[layout]()
    assert not x.is_contiguous()
    _check_quantize(_quant_args(x, E4M3, gran, axis, bs, recipe))


# NaN and Inf in float32 input: a NaN block/row gets NaN scales and NaN data, an Inf block gets
# scale_inv = inf (FP32) or the E8M0 NaN byte, as the reference.
@pytest.mark.parametrize("dtype", FP8, ids=str)
@pytest.mark.parametrize("gran,axis,bs,recipe", QUANT_CASES, ids=IDS)
def test_quantize_nan_inf_like_reference(gran, axis, bs, recipe, dtype):
    x = _input((40, 70), torch.float32, seed=11)
    x[5, 3] = math.nan
    x[9, 40] = math.inf
    x[30, 66] = -math.inf
    q, s = _check_quantize(_quant_args(x, dtype, gran, axis, bs, recipe))
    if gran == "MX_BLOCKWISE":
        assert (s.view(torch.uint8) == 255).any() and (s.view(torch.uint8) != 255).any()
    else:
        assert torch.isnan(s).any() or gran == "TENSORWISE"


# Every kernel path with tiles forced small: several programs per dim, ragged edges, several
# groups per tile; the two-pass amax path by lowering the fused-reduction limits.
TILE_CASES = [
    ("BLOCKWISE", -1, 16, R0, Tile(4, 32)),
    ("BLOCKWISE", 0, 16, R0, Tile(32, 8)),
    ("BLOCKWISE", None, 16, R2D, Tile(16, 32)),
    ("ROWWISE", -1, None, R0, Tile(2, 64)),
    ("TENSORWISE", None, None, R0, Tile(4, 16)),
    ("MX_BLOCKWISE", -1, 32, R0, Tile(4, 64)),
    ("MX_BLOCKWISE", -2, 32, R0, Tile(64, 4)),
    ("MX_BLOCKWISE", -1, 32, R2D, Tile(32, 32)),
    ("MX_BLOCKWISE", -2, 32, R2D, Tile(32, 32)),
    # a group per tile row / tile column / whole tile: the reductions without the 4-D reshape
    ("BLOCKWISE", -1, 16, R0, Tile(4, 16)),
    ("BLOCKWISE", 0, 16, R0, Tile(16, 8)),
    ("BLOCKWISE", None, 16, R2D, Tile(16, 16)),
    ("MX_BLOCKWISE", -2, 32, R0, Tile(32, 4)),
    ("MX_BLOCKWISE", -1, 32, R0, Tile(4, 32)),
]


@pytest.mark.parametrize("gran,axis,bs,recipe,tile", TILE_CASES,
                         ids=[f"{g}-{a}-{t.block_m}x{t.block_n}" for g, a, _, _, t in TILE_CASES])
def test_quantize_small_tiles(gran, axis, bs, recipe, tile):
    _check_quantize(_quant_args(_input((2, 37, 45), seed=13), E4M3, gran, axis, bs, recipe), tile)


@pytest.mark.parametrize("axis,tile", [(-1, None), (0, None), (-1, Tile(4, 16)), (0, Tile(16, 4)), (1, Tile(4, 8))])
def test_rowwise_two_pass_amax_path(monkeypatch, axis, tile):
    monkeypatch.setattr(quantize, "ROW_FUSED_MAX", 8)
    monkeypatch.setattr(quantize, "COL_FUSED_MAX", 8)
    x = _input((3, 37, 45), torch.float32, seed=17)
    x[1, 5, 7] = math.nan
    x[2, 30, 40] = math.inf
    _check_quantize(_quant_args(x, E4M3, "ROWWISE", axis), tile)


@pytest.mark.parametrize("tile", [Tile(4, 16, iters=3), Tile(8, 8, iters=2), Tile(2, 8, iters=32), None])
def test_rowwise_two_pass_amax_walks_down_m(monkeypatch, tile):
    """Columns (axis 1 of ``[3, 37, 45]``) through amax programs walking several tiles down M
    (ragged: the last program's walk passes M), a NaN and an Inf in different strips."""
    monkeypatch.setattr(quantize, "COL_FUSED_MAX", 8)
    axis = 1
    x = _input((3, 37, 45), torch.float32, seed=23)
    x[1, 33, 7] = math.nan
    x[2, 3, 40] = math.inf
    _check_quantize(_quant_args(x, E4M3, "ROWWISE", axis), tile)


@pytest.mark.parametrize("shape,tile", [((8, 4096), None), ((64, 96), Tile(4, 32, iters=4)), ((3, 1024), None)],
                         ids=["flat-rows", "flat-rows-walk", "one-row"])
@pytest.mark.parametrize("special", [None, "nan", "inf", "last-max"])
@pytest.mark.parametrize("amax", ["partials", "atomics"])
def test_tensorwise_flat_rows_view(monkeypatch, shape, tile, special, amax):
    """TENSORWISE of a contiguous tensor runs on ``[1, numel / 1024, 1024]`` (amax walking down
    the rows, then the cast); 3 x 1024 elements is one such row too few. The cast reduces the amax
    programs' partial maxima, or (past ``MAX_PARTIALS`` programs, forced here) reads the one cell
    they ``atomic_max`` into; the special value sits in a middle or the last program's rows."""
    if amax == "atomics":
        monkeypatch.setattr(quantize, "MAX_PARTIALS", 0)
    x = _input(shape, torch.bfloat16, seed=29)
    if special == "last-max":
        x.view(-1)[-3] = 1e4
    elif special:
        x.view(-1)[x.numel() // 3] = math.nan if special == "nan" else -math.inf
    _check_quantize(_quant_args(x, E4M3, "TENSORWISE"), tile)
    _check_quantize(_quant_args(x.t(), E5M2, "TENSORWISE"), tile)


@pytest.mark.parametrize("shape,launches", [((16, 128), 1), ((5, 7), 1), ((1, 9000), 1), ((16, 1024), 1),
                                            ((17, 1000), 2), ((32, 1024), 2)],
                         ids=["2x1024-view", "odd", "one-row", "at-the-limit", "one-row-past-the-limit",
                              "rows-past-the-limit"])
@pytest.mark.parametrize("special", [None, "nan", "inf", "zeros"])
def test_small_tensorwise_is_one_program(shape, launches, special):
    """A TENSORWISE tensor whose view ([1, numel / 1024, 1024] or [1, 1, numel]) rounds up to at
    most ONE_PROGRAM_MAX elements is one launch (the whole tensor one group of quant_groups_kernel);
    larger ones the amax and cast passes. Both give the reference's bits, NaN, Inf and all-zero
    tensors included."""
    from turbo_triton import launcher

    x = _input(shape, torch.bfloat16, seed=31)
    if special == "zeros":
        x.zero_()
    elif special:
        x.view(-1)[x.numel() // 2] = math.nan if special == "nan" else -math.inf
    launcher.clear()
    _check_quantize(_quant_args(x, E4M3, "TENSORWISE"))
    assert launcher.stats()["slow"] + launcher.stats()["fast"] == launches


def test_rowwise_long_rows_natural_sizes():
    """Rows longer than ROW_FUSED_MAX and columns longer than COL_FUSED_MAX, unpatched."""
    _check_quantize(_quant_args(_input((2, quantize.ROW_FUSED_MAX + 37), seed=19), E4M3, "ROWWISE", -1))
    _check_quantize(_quant_args(_input((quantize.COL_FUSED_MAX + 45, 3), seed=20), E5M2, "ROWWISE", 0))


@pytest.mark.parametrize("shape", [(0, 45), (37, 0), (0,), (2, 0, 64)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("gran,axis,bs,recipe", QUANT_CASES, ids=IDS)
def test_quantize_empty_like_reference(shape, gran, axis, bs, recipe):
    if (gran == "MX_BLOCKWISE" or recipe.use_2d_block) and len(shape) < 2:
        pytest.skip("2-D/3-D only")
    _check_quantize(_quant_args(torch.zeros(shape, dtype=torch.bfloat16), E4M3, gran, axis, bs, recipe))


def test_quantize_zero_dim_tensorwise():
    _check_quantize(_quant_args(torch.tensor(-3.5, dtype=torch.bfloat16), E4M3, "TENSORWISE"))


@pytest.mark.parametrize("dtype", FNUZ, ids=str)
@pytest.mark.parametrize("gran,axis,bs,recipe", [QUANT_CASES[i] for i in (0, 1, 2, 3, 6)],
                         ids=[IDS[i] for i in (0, 1, 2, 3, 6)])
def test_fnuz_formats_like_reference(gran, axis, bs, recipe, dtype):
    x = _input((37, 45), torch.float32, seed=23)
    x[4, 4] = math.nan
    q, s = _check_quantize(_quant_args(x, dtype, gran, axis, bs, recipe))
    d = DequantizeFp8Args(q, s, torch.float32, gran, axis, bs, recipe)
    assert_same(dequantize.dequantize_fp8(d), ref.dequantize_fp8(d), "dequantized")


# -- independent float64 math -------------------------------------------------------------------------

def test_fp32_scales_and_elements_against_float64():
    """BLOCKWISE 1x16: scale_inv = max(amax, 1e-12) / fp8_max within fp32 rounding, each element
    the nearest FP8 value of x / scale_inv (within half a step), zero blocks exactly zero."""
    x = _input((37, 45), torch.float32, seed=29)
    q, s = quantize.quantize_fp8(_quant_args(x, E4M3, "BLOCKWISE", -1, 16))
    x64 = x.double()
    blocks = torch.nn.functional.pad(x64.abs(), (0, 48 - 45)).reshape(37, 3, 16)
    want_s = blocks.amax(-1).clamp_min(1e-12) / 448.0
    torch.testing.assert_close(s.double(), want_s, rtol=2e-7, atol=0)
    s_el = s.double().repeat_interleave(16, 1)[:, :45]
    v = (x64 / s_el).clamp(-448, 448)
    _, e = torch.frexp(v.abs())
    half_step = torch.pow(2.0, (e.double() - 1).clamp_min(-6) - 3) / 2
    assert ((q.double() - v).abs() <= half_step * (1 + 1e-6)).all()
    assert (q[:2].double() == 0).all()


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_mx_bytes_and_elements_against_float64(dtype):
    """MX row-wise: byte = floor(log2(amax)) - emax + 127 (0 for zero blocks, padding included),
    elements exactly x / 2**X rounded to the FP8 grid (float64 round-half-even) and saturated."""
    x = _input((9, 70), torch.float32, seed=31)
    q, s = quantize.quantize_fp8(_quant_args(x, dtype, "MX_BLOCKWISE", -1, 32))
    assert q.shape == (9, 128) and s.shape == (9, 4)
    emax = mx_emax(dtype)
    xp = torch.nn.functional.pad(x.double(), (0, 128 - 70)).reshape(9, 4, 32)
    amax = xp.abs().amax(-1)
    want = torch.tensor([[0 if a == 0 else max(-127, math.floor(math.log2(a)) - emax) + 127 for a in row]
                         for row in amax.tolist()])
    assert torch.equal(s.view(torch.uint8).long(), want)
    scaled = xp * torch.pow(2.0, -(want.double() - 127)).unsqueeze(-1)
    fmax = fp8_max(dtype)
    mbits = 3 if dtype == E4M3 else 2
    emin = -6 if dtype == E4M3 else -14
    _, e = torch.frexp(scaled.abs())
    step = torch.pow(2.0, (e.double() - 1).clamp_min(emin) - mbits)
    grid = (torch.round(scaled.abs() / step) * step).clamp_max(fmax) * scaled.sign()
    assert torch.equal(q.double().reshape(9, 4, 32), grid)


# -- quantize_fp8_with_trans ---------------------------------------------------------------------------

WT_CASES = [
    ("BLOCKWISE", 16, R0, R0, (37, 45)),
    ("BLOCKWISE", 32, R0, R0, (70, 33)),
    ("BLOCKWISE", 128, R0, R0, (37, 150)),
    ("MX_BLOCKWISE", 32, R0, R0, (37, 45)),
    ("MX_BLOCKWISE", 32, R2D, R0, (37, 45)),
    ("MX_BLOCKWISE", 32, R0, R2D, (2, 37, 70)),
    ("MX_BLOCKWISE", 32, R2D, R2D, (3, 40, 33)),
]


def _check_with_trans(args, tile=None):
    out = quantize_with_trans.quantize_fp8_with_trans(args, tile)
    want = ref.quantize_fp8_with_trans(args)
    for name, a, b in zip(("q_row", "s_row", "q_col", "s_col"), out, want, strict=True):
        assert_same(a, b, name)


@pytest.mark.parametrize("dtype", FP8, ids=str)
@pytest.mark.parametrize("gran,bs,recipe,recipe_t,shape", WT_CASES,
                         ids=[f"{c[0]}-{c[1]}-{int(c[2].use_2d_block)}{int(c[3].use_2d_block)}-"
                              f"{'x'.join(map(str, c[4]))}" for c in WT_CASES])
def test_with_trans_bit_identical_to_reference(gran, bs, recipe, recipe_t, shape, dtype):
    x = _input(shape, seed=37)
    _check_with_trans(QuantizeFp8WithTransArgs(x, dtype, gran, bs, recipe, recipe_t))


@pytest.mark.parametrize("gran,bs,tile", [("BLOCKWISE", 16, Tile(16, 32)), ("BLOCKWISE", 8, Tile(32, 8)),
                                          ("MX_BLOCKWISE", 32, Tile(32, 64)), ("MX_BLOCKWISE", 32, Tile(64, 32))])
def test_with_trans_small_tiles_nan_inf_non_contiguous(gran, bs, tile):
    x = _input((90, 37), torch.float32, seed=41).t()
    x[3, 50] = math.nan
    x[20, 7] = -math.inf
    _check_with_trans(QuantizeFp8WithTransArgs(x, E4M3, gran, bs, R2D if bs == 32 else R0, R0), tile)


@pytest.mark.parametrize("shape", [(0, 45), (37, 0)], ids=str)
@pytest.mark.parametrize("gran,bs", [("BLOCKWISE", 16), ("MX_BLOCKWISE", 32)])
def test_with_trans_empty(shape, gran, bs):
    _check_with_trans(QuantizeFp8WithTransArgs(torch.zeros(shape), E5M2, gran, bs))


@pytest.mark.parametrize("dtype", FP8, ids=str)
@pytest.mark.parametrize("shape", [(37, 45), (70, 300), (3, 40, 33), (1, 1), (1, 64), (64, 1)], ids=str)
def test_rowwise_with_trans_bit_identical_to_reference(shape, dtype):
    """ROWWISE both ways (an extension of the spec): rows quantized while their column amax is gathered,
    then the column copy cast; 2-D and 3-D (grouped weights), single rows and columns, NaN / Inf kept
    (a NaN row or column gets a NaN scale, as quantize_fp8 gives it)."""
    x = _input(shape, seed=53)
    if x.numel() > 100:
        x.view(-1)[17] = math.nan
        x.view(-1)[-5] = -math.inf
    args = QuantizeFp8WithTransArgs(x, dtype, "ROWWISE")
    _check_with_trans(args)
    q_row, s_row, q_col, s_col = quantize_with_trans.quantize_fp8_with_trans(args)
    assert s_row.shape == (*shape[:-1], 1) and s_col.shape == (*shape[:-2], 1, shape[-1])
    for got, axis in (((q_row, s_row), -1), ((q_col, s_col), -2)):  # each copy is quantize_fp8 along its axis
        want = quantize.quantize_fp8(_quant_args(x, dtype, "ROWWISE", axis))
        assert_same(got[0], want[0], f"q axis {axis}")
        assert_same(got[1], want[1], f"scale axis {axis}")


@pytest.mark.parametrize("case", ["tiles", "iters", "long-rows", "strided", "empty"])
def test_rowwise_with_trans_paths(monkeypatch, case):
    """Small tiles (several programs merge each column's amax), programs that walk 4 row tiles each (the
    last one partly past M), rows longer than ``ROW_FUSED_MAX`` (the two-call fallback), a transposed
    input, and empty inputs."""
    x = _input((90, 37), torch.float32, seed=59)
    tile = None
    if case == "tiles":
        tile = Tile(8, 64)
    elif case == "iters":
        tile = Tile(4, 64, 4, 4)  # 90 rows: 6 programs of 16 rows
    elif case == "long-rows":
        monkeypatch.setattr(quantize, "ROW_FUSED_MAX", 16)
    elif case == "strided":
        x = x.t()
    if case == "empty":
        for shape in ((0, 45), (37, 0), (2, 0, 5)):
            _check_with_trans(QuantizeFp8WithTransArgs(torch.zeros(shape), E4M3, "ROWWISE"))
        return
    x[5, 3] = math.nan
    _check_with_trans(QuantizeFp8WithTransArgs(x, E5M2, "ROWWISE"), tile)


@pytest.mark.parametrize("partial", [True, False], ids=["partials", "atomics"])
def test_rowwise_with_trans_column_amax_merge(partial):
    """The column amax merged across programs both ways: per-program partials reduced by
    ``partial_scale_kernel`` (90 programs a batch: several 8-row steps, the last partial; 300 columns:
    the last 128-column block partial), and ``atomic_max``; a NaN column and an Inf column kept."""
    x = _input((2, 90, 300), torch.float32, seed=61)
    x[1, 40, 7] = math.nan
    x[0, 3, 299] = math.inf
    got = quantize_with_trans._rowwise(x, E4M3, None, Tile(1, 512, 4, 1), 1, partial)
    for pair, axis in ((got[:2], -1), (got[2:], -2)):
        want = quantize.quantize_fp8(_quant_args(x, E4M3, "ROWWISE", axis))
        assert_same(pair[0], want[0], f"q axis {axis}")
        assert_same(pair[1], want[1], f"scale axis {axis}")


# -- dequantize_fp8 -------------------------------------------------------------------------------------

@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("dtype", FP8, ids=str)
@pytest.mark.parametrize("gran,axis,bs,recipe", QUANT_CASES, ids=IDS)
def test_dequantize_bit_identical_to_reference(gran, axis, bs, recipe, dtype, out_dtype):
    x = _input((3, 37, 45), torch.float32, seed=43)
    x[0, 5, 3] = math.nan
    x[2, 9, 40] = math.inf
    q, s = ref.quantize_fp8(_quant_args(x, dtype, gran, axis, bs, recipe))
    args = DequantizeFp8Args(q, s, out_dtype, gran, axis, bs, recipe)
    assert_same(dequantize.dequantize_fp8(args), ref.dequantize_fp8(args), "dequantized")


def test_dequantize_extreme_scales():
    """Hand-made scales: huge (fp16 overflow to inf), tiny, NaN, inf; MX bytes 0 (2**-127, the
    fp32 subnormal range), 1, 254 and the NaN byte 255; every FP8 byte as data."""
    data = torch.arange(256, dtype=torch.uint8).repeat(4, 1).view(E5M2)  # [4, 256]
    s = torch.tensor([[1e30], [1e-30], [math.nan], [math.inf]])
    for out_dtype in (torch.float32, torch.float16, torch.bfloat16):
        args = DequantizeFp8Args(data, s, out_dtype, "ROWWISE", -1)
        assert_same(dequantize.dequantize_fp8(args), ref.dequantize_fp8(args), f"rowwise {out_dtype}")
    mx_data = torch.arange(256, dtype=torch.uint8).repeat(4, 1).view(E4M3)
    mx_s = torch.tensor([0, 1, 127, 254, 255, 7, 200, 0] * 4, dtype=torch.uint8).view(4, 8)
    for axis in (-1, -2):
        for out_dtype in (torch.float32, torch.bfloat16):
            args = DequantizeFp8Args(mx_data, mx_s.view(torch.float8_e8m0fnu), out_dtype, "MX_BLOCKWISE", axis, 32)
            assert_same(dequantize.dequantize_fp8(args), ref.dequantize_fp8(args), f"mx {axis} {out_dtype}")


@pytest.mark.parametrize("gran,axis,bs,recipe,tile", [
    ("BLOCKWISE", 0, 16, R0, Tile(8, 16)), ("BLOCKWISE", None, 16, R2D, Tile(4, 8)),
    ("MX_BLOCKWISE", -2, 32, R0, Tile(16, 32)), ("ROWWISE", -1, None, R0, Tile(2, 16)),
    # tiles holding whole groups (each scale loaded once, broadcast), ragged edges; MX under 32 columns
    ("BLOCKWISE", -1, 16, R0, Tile(4, 32)), ("BLOCKWISE", 0, 8, R0, Tile(16, 8)), ("BLOCKWISE", None, 8, R2D, Tile(16, 16)),
    ("MX_BLOCKWISE", -1, 32, R0, Tile(4, 64)), ("MX_BLOCKWISE", -2, 32, R0, Tile(8, 16)),
    ("MX_BLOCKWISE", -2, 32, R0, Tile(32, 64)),
    # one scale broadcast over the tile (TENSORWISE; ROWWISE along either dim), tiles inside a 2-D
    # group and across several; a block size that is no power of two (scales gathered per element)
    ("TENSORWISE", None, None, R0, Tile(4, 16)), ("ROWWISE", 0, None, R0, Tile(8, 16)),
    ("ROWWISE", -1, None, R0, Tile(4, 64)), ("BLOCKWISE", None, 16, R2D, Tile(32, 32)),
    ("BLOCKWISE", -1, 24, R0, Tile(4, 16)), ("BLOCKWISE", 0, 24, R0, Tile(8, 16))])
def test_dequantize_non_contiguous_data_and_scales_small_tiles(gran, axis, bs, recipe, tile):
    q, s = ref.quantize_fp8(_quant_args(_input((40, 45), seed=47), E4M3, gran, axis, bs, recipe))
    q_nc = q.t().contiguous().t()  # same values, column-major
    s_nc = s.t().contiguous().t() if s.dim() == 2 else s
    args = DequantizeFp8Args(q_nc, s_nc, torch.bfloat16, gran, axis, bs, recipe)
    assert_same(dequantize.dequantize_fp8(args, tile), ref.dequantize_fp8(args), "dequantized")


def test_dequantize_empty():
    for gran, axis, bs in (("ROWWISE", -1, None), ("BLOCKWISE", 0, 16), ("TENSORWISE", None, None)):
        q, s = ref.quantize_fp8(_quant_args(torch.zeros(0, 45), E4M3, gran, axis, bs))
        args = DequantizeFp8Args(q, s, torch.float32, gran, axis, bs)
        assert_same(dequantize.dequantize_fp8(args), ref.dequantize_fp8(args), gran)


# -- capability checks ----------------------------------------------------------------------------------

def test_declines_with_reasons():
    x = torch.zeros(64, 64)
    shuffled = ScalingRecipe(shuffle_scale=True)
    assert "shuffle" in quantize.can_handle(_quant_args(x, E4M3, "MX_BLOCKWISE", -1, 32, shuffled))
    assert "power-of-two" in quantize.can_handle(_quant_args(x, E4M3, "BLOCKWISE", -1, 48))
    assert "power-of-two" in quantize.can_handle(_quant_args(x, E4M3, "BLOCKWISE", None, 256, R2D))
    assert quantize.can_handle(_quant_args(x, E4M3, "BLOCKWISE", -1, 256)) is None
    assert "power-of-two" in quantize_with_trans.can_handle(QuantizeFp8WithTransArgs(x, E4M3, "BLOCKWISE", 256))
    assert "shuffle" in quantize_with_trans.can_handle(
        QuantizeFp8WithTransArgs(x, E4M3, "MX_BLOCKWISE", 32, R0, ScalingRecipe(shuffle_out=True)))
    q = torch.zeros(64, 64, dtype=E4M3)
    assert dequantize.can_handle(DequantizeFp8Args(q, torch.ones(()), torch.float32, "TENSORWISE")) is None
    for gran, axis, bs, recipe in QUANT_CASES:
        assert quantize.can_handle(_quant_args(x, E4M3, gran, axis, bs, recipe)) is None


def test_device_reasons(monkeypatch):
    """On a GPU (simulated): FNUZ outside gfx940-942 and FP8 before sm89 are declined by name."""
    x = torch.zeros(4, 4)
    monkeypatch.setattr(common._runtime, "interpreting", lambda: False)
    monkeypatch.setattr(common._runtime, "device_reason", lambda t: None)
    monkeypatch.setattr(common.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(common._runtime, "arch_of", lambda i: "sm90")
    assert "gfx942" in common.device_reason(x, torch.float8_e4m3fnuz)
    assert common.device_reason(x, E4M3) is None
    monkeypatch.setattr(common._runtime, "arch_of", lambda i: "sm80")
    assert "sm89" in common.device_reason(x, E5M2)
    monkeypatch.setattr(common._runtime, "arch_of", lambda i: "gfx942")
    assert common.device_reason(x, torch.float8_e5m2fnuz) is None


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert "TRITON_INTERPRET" in quantize.can_handle(_quant_args(torch.zeros(4, 4), E4M3, "TENSORWISE"))


def test_bad_tile_is_an_error():
    with pytest.raises(ValueError, match="tile.block_n"):
        quantize.quantize_fp8(_quant_args(torch.ones(8, 64), E4M3, "BLOCKWISE", -1, 32), Tile(4, 16))


@pytest.mark.parametrize("gran,bs", [("ROWWISE", None), ("BLOCKWISE", 16), ("BLOCKWISE", 128)])
@pytest.mark.parametrize("storage", ["plain", "padded"])
@pytest.mark.parametrize("two_pass", [False, True])
def test_transposed_view_along_last_dim(monkeypatch, gran, bs, storage, two_pass):
    """``quantize_fp8(y.t(), axis=-1)`` (a column-wise copy laid out K-major) runs on y's columns with
    q and scales stored transposed: bit-identical to the reference, q row-major, NaN and Inf kept;
    ROWWISE columns short enough for one tile, and through the two-pass amax path."""
    if two_pass:
        monkeypatch.setattr(quantize, "COL_FUSED_MAX", 8)
    y = _input((150, 70), torch.float32, seed=31)
    y[40, 3] = math.nan
    y[100, 60] = -math.inf
    if storage == "padded":  # fp32 rows 75 apart
        y = torch.cat([y, torch.zeros(150, 5)], dim=1)[:, :70]
    else:  # bf16
        y = y.bfloat16()
    x = y.t()
    assert quantize._transposed_view(x, 1)
    q, s = _check_quantize(_quant_args(x, E4M3, gran, -1, bs))
    assert q.is_contiguous() and q.shape == (70, 150)
    assert s.shape == ((70, 1) if bs is None else (70, -(-150 // bs)))


@pytest.mark.parametrize("gran,bs", [("ROWWISE", None), ("BLOCKWISE", 16)])
@pytest.mark.parametrize("two_pass", [False, True])
def test_transposed_view_of_grouped_weights(monkeypatch, gran, bs, two_pass):
    """Grouped weights ``w [G, N, K]`` quantized along N from ``w.transpose(-1, -2)`` (the dgrad's
    copy laid out K-major: ``[G, K, N]`` row-major) run on w's columns per group: bit-identical to
    the reference, NaN and Inf kept, scales ``[G, K, 1]`` / ``[G, K, cdiv(N, bs)]``."""
    if two_pass:
        monkeypatch.setattr(quantize, "COL_FUSED_MAX", 8)
    w = _input((3, 40, 24), torch.float32, seed=5)
    w[1, 7, 2] = math.nan
    w[2, 30, 20] = math.inf
    w = w.bfloat16()
    x = w.transpose(-1, -2)
    assert quantize._transposed_view(x, 2)
    assert not quantize._transposed_view(x, 1) and not quantize._transposed_view(w, 2)
    assert not quantize._transposed_view(w[:, :, :12].transpose(-1, -2), 2)  # not a view of contiguous storage
    q, s = _check_quantize(_quant_args(x, E4M3, gran, -1, bs))
    assert q.is_contiguous() and q.shape == (3, 24, 40)
    assert s.shape == ((3, 24, 1) if bs is None else (3, 24, -(-40 // bs)))
