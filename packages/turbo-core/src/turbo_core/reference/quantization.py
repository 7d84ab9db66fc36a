"""Reference (TORCH) kernels of the quantization family: the oracle of the documented semantics.

Runs on the CPU and on GPUs with plain torch ops and no host synchronisation (the grouped layouts
are built with device-side index arithmetic). amax, scales and the scaled values are computed in
fp32; MX scalings by ``2**-X`` are exact (float64), and the final rounding to FP8 is torch's
round-to-nearest-even cast after clamping to ``±max``. E2M1 rounding is nearest-even (or stochastic
with ``use_sr``). Declines: AITER pre-shuffled layouts (``shuffle_scale``/``shuffle_out``) and the
random Hadamard transform (``use_rht``), whose exact conventions belong to the backends that
produce them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from turbo_core.backend import BackendType
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
    cdiv,
    grouped_row_align,
    mx_is_rowwise,
    normalize_axis,
)
from turbo_core.low_precision import (
    E8M0_DTYPE,
    FLOAT4_E2M1FN_X2,
    MXFP8_BLOCK_SIZE,
    MXFP8_PADDING_ALIGN_SIZE,
    ScalingGranularity,
    ScalingRecipe,
    fp8_cast,
    fp8_max,
    fp8_scale,
    mx_emax,
)
from turbo_core.plugins.types import Kernel

G = ScalingGranularity
_E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


# -- FP32-scale quantization --------------------------------------------------------------------------

def _amax(xa: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """amax over ``dims`` (keepdim) that is 0 for empty reductions (and NaN when a NaN is present)."""
    dims = tuple(d % xa.dim() for d in dims) if xa.dim() else ()
    if not dims:
        return xa.amax() if xa.numel() else xa.new_zeros(())
    if any(xa.shape[d] == 0 for d in dims):
        shape = [1 if i in dims else s for i, s in enumerate(xa.shape)]
        return xa.new_zeros(shape)
    return xa.amax(dim=dims, keepdim=True)


# module-level names (the oracle tests patch them here to check that a wrong kernel is caught)
_fp8_scale = fp8_scale
_cast = fp8_cast


def _tensorwise(x32: torch.Tensor, dtype: torch.dtype):
    scale = _fp8_scale(_amax(x32.abs(), tuple(range(x32.dim()))).reshape(()), dtype)
    return _cast(x32, scale, dtype), 1.0 / scale


def _rowwise(x32: torch.Tensor, dtype: torch.dtype, axis: int):
    scale = _fp8_scale(_amax(x32.abs(), (axis,)), dtype)
    return _cast(x32, scale, dtype), 1.0 / scale


def _blockwise_1d(x32: torch.Tensor, dtype: torch.dtype, axis: int, bs: int):
    y = x32.movedim(axis, -1)
    n = y.shape[-1]
    nb = cdiv(n, bs)
    blocks = F.pad(y, (0, nb * bs - n)).reshape(*y.shape[:-1], nb, bs)
    scale = _fp8_scale(_amax(blocks.abs(), (-1,)), dtype)
    q = _cast(blocks, scale, dtype).reshape(*y.shape[:-1], nb * bs)[..., :n]
    return q.movedim(-1, axis).contiguous(), (1.0 / scale).squeeze(-1).movedim(-1, axis).contiguous()


def _blockwise_2d(x32: torch.Tensor, dtype: torch.dtype, bs: int):
    y = x32 if x32.dim() == 3 else x32.unsqueeze(0)
    b, m, n = y.shape
    mb, nb = cdiv(m, bs), cdiv(n, bs)
    tiles = F.pad(y, (0, nb * bs - n, 0, mb * bs - m)).reshape(b, mb, bs, nb, bs)
    scale = _fp8_scale(_amax(tiles.abs(), (2, 4)), dtype)
    q = _cast(tiles, scale, dtype).reshape(b, mb * bs, nb * bs)[:, :m, :n]
    s_inv = (1.0 / scale).reshape(b, mb, nb)
    if x32.dim() == 2:
        q, s_inv = q[0], s_inv[0]
    return q.contiguous(), s_inv.contiguous()


def _expand_blocks(s: torch.Tensor, dim: int, bs: int, n: int) -> torch.Tensor:
    return s.repeat_interleave(bs, dim=dim).narrow(dim, 0, n)


# -- MX (E8M0 scales) -----------------------------------------------------------------------------

def _pow2_f64(e: torch.Tensor) -> torch.Tensor:
    """Exact ``2.0**e`` (float64) for integer ``e`` in [-1022, 1023]."""
    return (e.to(torch.int64) + 1023).bitwise_left_shift(52).view(torch.float64)


def _mx_exponent(amax: torch.Tensor, emax: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(X, byte)``: the OCP MX shared exponent ``floor(log2(amax)) - emax`` clamped to
    [-127, 127] (-127 for an all-zero block) and its E8M0 byte (0xFF for NaN/Inf blocks; X is then
    0 so the elements keep their NaN/saturated values)."""
    _, exp = torch.frexp(amax)  # amax = m * 2**exp with m in [0.5, 1): floor(log2(amax)) = exp - 1
    x = torch.where(amax > 0, exp.to(torch.int32) - 1 - emax, torch.full_like(exp, -127, dtype=torch.int32))
    x = x.clamp(-127, 127)
    finite = torch.isfinite(amax)
    byte = torch.where(finite, x + 127, torch.full_like(x, 255)).to(torch.uint8)
    return torch.where(finite, x, torch.zeros_like(x)), byte


def _e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """float32 values of E2M1 codes (uint8 0..15, sign in bit 3)."""
    c = codes.to(torch.int32)
    e, m = (c >> 1) & 3, (c & 1).to(torch.float32)
    normal = torch.pow(2.0, (e - 1).to(torch.float32)) * (1.0 + 0.5 * m)
    mag = torch.where(e == 0, 0.5 * m, normal)
    return torch.where((c & 8) != 0, -mag, mag)


def _e2m1_encode(v: torch.Tensor, stochastic: bool) -> torch.Tensor:
    """E2M1 codes (uint8) of float32 values already scaled into range; saturating at ±6."""
    mag = v.abs()
    if stochastic:
        # Largest grid point <= mag (index k), rounded up with probability (mag - g_k) / (g_k+1 - g_k).
        grid = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
        k = sum((mag >= g).to(torch.int32) for g in grid[1:])
        lo = _e2m1_decode(k.to(torch.uint8))
        hi = _e2m1_decode((k + 1).clamp(max=7).to(torch.uint8))
        p = torch.where(hi > lo, (mag - lo) / (hi - lo).clamp_min(1e-30), torch.zeros_like(mag))
        code = k + (torch.rand_like(mag) < p).to(torch.int32)
    else:
        below = sum((mag > b).to(torch.int32) for b in _E2M1_MIDPOINTS)  # midpoints strictly below
        upto = sum((mag >= b).to(torch.int32) for b in _E2M1_MIDPOINTS)  # midpoints at or below
        code = torch.where(below % 2 == 0, below, upto)  # a tie goes to the even code
    code = torch.where(torch.isnan(v), torch.zeros_like(code), code.clamp(max=7))
    sign = torch.signbit(v) & ~torch.isnan(v)
    return (code + 8 * sign.to(torch.int32)).to(torch.uint8)


def _pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """Two codes per byte: the even element in the low nibble, the odd one in the high nibble."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).contiguous().view(FLOAT4_E2M1FN_X2)


def _unpack_fp4(data: torch.Tensor) -> torch.Tensor:
    b = data.contiguous().view(torch.uint8)
    return torch.stack((b & 15, b >> 4), dim=-1).reshape(*b.shape[:-1], b.shape[-1] * 2)


def _mx_rows(y32: torch.Tensor, dtype: torch.dtype, use_2d: bool, use_sr: bool = False):
    """MX-quantize the rows of ``y32`` ``[..., R, C]`` in 1x32 blocks (32x32 tiles when ``use_2d``),
    padding C to a multiple of 128: ``([..., R, C_pad] data, [..., R, C_pad/32] E8M0)``."""
    *lead, r, c = y32.shape
    c_pad = cdiv(c, MXFP8_PADDING_ALIGN_SIZE) * MXFP8_PADDING_ALIGN_SIZE
    nb = c_pad // MXFP8_BLOCK_SIZE
    blocks = F.pad(y32, (0, c_pad - c)).reshape(*lead, r, nb, MXFP8_BLOCK_SIZE)
    amax = _amax(blocks.abs(), (-1,)).squeeze(-1)  # [..., R, nb]
    if use_2d and r:
        r_pad = cdiv(r, 32) * 32
        tiles = F.pad(amax, (0, 0, 0, r_pad - r)).reshape(*lead, r_pad // 32, 32, nb)
        amax = tiles.amax(dim=-2, keepdim=True).expand(*lead, r_pad // 32, 32, nb).reshape(*lead, r_pad, nb)
        amax = amax[..., :r, :]
    fp4 = dtype == FLOAT4_E2M1FN_X2
    x_exp, byte = _mx_exponent(amax, mx_emax(dtype))
    scaled = (blocks.to(torch.float64) * _pow2_f64(-x_exp).unsqueeze(-1)).to(torch.float32)
    scaled = scaled.reshape(*lead, r, c_pad)
    if fp4:
        data = _pack_fp4(_e2m1_encode(scaled, use_sr))
    else:
        m = fp8_max(dtype)
        data = scaled.clamp(-m, m).to(dtype)
    return data.contiguous(), byte.view(E8M0_DTYPE).contiguous()


def _mx_quantize(x32: torch.Tensor, dtype: torch.dtype, axis: int, recipe: ScalingRecipe):
    if not mx_is_rowwise(x32.dim(), axis):
        x32 = x32.transpose(-1, -2)
    return _mx_rows(x32, dtype, recipe.use_2d_block, recipe.use_sr)


def _mx_dequantize(data: torch.Tensor, scale_inv: torch.Tensor, out_dtype: torch.dtype, rowwise: bool,
                   fp4: bool) -> torch.Tensor:
    vals = _e2m1_decode(_unpack_fp4(data)) if fp4 else data.to(torch.float32)
    *lead, r, c = vals.shape
    byte = scale_inv.contiguous().view(torch.uint8).to(torch.int64)
    pow2 = torch.where(byte == 255, torch.full(byte.shape, float("nan"), dtype=torch.float64,
                                               device=byte.device), _pow2_f64(byte - 127))
    blocks = vals.to(torch.float64).reshape(*lead, r, c // MXFP8_BLOCK_SIZE, MXFP8_BLOCK_SIZE)
    out = (blocks * pow2.unsqueeze(-1)).reshape(*lead, r, c)
    if not rowwise:
        out = out.transpose(-1, -2)
    return out.to(out_dtype).contiguous()


# -- FP8 kernels ----------------------------------------------------------------------------------

def _quantize_fp8(x, dtype, granularity, axis, block_size, recipe):
    x32 = x.to(torch.float32)
    gran = G(granularity)
    if gran == G.TENSORWISE:
        q, s = _tensorwise(x32, dtype)
    elif gran == G.ROWWISE:
        q, s = _rowwise(x32, dtype, normalize_axis(axis, x.dim()))
    elif gran == G.BLOCKWISE and recipe.use_2d_block:
        q, s = _blockwise_2d(x32, dtype, block_size)
    elif gran == G.BLOCKWISE:
        q, s = _blockwise_1d(x32, dtype, normalize_axis(axis, x.dim()), block_size)
    else:
        return _mx_quantize(x32, dtype, axis, recipe)
    return q.contiguous(), s.to(torch.float32).contiguous()


def quantize_fp8(args: QuantizeFp8Args):
    return _quantize_fp8(args.x, args.out_dtype, args.granularity, args.axis, args.block_size, args.recipe)


def quantize_fp8_with_trans(args: QuantizeFp8WithTransArgs):
    nd = args.x.dim()
    row_axis, col_axis = nd - 1, nd - 2
    q_row, s_row = _quantize_fp8(args.x, args.out_dtype, args.granularity, row_axis, args.block_size, args.recipe)
    q_col, s_col = _quantize_fp8(args.x, args.out_dtype, args.granularity, col_axis, args.block_size,
                                 args.recipe_for_trans)
    return q_row, s_row, q_col, s_col


def _dequantize_fp8(x, scale_inv, out_dtype, granularity, axis, block_size, recipe):
    gran = G(granularity)
    if gran == G.MX_BLOCKWISE:
        return _mx_dequantize(x, scale_inv, out_dtype, mx_is_rowwise(x.dim(), axis), fp4=False)
    s = scale_inv.to(torch.float32)
    if gran == G.TENSORWISE:
        s = s.reshape(())
    elif gran == G.BLOCKWISE and recipe.use_2d_block:
        s = _expand_blocks(_expand_blocks(s, -2, block_size, x.shape[-2]), -1, block_size, x.shape[-1])
    elif gran == G.BLOCKWISE:
        ax = normalize_axis(axis, x.dim())
        s = _expand_blocks(s, ax, block_size, x.shape[ax])
    return (x.to(torch.float32) * s).to(out_dtype).contiguous()


def dequantize_fp8(args: DequantizeFp8Args):
    return _dequantize_fp8(args.x, args.scale_inv, args.out_dtype, args.granularity, args.axis,
                           args.block_size, args.recipe)


# -- grouped layouts ---------------------------------------------------------------------------------

def _padded_groups(group_lens: torch.Tensor, group_offs: torch.Tensor, align: int):
    """Per-group lengths rounded up to ``align`` and their exclusive prefix sum (on the device)."""
    lens_pad = (group_lens + (align - 1)) // align * align
    offs_pad = torch.zeros_like(group_offs)
    offs_pad[1:] = torch.cumsum(lens_pad, 0).to(group_offs.dtype)
    return lens_pad, offs_pad


def _row_map(rows: int, group_offs: torch.Tensor, offs_pad: torch.Tensor, limit: int):
    """For output row ``r`` of the tight layout: its row in the padded layout, and whether it
    belongs to a group (rows at/after ``group_offs[-1]`` or mapping past ``limit`` do not)."""
    offs = group_offs.to(torch.int64)
    pad = offs_pad.to(torch.int64)
    groups = offs.shape[0] - 1
    r = torch.arange(rows, device=offs.device, dtype=torch.int64)
    g = torch.searchsorted(offs[1:].contiguous(), r, right=True)
    gc = g.clamp(max=groups - 1)
    dest = pad[gc] + r - offs[gc]
    valid = (g < groups) & (dest >= 0) & (dest < limit)
    return dest, valid


def _scatter_rows(x32: torch.Tensor, group_offs, offs_pad, m_pad: int) -> torch.Tensor:
    dest, valid = _row_map(x32.shape[0], group_offs, offs_pad, m_pad)
    buf = x32.new_zeros((m_pad + 1, x32.shape[1]))  # the extra row takes the rows of no group
    buf.index_copy_(0, torch.where(valid, dest, torch.full_like(dest, m_pad)), x32)
    return buf[:m_pad]


def _gather_rows(full: torch.Tensor, total_m: int, group_offs, group_offs_padded) -> torch.Tensor:
    if full.shape[0] == 0:
        return full.new_zeros((total_m, full.shape[1]))
    dest, valid = _row_map(total_m, group_offs, group_offs_padded, full.shape[0])
    rows = full.index_select(0, torch.where(valid, dest, torch.zeros_like(dest)))
    return torch.where(valid.unsqueeze(1), rows, torch.zeros_like(rows)).contiguous()


def _grouped_fp8(x, dtype, granularity, group_lens, group_offs, axis, block_size, recipe):
    gran = G(granularity)
    ax = normalize_axis(axis, 2)
    x32 = x.to(torch.float32)
    align = grouped_row_align(gran, ax, block_size)
    if align == 1:  # BLOCKWISE row-wise: tight rows, scales transposed [cdiv(N, bs), M]
        q, s = _blockwise_1d(x32, dtype, 1, block_size)
        return q, s.t().contiguous(), group_lens.clone(), group_offs.clone()
    lens_pad, offs_pad = _padded_groups(group_lens, group_offs, align)
    groups = group_lens.shape[0]
    if gran == G.BLOCKWISE:
        m_pad = x.shape[0] + groups * block_size
    else:
        m_pad = cdiv(x.shape[0] + groups * align, align) * align
    buf = _scatter_rows(x32, group_offs, offs_pad, m_pad)
    if gran == G.BLOCKWISE:
        q, s = _blockwise_1d(buf, dtype, 0, block_size)
    else:
        q, s = _mx_quantize(buf, dtype, ax, recipe)
    return q, s, lens_pad, offs_pad


def grouped_quantize_fp8(args: GroupedQuantizeFp8Args):
    return _grouped_fp8(args.x, args.out_dtype, args.granularity, args.group_lens, args.group_offs,
                        args.axis, args.block_size, args.recipe)


def grouped_quantize_fp8_with_trans(args: GroupedQuantizeFp8WithTransArgs):
    q_row, s_row, l_row, o_row = _grouped_fp8(args.x, args.out_dtype, args.granularity, args.group_lens,
                                              args.group_offs, 1, args.block_size, args.recipe)
    q_col, s_col, l_col, o_col = _grouped_fp8(args.x, args.out_dtype, args.granularity, args.group_lens,
                                              args.group_offs, 0, args.block_size, args.recipe_for_trans)
    return q_row, s_row, q_col, s_col, l_row, o_row, l_col, o_col


def grouped_dequantize_fp8(args: GroupedDequantizeFp8Args):
    gran = G(args.granularity)
    ax = normalize_axis(args.axis, 2)
    if gran == G.BLOCKWISE and ax == 1:
        return _dequantize_fp8(args.x, args.scale_inv.t(), args.out_dtype, gran, 1, args.block_size,
                               ScalingRecipe())
    if gran == G.BLOCKWISE:
        full = _dequantize_fp8(args.x, args.scale_inv, torch.float32, gran, 0, args.block_size, ScalingRecipe())
    else:
        full = _mx_dequantize(args.x, args.scale_inv, torch.float32, ax == 1, fp4=False)
    return _gather_rows(full, args.total_m, args.group_offs, args.group_offs_padded).to(args.out_dtype)


# -- FP4 kernels ----------------------------------------------------------------------------------------

def quantize_fp4(args: QuantizeFp4Args):
    return _mx_quantize(args.x.to(torch.float32), args.out_dtype, args.axis, args.recipe)


def quantize_fp4_with_trans(args: QuantizeFp4WithTransArgs):
    x32 = args.x.to(torch.float32)
    nd = x32.dim()
    q_row, s_row = _mx_quantize(x32, args.out_dtype, nd - 1, args.recipe)
    q_col, s_col = _mx_quantize(x32, args.out_dtype, nd - 2, args.recipe_for_trans)
    return q_row, s_row, q_col, s_col


def dequantize_fp4(args: DequantizeFp4Args):
    return _mx_dequantize(args.x, args.scale_inv, args.out_dtype, mx_is_rowwise(args.x.dim(), args.axis),
                          fp4=True)


def _grouped_fp4(x, dtype, group_lens, group_offs, axis, recipe):
    ax = normalize_axis(axis, 2)
    x32 = x.to(torch.float32)
    if ax == 1:
        q, s = _mx_quantize(x32, dtype, 1, recipe)
        return q, s, group_lens.clone(), group_offs.clone()
    align = grouped_row_align(G.MX_BLOCKWISE, 0, None, fp4=True)
    lens_pad, offs_pad = _padded_groups(group_lens, group_offs, align)
    m_pad = cdiv(x.shape[0] + group_lens.shape[0] * align, align) * align
    q, s = _mx_quantize(_scatter_rows(x32, group_offs, offs_pad, m_pad), dtype, 0, recipe)
    return q, s, lens_pad, offs_pad


def grouped_quantize_fp4(args: GroupedQuantizeFp4Args):
    return _grouped_fp4(args.x, args.out_dtype, args.group_lens, args.group_offs, args.axis, args.recipe)


def grouped_quantize_fp4_with_trans(args: GroupedQuantizeFp4WithTransArgs):
    q_row, s_row, l_row, o_row = _grouped_fp4(args.x, args.out_dtype, args.group_lens, args.group_offs, 1,
                                              args.recipe)
    q_col, s_col, l_col, o_col = _grouped_fp4(args.x, args.out_dtype, args.group_lens, args.group_offs, 0,
                                              args.recipe_for_trans)
    return q_row, s_row, q_col, s_col, l_row, o_row, l_col, o_col


def grouped_dequantize_fp4(args: GroupedDequantizeFp4Args):
    ax = normalize_axis(args.axis, 2)
    if ax == 1:
        return _mx_dequantize(args.x, args.scale_inv, args.out_dtype, True, fp4=True)
    full = _mx_dequantize(args.x, args.scale_inv, torch.float32, False, fp4=True)
    return _gather_rows(full, args.total_m, args.group_offs, args.group_offs_padded).to(args.out_dtype)


# -- capability checks -----------------------------------------------------------------------------------

def _recipe_reason(*recipes: ScalingRecipe) -> str | None:
    for r in recipes:
        if r.shuffle_scale or r.shuffle_out:
            return "TORCH does not produce AITER pre-shuffled layouts (shuffle_scale/shuffle_out)"
        if r.use_rht:
            return "TORCH does not implement the random Hadamard transform (use_rht)"
    return None


def _check_recipe(args) -> str | None:
    return _recipe_reason(*(getattr(args, f) for f in ("recipe", "recipe_for_trans") if hasattr(args, f)))


_FP8_VARIANTS = ("fp8", "TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE")
_GROUPED_FP8_VARIANTS = ("fp8", "BLOCKWISE", "MX_BLOCKWISE")
_FP4_VARIANTS = ("fp4", "MX_BLOCKWISE", "sr")


def _kernel(name: str, impl, variants) -> Kernel:
    return Kernel(name, BackendType.TORCH, impl, check=_check_recipe, variants=variants, priority=-100)


KERNELS = [
    _kernel("quantize_fp8", quantize_fp8, _FP8_VARIANTS),
    _kernel("quantize_fp8_with_trans", quantize_fp8_with_trans, ("fp8", "BLOCKWISE", "MX_BLOCKWISE")),
    _kernel("dequantize_fp8", dequantize_fp8, _FP8_VARIANTS),
    _kernel("grouped_quantize_fp8", grouped_quantize_fp8, _GROUPED_FP8_VARIANTS),
    _kernel("grouped_quantize_fp8_with_trans", grouped_quantize_fp8_with_trans, _GROUPED_FP8_VARIANTS),
    _kernel("grouped_dequantize_fp8", grouped_dequantize_fp8, _GROUPED_FP8_VARIANTS),
    _kernel("quantize_fp4", quantize_fp4, _FP4_VARIANTS),
    _kernel("quantize_fp4_with_trans", quantize_fp4_with_trans, _FP4_VARIANTS),
    _kernel("dequantize_fp4", dequantize_fp4, _FP4_VARIANTS),
    _kernel("grouped_quantize_fp4", grouped_quantize_fp4, _FP4_VARIANTS),
    _kernel("grouped_quantize_fp4_with_trans", grouped_quantize_fp4_with_trans, _FP4_VARIANTS),
    _kernel("grouped_dequantize_fp4", grouped_dequantize_fp4, _FP4_VARIANTS),
]
