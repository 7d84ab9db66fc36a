"""The TRITON grouped quantization kernels (``turbo_triton.quantization.grouped``, CPU interpreter)
against the TORCH reference kernels (``turbo_core.reference.quantization``) bit for bit, and
against what the layouts must be by construction (padded lens/offs from Python ints, zero padding
rows, each group's rows where ``offs_pad`` puts them) and float64 round trips.

Covered: FP8 BLOCKWISE (blocks of 32 and 128) and MX, E4M3 and E5M2, bf16/fp32/fp16 inputs,
row-wise and col-wise, the fused with_trans pair, dequantization (every layout, rows in no group,
``total_M`` shorter and longer than the groups), MXFP4 (row tight, col 512-aligned, with_trans,
dequantization), NaN/Inf, degenerate sizes, non-contiguous inputs, forced small tiles (several
programs per group with ragged edges), and the capability checks.

"Bit for bit" compares raw bytes everywhere except at NaN, where both sides must be NaN (NaN
payloads are not part of the spec)."""

import math

import pytest
import torch
from bit_compare import assert_same, bits

from turbo_core.dispatch.specs.quantization import (
    GroupedDequantizeFp4Args,
    GroupedDequantizeFp8Args,
    GroupedQuantizeFp4Args,
    GroupedQuantizeFp4WithTransArgs,
    GroupedQuantizeFp8Args,
    GroupedQuantizeFp8WithTransArgs,
)
from turbo_core.low_precision import FLOAT4_E2M1FN_X2, ScalingRecipe
from turbo_core.reference import quantization as ref
from turbo_triton.quantization import grouped
from turbo_triton.quantization.common import Tile

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FP4 = FLOAT4_E2M1FN_X2
KINDS = {"bw32": ("BLOCKWISE", 32), "bw128": ("BLOCKWISE", 128), "mx": ("MX_BLOCKWISE", 32)}
SNR_DB = {E4M3: 25.0, E5M2: 20.0, FP4: 10.0}

pytestmark = pytest.mark.skipif(FP4 is None, reason="torch without float4_e2m1fn_x2")


def assert_all_same(actual, expected, what: str) -> None:
    assert len(actual) == len(expected), f"{what}: {len(actual)} outputs, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        assert_same(a, e, f"{what} output {i}")


# Group layouts: an empty group, groups shorter than every alignment (5, 1, 2), groups longer than
# 32/128 (37, 40, 130: blocks and tiles across a group), rows past group_offs[-1] (3, and 41:
# more than a tight with_trans tail has to cover), int64 and int32 lens/offs, odd N below and
# above one 32/128 block.
CASES = {
    "mixed": ([5, 0, 37, 1, 40], 3, 70, torch.int64),
    "long": ([0, 130, 2], 41, 33, torch.int32),
}


def _groups(case: str):
    lens_list, tail, n, idx = CASES[case]
    m = sum(lens_list) + tail
    lens = torch.tensor(lens_list, dtype=idx)
    offs = torch.tensor([0, *torch.tensor(lens_list).cumsum(0).tolist()], dtype=idx)
    return lens_list, m, n, lens, offs


def _input(m: int, n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Gaussian with a spread of magnitudes across columns, every 7th value tiny (subnormal FP8
    results), an all-zero row and a -0."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, n, generator=g) * torch.logspace(-2, 2, max(n, 1))[:n]
    x.view(-1)[::7] *= 1e-3
    if m > 8 and n > 0:
        x[7] = 0
        x[8, 0] = -0.0
    return x.to(dtype)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _expected_pads(lens_list, align):
    lens_pad = [_cdiv(v, align) * align for v in lens_list]
    return lens_pad, [0, *torch.tensor(lens_pad).cumsum(0).tolist()]


def _check_layout(lens_list, offs_list, lp, op, align):
    """Padded lens/offs as Python computes them (tight: the inputs)."""
    want_lens, want_offs = (lens_list, offs_list) if align == 1 else _expected_pads(lens_list, align)
    assert lp.tolist() == want_lens and op.tolist() == want_offs, f"lens/offs {lp.tolist()} {op.tolist()}"
    return want_offs


def _used_rows(lens_list, offs_pad, m_pad):
    used = torch.zeros(m_pad, dtype=torch.bool)
    for g, length in enumerate(lens_list):
        used[offs_pad[g]: offs_pad[g] + length] = True
    return used


def _snr_db(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    noise = (x - y).pow(2).sum().item()
    return math.inf if noise == 0 else 10 * math.log10(x.pow(2).sum().item() / noise)


# -- FP8 quantize -------------------------------------------------------------------------------------

# Every granularity x axis (1 and -2: negative axes too) x (E4M3 from bf16, E5M2 from fp32) x the
# two group layouts.
@pytest.mark.parametrize("dtypes", [(E4M3, torch.bfloat16), (E5M2, torch.float32)], ids=["e4m3-bf16", "e5m2-fp32"])
@pytest.mark.parametrize("axis", [1, -2])
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("case", list(CASES))
def test_grouped_quantize_fp8(case, kind, axis, dtypes):
    fp8, in_dtype = dtypes
    gran, bs = KINDS[kind]
    lens_list, m, n, lens, offs = _groups(case)
    x = _input(m, n, in_dtype, seed=m + n)
    args = GroupedQuantizeFp8Args(x, fp8, gran, lens, offs, axis, bs)
    assert grouped.can_handle_quantize_fp8(args) is None
    out = grouped.grouped_quantize_fp8(args)
    assert_all_same(out, ref.grouped_quantize_fp8(args), f"{kind} axis {axis}")
    q, s, lp, op = out
    rowwise = axis % 2 == 1
    align = (1 if rowwise else bs) if gran == "BLOCKWISE" else (32 if rowwise else 128)
    offs_pad = _check_layout(lens_list, offs.tolist(), lp, op, align)
    assert lp.dtype == lens.dtype and op.dtype == offs.dtype
    total = int(offs[-1])
    if align > 1:  # padding rows are zero (data bytes 0: +0 in every FP8 format)
        data_rows = q if (gran == "BLOCKWISE" or rowwise) else q.t()
        used = _used_rows(lens_list, offs_pad, data_rows.shape[0])
        assert not bits(data_rows[~used]).any(), "padding rows must be zero"
    deq = grouped.grouped_dequantize_fp8(GroupedDequantizeFp8Args(
        q, s, torch.float32, gran, offs, op, m if align == 1 else total, axis, bs))
    assert _snr_db(x[:total, :n].double(), deq[:total, :n]) >= SNR_DB[fp8]


# The fused pair equals the two single-direction calls (and the reference), for each granularity.
@pytest.mark.parametrize("dtypes", [(E4M3, torch.bfloat16), (E5M2, torch.float32)], ids=["e4m3-bf16", "e5m2-fp32"])
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("case", list(CASES))
def test_grouped_quantize_fp8_with_trans(case, kind, dtypes):
    fp8, in_dtype = dtypes
    gran, bs = KINDS[kind]
    lens_list, m, n, lens, offs = _groups(case)
    x = _input(m, n, in_dtype, seed=3 * m + n)
    args = GroupedQuantizeFp8WithTransArgs(x, fp8, gran, lens, offs, bs)
    assert grouped.can_handle_quantize_fp8_with_trans(args) is None
    out = grouped.grouped_quantize_fp8_with_trans(args)
    assert_all_same(out, ref.grouped_quantize_fp8_with_trans(args), f"{kind} with_trans")
    singles = [grouped.grouped_quantize_fp8(GroupedQuantizeFp8Args(x, fp8, gran, lens, offs, a, bs)) for a in (1, 0)]
    want = (singles[0][0], singles[0][1], singles[1][0], singles[1][1], *singles[0][2:], *singles[1][2:])
    assert_all_same(out, want, f"{kind} with_trans vs single directions")
    _check_layout(lens_list, offs.tolist(), out[6], out[7], bs if gran == "BLOCKWISE" else 128)


# -- FP8 dequantize --------------------------------------------------------------------------------------

# Each layout, dequantizing the reference's own quantization, into each output dtype.
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("kind,axis", [("bw32", 1), ("bw128", 0), ("mx", 1), ("mx", 0)])
def test_grouped_dequantize_fp8(kind, axis, out_dtype):
    gran, bs = KINDS[kind]
    lens_list, m, n, lens, offs = _groups("mixed")
    x = _input(m, n, torch.float32, seed=11)
    q, s, _, op = ref.grouped_quantize_fp8(GroupedQuantizeFp8Args(x, E4M3, gran, lens, offs, axis, bs))
    total = m if (gran == "BLOCKWISE" and axis == 1) else int(offs[-1])
    args = GroupedDequantizeFp8Args(q, s, out_dtype, gran, offs, op, total, axis, bs)
    assert grouped.can_handle_dequantize_fp8(args) is None
    out = grouped.grouped_dequantize_fp8(args)
    assert_same(out, ref.grouped_dequantize_fp8(args), f"{kind} axis {axis}")
    assert _snr_db(x[:total].double(), out[:, :n]) >= SNR_DB[E4M3]


# total_M past the groups (rows of no group come out zero) and short of them (cut).
@pytest.mark.parametrize("extra", [9, -20])
@pytest.mark.parametrize("kind,axis", [("bw32", 0), ("mx", 1), ("mx", 0)])
def test_grouped_dequantize_fp8_total_m(kind, axis, extra):
    gran, bs = KINDS[kind]
    _, m, n, lens, offs = _groups("long")
    x = _input(m, n, torch.bfloat16, seed=12)
    q, s, _, op = ref.grouped_quantize_fp8(GroupedQuantizeFp8Args(x, E4M3, gran, lens, offs, axis, bs))
    total = int(offs[-1]) + extra
    args = GroupedDequantizeFp8Args(q, s, torch.bfloat16, gran, offs, op, total, axis, bs)
    out = grouped.grouped_dequantize_fp8(args)
    assert_same(out, ref.grouped_dequantize_fp8(args), f"{kind} axis {axis} total {total}")
    if extra > 0:
        assert not bits(out[int(offs[-1]):]).any(), "rows of no group must be zero"


# -- FP4 -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("in_dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("case", list(CASES))
def test_grouped_quantize_fp4(case, axis, in_dtype):
    lens_list, m, n, lens, offs = _groups(case)
    x = _input(m, n, in_dtype, seed=5 * m + n)
    args = GroupedQuantizeFp4Args(x, FP4, lens, offs, axis)
    assert grouped.can_handle_quantize_fp4(args) is None
    out = grouped.grouped_quantize_fp4(args)
    assert_all_same(out, ref.grouped_quantize_fp4(args), f"fp4 axis {axis}")
    q, s, lp, op = out
    offs_pad = _check_layout(lens_list, offs.tolist(), lp, op, 1 if axis == 1 else 512)
    total = int(offs[-1])
    if axis == 0:
        used = _used_rows(lens_list, offs_pad, q.shape[1] * 2)
        codes = torch.stack((q.view(torch.uint8) & 15, q.view(torch.uint8) >> 4), -1).reshape(n, -1)
        assert not codes.t()[~used].any(), "padding rows must be zero"
    deq = grouped.grouped_dequantize_fp4(GroupedDequantizeFp4Args(
        q, s, torch.float32, axis, group_offs=offs, group_offs_padded=op, total_m=None if axis == 1 else total))
    assert _snr_db(x[:total].double(), deq[:total, :n]) >= SNR_DB[FP4]


@pytest.mark.parametrize("case", list(CASES))
def test_grouped_quantize_fp4_with_trans(case):
    lens_list, m, n, lens, offs = _groups(case)
    x = _input(m, n, torch.bfloat16, seed=7 * m)
    args = GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs)
    assert grouped.can_handle_quantize_fp4_with_trans(args) is None
    out = grouped.grouped_quantize_fp4_with_trans(args)
    assert_all_same(out, ref.grouped_quantize_fp4_with_trans(args), "fp4 with_trans")
    singles = [grouped.grouped_quantize_fp4(GroupedQuantizeFp4Args(x, FP4, lens, offs, a)) for a in (1, 0)]
    want = (singles[0][0], singles[0][1], singles[1][0], singles[1][1], *singles[0][2:], *singles[1][2:])
    assert_all_same(out, want, "fp4 with_trans vs single directions")


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("axis", [1, 0])
def test_grouped_dequantize_fp4(axis, out_dtype):
    _, m, n, lens, offs = _groups("mixed")
    x = _input(m, n, torch.float32, seed=13)
    q, s, _, op = ref.grouped_quantize_fp4(GroupedQuantizeFp4Args(x, FP4, lens, offs, axis))
    args = GroupedDequantizeFp4Args(q, s, out_dtype, axis, group_offs=offs, group_offs_padded=op,
                                    total_m=None if axis == 1 else int(offs[-1]) + 5)
    assert grouped.can_handle_dequantize_fp4(args) is None
    assert_same(grouped.grouped_dequantize_fp4(args), ref.grouped_dequantize_fp4(args), f"fp4 axis {axis}")


# -- every kernel with small forced tiles: many programs per group, ragged tile edges ----------------------

def _fp8_args(kind, axis, x, lens, offs, dtype=E4M3):
    gran, bs = KINDS[kind]
    return GroupedQuantizeFp8Args(x, dtype, gran, lens, offs, axis, bs)


@pytest.mark.parametrize("what,tile", [
    ("bw32-row", Tile(4, 32)), ("bw32-col", Tile(32, 16)), ("mx-row", Tile(2, 32)), ("mx-col", Tile(32, 8)),
    ("bw32-trans", Tile(32, 32)), ("mx-trans", Tile(32, 32)), ("fp4-col", Tile(64, 4)), ("fp4-trans", Tile(32, 64)),
])
def test_small_tiles(what, tile):
    _, m, n, lens, offs = _groups("mixed")
    x = _input(m, n, torch.bfloat16, seed=17)
    kind, mode = what.split("-")
    if kind == "fp4":
        if mode == "col":
            args = GroupedQuantizeFp4Args(x, FP4, lens, offs, 0)
            assert_all_same(grouped.grouped_quantize_fp4(args, tile), ref.grouped_quantize_fp4(args), what)
        else:
            args = GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs)
            assert_all_same(grouped.grouped_quantize_fp4_with_trans(args, tile),
                            ref.grouped_quantize_fp4_with_trans(args), what)
    elif mode == "trans":
        gran, bs = KINDS[kind]
        args = GroupedQuantizeFp8WithTransArgs(x, E4M3, gran, lens, offs, bs)
        assert_all_same(grouped.grouped_quantize_fp8_with_trans(args, tile),
                        ref.grouped_quantize_fp8_with_trans(args), what)
    else:
        args = _fp8_args(kind, 1 if mode == "row" else 0, x, lens, offs)
        assert_all_same(grouped.grouped_quantize_fp8(args, tile), ref.grouped_quantize_fp8(args), what)


@pytest.mark.parametrize("kind,axis", [("bw32", 1), ("bw32", 0), ("mx", 0), ("fp4", 0)])
def test_dequantize_small_tiles(kind, axis):
    _, m, n, lens, offs = _groups("mixed")
    x = _input(m, n, torch.float32, seed=19)
    total = int(offs[-1]) + 2
    if kind == "fp4":
        q, s, _, op = ref.grouped_quantize_fp4(GroupedQuantizeFp4Args(x, FP4, lens, offs, axis))
        args = GroupedDequantizeFp4Args(q, s, torch.bfloat16, axis, group_offs=offs, group_offs_padded=op,
                                        total_m=total)
        assert_same(grouped.grouped_dequantize_fp4(args, Tile(4, 16)), ref.grouped_dequantize_fp4(args), kind)
        return
    gran, bs = KINDS[kind]
    q, s, _, op = ref.grouped_quantize_fp8(_fp8_args(kind, axis, x, lens, offs))
    args = GroupedDequantizeFp8Args(q, s, torch.bfloat16, gran, offs, op, m if axis == 1 and kind != "mx" else total,
                                    axis, bs)
    assert_same(grouped.grouped_dequantize_fp8(args, Tile(4, 16)), ref.grouped_dequantize_fp8(args), kind)


# -- special values, odd inputs ---------------------------------------------------------------------------

# NaN and Inf inside groups: NaN scales / E8M0 0xFF exactly where the reference has them (the
# interpreter's numpy warns about the 1/inf and 1/0 that the reference's scales also take).
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("what", ["bw32-col", "mx-row", "mx-col", "bw32-trans", "mx-trans", "fp4-col", "fp4-trans"])
def test_nan_inf(what):
    _, m, n, lens, offs = _groups("mixed")
    x = _input(m, n, torch.float32, seed=23)
    x[2, 5] = float("nan")
    x[10, 40] = float("inf")
    x[50, 3] = -float("inf")
    kind, mode = what.split("-")
    if kind == "fp4":
        if mode == "col":
            args = GroupedQuantizeFp4Args(x, FP4, lens, offs, 0)
            assert_all_same(grouped.grouped_quantize_fp4(args), ref.grouped_quantize_fp4(args), what)
        else:
            args = GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs)
            assert_all_same(grouped.grouped_quantize_fp4_with_trans(args), ref.grouped_quantize_fp4_with_trans(args),
                            what)
        return
    if mode == "trans":
        gran, bs = KINDS[kind]
        args = GroupedQuantizeFp8WithTransArgs(x, E4M3, gran, lens, offs, bs)
        out = grouped.grouped_quantize_fp8_with_trans(args)
        assert_all_same(out, ref.grouped_quantize_fp8_with_trans(args), what)
        q, s, op, axis = out[2], out[3], out[7], 0
    else:
        axis = 1 if mode == "row" else 0
        args = _fp8_args(kind, axis, x, lens, offs)
        q, s, _, op = grouped.grouped_quantize_fp8(args)
        assert_all_same((q, s), ref.grouped_quantize_fp8(args)[:2], what)
    gran, bs = KINDS[kind]
    dargs = GroupedDequantizeFp8Args(q, s, torch.float32, gran, offs, op, int(offs[-1]), axis, bs)
    assert_same(grouped.grouped_dequantize_fp8(dargs), ref.grouped_dequantize_fp8(dargs), f"{what} dequantize")


# Degenerate: every group empty, no rows at all, no columns; with_trans too.
@pytest.mark.parametrize("lens_list,m,n", [([0, 0, 0], 10, 40), ([0, 0], 0, 40), ([4, 6], 10, 0)],
                         ids=["empty-groups", "no-rows", "no-cols"])
def test_degenerate(lens_list, m, n):
    x = _input(m, n, torch.bfloat16, seed=29)
    lens = torch.tensor(lens_list)
    offs = torch.tensor([0, *torch.tensor(lens_list).cumsum(0).tolist()])
    for kind in KINDS:
        for axis in (1, 0):
            args = _fp8_args(kind, axis, x, lens, offs)
            assert_all_same(grouped.grouped_quantize_fp8(args), ref.grouped_quantize_fp8(args), f"{kind} {axis}")
        gran, bs = KINDS[kind]
        args = GroupedQuantizeFp8WithTransArgs(x, E4M3, gran, lens, offs, bs)
        assert_all_same(grouped.grouped_quantize_fp8_with_trans(args), ref.grouped_quantize_fp8_with_trans(args),
                        f"{kind} with_trans")
    args = GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs)
    assert_all_same(grouped.grouped_quantize_fp4_with_trans(args), ref.grouped_quantize_fp4_with_trans(args), "fp4")


# A transposed (non-contiguous) fp16 input, and groups that claim more rows than x has (a broken
# contract the kernels must survive without reading outside x, giving what the reference gives).
@pytest.mark.parametrize("what", ["strided", "overclaimed"])
def test_odd_inputs(what):
    if what == "strided":
        lens_list, m, n, lens, offs = _groups("mixed")
        x = _input(n, m, torch.float16, seed=31).t()
    else:
        m, n = 60, 40
        x = _input(m, n, torch.float16, seed=31)
        lens = torch.tensor([50, 50])
        offs = torch.tensor([0, 50, 100])
    assert not x.is_contiguous() or what == "overclaimed"
    for kind in ("bw32", "mx"):
        for axis in (1, 0):
            args = _fp8_args(kind, axis, x, lens, offs, E5M2)
            assert_all_same(grouped.grouped_quantize_fp8(args), ref.grouped_quantize_fp8(args), f"{kind} {axis}")
        gran, bs = KINDS[kind]
        args = GroupedQuantizeFp8WithTransArgs(x, E5M2, gran, lens, offs, bs)
        assert_all_same(grouped.grouped_quantize_fp8_with_trans(args), ref.grouped_quantize_fp8_with_trans(args),
                        f"{kind} with_trans")
    args = GroupedQuantizeFp4WithTransArgs(x, FP4, lens, offs)
    assert_all_same(grouped.grouped_quantize_fp4_with_trans(args), ref.grouped_quantize_fp4_with_trans(args), "fp4")


# -- capability checks --------------------------------------------------------------------------------------

def test_can_handle_declines_with_reasons():
    _, m, n, lens, offs = _groups("mixed")
    x = _input(m, n, torch.bfloat16, seed=37)
    shuffled = ScalingRecipe(shuffle_scale=True)
    reason = grouped.can_handle_quantize_fp8(GroupedQuantizeFp8Args(x, E4M3, "MX_BLOCKWISE", lens, offs, 0, 32,
                                                                     shuffled))
    assert reason and "shuffle" in reason
    reason = grouped.can_handle_quantize_fp8(GroupedQuantizeFp8Args(x, E4M3, "BLOCKWISE", lens, offs, 0, 48))
    assert reason and "48" in reason
    reason = grouped.can_handle_quantize_fp8_with_trans(GroupedQuantizeFp8WithTransArgs(x, E4M3, "BLOCKWISE", lens,
                                                                                         offs, 256))
    assert reason and "256" in reason
    reason = grouped.can_handle_quantize_fp4(GroupedQuantizeFp4Args(x, FP4, lens, offs, 0,
                                                                    recipe=ScalingRecipe(use_sr=True)))
    assert reason and "use_sr" in reason
    q, s, _, op = ref.grouped_quantize_fp8(GroupedQuantizeFp8Args(x, E4M3, "MX_BLOCKWISE", lens, offs, 0, 32))
    reason = grouped.can_handle_dequantize_fp8(GroupedDequantizeFp8Args(q, s, torch.float64, "MX_BLOCKWISE", offs,
                                                                        op, m, 0, 32))
    assert reason and "float64" in reason
