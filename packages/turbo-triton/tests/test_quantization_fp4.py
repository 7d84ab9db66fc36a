"""TRITON MXFP4 (``quantize_fp4``, ``quantize_fp4_with_trans``, ``dequantize_fp4``) under the interpreter.

Expectations come from plain Python loops written here (the OCP MX exponent by ``math.frexp``, the
nearest E2M1 grid point by search with ties to the even code, nibbles packed by hand, decoding by
table in float64), and the results must also equal the TORCH reference's bytes exactly.

Grid: row-wise and col-wise (transposed) blocks, 1x32 and 32x32 (``use_2d_block``), 2-D and 3-D
inputs, dims that are not multiples of 32 (zero padding to 128 on the blocked dim), fp32/bf16/fp16
inputs, several tiles a tensor (small tiles). Special blocks: exact midpoints (ties to even),
values past 6 (saturation), -0.0, all-zero blocks (byte 0), subnormal inputs, NaN and Inf (scale
byte 0xFF, NaN -> +0, Inf -> 6, the whole block dequantizes to NaN).
"""

from __future__ import annotations

import math

import pytest
import torch

from turbo_core.dispatch.specs.quantization import (
    DEQUANTIZE_FP4,
    QUANTIZE_FP4,
    DequantizeFp4Args,
    QuantizeFp4Args,
    QuantizeFp4WithTransArgs,
)
from turbo_core.low_precision import FLOAT4_E2M1FN_X2, ScalingRecipe
from turbo_core.reference import quantization as ref
from turbo_core.testing.numerics import assert_snr
from turbo_triton.quantization import fp4
from turbo_triton.quantization.common import Tile

pytestmark = pytest.mark.skipif(FLOAT4_E2M1FN_X2 is None, reason="torch lacks float4_e2m1fn_x2")

GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


# -- the oracle: Python loops ---------------------------------------------------------------------

def _code(v: float) -> int:
    """E2M1 code of an already scaled fp32 value: nearest grid point, ties to the even code,
    saturating at 6, NaN -> +0."""
    if math.isnan(v):
        return 0
    mag = min(abs(v), 6.0)
    k = min(range(8), key=lambda i: (abs(GRID[i] - mag), i % 2))
    return k + (8 if math.copysign(1.0, v) < 0 else 0)


def _exponent(amax: float) -> tuple[int, int]:
    """``(X, byte)`` of a block amax (NaN/Inf: X = 0, byte 0xFF)."""
    if math.isnan(amax) or math.isinf(amax):
        return 0, 255
    if amax == 0:
        return -127, 0
    _, e = math.frexp(amax)  # amax = m * 2**e, m in [0.5, 1)
    x = max(-127, min(127, e - 1 - 2))
    return x, x + 127


def _amax(vals: list[float]) -> float:
    if any(math.isnan(v) for v in vals):
        return math.nan
    return max(abs(v) for v in vals)


def _fp32(v: float) -> float:
    return torch.tensor(v, dtype=torch.float64).float().item()


def _quant_rows(rows: list[list[float]], two_d: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP4 of each row (blocks of 32 along it, padded to 128): ``(bytes [R, C_pad/2], scales [R, C_pad/32])``."""
    c = len(rows[0]) if rows else 0
    c_pad = -(-c // 128) * 128
    rows = [r + [0.0] * (c_pad - c) for r in rows]
    nb = c_pad // 32
    amax = [[_amax(r[j * 32:(j + 1) * 32]) for j in range(nb)] for r in rows]
    if two_d:
        amax = [[_amax([amax[i][j] for i in range(t - t % 32, min(t - t % 32 + 32, len(rows)))]) for j in range(nb)]
                for t in range(len(rows))]
    data, scales = [], []
    for r, am in zip(rows, amax, strict=True):
        xs = [_exponent(a) for a in am]
        codes = [_code(_fp32(v * 2.0 ** -xs[k // 32][0])) for k, v in enumerate(r)]
        data.append([codes[2 * j] | (codes[2 * j + 1] << 4) for j in range(c_pad // 2)])
        scales.append([b for _, b in xs])
    return (torch.tensor(data, dtype=torch.uint8).reshape(len(rows), c_pad // 2),
            torch.tensor(scales, dtype=torch.uint8).reshape(len(rows), nb))


def _expect_quant(x: torch.Tensor, axis: int, two_d: bool):
    x3 = x.double() if x.dim() == 3 else x.double().unsqueeze(0)
    if axis % x.dim() != x.dim() - 1:
        x3 = x3.transpose(-1, -2)
    parts = [_quant_rows(m.tolist(), two_d) for m in x3]
    q = torch.stack([p[0] for p in parts])
    s = torch.stack([p[1] for p in parts])
    return (q, s) if x.dim() == 3 else (q[0], s[0])


def _expect_dequant(q: torch.Tensor, s: torch.Tensor, rowwise: bool, dtype) -> torch.Tensor:
    qb = q.view(torch.uint8).tolist()
    sb = s.view(torch.uint8).tolist()

    def rows(qm, sm):
        out = []
        for qr, sr in zip(qm, sm, strict=True):
            vals = []
            for j, byte in enumerate(qr):
                for code in (byte & 15, byte >> 4):
                    mag = GRID[code & 7]
                    v = -mag if code & 8 else mag
                    sc = sr[(2 * j) // 32]
                    vals.append(math.nan if sc == 255 else v * 2.0 ** (sc - 127))
            out.append(vals)
        return out

    if q.dim() == 3:
        full = torch.tensor([rows(a, b) for a, b in zip(qb, sb, strict=True)], dtype=torch.float64)
    else:
        full = torch.tensor(rows(qb, sb), dtype=torch.float64).reshape(q.shape[0], 2 * q.shape[1])
    if not rowwise:
        full = full.transpose(-1, -2)
    return full.to(dtype).contiguous()


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    a8, b8 = a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)
    return a8.shape == b8.shape and torch.equal(a8, b8)


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-equal except NaN payloads (torch's own fp64 -> bf16 cast of a NaN gives 0xFFFF on the CPU):
    NaN at the same places, every other element bit for bit (-0.0 included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    nan = torch.isnan(a)
    return torch.equal(nan, torch.isnan(b)) and _same_bits(a[~nan], b[~nan])


def _inputs(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.logspace(-4, 4, shape[-1])  # a range of exponents per row
    return x.to(dtype)


# -- quantize -------------------------------------------------------------------------------------

# 2-D with N % 32 != 0 and M not a multiple of 32 (padding on both blocked dims), 3-D with a tiny N.
SHAPES = [(5, 70), (40, 33), (2, 36, 20)]


@pytest.mark.parametrize("two_d", [False, True], ids=["1x32", "32x32"])
@pytest.mark.parametrize("axis", [-1, -2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_quantize_matches_loops_and_reference(shape, dtype, axis, two_d):
    x = _inputs(shape, dtype, seed=len(shape) * 100 + shape[-1])
    args = QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, axis, recipe=ScalingRecipe(use_2d_block=two_d))
    QUANTIZE_FP4.check_args(args)
    assert fp4.can_handle(args) is None
    q, s = fp4.quantize_fp4(args)
    assert q.dtype == FLOAT4_E2M1FN_X2 and s.dtype == ref.E8M0_DTYPE
    want_q, want_s = _expect_quant(x, axis, two_d)
    assert torch.equal(s.view(torch.uint8), want_s), "scale bytes differ from the loops"
    assert torch.equal(q.view(torch.uint8), want_q), "packed codes differ from the loops"
    rq, rs = ref.quantize_fp4(args)
    assert _same_bits(q, rq) and _same_bits(s, rs), "differs from the reference"


@pytest.mark.parametrize("axis,tile", [(-1, Tile(1, 32)), (-1, Tile(4, 64)), (-2, Tile(32, 1)), (-2, Tile(64, 4))])
def test_quantize_many_tiles(axis, tile):
    x = _inputs((45, 100), torch.float32, seed=3)
    args = QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, axis)
    q, s = fp4.quantize_fp4(args, tile=tile)
    want_q, want_s = _expect_quant(x, axis, False)
    assert torch.equal(q.view(torch.uint8), want_q) and torch.equal(s.view(torch.uint8), want_s)


def _special_rows() -> torch.Tensor:
    """Rows of 32 (one block each) with a chosen amax, so the scaled values are known."""
    mids = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    rows = [
        mids + [-v for v in mids] + [7.0, -7.5, 6.0, -0.0, 0.1, 5.5] + [0.0] * 12,  # amax 7.5: X = 0
        [v * 2.0 ** -20 for v in mids] + [7.0 * 2.0 ** -20] + [0.0] * 24,  # the same ties, X = -20
        [0.0] * 32,  # all-zero block: byte 0
        [1e-40, -3e-39] + [0.0] * 30,  # subnormal amax: X = -127
        [1.0, math.nan, 3.0, -2.0] + [0.5] * 28,  # NaN: byte 0xFF, NaN -> +0
        [1.0, math.inf, -3.0, -math.inf] + [0.25] * 28,  # Inf: byte 0xFF, Inf -> 6
    ]
    return torch.tensor(rows, dtype=torch.float32)


def test_special_blocks_rowwise():
    x = _special_rows()
    args = QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, -1)
    q, s = fp4.quantize_fp4(args)
    want_q, want_s = _expect_quant(x, -1, False)
    assert torch.equal(s.view(torch.uint8), want_s) and torch.equal(q.view(torch.uint8), want_q)
    assert s.view(torch.uint8)[:, 0].tolist() == [127, 107, 0, 0, 255, 255]
    codes = torch.stack((q.view(torch.uint8) & 15, q.view(torch.uint8) >> 4), -1).reshape(6, -1)
    # ties to even: 0.25->0, 0.75->2 (1.0), 1.25->2, 1.75->4 (2.0), 2.5->4, 3.5->6 (4.0), 5.0->6; 7.0/-7.5 saturate
    assert codes[0, :7].tolist() == [0, 2, 2, 4, 4, 6, 6]
    assert codes[0, 7:14].tolist() == [8, 10, 10, 12, 12, 14, 14]
    assert codes[0, 14:18].tolist() == [7, 15, 7, 8]  # 7.0, -7.5, 6.0, -0.0
    assert codes[4, 1].item() == 0 and codes[5, 1].item() == 7 and codes[5, 3].item() == 15
    rq, rs = ref.quantize_fp4(args)
    assert _same_bits(q, rq) and _same_bits(s, rs)
    out = fp4.dequantize_fp4(DequantizeFp4Args(q, s, torch.float32, -1))
    assert torch.isnan(out[4:, :32]).all() and not torch.isnan(out[:4]).any()
    assert (out[2] == 0).all() and torch.equal(out[1, :7] * 2.0 ** 20, out[0, :7])


def test_special_blocks_colwise_and_2d():
    x = _special_rows().t().contiguous()  # [32, 6]: the blocks run down the columns
    for two_d in (False, True):
        args = QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, -2, recipe=ScalingRecipe(use_2d_block=two_d))
        q, s = fp4.quantize_fp4(args)
        want_q, want_s = _expect_quant(x, -2, two_d)
        assert torch.equal(s.view(torch.uint8), want_s) and torch.equal(q.view(torch.uint8), want_q)


def test_quantize_empty():
    q, s = fp4.quantize_fp4(QuantizeFp4Args(torch.zeros((0, 64)), FLOAT4_E2M1FN_X2, -1))
    assert q.shape == (0, 64) and s.shape == (0, 4)


@pytest.mark.parametrize("two_d", [(False, False), (True, False), (False, True)], ids=str)
@pytest.mark.parametrize("shape", [(40, 70), (2, 33, 20)], ids=str)
def test_with_trans_equals_both_directions(shape, two_d):
    x = _inputs(shape, torch.bfloat16, seed=11)
    r_row, r_col = ScalingRecipe(use_2d_block=two_d[0]), ScalingRecipe(use_2d_block=two_d[1])
    args = QuantizeFp4WithTransArgs(x, FLOAT4_E2M1FN_X2, recipe=r_row, recipe_for_trans=r_col)
    assert fp4.can_handle_with_trans(args) is None
    q_row, s_row, q_col, s_col = fp4.quantize_fp4_with_trans(args, tile=Tile(32, 32))
    wq, ws = _expect_quant(x, -1, two_d[0])
    assert torch.equal(q_row.view(torch.uint8), wq) and torch.equal(s_row.view(torch.uint8), ws)
    wq, ws = _expect_quant(x, -2, two_d[1])
    assert torch.equal(q_col.view(torch.uint8), wq) and torch.equal(s_col.view(torch.uint8), ws)
    for got, want in zip((q_row, s_row, q_col, s_col), ref.quantize_fp4_with_trans(args), strict=True):
        assert _same_bits(got, want)


# -- the pair kernels (bf16: col-wise quantize, with_trans, row-wise with ROW_PAIRS) -----------------
# Under the interpreter they run their fp32 encoder (the inline PTX runs only on an NVIDIA GPU); these
# tests check their tiling, pairing and stores.

def _pairs_taken(monkeypatch) -> list:
    seen = []
    real = fp4._pairs

    def spy(x3):
        seen.append(real(x3))
        return seen[-1]
    monkeypatch.setattr(fp4, "_pairs", spy)
    return seen


_TILES = [None, Tile(32, 32, 4), Tile(64, 32, 1), Tile(32, 64, 2)]
_PAIR_CASES = [(-2, False, t) for t in _TILES] + [(-1, True, t) for t in _TILES] + [(-1, True, Tile(16, 64, 1))]


@pytest.mark.parametrize("axis,row_pairs,tile", _PAIR_CASES, ids=str)
@pytest.mark.parametrize("shape", [(45, 70), (2, 37, 20), (64, 32)], ids=str)
def test_pair_kernels_quantize(shape, axis, row_pairs, tile, monkeypatch):
    monkeypatch.setattr(fp4, "ROW_PAIRS", row_pairs)
    seen = _pairs_taken(monkeypatch)
    x = _inputs(shape, torch.bfloat16, seed=shape[-2] + 7)
    x.view(-1)[3] = math.nan
    x.view(-1)[-2] = -math.inf
    x.view(-1)[-5] = -0.0
    for two_d in (False, True):
        if two_d and tile is not None and tile.block_m < 32:
            continue  # 32x32 blocks need 32-row tiles (this tile runs the 1x32 blocks only)
        args = QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, axis, recipe=ScalingRecipe(use_2d_block=two_d))
        q, s = fp4.quantize_fp4(args, tile=tile)
        want_q, want_s = _expect_quant(x, axis, two_d)
        assert torch.equal(s.view(torch.uint8), want_s) and torch.equal(q.view(torch.uint8), want_q)
        rq, rs = ref.quantize_fp4(args)
        assert _same_bits(q, rq) and _same_bits(s, rs)
    assert seen and all(seen), "the pair kernels were not taken"


@pytest.mark.parametrize("tile", [None, Tile(32, 32, 4), Tile(64, 64, 2), Tile(32, 64, 1)], ids=str)
@pytest.mark.parametrize("shape", [(45, 70), (2, 33, 40)], ids=str)
def test_pair_kernels_with_trans(shape, tile, monkeypatch):
    seen = _pairs_taken(monkeypatch)
    x = _inputs(shape, torch.bfloat16, seed=13)
    x.view(-1)[40] = math.nan
    for r2, c2 in ((False, False), (True, True), (True, False)):
        args = QuantizeFp4WithTransArgs(x, FLOAT4_E2M1FN_X2, recipe=ScalingRecipe(use_2d_block=r2),
                                        recipe_for_trans=ScalingRecipe(use_2d_block=c2))
        got = fp4.quantize_fp4_with_trans(args, tile=tile)
        wq, ws = _expect_quant(x, -1, r2)
        assert torch.equal(got[0].view(torch.uint8), wq) and torch.equal(got[1].view(torch.uint8), ws)
        wq, ws = _expect_quant(x, -2, c2)
        assert torch.equal(got[2].view(torch.uint8), wq) and torch.equal(got[3].view(torch.uint8), ws)
        for a, b in zip(got, ref.quantize_fp4_with_trans(args), strict=True):
            assert _same_bits(a, b)
    assert seen and all(seen), "the pair kernels were not taken"


def test_pair_asm_keeps_lanes_apart():
    """The pair encoder's PTX: two independent lane computations, nibbles combined lane-wise."""
    from turbo_triton.quantization import fp4_kernels as kern

    for asm in (kern._PAIR_ASM16.value, kern._PAIR_ASM32.value):
        assert asm.count("or.b32 ce, c, sg;") == 1 and asm.count("or.b32 co, c, sg;") == 1
        assert asm.rstrip().endswith("shl.b32 co, co, 4;\nor.b32 $0, ce, co;\n}")
        assert "$2, 12" in asm and "$1, 12" in asm and "0xF0" not in asm  # no cross-lane nibble packing


# -- dequantize -----------------------------------------------------------------------------------

@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("axis", [-1, -2])
@pytest.mark.parametrize("shape", [(5, 70), (2, 36, 20)], ids=str)
def test_dequantize_matches_loops_and_reference(shape, axis, out_dtype):
    x = _inputs(shape, torch.float32, seed=5)
    x.view(-1)[3] = math.nan  # one NaN block
    q, s = ref.quantize_fp4(QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, axis))
    args = DequantizeFp4Args(q, s, out_dtype, axis)
    DEQUANTIZE_FP4.check_args(args)
    assert fp4.can_handle_dequantize(args) is None
    got = fp4.dequantize_fp4(args)
    want = _expect_dequant(q, s, axis % x.dim() == x.dim() - 1, out_dtype)
    assert got.dtype == out_dtype and got.shape == want.shape
    assert _same_values(got, want), "dequantized values differ from the loops"
    assert _same_values(got, ref.dequantize_fp4(args))


def test_dequantize_many_tiles():
    x = _inputs((37, 300), torch.float32, seed=8)
    q, s = ref.quantize_fp4(QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, -1))
    got = fp4.dequantize_fp4(DequantizeFp4Args(q, s, torch.float32, -1), tile=Tile(4, 16))
    assert _same_bits(got, _expect_dequant(q, s, True, torch.float32))


def test_round_trip_snr():
    """Quantize then dequantize: the FP4 accuracy gate against the float64 input."""
    x = torch.randn((64, 256), generator=torch.Generator().manual_seed(2))
    for axis in (-1, -2):
        q, s = fp4.quantize_fp4(QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, axis))
        back = fp4.dequantize_fp4(DequantizeFp4Args(q, s, torch.float32, axis))
        assert_snr(x.double(), back[:64, :256], "FP4", what=f"axis {axis}")


# -- capability -----------------------------------------------------------------------------------

def test_can_handle_reasons():
    x = torch.randn(4, 64)
    assert "stochastic" in fp4.can_handle(QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, -1, recipe=ScalingRecipe(use_sr=True)))
    assert "Hadamard" in fp4.can_handle(QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, -1, recipe=ScalingRecipe(use_rht=True)))
    assert "shuffle" in fp4.can_handle(QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, -1,
                                                       recipe=ScalingRecipe(shuffle_scale=True)))
    assert "CPU tensors only" in fp4.can_handle(QuantizeFp4Args(torch.empty((4, 64), device="meta"),
                                                                FLOAT4_E2M1FN_X2, -1))
    t = QuantizeFp4WithTransArgs(x, FLOAT4_E2M1FN_X2, recipe_for_trans=ScalingRecipe(use_sr=True))
    assert "stochastic" in fp4.can_handle_with_trans(t)


@pytest.mark.parametrize("shape, axis, pairs", [((1, 1), -2, False), ((5, 2), -2, False), ((45, 7), -2, True),
                                                ((200, 31), -2, True), ((3, 100), -2, True)])
def test_pair_kernels_only_where_their_tile_holds_two_pairs_a_thread(monkeypatch, shape, axis, pairs):
    # col-wise, the pair kernel's tile is at most the padded M (128 here) by the input's N: at N <= 2
    # it cannot hold two pairs a thread (fp4._pairs_ok), and such inputs take the generic kernel,
    # with the reference's bits
    seen = []
    real = fp4.fast_kernel

    def spy(fn):
        launcher = real(fn)

        class Spy:
            def __getitem__(self, grid):
                def launch(*args, **kwargs):
                    seen.append(kwargs["PAIRS"])
                    return launcher[grid](*args, **kwargs)
                return launch
        return Spy()

    monkeypatch.setattr(fp4, "fast_kernel", spy)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    args = QuantizeFp4Args(x, FLOAT4_E2M1FN_X2, axis)
    got = fp4.quantize_fp4(args)
    assert seen == [pairs]
    want = ref.quantize_fp4(args)
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g.view(torch.uint8), w.view(torch.uint8))
