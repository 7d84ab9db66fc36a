"""Properties of the twelve quantization primitives (FP8 every granularity, MXFP4; single, fused
row + column, grouped; and their dequantizations) against float64 math written from the spec.

The quantizer oracle is the conformance kit's (``turbo_core.testing.cases.quantization``): FP32
scales ``amax / fp8_max`` within fp32 rounding and every element within half an FP8 step of
``x / scale``; MX exponents ``floor(log2(amax)) - emax`` exactly and every element the nearest-even
value of ``x / 2**X``. Stochastic rounding (FP4 ``use_sr``) must land on one of the two grid values
around ``x / 2**X``. Dequantization: ``q * scale_inv`` rounded once to the output dtype.

Drawn: ranks 0-3, every axis, sizes from 0 (partial blocks, MX padding), fp32/bf16/fp16 inputs in
row-major, column-major and strided layouts, value distributions far from 1 (2**-20, 2**20), rows of
zeros, constants and mixed magnitudes; E4M3/E5M2, OCP and FNUZ; block sizes 1-D and 2-D; MX 32x32
tiles per direction; groups with zeros and one huge group, rows past the last group.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from turbo_core.dispatch.specs.quantization import (
    DequantizeFp4Args,
    DequantizeFp8Args,
    GroupedDequantizeFp4Args,
    GroupedDequantizeFp8Args,
    GroupedQuantizeFp4Args,
    GroupedQuantizeFp4WithTransArgs,
    GroupedQuantizeFp8Args,
    GroupedQuantizeFp8WithTransArgs,
    QuantizeFp4Args,
    QuantizeFp4WithTransArgs,
    QuantizeFp8Args,
    QuantizeFp8WithTransArgs,
)
from turbo_core.low_precision import ScalingRecipe
from turbo_core.testing.cases.quantization import _check_fp32_scaled, _check_mx, _mx_expected
from turbo_core.testing.properties.harness import Property, Target, close, exact
from turbo_core.testing.properties.lowp import dequant, e2m1_values, random_scales
from turbo_core.testing.properties.strategies import (
    FLOAT_DTYPES,
    FNUZ_FP8,
    FP4,
    LAYOUTS,
    OCP_FP8,
    VALUE_KINDS,
    dims,
    draw_values,
    e8m0_bytes,
    fp4_bytes,
    fp8_data,
    generator,
    group_lens,
    lay_out,
    offsets,
    seeds,
)

__all__ = ["PROPERTIES"]

_BLOCKS = (16, 32, 64, 128, 7)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _input(shape, kind: str, dtype: torch.dtype, layout: str, seed: int) -> torch.Tensor:
    """A quantizer input: values of ``kind`` in ``dtype`` (fp16's range caps "huge" at 2**10)."""
    if dtype == torch.float16 and kind == "huge":
        kind = "normal"
        x = draw_values(shape, kind, generator(seed)) * 2.0**10
    else:
        x = draw_values(shape, kind, generator(seed))
    return lay_out(x.to(dtype), layout)


def _host(res) -> tuple[torch.Tensor, ...]:
    return tuple(r.detach().cpu() if r.device.type != "cpu" else r for r in res)


def _fp8_check(x, q, s, dtype, gran, axis, bs, two_d, what: str):
    """The quantizer oracle for one direction; returns the float64 dequantization."""
    q, s = _host((q, s))
    try:
        if gran == "MX_BLOCKWISE":
            return _check_mx(x, q, s, dtype, axis, two_d)
        return _check_fp32_scaled(x, q, s, dtype, gran, axis, bs, two_d)
    except AssertionError as exc:
        raise AssertionError(f"{what}: {exc}") from None


# -- quantize_fp8 ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class QuantCase:
    shape: tuple[int, ...]
    granularity: str
    axis: int | None
    block_size: int | None
    two_d: bool
    in_dtype: torch.dtype
    out_dtype: torch.dtype
    kind: str
    layout: str
    seed: int


def _shape(draw, lo_rank: int, hi_rank: int, max_dim: int) -> tuple[int, ...]:
    rank = draw(st.integers(lo_rank, hi_rank))
    return tuple(draw(dims(0, max_dim if i >= rank - 2 else 4)) for i in range(rank))


@st.composite
def _quant_cases(draw, max_dim: int):
    gran = draw(st.sampled_from(("TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE")))
    mx = gran == "MX_BLOCKWISE"
    two_d = gran in ("BLOCKWISE", "MX_BLOCKWISE") and draw(st.booleans())
    lo, hi = (2, 3) if mx or two_d else (0, 3) if gran == "TENSORWISE" else (1, 3)
    shape = _shape(draw, lo, hi, max_dim)
    rank = len(shape)
    axis = None
    if mx:
        axis = draw(st.sampled_from((-1, -2)))
    elif gran != "TENSORWISE" and not two_d:
        axis = draw(st.integers(-rank, rank - 1))
    bs = draw(st.sampled_from(_BLOCKS)) if gran == "BLOCKWISE" else 32 if mx else None
    out = draw(st.sampled_from(OCP_FP8 if mx else OCP_FP8 + FNUZ_FP8))
    return QuantCase(shape, gran, axis, bs, two_d, draw(st.sampled_from(FLOAT_DTYPES)), out,
                     draw(st.sampled_from(VALUE_KINDS)), draw(st.sampled_from(LAYOUTS)), draw(seeds()))


def _check_quantize_fp8(c: QuantCase, target: Target) -> None:
    x = _input(c.shape, c.kind, c.in_dtype, c.layout, c.seed)
    args = QuantizeFp8Args(target.put(x), c.out_dtype, c.granularity, c.axis, c.block_size,
                           ScalingRecipe(use_2d_block=c.two_d))
    q, s = target.call(args)
    _fp8_check(x, q, s, c.out_dtype, c.granularity, c.axis, c.block_size, c.two_d, "quantize_fp8")


# -- quantize_fp8_with_trans -----------------------------------------------------------------------

@st.composite
def _with_trans_cases(draw, max_dim: int):
    gran = draw(st.sampled_from(("ROWWISE", "BLOCKWISE", "MX_BLOCKWISE")))
    mx = gran == "MX_BLOCKWISE"
    shape = _shape(draw, 2, 2 if gran == "BLOCKWISE" else 3, max_dim)
    bs = draw(st.sampled_from(_BLOCKS)) if gran == "BLOCKWISE" else 32 if mx else None
    two_d = (draw(st.booleans()), draw(st.booleans())) if mx else (False, False)
    out = draw(st.sampled_from(OCP_FP8 if mx else OCP_FP8 + FNUZ_FP8))
    return QuantCase(shape, gran, None, bs, two_d, draw(st.sampled_from(FLOAT_DTYPES)), out,
                     draw(st.sampled_from(VALUE_KINDS)), draw(st.sampled_from(LAYOUTS)), draw(seeds()))


def _check_quantize_fp8_with_trans(c: QuantCase, target: Target) -> None:
    x = _input(c.shape, c.kind, c.in_dtype, c.layout, c.seed)
    args = QuantizeFp8WithTransArgs(target.put(x), c.out_dtype, c.granularity, c.block_size,
                                    ScalingRecipe(use_2d_block=c.two_d[0]), ScalingRecipe(use_2d_block=c.two_d[1]))
    q_row, s_row, q_col, s_col = target.call(args)
    _fp8_check(x, q_row, s_row, c.out_dtype, c.granularity, -1, c.block_size, c.two_d[0], "row copy")
    _fp8_check(x, q_col, s_col, c.out_dtype, c.granularity, -2, c.block_size, c.two_d[1], "column copy")


# -- dequantize_fp8 --------------------------------------------------------------------------------

@dataclass(frozen=True)
class DequantCase:
    shape: tuple[int, ...]  # the quantized data's shape
    granularity: str
    axis: int | None
    block_size: int | None
    two_d: bool
    fp8: torch.dtype | None  # None: FP4
    out_dtype: torch.dtype
    seed: int


@st.composite
def _dequant_cases(draw, max_dim: int, fp4: bool):
    gran = "MX_BLOCKWISE" if fp4 else draw(st.sampled_from(("TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE")))
    mx = gran == "MX_BLOCKWISE"
    two_d = gran == "BLOCKWISE" and draw(st.booleans())
    if mx:  # data as the quantizer stores it: the blocked (last) dim padded to 128
        shape = _shape(draw, 2, 3, max_dim)
        shape = (*shape[:-1], 128 * draw(st.integers(0, 2)) // (2 if fp4 else 1))
    else:
        shape = _shape(draw, 2 if two_d else 0 if gran == "TENSORWISE" else 1, 3, max_dim)
    rank = len(shape)
    axis = draw(st.sampled_from((-1, -2))) if mx else (
        draw(st.integers(-rank, rank - 1)) if gran in ("ROWWISE", "BLOCKWISE") and not two_d else None)
    bs = draw(st.sampled_from(_BLOCKS)) if gran == "BLOCKWISE" else 32 if mx else None
    fp8 = None if fp4 else draw(st.sampled_from(OCP_FP8 if mx else OCP_FP8 + FNUZ_FP8))
    return DequantCase(shape, gran, axis, bs, two_d, fp8, draw(st.sampled_from(FLOAT_DTYPES)), draw(seeds()))


def _dequant_operand(c: DequantCase, g):
    """(data, scale_inv, float64 values in the output's layout)."""
    if c.granularity == "MX_BLOCKWISE":
        data = fp4_bytes(c.shape, g) if c.fp8 is None else fp8_data(c.shape, c.fp8, g)
        cols = c.shape[-1] * (2 if c.fp8 is None else 1)
        scale = e8m0_bytes((*c.shape[:-1], cols // 32), g)
        values = dequant(data, scale, (1,) * (len(c.shape) - 1) + (32,))
        return data, scale, values if c.axis in (-1, len(c.shape) - 1) else values.transpose(-1, -2)
    data = fp8_data(c.shape, c.fp8, g)
    rank = len(c.shape)
    if c.granularity == "TENSORWISE":
        scale = random_scales((), g)
        return data, scale, dequant(data, scale, None)
    if c.two_d:
        bs = c.block_size
        scale = random_scales((*c.shape[:-2], _cdiv(c.shape[-2], bs), _cdiv(c.shape[-1], bs)), g)
        return data, scale, dequant(data, scale, (1,) * (rank - 2) + (bs, bs))
    ax = c.axis % rank
    s_shape = tuple((1 if c.granularity == "ROWWISE" else _cdiv(d, c.block_size)) if i == ax else d
                    for i, d in enumerate(c.shape))
    scale = random_scales(s_shape, g)
    blocks = tuple((None if c.granularity == "ROWWISE" else c.block_size) if i == ax else 1 for i in range(rank))
    return data, scale, dequant(data, scale, blocks)


def _check_dequantize_fp8(c: DequantCase, target: Target) -> None:
    data, scale, want = _dequant_operand(c, generator(c.seed))
    args = DequantizeFp8Args(target.put(data), target.put(scale), c.out_dtype, c.granularity, c.axis, c.block_size,
                             ScalingRecipe(use_2d_block=c.two_d))
    res = target.call(args)
    if res.dtype != c.out_dtype:
        raise AssertionError(f"dequantize_fp8: dtype {res.dtype}, expected {c.out_dtype}")
    close(res, want, c.out_dtype, "dequantize_fp8")


def _check_dequantize_fp4(c: DequantCase, target: Target) -> None:
    data, scale, want = _dequant_operand(c, generator(c.seed))
    res = target.call(DequantizeFp4Args(target.put(data), target.put(scale), c.out_dtype, c.axis))
    if res.dtype != c.out_dtype:
        raise AssertionError(f"dequantize_fp4: dtype {res.dtype}, expected {c.out_dtype}")
    close(res, want, c.out_dtype, "dequantize_fp4")


# -- quantize_fp4 ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fp4Case:
    shape: tuple[int, ...]
    axis: int
    two_d: tuple[bool, bool]  # 32x32 tiles: (row / single direction, column)
    sr: bool  # stochastic rounding
    in_dtype: torch.dtype
    kind: str
    layout: str
    seed: int


@st.composite
def _fp4_cases(draw, max_dim: int):
    return Fp4Case(_shape(draw, 2, 3, max_dim), draw(st.sampled_from((-1, -2))), (draw(st.booleans()),
                   draw(st.booleans())), draw(st.booleans()), draw(st.sampled_from(FLOAT_DTYPES)),
                   draw(st.sampled_from(VALUE_KINDS)), draw(st.sampled_from(LAYOUTS)), draw(seeds()))


def _check_fp4_direction(x, q, s, axis, two_d, sr, what: str):
    """The MX oracle, or for stochastic rounding: exact scales and every element one of the two
    E2M1 values around ``x / 2**X``."""
    if not sr:
        return _fp8_check(x, q, s, FP4, "MX_BLOCKWISE", axis, 32, two_d, what)
    q, s = _host((q, s))
    x64 = x.to(torch.float64)
    rows = x64 if axis % x.dim() == x.dim() - 1 else x64.transpose(-1, -2)
    want_vals, want_bytes = _mx_expected(rows, FP4, two_d)
    exact(s.view(torch.uint8).to(torch.int64), want_bytes, f"{what}: E8M0 exponents")
    if tuple(q.shape) != (*want_vals.shape[:-1], want_vals.shape[-1] // 2):
        raise AssertionError(f"{what}: data shape {tuple(q.shape)}")
    *lead, r, cp = want_vals.shape
    cols = rows.shape[-1]
    scaled = torch.nn.functional.pad(rows, (0, cp - cols)).reshape(*lead, r, cp // 32, 32)
    scaled = (scaled * torch.exp2(-(want_bytes - 127).to(torch.float64)).unsqueeze(-1)).reshape(*lead, r, cp)
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
    mag = scaled.abs().clamp_max(6.0)
    idx = torch.searchsorted(grid, mag.contiguous(), right=True).clamp(1, 8) - 1
    lo, hi = grid[idx], grid[(idx + 1).clamp_max(7)]
    got = e2m1_values(q)
    ok = ((got.abs() == lo) | (got.abs() == hi)) & ((got == 0) | ((got < 0) == (scaled < 0)))
    if not bool(ok.all()):
        raise AssertionError(f"{what}: a stochastically rounded element is not next to x / 2**X")


def _check_quantize_fp4(c: Fp4Case, target: Target) -> None:
    x = _input(c.shape, c.kind, c.in_dtype, c.layout, c.seed)
    recipe = ScalingRecipe(use_2d_block=c.two_d[0], use_sr=c.sr)
    q, s = target.call(QuantizeFp4Args(target.put(x), FP4, c.axis, 32, recipe))
    _check_fp4_direction(x, q, s, c.axis, c.two_d[0], c.sr, "quantize_fp4")


def _check_quantize_fp4_with_trans(c: Fp4Case, target: Target) -> None:
    x = _input(c.shape, c.kind, c.in_dtype, c.layout, c.seed)
    args = QuantizeFp4WithTransArgs(target.put(x), FP4, 32, ScalingRecipe(use_2d_block=c.two_d[0], use_sr=c.sr),
                                    ScalingRecipe(use_2d_block=c.two_d[1], use_sr=c.sr))
    q_row, s_row, q_col, s_col = target.call(args)
    _check_fp4_direction(x, q_row, s_row, -1, c.two_d[0], c.sr, "row copy")
    _check_fp4_direction(x, q_col, s_col, -2, c.two_d[1], c.sr, "column copy")


# -- grouped ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GroupedQuantCase:
    lens: tuple[int, ...]
    extra: int  # rows past the last group
    n: int
    granularity: str  # FP4: MX_BLOCKWISE
    rowwise: bool
    block_size: int | None
    dtype: torch.dtype | None  # FP8 element dtype; None: FP4
    in_dtype: torch.dtype
    index_dtype: torch.dtype
    kind: str
    layout: str
    seed: int


@st.composite
def _grouped_cases(draw, max_dim: int, fp4: bool, with_trans: bool = False):
    gran = "MX_BLOCKWISE" if fp4 else draw(st.sampled_from(("BLOCKWISE", "MX_BLOCKWISE")))
    mx = gran == "MX_BLOCKWISE"
    bs = draw(st.sampled_from(_BLOCKS)) if gran == "BLOCKWISE" else 32
    dtype = None if fp4 else draw(st.sampled_from(OCP_FP8 if mx else OCP_FP8 + FNUZ_FP8))
    return GroupedQuantCase(tuple(draw(group_lens(3, max_dim))), draw(st.sampled_from((0, 0, 1, 5))),
                            draw(dims(0, max_dim)), gran, False if with_trans else draw(st.booleans()), bs, dtype,
                            draw(st.sampled_from(FLOAT_DTYPES)), draw(st.sampled_from((torch.int64, torch.int32))),
                            draw(st.sampled_from(VALUE_KINDS)), draw(st.sampled_from(LAYOUTS)), draw(seeds()))


def _align(c: GroupedQuantCase, rowwise: bool) -> int:
    if c.dtype is None:
        return 1 if rowwise else 512
    if c.granularity == "BLOCKWISE":
        return 1 if rowwise else c.block_size
    return 32 if rowwise else 128


def _padded_rows(c: GroupedQuantCase, rowwise: bool) -> tuple[list[int], list[int], int]:
    """(padded lens, padded offsets, rows of the padded layout)."""
    align = _align(c, rowwise)
    m = sum(c.lens) + c.extra
    lens = [_cdiv(v, align) * align for v in c.lens]
    if align == 1:
        return lens, offsets(lens), m
    if c.granularity == "BLOCKWISE":
        return lens, offsets(lens), m + len(c.lens) * align
    return lens, offsets(lens), _cdiv(m + len(c.lens) * align, align) * align


def _grouped_direction(c: GroupedQuantCase, x: torch.Tensor, outs, rowwise: bool, what: str) -> None:
    """Check ``(q, s, lens_padded, offs_padded)`` of one direction against the padded layout."""
    q, s, lp, op = outs
    want_lens, want_offs, m_pad = _padded_rows(c, rowwise)
    exact(lp.to(torch.int64), torch.tensor(want_lens), f"{what}: padded group lens")
    exact(op.to(torch.int64), torch.tensor(want_offs), f"{what}: padded group offsets")
    if _align(c, rowwise) == 1:
        padded = x
    else:
        padded = torch.zeros(m_pad, c.n, dtype=x.dtype)
        src = offsets(list(c.lens))
        for g, ln in enumerate(c.lens):
            padded[want_offs[g]:want_offs[g] + ln] = x[src[g]:src[g] + ln]
    dtype = FP4 if c.dtype is None else c.dtype
    if c.granularity == "BLOCKWISE" and rowwise:
        q, s = _host((q, s))
        if tuple(s.shape) != (_cdiv(c.n, c.block_size), x.shape[0]):
            raise AssertionError(f"{what}: BLOCKWISE row scales: shape {tuple(s.shape)}, expected "
                                 f"{(_cdiv(c.n, c.block_size), x.shape[0])} (transposed)")
        _fp8_check(x, q, s.t(), dtype, "BLOCKWISE", -1, c.block_size, False, what)
    else:
        _fp8_check(padded, q, s, dtype, c.granularity, 1 if rowwise else 0, c.block_size, False, what)


def _grouped_input(c: GroupedQuantCase, target: Target):
    x = _input((sum(c.lens) + c.extra, c.n), c.kind, c.in_dtype, c.layout, c.seed)
    lens = target.put(torch.tensor(c.lens, dtype=c.index_dtype))
    offs = target.put(torch.tensor(offsets(list(c.lens)), dtype=c.index_dtype))
    return x, lens, offs


def _check_grouped_quantize(c: GroupedQuantCase, target: Target) -> None:
    x, lens, offs = _grouped_input(c, target)
    axis = -1 if c.rowwise else 0
    if c.dtype is None:
        args = GroupedQuantizeFp4Args(target.put(x), FP4, lens, offs, axis)
    else:
        args = GroupedQuantizeFp8Args(target.put(x), c.dtype, c.granularity, lens, offs, axis, c.block_size)
    outs = target.call(args)
    _grouped_direction(c, x, outs, c.rowwise, target.primitive)


def _check_grouped_quantize_with_trans(c: GroupedQuantCase, target: Target) -> None:
    x, lens, offs = _grouped_input(c, target)
    if c.dtype is None:
        args = GroupedQuantizeFp4WithTransArgs(target.put(x), FP4, lens, offs)
    else:
        args = GroupedQuantizeFp8WithTransArgs(target.put(x), c.dtype, c.granularity, lens, offs, c.block_size)
    q_row, s_row, q_col, s_col, l_row, o_row, l_col, o_col = target.call(args)
    _grouped_direction(c, x, (q_row, s_row, l_row, o_row), True, "row copy")
    _grouped_direction(c, x, (q_col, s_col, l_col, o_col), False, "column copy")


@dataclass(frozen=True)
class GroupedDequantCase:
    quant: GroupedQuantCase
    out_dtype: torch.dtype
    extra_out: int  # output rows past the last group


def _grouped_dequant_cases(max_dim: int, fp4: bool):
    return st.builds(GroupedDequantCase, _grouped_cases(max_dim, fp4), st.sampled_from(FLOAT_DTYPES),
                     st.sampled_from((0, 2)))


def _check_grouped_dequantize(dc: GroupedDequantCase, target: Target) -> None:
    c = dc.quant
    g = generator(c.seed)
    lens_pad, offs_pad, m_pad = _padded_rows(c, c.rowwise)
    mx = c.granularity == "MX_BLOCKWISE"
    n_pad = _cdiv(c.n, 128) * 128 if mx and c.rowwise else c.n
    # the quantized layout: MX col-wise (and FP4 col-wise) stored transposed [N, M_pad]
    stored = (m_pad, n_pad) if c.rowwise else ((c.n, m_pad) if mx else (m_pad, c.n))
    if c.dtype is None:
        data = fp4_bytes((stored[0], stored[1] // 2), g)
    else:
        data = fp8_data(stored, c.dtype, g)
    if mx:
        scale = e8m0_bytes((stored[0], stored[1] // 32), g)
        full = dequant(data, scale, (1, 32))
        full = full if c.rowwise else full.t()
    elif c.rowwise:  # BLOCKWISE row-wise: tight, scales transposed
        scale = random_scales((_cdiv(c.n, c.block_size), m_pad), g)
        full = dequant(data, scale.t(), (1, c.block_size))
    else:
        scale = random_scales((_cdiv(m_pad, c.block_size), c.n), g)
        full = dequant(data, scale, (c.block_size, 1))
    offs = offsets(list(c.lens))
    tight = c.rowwise and (c.dtype is None or c.granularity == "BLOCKWISE")
    if tight:  # every row, as the tight quantization stored it
        want, total = full, m_pad
    else:
        total = offs[-1] + dc.extra_out
        want = torch.zeros(total, full.shape[1], dtype=torch.float64)
        for gi, ln in enumerate(c.lens):
            want[offs[gi]:offs[gi] + ln] = full[offs_pad[gi]:offs_pad[gi] + ln]
    put = target.put
    offs_t = put(torch.tensor(offs, dtype=c.index_dtype))
    offs_pad_t = put(torch.tensor(offs_pad, dtype=c.index_dtype))
    axis = -1 if c.rowwise else 0
    if c.dtype is None:
        args = GroupedDequantizeFp4Args(put(data), put(scale), dc.out_dtype, axis, 32,
                                        None if c.rowwise else offs_t, None if c.rowwise else offs_pad_t,
                                        None if c.rowwise else total)
    else:
        args = GroupedDequantizeFp8Args(put(data), put(scale), dc.out_dtype, c.granularity, offs_t, offs_pad_t, total,
                                        axis, c.block_size)
    res = target.call(args)
    if res.dtype != dc.out_dtype:
        raise AssertionError(f"{target.primitive}: dtype {res.dtype}, expected {dc.out_dtype}")
    close(res, want, dc.out_dtype, target.primitive)


PROPERTIES = [
    Property("quantize_fp8", _quant_cases, _check_quantize_fp8),
    Property("quantize_fp8_with_trans", _with_trans_cases, _check_quantize_fp8_with_trans),
    Property("dequantize_fp8", lambda d: _dequant_cases(d, False), _check_dequantize_fp8),
    Property("grouped_quantize_fp8", lambda d: _grouped_cases(d, False), _check_grouped_quantize),
    Property("grouped_quantize_fp8_with_trans", lambda d: _grouped_cases(d, False, True),
             _check_grouped_quantize_with_trans),
    Property("grouped_dequantize_fp8", lambda d: _grouped_dequant_cases(d, False), _check_grouped_dequantize),
    Property("quantize_fp4", _fp4_cases, _check_quantize_fp4),
    Property("quantize_fp4_with_trans", _fp4_cases, _check_quantize_fp4_with_trans),
    Property("dequantize_fp4", lambda d: _dequant_cases(d, True), _check_dequantize_fp4),
    Property("grouped_quantize_fp4", lambda d: _grouped_cases(d, True), _check_grouped_quantize),
    Property("grouped_quantize_fp4_with_trans", lambda d: _grouped_cases(d, True, True),
             _check_grouped_quantize_with_trans),
    Property("grouped_dequantize_fp4", lambda d: _grouped_dequant_cases(d, True), _check_grouped_dequantize),
]


