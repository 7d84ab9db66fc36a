"""Conformance cases for the quantization ops (FP8 every granularity, MXFP4, grouped, fused).

The oracle is independent float64 math written from the documented semantics, not the reference
backend: scale shapes re-derived from the layout table; FP32 scales ``amax / fp8_max`` (within
fp32 rounding); MX exponents ``floor(log2(amax)) - emax`` exactly; MX and FP4 elements exactly
round-to-nearest-even on the format's grid (the 2**-X scaling is exact); FP32-scaled FP8 elements
within half an FP8 step of ``x * scale``; round-trip SNR >= 25 dB (E4M3), 20 dB (E5M2), 10 dB (FP4).

Sizes are odd (1x111, 7x333, 3x5x67) so that partial blocks, MX padding and single rows are hit.
"""

from __future__ import annotations

import functools
import math

import torch

from turbo_core.low_precision import ScalingRecipe
from turbo_core.ops import (
    dequantize_fp4,
    dequantize_fp8,
    grouped_dequantize_fp4,
    grouped_dequantize_fp8,
    grouped_quantize_fp4,
    grouped_quantize_fp8,
    quantize_fp4,
    quantize_fp4_with_trans,
    quantize_fp8,
    quantize_fp8_with_trans,
)
from turbo_core.testing.case import Case, host_copy
from turbo_core.testing.numerics import assert_snr

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FP4 = getattr(torch, "float4_e2m1fn_x2", None)
FMT = {E4M3: "E4M3", E5M2: "E5M2"}
SHAPES_2D = [(1, 111), (7, 333), (40, 65)]
SHAPE_3D = (3, 5, 67)


def _x(shape, seed, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 3).to(dtype)


def _host(tensors) -> tuple[torch.Tensor, ...]:
    """CPU copies of an op's outputs, for the oracle (which works on the CPU)."""
    return tuple(host_copy(t) for t in tensors)


def _cdiv(a, b):
    return -(-a // b)


# -- independent oracle ---------------------------------------------------------------------------

#: Mantissa bits of the FP8 formats (``torch.finfo(float8_e5m2fnuz).eps`` reads 2**-3, a third bit
#: the format does not have).
_MANTISSA_BITS = {torch.float8_e4m3fn: 3, torch.float8_e5m2: 2, torch.float8_e4m3fnuz: 3, torch.float8_e5m2fnuz: 2}


def _grid(dtype):
    """(mantissa bits, min normal exponent, max) of an element format."""
    if dtype == FP4:
        return 1, 0, 6.0
    fi = torch.finfo(dtype)
    return _MANTISSA_BITS[dtype], round(math.log2(fi.smallest_normal)), float(fi.max)


def _round_to_grid(v: torch.Tensor, dtype) -> torch.Tensor:
    """float64 round-to-nearest-even onto the format grid, saturating at ±max."""
    mbits, emin, vmax = _grid(dtype)
    a = v.abs()
    _, e = torch.frexp(a)
    step = torch.pow(2.0, (e.to(torch.float64) - 1).clamp_min(emin) - mbits)
    r = (torch.round(a / step) * step).clamp_max(vmax)
    return torch.where(v < 0, -r, r)


def _fp4_values(q: torch.Tensor) -> torch.Tensor:
    """float64 values of packed E2M1 data (low nibble = even element)."""
    b = q.view(torch.uint8).to(torch.int64)
    codes = torch.stack((b & 15, b >> 4), dim=-1).reshape(*b.shape[:-1], 2 * b.shape[-1])
    table = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
    mag = table[codes & 7]
    return torch.where(codes >= 8, -mag, mag)


def _values(q: torch.Tensor) -> torch.Tensor:
    return _fp4_values(q) if q.dtype == FP4 else q.to(torch.float64)


def _e8m0(s: torch.Tensor) -> torch.Tensor:
    return s.view(torch.uint8).to(torch.int64)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Comparable view of any tensor (1-byte low-precision dtypes as their raw bytes)."""
    return t.view(torch.uint8) if t.element_size() == 1 else t


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(what)


def _fp32_scale_groups(x64: torch.Tensor, gran: str, axis, bs, two_d):
    """``(expected scale shape, per-element group amax broadcast to x)`` from the layout table."""
    shape = tuple(x64.shape)
    a = x64.abs()
    if gran == "TENSORWISE":
        return (), a.amax().expand(shape) if a.numel() else a
    if gran == "ROWWISE":
        ax = axis % len(shape)
        s = list(shape)
        s[ax] = 1
        if shape[ax] == 0:  # nothing to reduce: no element needs a scale
            return tuple(s), a
        return tuple(s), a.amax(dim=ax, keepdim=True).expand(shape)
    if two_d:
        m, n = shape[-2:]
        pm, pn = _cdiv(m, bs) * bs, _cdiv(n, bs) * bs
        t = torch.nn.functional.pad(a, (0, pn - n, 0, pm - m)).reshape(*shape[:-2], pm // bs, bs, pn // bs, bs)
        am = t.amax(dim=(-3, -1), keepdim=True).expand(t.shape).reshape(*shape[:-2], pm, pn)[..., :m, :n]
        return (*shape[:-2], pm // bs, pn // bs), am
    ax = axis % len(shape)
    y = a.movedim(ax, -1)
    n = y.shape[-1]
    t = torch.nn.functional.pad(y, (0, _cdiv(n, bs) * bs - n)).reshape(*y.shape[:-1], _cdiv(n, bs), bs)
    am = t.amax(dim=-1, keepdim=True).expand(t.shape).reshape(*y.shape[:-1], _cdiv(n, bs) * bs)[..., :n].movedim(-1, ax)
    s = list(shape)
    s[ax] = _cdiv(shape[ax], bs)
    return tuple(s), am


def _scale_at_elements(scale_inv: torch.Tensor, gran, axis, bs, two_d, shape) -> torch.Tensor:
    s = scale_inv.to(torch.float64)
    if gran == "TENSORWISE":
        return s.reshape(()).expand(shape)
    if gran == "ROWWISE":
        return s.expand(shape)
    if two_d:
        return s.repeat_interleave(bs, -2).repeat_interleave(bs, -1)[..., : shape[-2], : shape[-1]]
    ax = axis % len(shape)
    return s.repeat_interleave(bs, ax).narrow(ax, 0, shape[ax])


def _check_fp32_scaled(x, q, s, dtype, gran, axis=None, bs=None, two_d=False):
    """Scale shape/dtype/values and element rounding of a TENSORWISE/ROWWISE/BLOCKWISE result."""
    x64 = x.to(torch.float64)
    want_shape, amax = _fp32_scale_groups(x64, gran, axis, bs, two_d)
    _check(q.dtype == dtype and tuple(q.shape) == tuple(x.shape), f"q: {q.dtype} {tuple(q.shape)}")
    _check(s.dtype == torch.float32 and tuple(s.shape) == want_shape,
           f"scale_inv: expected fp32 {want_shape}, got {s.dtype} {tuple(s.shape)}")
    fmax = float(torch.finfo(dtype).max)
    s_el = _scale_at_elements(s, gran, axis, bs, two_d, tuple(x.shape))
    want_s = amax.clamp_min(1e-12) / fmax
    _check(bool(torch.isfinite(s_el).all()), "scale_inv: not finite")
    torch.testing.assert_close(s_el, want_s, rtol=1e-6, atol=0, msg=lambda m: f"scale_inv values: {m}")
    # Each element within half an FP8 step of x * scale (round to nearest).
    v = x64 / s_el
    mbits, emin, _ = _grid(dtype)
    _, e = torch.frexp(v.abs())
    half_step = torch.pow(2.0, (e.to(torch.float64) - 1).clamp_min(emin) - mbits) / 2
    err = (_values(q) - v.clamp(-fmax, fmax)).abs()
    if not bool((err <= half_step * (1 + 1e-3) + 1e-30).all()):
        raise AssertionError(f"q: an element is off by {float((err / half_step).max()):.3f} half-steps")
    return q.to(torch.float64) * s_el


def _mx_expected(x64_rows: torch.Tensor, dtype, two_d: bool):
    """Expected (data values [.., R, C_pad], E8M0 bytes [.., R, C_pad/32]) for rows of x (float64)."""
    *lead, r, c = x64_rows.shape
    cp = _cdiv(c, 128) * 128
    blocks = torch.nn.functional.pad(x64_rows, (0, cp - c)).reshape(*lead, r, cp // 32, 32)
    amax = blocks.abs().amax(-1)
    if two_d and r:
        rp = _cdiv(r, 32) * 32
        t = torch.nn.functional.pad(amax, (0, 0, 0, rp - r)).reshape(*lead, rp // 32, 32, cp // 32)
        amax = t.amax(-2, keepdim=True).expand(t.shape).reshape(*lead, rp, cp // 32)[..., :r, :]
    emax = math.floor(math.log2(_grid(dtype)[2]))
    exps = torch.tensor([(-127 if a == 0 else max(-127, min(127, math.floor(math.log2(a)) - emax)))
                         for a in amax.flatten().tolist()], dtype=torch.int64).reshape(amax.shape)
    vals = _round_to_grid(blocks * torch.pow(2.0, -exps.to(torch.float64)).unsqueeze(-1), dtype)
    return vals.reshape(*lead, r, cp), exps + 127


def _check_mx(x, q, s, dtype, axis, two_d=False):
    """MX layout, exact E8M0 bytes and exact element values; returns the float64 dequantization
    in x's logical shape."""
    x64 = x.to(torch.float64)
    rowwise = axis % x.dim() == x.dim() - 1
    rows = x64 if rowwise else x64.transpose(-1, -2)
    want_vals, want_bytes = _mx_expected(rows, dtype, two_d)
    cols = want_vals.shape[-1] // (2 if dtype == FP4 else 1)
    want_q = (*rows.shape[:-1], cols)
    _check(q.dtype == dtype and tuple(q.shape) == want_q, f"q: expected {dtype} {want_q}, got {q.dtype} {tuple(q.shape)}")
    _check(tuple(s.shape) == tuple(want_bytes.shape) and s.dtype in (torch.uint8, getattr(torch, "float8_e8m0fnu", None)),
           f"scale_inv: expected E8M0 {tuple(want_bytes.shape)}, got {s.dtype} {tuple(s.shape)}")
    _check(torch.equal(_e8m0(s), want_bytes), "scale_inv: E8M0 exponents differ from floor(log2(amax)) - emax")
    _check(torch.equal(_values(q), want_vals), "q: MX elements are not the nearest-even values of x / 2**X")
    deq = (_values(q).reshape(*want_bytes.shape, 32) * torch.pow(2.0, _e8m0(s) - 127.0).unsqueeze(-1))
    deq = deq.reshape(want_vals.shape)[..., : rows.shape[-1]]
    return deq if rowwise else deq.transpose(-1, -2)


# -- cases ------------------------------------------------------------------------------------------

FP8_CONFIGS = [  # (id, granularity, axis, block_size, 2-D blocks)
    ("tensorwise", "TENSORWISE", None, None, False),
    ("rowwise-last", "ROWWISE", -1, None, False),
    ("rowwise-first", "ROWWISE", 0, None, False),
    ("block128-row", "BLOCKWISE", -1, 128, False),
    ("block32-col", "BLOCKWISE", -2, 32, False),
    ("block32-2d", "BLOCKWISE", None, 32, True),
    ("mx-row", "MX_BLOCKWISE", -1, 32, False),
    ("mx-col", "MX_BLOCKWISE", -2, 32, False),
    ("mx-2d", "MX_BLOCKWISE", -1, 32, True),
]


def _fp8_round_trip(gran, axis, bs, two_d, dtype, shape, in_dtype, *, device="cpu"):
    """Inputs drawn on the CPU, the ops on ``device``, the oracle on the CPU."""
    x = _x(shape, seed=sum(shape) + len(gran), dtype=in_dtype)
    recipe = ScalingRecipe(use_2d_block=two_d)
    qd, sd = quantize_fp8(x.to(device), dtype, gran, block_size=bs, axis=axis, scaling_recipe=recipe)
    q, s = _host((qd, sd))
    if gran == "MX_BLOCKWISE":
        deq64 = _check_mx(x, q, s, dtype, axis, two_d)
    else:
        deq64 = _check_fp32_scaled(x, q, s, dtype, gran, axis, bs, two_d)
    assert_snr(x.to(torch.float64), deq64, FMT[dtype], what=f"{gran} round trip")
    # The backend's dequantization equals q * scale_inv rounded once to the output dtype.
    d = dequantize_fp8(qd, torch.float32, gran, block_size=bs, axis=axis, scale_inv=sd, scaling_recipe=recipe)
    d = d.cpu()
    if gran == "MX_BLOCKWISE":
        d = d[..., : x.shape[-2], : x.shape[-1]]
    _check(tuple(d.shape) == tuple(x.shape) and d.dtype == torch.float32, f"dequantize: shape {tuple(d.shape)}")
    torch.testing.assert_close(d.to(torch.float64), deq64, rtol=2**-23, atol=0, msg=lambda m: f"dequantize: {m}")


def _fp4_round_trip(axis, two_d, shape, *, device="cpu"):
    """Inputs drawn on the CPU, the ops on ``device``, the oracle on the CPU."""
    x = _x(shape, seed=7 * sum(shape))
    recipe = ScalingRecipe(use_2d_block=two_d)
    qd, sd = quantize_fp4(x.to(device), FP4, "MX_BLOCKWISE", axis=axis, scaling_recipe=recipe)
    q, s = _host((qd, sd))
    deq64 = _check_mx(x, q, s, FP4, axis, two_d)
    assert_snr(x.to(torch.float64), deq64, "FP4", what="MXFP4 round trip")
    d = dequantize_fp4(qd, torch.float32, "MX_BLOCKWISE", axis=axis, scale_inv=sd).cpu()
    d = d[..., : x.shape[-2], : x.shape[-1]]
    torch.testing.assert_close(d.to(torch.float64), deq64, rtol=0, atol=0, msg=lambda m: f"dequantize_fp4: {m}")


def _all_zero(gran, axis, bs, two_d, fp4, *, device="cpu"):
    """The ops on ``device``, the checks on the CPU."""
    x = torch.zeros(9, 70, dtype=torch.bfloat16, device=device)
    recipe = ScalingRecipe(use_2d_block=two_d)
    if fp4:
        q, s = quantize_fp4(x, FP4, gran, axis=axis, scaling_recipe=recipe)
        d = dequantize_fp4(q, torch.bfloat16, gran, axis=axis, scale_inv=s)
    else:
        q, s = quantize_fp8(x, E4M3, gran, block_size=bs, axis=axis, scaling_recipe=recipe)
        d = dequantize_fp8(q, torch.bfloat16, gran, block_size=bs, axis=axis, scale_inv=s, scaling_recipe=recipe)
    q, s, d = _host((q, s, d))
    scale = torch.pow(2.0, _e8m0(s) - 127.0) if gran == "MX_BLOCKWISE" else s.to(torch.float64)
    _check(bool(torch.isfinite(scale).all()), "scale_inv: an all-zero input must give finite scales")
    _check(bool((_values(q) == 0).all()) and bool((d == 0).all()), "all-zero input: data and dequantization must be 0")


def _with_trans(gran, fp4, shape, *, device="cpu"):
    """Inputs drawn on the CPU, the ops on ``device``, the checks on the CPU."""
    x = _x(shape, seed=11)
    xd = x.to(device)
    if fp4:
        out = quantize_fp4_with_trans(xd, FP4, gran)
        singles = [quantize_fp4(xd, FP4, gran, axis=a) for a in (-1, -2)]
    else:
        bs = {"MX_BLOCKWISE": 32, "BLOCKWISE": 16}.get(gran)  # ROWWISE: no blocks
        out = quantize_fp8_with_trans(xd, E4M3, gran, block_size=bs)
        singles = [quantize_fp8(xd, E4M3, gran, block_size=bs, axis=a) for a in (-1, -2)]
    out = _host(out)
    want = [t for pair in singles for t in _host(pair)]
    for i, (a, b) in enumerate(zip(out, want, strict=True)):
        _check(a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b)),
               f"with_trans output {i} differs from the single-direction quantization")
    if gran == "MX_BLOCKWISE":
        _check_mx(x, out[2], out[3], FP4 if fp4 else E4M3, -2)


def _grouped(kind, axis, *, device="cpu"):
    """Grouped layouts: padded lens/offs, rows of each group in place, zero padding, round trip.
    Inputs drawn on the CPU, the ops on ``device``, the checks on the CPU."""
    lens_list = [5, 0, 37, 1]
    m, n = sum(lens_list) + 3, 70  # 3 trailing rows belong to no group
    x = _x((m, n), seed=5)
    lens = torch.tensor(lens_list, dtype=torch.int64)
    offs = torch.tensor([0, *torch.tensor(lens_list).cumsum(0).tolist()], dtype=torch.int64)
    rowwise = axis % 2 == 1
    xd, lens_d, offs_d = x.to(device), lens.to(device), offs.to(device)
    if kind == "fp4":
        dtype, align = FP4, (1 if rowwise else 512)
        qd, sd, lp, op_d = grouped_quantize_fp4(xd, FP4, "MX_BLOCKWISE", lens_d, offs_d, axis=axis)
    elif kind == "mx":
        dtype, align = E4M3, (32 if rowwise else 128)
        qd, sd, lp, op_d = grouped_quantize_fp8(xd, E4M3, "MX_BLOCKWISE", lens_d, offs_d, axis=axis)
    else:
        dtype, align = E4M3, (1 if rowwise else 16)
        qd, sd, lp, op_d = grouped_quantize_fp8(xd, E4M3, "BLOCKWISE", lens_d, offs_d, axis=axis, block_size=16)
    q, s, lp, op = _host((qd, sd, lp, op_d))
    want_lens = [_cdiv(v, align) * align for v in lens_list]
    want_offs = [0, *torch.tensor(want_lens).cumsum(0).tolist()]
    _check(lp.tolist() == want_lens and op.tolist() == want_offs,
           f"padded group lens/offs: {lp.tolist()} / {op.tolist()}, expected {want_lens} / {want_offs}")
    if align == 1:
        m_pad = m
    elif kind == "blockwise":
        m_pad = m + len(lens_list) * 16
    else:
        m_pad = _cdiv(m + len(lens_list) * align, align) * align
    # The padded high-precision layout, quantized as one tensor, must give exactly these outputs.
    padded = torch.zeros(m_pad, n, dtype=torch.float64)
    for g, length in enumerate(lens_list):
        padded[want_offs[g]: want_offs[g] + length] = x[offs[g]: offs[g] + length].to(torch.float64)
    if align == 1:
        padded[: m] = x.to(torch.float64)
    if kind == "blockwise":
        if rowwise:
            _check(tuple(s.shape) == (_cdiv(n, 16), m), f"grouped BLOCKWISE row scales: expected transposed "
                                                          f"{(_cdiv(n, 16), m)}, got {tuple(s.shape)}")
            deq = _check_fp32_scaled(x, q, s.t(), dtype, "BLOCKWISE", -1, 16)
        else:
            deq = _check_fp32_scaled(padded.to(torch.bfloat16), q, s, dtype, "BLOCKWISE", 0, 16)
    else:
        deq = _check_mx(padded.to(torch.bfloat16), q, s, dtype, 1 if rowwise else 0)
    if align != 1:
        used = torch.zeros(m_pad, dtype=torch.bool)
        for g, length in enumerate(lens_list):
            used[want_offs[g]: want_offs[g] + length] = True
        _check(bool((deq[~used] == 0).all()), "grouped: padding rows must be zero")
    total = int(offs[-1])
    if kind == "fp4":
        out = grouped_dequantize_fp4(qd, torch.float32, "MX_BLOCKWISE", axis=axis, scale_inv=sd, group_offs=offs_d,
                                     group_offs_padded=op_d, total_M=None if rowwise else total)
    else:
        out = grouped_dequantize_fp8(qd, torch.float32, "MX_BLOCKWISE" if kind == "mx" else "BLOCKWISE", offs_d, op_d,
                                     axis=axis, scale_inv=sd, block_size=None if kind == "mx" else 16,
                                     total_M=m if (rowwise and kind == "blockwise") else total)
    out = out.cpu()
    rows = out.shape[0]
    out = out[:total, :n].to(torch.float64)
    fmt = "FP4" if kind == "fp4" else "E4M3"
    assert_snr(x[:total].to(torch.float64), out, fmt, what=f"grouped {kind} round trip")
    _check(rows in (total, m), f"grouped dequantize: {rows} rows")


def _nan_inf(*, device="cpu"):
    """Inputs drawn on the CPU, the ops on ``device``, the checks on the CPU."""
    x = _x((4, 64), seed=3, dtype=torch.float32)
    x[1, 3] = float("nan")
    x[2, 40] = float("inf")
    x = x.to(device)
    q, s = quantize_fp8(x, E4M3, "ROWWISE", axis=-1)
    d = dequantize_fp8(q, torch.float32, "ROWWISE", axis=-1, scale_inv=s).cpu()
    _check(bool(torch.isnan(d[1]).all()) and bool(torch.isnan(d[2]).all()), "rows with NaN/Inf must dequantize to NaN")
    _check(bool(torch.isfinite(d[0]).all()) and bool(torch.isfinite(d[3]).all()), "clean rows must stay finite")
    s = host_copy(quantize_fp8(x, E4M3, "MX_BLOCKWISE", axis=-1)[1])
    _check(_e8m0(s)[1, 0] == 255 and _e8m0(s)[2, 1] == 255, "MX blocks with NaN/Inf must get the NaN scale 0xFF")
    _check(bool((_e8m0(s)[0] != 255).all()), "clean MX blocks must have finite scales")


CASES = (
    [Case(f"quantize_fp8-{cid}-{FMT[dt]}-{'x'.join(map(str, shape))}", ("quantize_fp8", "dequantize_fp8"),
          functools.partial(_fp8_round_trip, gran, axis, bs, two_d, dt, shape, torch.bfloat16))
     for cid, gran, axis, bs, two_d in FP8_CONFIGS for dt in (E4M3, E5M2) for shape in SHAPES_2D]
    + [Case(f"quantize_fp8-{cid}-E4M3-3x5x67-fp32", ("quantize_fp8", "dequantize_fp8"),
            functools.partial(_fp8_round_trip, gran, axis, bs, two_d, E4M3, SHAPE_3D, torch.float32))
       for cid, gran, axis, bs, two_d in FP8_CONFIGS]
    + [Case(f"quantize_fp8-zeros-{cid}", ("quantize_fp8", "dequantize_fp8"),
            functools.partial(_all_zero, gran, axis, bs, two_d, False)) for cid, gran, axis, bs, two_d in FP8_CONFIGS]
    + [Case("quantize_fp8-nan-inf", ("quantize_fp8", "dequantize_fp8"), _nan_inf)]
    + [Case(f"quantize_fp8_with_trans-{g}-{'x'.join(map(str, s))}", ("quantize_fp8", "quantize_fp8_with_trans"),
            functools.partial(_with_trans, g, False, s))
       for g, s in (("BLOCKWISE", (40, 65)), ("MX_BLOCKWISE", (40, 65)), ("MX_BLOCKWISE", SHAPE_3D),
                    ("ROWWISE", (40, 65)), ("ROWWISE", SHAPE_3D))]
    + [Case(f"grouped_quantize_fp8-{kind}-axis{axis}", ("grouped_quantize_fp8", "grouped_dequantize_fp8"),
            functools.partial(_grouped, kind, axis)) for kind in ("mx", "blockwise") for axis in (-1, 0)]
)

if FP4 is not None:
    CASES += (
        [Case(f"quantize_fp4-{'2d' if two_d else 'row' if axis == -1 else 'col'}-{'x'.join(map(str, shape))}",
              ("quantize_fp4", "dequantize_fp4"), functools.partial(_fp4_round_trip, axis, two_d, shape))
         for axis, two_d in ((-1, False), (-2, False), (-1, True)) for shape in (*SHAPES_2D, SHAPE_3D)]
        + [Case(f"quantize_fp4-zeros-{axis}", ("quantize_fp4", "dequantize_fp4"),
                functools.partial(_all_zero, "MX_BLOCKWISE", axis, 32, False, True)) for axis in (-1, -2)]
        + [Case(f"quantize_fp4_with_trans-{'x'.join(map(str, s))}", ("quantize_fp4", "quantize_fp4_with_trans"),
                functools.partial(_with_trans, "MX_BLOCKWISE", True, s)) for s in ((40, 65), SHAPE_3D)]
        + [Case(f"grouped_quantize_fp4-axis{axis}", ("grouped_quantize_fp4", "grouped_dequantize_fp4"),
                functools.partial(_grouped, "fp4", axis)) for axis in (-1, 0)]
    )
