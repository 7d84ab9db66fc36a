"""Grouped quantization on Triton: ``grouped_quantize_fp8``, ``grouped_quantize_fp8_with_trans``,
``grouped_dequantize_fp8``, ``grouped_quantize_fp4``, ``grouped_quantize_fp4_with_trans``,
``grouped_dequantize_fp4`` (launchers and capability checks; kernels in ``grouped_kernels``).

Layouts are the spec's (``turbo_core.dispatch.specs.quantization``: ``grouped_fp8_shapes``,
``grouped_fp4_shapes``); every output is bit-identical to the TORCH reference
(``turbo_core.reference.quantization``), padding rows and their scales included. ``group_lens``
``[G]`` / ``group_offs`` ``[G+1]`` (int32/int64, ``offs`` the exclusive prefix sum of ``lens``
from 0, as the spec defines it) stay on the device: the padded lens/offs and an int32 row map are
computed by one small kernel (``pad_map_kernel``), and output sizes are static bounds of ``M``,
``G`` and the alignment. No host synchronisation.

==============================  =============================  ================================================
call                            layout                         kernels (x read once)
==============================  =============================  ================================================
FP8 BLOCKWISE, axis 1           tight ``[M, N]``, scales       the dense ``quant_groups_kernel``, scale
                                ``[cdiv(N,bs), M]``            strides transposed (no map)
FP8 BLOCKWISE, axis 0           groups padded to bs            map + ``grouped_quant_groups_kernel``
FP8 MX, axis 1 / 0              groups padded to 32 / 128      map + ``grouped_quant_mx_kernel``
FP8 BLOCKWISE with_trans        tight row + bs-padded col      map + ``grouped_blockwise_with_trans_kernel``
FP8 MX with_trans               row 32-, col 128-padded        map + ``grouped_mx_with_trans_kernel``
FP4, axis 1                     tight                          the dense ``quantize_fp4`` launcher
FP4, axis 0 / with_trans        groups padded to 512 (col)     map + the grouped MX kernels (``FP4``); bf16,
                                                               ``fast``: the pair kernels (``grouped_fp4_kernels``)
dequantize, padded layouts      ``[total_M, ...]``             ``unpad_map_kernel`` + ``grouped_dequant_kernel``
                                                               (FP8 MX axis 0, ``fast``:
                                                               ``grouped_mx_dequant_trans_kernel``)
==============================  =============================  ================================================

with_trans walks the column layout (the larger alignment) and writes each of its rows to the
row layout through ``dst``: group ``g``'s first ``lens_r[g]`` rows map onto the row layout's
group, and the rows past the column layout's last group onto the row layout's tail. There are
always enough of them: MX ``M_c - offs_c[G] >= M_r - offs_r[G]`` (``M_c - M_r >= 96 G`` while each
group pads at most 96 rows more in the column layout); tight row copies (BLOCKWISE, FP4) need
``M - offs[G]`` tail rows and the column layout has at least ``M - offs[G] + G``.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.quantization import (
    DequantizeFp4Args,
    GroupedDequantizeFp4Args,
    GroupedDequantizeFp8Args,
    GroupedQuantizeFp4Args,
    GroupedQuantizeFp4WithTransArgs,
    GroupedQuantizeFp8Args,
    GroupedQuantizeFp8WithTransArgs,
    QuantizeFp4Args,
    grouped_fp4_shapes,
    grouped_fp8_shapes,
    grouped_row_align,
    normalize_axis,
)
from turbo_core.low_precision import E8M0_DTYPE, FLOAT4_E2M1FN_X2, ScalingGranularity
from turbo_triton import _runtime
from turbo_triton.intmath import cdiv, next_power_of_2
from turbo_triton.launcher import fast_kernel
from turbo_triton.quantization import common
from turbo_triton.quantization.common import Tile

__all__ = ["can_handle_dequantize_fp4", "can_handle_dequantize_fp8", "can_handle_quantize_fp4",
           "can_handle_quantize_fp4_with_trans", "can_handle_quantize_fp8", "can_handle_quantize_fp8_with_trans",
           "grouped_dequantize_fp4", "grouped_dequantize_fp8", "grouped_quantize_fp4",
           "grouped_quantize_fp4_with_trans", "grouped_quantize_fp8", "grouped_quantize_fp8_with_trans"]

G = ScalingGranularity
_OUT = (torch.float32, torch.float16, torch.bfloat16)
_MAX_ROWS = 2**31 - 1  # the row maps are int32
_MAP_ROWS = 128  # padded rows a program of the map kernels


# -- capability checks -------------------------------------------------------------------------------

def _rows_reason(m: int, groups: int, align: int) -> str | None:
    if m + groups * align + align > _MAX_ROWS:
        return f"TRITON's grouped row maps are int32: {m} rows + {groups} groups x {align} padding is too many"
    return None


def _fp4_recipe_reason(*recipes) -> str | None:
    from turbo_triton.quantization import fp4

    return fp4._recipe_reason(*recipes)


def can_handle_quantize_fp8(args: GroupedQuantizeFp8Args) -> str | None:
    reason = common.device_reason(args.x, args.out_dtype) or common.recipe_reason(args.recipe)
    if reason:
        return reason
    if G(args.granularity) == G.BLOCKWISE:
        reason = common.block_size_reason(args.block_size, square=False)
    align = grouped_row_align(G(args.granularity), normalize_axis(args.axis, 2), args.block_size)
    return reason or _rows_reason(args.x.shape[0], args.group_lens.shape[0], align)


def can_handle_quantize_fp8_with_trans(args: GroupedQuantizeFp8WithTransArgs) -> str | None:
    reason = (common.device_reason(args.x, args.out_dtype)
              or common.recipe_reason(args.recipe, args.recipe_for_trans))
    if reason:
        return reason
    if G(args.granularity) == G.BLOCKWISE:
        # A tile holds whole blocks of both directions: bs x bs at least.
        reason = common.block_size_reason(args.block_size, square=True)
    align = grouped_row_align(G(args.granularity), 0, args.block_size)
    return reason or _rows_reason(args.x.shape[0], args.group_lens.shape[0], align)


def _dequant_reason(x: torch.Tensor, out_dtype: torch.dtype) -> str | None:
    if out_dtype not in _OUT:
        return f"TRITON dequantizes to fp32/fp16/bf16, not {out_dtype}"
    if max(x.shape) * 2 > _MAX_ROWS:
        return "TRITON's grouped row maps are int32: too many padded rows"
    return None


def can_handle_dequantize_fp8(args: GroupedDequantizeFp8Args) -> str | None:
    return (common.device_reason(args.x, args.x.dtype) or common.recipe_reason(args.recipe)
            or _dequant_reason(args.x, args.out_dtype))


def can_handle_quantize_fp4(args: GroupedQuantizeFp4Args) -> str | None:
    return (_runtime.device_reason(args.x) or _fp4_recipe_reason(args.recipe)
            or _rows_reason(args.x.shape[0], args.group_lens.shape[0], grouped_row_align(None, 0, None, fp4=True)))


def can_handle_quantize_fp4_with_trans(args: GroupedQuantizeFp4WithTransArgs) -> str | None:
    return (_runtime.device_reason(args.x) or _fp4_recipe_reason(args.recipe, args.recipe_for_trans)
            or _rows_reason(args.x.shape[0], args.group_lens.shape[0], grouped_row_align(None, 0, None, fp4=True)))


def can_handle_dequantize_fp4(args: GroupedDequantizeFp4Args) -> str | None:
    return _runtime.device_reason(args.x) or _dequant_reason(args.x, args.out_dtype)


# -- the row maps ----------------------------------------------------------------------------------------

def _group_block(groups: int) -> int:
    return min(64, max(16, next_power_of_2(groups)))


def _pad_map(x: torch.Tensor, lens: torch.Tensor, offs: torch.Tensor, align: int, m_pad: int,
             row_align: int | None = None, m_row: int = 0):
    """``(lens_pad, offs_pad, src)`` of the layout padded to ``align`` (``m_pad`` rows); with
    ``row_align`` also ``(lens_r, offs_r, dst)`` of the row layout (``m_row`` rows; tight when
    ``row_align`` is 1: then ``lens_r``/``offs_r`` are copies of the inputs)."""
    from turbo_triton.quantization import grouped_kernels as kern

    dev, groups = x.device, lens.shape[0]
    lens_pad = torch.empty_like(lens)
    offs_pad = torch.empty_like(offs)
    src = torch.empty(m_pad, dtype=torch.int32, device=dev)
    with_row = row_align is not None
    if with_row and row_align > 1:
        lens_r, offs_r = torch.empty_like(lens), torch.empty_like(offs)
    elif with_row:
        lens_r, offs_r = lens.clone(), offs.clone()
    else:
        lens_r, offs_r = lens_pad, offs_pad  # unused by the kernel
    dst = torch.empty(m_pad if with_row else 1, dtype=torch.int32, device=dev)
    fast_kernel(kern.pad_map_kernel)[(max(1, cdiv(m_pad, _MAP_ROWS)),)](
        lens, offs, lens_pad, offs_pad, src, lens_r, offs_r, dst, groups, x.shape[0], m_pad, m_row,
        ALIGN=align, R_ALIGN=row_align or 1, WITH_ROW=with_row, BR=_MAP_ROWS, BG=_group_block(groups))
    if with_row:
        return lens_pad, offs_pad, src, lens_r, offs_r, dst
    return lens_pad, offs_pad, src


def _unpad_map(offs: torch.Tensor, offs_pad: torch.Tensor, total: int, limit: int, inverse: bool = False):
    """int32 ``[total]``: each output row's padded row, or -1; ``inverse``: also int32 ``[limit]``,
    each padded row's output row, or -1 (``unpad_map_kernel``'s ``inv``), in the same launch."""
    from turbo_triton.quantization import grouped_kernels as kern

    groups = offs.shape[0] - 1
    out = torch.empty(total, dtype=torch.int32, device=offs.device)
    inv = torch.empty(limit if inverse else 1, dtype=torch.int32, device=offs.device)
    span = max(total, limit) if inverse else total
    if span:
        fast_kernel(kern.unpad_map_kernel)[(cdiv(span, _MAP_ROWS),)](offs, offs_pad, out, inv, groups, total, limit,
                                                               BR=_MAP_ROWS, BG=_group_block(groups), WITH_INV=inverse)
    return (out, inv) if inverse else out


def _tile(tile: Tile | None, m: int, n: int, gm: int, gn: int, cap_n: int = 1024, mx: bool = False) -> Tile:
    tile = tile or (common.pick_mx(m, n, gm, gn) if mx else common.pick(m, n, gm, gn, cap_n=max(cap_n, gn)))
    common.check_tile(tile, gm, gn)
    return tile


# -- FP8 quantization ------------------------------------------------------------------------------------

def _blockwise_rowwise(x, dtype, bs, tile):
    """Tight rows: the dense kernel with the scales written transposed ``[cdiv(N, bs), M]``."""
    from turbo_triton.quantization import kernels

    m, n = x.shape
    q = torch.empty((m, n), dtype=dtype, device=x.device)
    s = torch.empty((cdiv(n, bs), m), dtype=torch.float32, device=x.device)
    if x.numel() == 0:
        return q, s
    tile = _tile(tile, m, n, 1, bs)
    xa, x_bits = common.x_arg(x)
    fast_kernel(kernels.quant_groups_kernel)[common.grid(1, m, n, tile)](
        xa, common.data_arg(q), s, m, n, 0, *x.stride(), 0, 1, m, common.eps(), n, 1,
        BM=tile.block_m, BN=tile.block_n, GM=1, GN=bs, **common.fmt_constexprs(dtype), X_BITS=x_bits,
        num_warps=tile.num_warps)
    return q, s


#: What ``fast=None`` means for the grouped fast paths (the FP4 col-wise and with_trans pair kernels,
#: the FP8 col-wise and MX with_trans quantizers' dense arithmetic (``FAST``: float amax; ``HW_SAT``),
#: the FP8 MX col-wise dequantize over the padded data and the FP8 MX row-wise dequantize's
#: once-a-tile scale loads). Each gives the reference's bits (``tests/test_grouped_quant_fast.py``),
#: and each is faster on sm90 than ``fast=False``, the generic path (integer amax on the bits, explicit
#: clamp; the ``quant`` suite measures both), so they are the default. BLOCKWISE with_trans takes the
#: fast arithmetic on the generic path's 128 x 128 x 4 tile (the dense kernel's 8 warps are not faster)
#: for blocks of 128 or more; for smaller blocks it is not faster, so ``fast=None`` keeps the generic
#: path there. False here puts every ``fast=None`` call on the generic path.
FAST_DEFAULT = True


def _fast(fast: bool | None) -> bool:
    return FAST_DEFAULT if fast is None else fast


def _fp4_pairs(x: torch.Tensor, tile: Tile | None, fast: bool | None) -> bool:
    """Whether an MXFP4 col-wise or with_trans call takes the pair kernels (``grouped_fp4_kernels``):
    where the dense launcher takes them (``fp4._pairs``: bf16 ``x``, not ROCm; ``fp4._pairs_ok``: a
    tile of 32 rows or more with two pairs an encoder instance). ``fast`` None: ``FAST_DEFAULT`` and
    ``fp4.FAST_ENABLED`` (the dense launchers' switch); True: the conditions alone; False: never."""
    from turbo_triton.quantization import fp4

    if not _fast(fast) or x.dtype != torch.bfloat16 or torch.version.hip is not None:
        return False
    return (fast or fp4.FAST_ENABLED) and (tile is None or fp4._pairs_ok(tile))


def _quantize_padded(x, dtype, gran, lens, offs, ax, bs, tile, fp4=False, fast=None):
    """One direction of a padded layout: ``(q, s, lens_pad, offs_pad)``; ``fast``: see the public
    launchers."""
    from turbo_triton.quantization import grouped_kernels as kern

    m, n = x.shape
    groups = lens.shape[0]
    align = grouped_row_align(gran, ax, bs, fp4=fp4)
    if fp4:
        data_shape, scale_shape = grouped_fp4_shapes(m, n, groups, ax)
        m_pad = data_shape[1] * 2
    else:
        data_shape, scale_shape = grouped_fp8_shapes(m, n, groups, gran, ax, bs)
        m_pad = data_shape[0] if (gran == G.BLOCKWISE or ax == 1) else data_shape[1]
    lens_pad, offs_pad, src = _pad_map(x, lens, offs, align, m_pad)
    q = torch.empty(data_shape, dtype=torch.uint8 if fp4 else dtype, device=x.device)
    s = torch.empty(scale_shape, dtype=torch.float32 if gran == G.BLOCKWISE else E8M0_DTYPE, device=x.device)
    if fp4:
        q = q.view(FLOAT4_E2M1FN_X2)
    if q.numel() == 0:
        return q, s, lens_pad, offs_pad
    xa, x_bits = common.x_arg(x)
    if gran == G.BLOCKWISE:
        tile = _tile(tile, m_pad, n, bs, 1)
        fast_kernel(kern.grouped_quant_groups_kernel)[common.grid(1, m_pad, n, tile)](
            xa, src, common.data_arg(q), s, m_pad, n, *x.stride(), common.eps(),
            BM=tile.block_m, BN=tile.block_n, BS=bs, **common.fmt_constexprs(dtype), X_BITS=x_bits,
            HW_SAT=_fast(fast) and common.hw_sat()["HW_SAT"], num_warps=tile.num_warps)
        return q, s, lens_pad, offs_pad
    row = ax == 1
    if fp4 and _fp4_pairs(x, tile, fast):
        _fp4_pairs_col(x, src, q, s, m_pad, tile)
        return q, s, lens_pad, offs_pad
    n_ext = data_shape[1] if row else n
    gm, gn = (1, 32) if row else (32, 1)
    # FP8 col-wise fast path: the dense col-wise MX quantize's tile (64 x 128 x 4, quantize._mx) and
    # arithmetic (FAST: float group amax, HW_SAT), which it takes for every input dtype.
    fast8 = not fp4 and not row and _fast(fast)
    if fast8 and tile is None:
        tile = common.pick(m_pad, n_ext, gm, gn, cap_n=128, target=8192, warps=4)
    tile = _tile(tile, m_pad, n_ext, gm, gn, mx=fp4 or not row)  # MX FP8 rows: the row-direction tile
    # FP4 ignores the FP8 format constexprs (placeholders); E2M1 has its own emax.
    fmt = dict(FMAX=1.0, MB=1, BIAS=1, FNUZ=False, SOFT=False) if fp4 else common.fmt_constexprs(dtype)
    q_row_len = data_shape[1]  # the data's row stride (bytes for FP4)
    fast_kernel(kern.grouped_quant_mx_kernel)[common.grid(1, m_pad, n_ext, tile)](
        xa, src, q.view(torch.uint8) if fp4 else common.data_arg(q), s.view(torch.uint8), m_pad, n, n_ext,
        *x.stride(), q_row_len, scale_shape[1], BM=tile.block_m, BN=tile.block_n, GM=gm, GN=gn, ROW=row,
        FP4=fp4, **fmt, EMAX=0 if fp4 else common.mx_emax_of(dtype), X_BITS=x_bits, FAST=fast8,
        HW_SAT=fast8 and common.hw_sat()["HW_SAT"], num_warps=tile.num_warps)
    return q, s, lens_pad, offs_pad


def _fp4_pairs_col(x, src, q, s, m_pad, tile):
    """MXFP4 col-wise by ``grouped_fp4_pairs_col_kernel`` (``q [N, m_pad/2]``, ``s [N, m_pad/32]``)."""
    from turbo_triton.quantization import fp4
    from turbo_triton.quantization import grouped_fp4_kernels as kern4

    n = x.shape[1]
    # The dense col-wise pair tile (fp4.COL_TILE: 64 x 128 x 2 on the GPU) over the padded extent.
    tile = tile or fp4._pairs_tile(m_pad, n, 1, fp4.COL_TILE)
    common.check_tile(tile, 32, 1)
    fast_kernel(kern4.grouped_fp4_pairs_col_kernel)[common.grid(1, m_pad, n, tile)](
        x.view(torch.int16), src, q.view(torch.uint8), s.view(torch.uint8), m_pad, n, *x.stride(),
        BM=tile.block_m, BN=tile.block_n, ASM=not common.soft(), F32MUL=fp4.F32MUL, num_warps=tile.num_warps)


def grouped_quantize_fp8(args: GroupedQuantizeFp8Args, tile: Tile | None = None, *, fast: bool | None = None):
    """``(q, scale_inv, group_lens_padded, group_offs_padded)`` (see the module doc); ``tile``
    (over the padded extent) overrides the heuristic (tests, tuning).

    BLOCKWISE col-wise, ``fast`` True takes the hardware saturation (``HW_SAT``, NVIDIA), as the
    dense BLOCKWISE quantize. MX col-wise, ``fast`` picks the code path of
    ``grouped_quant_mx_kernel``: True the dense col-wise MX quantize's (``FAST``: float group amax
    and the hardware saturation on NVIDIA, 64 x 128 x 4 tiles; every input dtype, as the dense
    launcher); False: the generic one (integer amax on the bits, explicit clamp, ``pick_mx``'s 32 x 128
    tiles); None (default): ``FAST_DEFAULT``. Same bits. Row-wise layouts ignore it."""
    gran, ax, x = G(args.granularity), normalize_axis(args.axis, 2), args.x
    if gran == G.BLOCKWISE and ax == 1:
        q, s = _blockwise_rowwise(x, args.out_dtype, args.block_size, tile)
        return q, s, args.group_lens.clone(), args.group_offs.clone()
    return _quantize_padded(x, args.out_dtype, gran, args.group_lens, args.group_offs, ax, args.block_size, tile,
                            fast=fast)


def _with_trans(x, dtype, gran, lens, offs, bs, tile, fp4=False, fast=None):
    from turbo_triton.quantization import grouped_kernels as kern

    m, n = x.shape
    groups = lens.shape[0]
    dev = x.device
    if fp4:
        row_data, row_scale = grouped_fp4_shapes(m, n, groups, 1)
        col_data, col_scale = grouped_fp4_shapes(m, n, groups, 0)
        m_c, m_r, n_ext = col_data[1] * 2, m, row_data[1] * 2
    else:
        row_data, row_scale = grouped_fp8_shapes(m, n, groups, gran, 1, bs)
        col_data, col_scale = grouped_fp8_shapes(m, n, groups, gran, 0, bs)
        if gran == G.BLOCKWISE:
            m_c, m_r, n_ext = col_data[0], m, n
        else:
            m_c, m_r, n_ext = col_data[1], row_data[0], row_data[1]
    align_c = grouped_row_align(gran, 0, bs, fp4=fp4)
    align_r = grouped_row_align(gran, 1, bs, fp4=fp4)
    l_col, o_col, src, l_row, o_row, dst = _pad_map(x, lens, offs, align_c, m_c, align_r, m_r)
    mx = gran == G.MX_BLOCKWISE
    data_dtype = torch.uint8 if fp4 else dtype
    s_dtype = E8M0_DTYPE if mx else torch.float32
    q_row, q_col = (torch.empty(shape, dtype=data_dtype, device=dev) for shape in (row_data, col_data))
    s_row, s_col = (torch.empty(shape, dtype=s_dtype, device=dev) for shape in (row_scale, col_scale))
    outs = (q_row, s_row, q_col, s_col)
    if fp4:
        outs = (q_row.view(FLOAT4_E2M1FN_X2), s_row, q_col.view(FLOAT4_E2M1FN_X2), s_col)
    if n == 0:  # every data output is empty; the lens/offs are written
        return (*outs, l_row, o_row, l_col, o_col)
    if fp4 and _fp4_pairs(x, tile, fast):
        _fp4_pairs_with_trans(x, src, dst, o_col, q_row, s_row, q_col, s_col, m_c, n_ext, tile)
        return (*outs, l_row, o_row, l_col, o_col)
    xa, x_bits = common.x_arg(x)
    # FP8 fast: the dense with_trans kernels' arithmetic (float amax, HW_SAT) on the generic path's tiles
    # (FAST_DEFAULT's note). fast=None: MX and BLOCKWISE 128 or wider; for BLOCKWISE 32 the fast path is
    # not faster, so it keeps the generic path.
    fast8 = not fp4 and (fast if fast is not None else FAST_DEFAULT and (mx or bs >= 128))
    hw = fast8 and common.hw_sat()["HW_SAT"]
    if not mx:
        tile = _tile(tile, m_c, n, bs, bs)
        fast_kernel(kern.grouped_blockwise_with_trans_kernel)[common.grid(1, m_c, n, tile)](
            xa, src, dst, o_col, groups, common.data_arg(q_row), s_row, common.data_arg(q_col), s_col,
            m, m_c, n, *x.stride(), common.eps(), BM=tile.block_m, BN=tile.block_n, BS=bs,
            **common.fmt_constexprs(dtype), X_BITS=x_bits, FAST=fast8, HW_SAT=hw, num_warps=tile.num_warps)
    else:
        tile = _tile(tile, m_c, n_ext, 32, 32, mx=True)
        fmt = dict(FMAX=1.0, MB=1, BIAS=1, FNUZ=False, SOFT=False) if fp4 else common.fmt_constexprs(dtype)
        data = (lambda t: t) if fp4 else common.data_arg
        fast_kernel(kern.grouped_mx_with_trans_kernel)[common.grid(1, m_c, n_ext, tile)](
            xa, src, dst, o_col, groups, data(q_row), s_row.view(torch.uint8), data(q_col), s_col.view(torch.uint8),
            m_c, m_r, n, n_ext, *x.stride(), BM=tile.block_m, BN=tile.block_n, FP4=fp4, **fmt,
            EMAX=0 if fp4 else common.mx_emax_of(dtype), X_BITS=x_bits, FAST=fast8, HW_SAT=hw,
            num_warps=tile.num_warps)
    return (*outs, l_row, o_row, l_col, o_col)


def _fp4_pairs_with_trans(x, src, dst, o_col, q_row, s_row, q_col, s_col, m_c, n_pad, tile):
    """MXFP4 with_trans by ``grouped_fp4_pairs_with_trans_kernel`` over the column layout's
    ``[m_c, n_pad]`` (the tight row copy has ``x``'s ``M`` rows)."""
    from turbo_triton.quantization import fp4
    from turbo_triton.quantization import grouped_fp4_kernels as kern4

    m, n = x.shape
    # The dense with_trans pair tile (fp4.TRANS_TILE: 32 x 128 x 2 on the GPU).
    tile = tile or fp4._pairs_tile(m_c, n_pad, 32, fp4.TRANS_TILE)
    common.check_tile(tile, 32, 32)
    fast_kernel(kern4.grouped_fp4_pairs_with_trans_kernel)[common.grid(1, m_c, n_pad, tile)](
        x.view(torch.int16), src, dst, o_col, o_col.shape[0] - 1, q_row, s_row.view(torch.uint8), q_col,
        s_col.view(torch.uint8), m_c, m, n, n_pad, *x.stride(), BM=tile.block_m, BN=tile.block_n,
        ASM=not common.soft(), F32MUL=fp4.F32MUL, num_warps=tile.num_warps)


def grouped_quantize_fp8_with_trans(args: GroupedQuantizeFp8WithTransArgs, tile: Tile | None = None, *,
                                    fast: bool | None = None):
    """``(q_row, s_row, q_col, s_col, lens_row, offs_row, lens_col, offs_col)`` from one read of
    ``x``; ``tile`` (over the column layout's padded extent) overrides the heuristic. ``fast``:
    True the dense with_trans kernels' arithmetic (float amax, hardware saturation on NVIDIA) on the
    generic path's tiles; False the generic path; None (default): ``FAST_DEFAULT`` for MX and BLOCKWISE
    of 128 or more, the generic path for smaller BLOCKWISE blocks (``FAST_DEFAULT``'s note). Same bits."""
    return _with_trans(args.x, args.out_dtype, G(args.granularity), args.group_lens, args.group_offs,
                       args.block_size, tile, fast=fast)


# -- FP4 quantization --------------------------------------------------------------------------------------

def grouped_quantize_fp4(args: GroupedQuantizeFp4Args, tile: Tile | None = None, *, fast: bool | None = None):
    """``(q, scale_inv, group_lens_padded, group_offs_padded)``: row-wise tight (the dense
    launcher), col-wise each group padded to 512 rows (``q [N, M_c/2]``, ``scale_inv [N, M_c/32]``);
    ``tile`` (over the padded extent ``[M_c, N]``) overrides the heuristic.

    Col-wise, ``fast`` picks the kernel: None (default) the pair kernel
    (``grouped_fp4_pairs_col_kernel``, the dense col-wise PAIRS path through the row map) where
    ``FAST_DEFAULT`` is set and the dense launcher would take it (bf16 ``x``, not ROCm,
    ``fp4.FAST_ENABLED``, a tile it takes: ``_fp4_pairs``), else the generic
    ``grouped_quant_mx_kernel``; True: the pair kernel wherever it applies, whatever the switches;
    False: always the generic kernel (side-by-side timing). Both give the same bits. Row-wise
    ignores it."""
    ax = normalize_axis(args.axis, 2)
    if ax == 1:
        from turbo_triton.quantization import fp4

        q, s = fp4.quantize_fp4(QuantizeFp4Args(args.x, args.out_dtype, 1, args.block_size, args.recipe), tile)
        return q, s, args.group_lens.clone(), args.group_offs.clone()
    return _quantize_padded(args.x, args.out_dtype, G.MX_BLOCKWISE, args.group_lens, args.group_offs, 0, None,
                            tile, fp4=True, fast=fast)


def grouped_quantize_fp4_with_trans(args: GroupedQuantizeFp4WithTransArgs, tile: Tile | None = None, *,
                                    fast: bool | None = None):
    """Tight row copy and 512-row-aligned col copy from one read of ``x``: 8 tensors
    (``q_row [M, N_pad/2]``, ``s_row [M, N_pad/32]``, ``q_col [N, M_c/2]``, ``s_col [N, M_c/32]``,
    then the row and col lens/offs); ``tile`` (over the column layout's ``[M_c, N_pad]``) overrides
    the heuristic. ``fast`` as :func:`grouped_quantize_fp4`'s: None (default) the pair kernel
    (``grouped_fp4_pairs_with_trans_kernel``, the dense with_trans PAIRS path through the row maps)
    where ``FAST_DEFAULT`` is set and the dense launcher would take it, else the generic
    ``grouped_mx_with_trans_kernel``; True: the pair kernel wherever it applies; False: always the
    generic kernel. Same bits."""
    return _with_trans(args.x, args.out_dtype, G.MX_BLOCKWISE, args.group_lens, args.group_offs, None, tile,
                       fp4=True, fast=fast)


# -- dequantization ----------------------------------------------------------------------------------------

def _launch_dequant(data, s, idx, out, c, strides, pdiv, cdiv, kind, fp8_dtype, tile, block_scales=False):
    from turbo_triton.quantization import grouped_kernels as kern

    total = out.shape[0]
    if out.numel() == 0:
        return out
    tile = _tile(tile, total, c, 1, 1)
    block_scales = block_scales and tile.block_n % 32 == 0
    fmt = common.fmt_constexprs(fp8_dtype) if fp8_dtype is not None else dict(MB=1, BIAS=1, FNUZ=False, SOFT=False)
    bf16_bits = common.soft() and out.dtype == torch.bfloat16
    fast_kernel(kern.grouped_dequant_kernel)[common.grid(1, total, c, tile)](
        data, s, idx, out.view(torch.int16) if bf16_bits else out, total, c, *strides,
        BM=tile.block_m, BN=tile.block_n, PDIV=pdiv, CDIV=cdiv, KIND=kind, MB=fmt["MB"], BIAS=fmt["BIAS"],
        FNUZ=fmt["FNUZ"], SOFT=fmt["SOFT"], ROUND_BF16=bf16_bits, BLOCK_SCALES=block_scales,
        num_warps=tile.num_warps)
    return out


def _mx_col_dequant(x, sb, offs, offs_pad, out, tile):
    """MX col-wise (``x [N, M_pad]``) in three launches: the row map and its inverse,
    ``grouped_mx_dequant_fix_kernel`` (the rows of no group, usually none), then
    ``grouped_mx_dequant_trans_kernel`` (tiles of the padded data stored transposed to their rows;
    ``tile`` over ``[N, M_pad]`` overrides its heuristic)."""
    from turbo_triton.quantization import grouped_kernels as kern

    total, c = out.shape
    if out.numel() == 0:
        return out
    p = x.shape[1]
    idx, inv = _unpad_map(offs, offs_pad, total, p, inverse=True)
    fmt = common.fmt_constexprs(x.dtype)
    consts = dict(MB=fmt["MB"], BIAS=fmt["BIAS"], FNUZ=fmt["FNUZ"], SOFT=fmt["SOFT"],
                  ROUND_BF16=common.soft() and out.dtype == torch.bfloat16)
    o = out.view(torch.int16) if consts["ROUND_BF16"] else out
    data = common.data_arg(x)
    # Large tiles: the usual tile has nothing to write and only reads its map entries.
    fix = common.pick(total, c, 1, 1, cap_n=1024, target=65536, warps=8)
    fast_kernel(kern.grouped_mx_dequant_fix_kernel)[common.grid(1, total, c, fix)](
        data, sb, idx, inv, o, total, c, *x.stride(), *sb.stride(), BR=fix.block_m, BC=fix.block_n,
        GC=min(64, fix.block_n), **consts, num_warps=fix.num_warps)
    # The dense MX col-wise dequantize's tile (128 x 64 on 8 warps: 128 data rows, so each output row
    # gets 256 bytes of bf16).
    tile = tile or common.pick(c, p, 1, 1, cap_n=64, warps=8)
    common.check_tile(tile, 1, 1)
    if p == 0:  # no padded rows: every output row is a zero row, written above
        return out
    fast_kernel(kern.grouped_mx_dequant_trans_kernel)[common.grid(1, c, p, tile)](
        data, sb, idx, inv, o, c, p, *x.stride(), *sb.stride(), BM=tile.block_m, BN=tile.block_n, **consts,
        num_warps=tile.num_warps)
    return out


def grouped_dequantize_fp8(args: GroupedDequantizeFp8Args, tile: Tile | None = None, *,
                           fast: bool | None = None) -> torch.Tensor:
    """``[total_M, C]`` in ``out_dtype`` (C: N, or N_pad for MX row-wise) with the group padding
    removed; rows in no group are zero. ``tile`` (over the output; for the MX col-wise fast path
    over the padded data ``[N, M_pad]``) overrides the heuristic.

    MX col-wise, ``fast`` picks the kernel: True ``grouped_mx_dequant_trans_kernel`` (tiles of the
    padded data, loads along the padded rows as the dense MX col-wise dequantize, stored transposed
    to their output rows through the inverse row map); False: the row gather
    ``grouped_dequant_kernel`` (loads strided by ``M_pad``). MX row-wise, True loads each scale byte
    once a tile and broadcasts it to its 32 columns (``BLOCK_SCALES``, as the dense MX dequantize),
    False gathers it per element. None (default): ``FAST_DEFAULT``. Same bits. BLOCKWISE ignores it."""
    from turbo_triton.quantization import kernels

    x, s, dev = args.x, args.scale_inv, args.x.device
    gran, ax = G(args.granularity), normalize_axis(args.axis, 2)
    data = common.data_arg(x)
    if gran == G.BLOCKWISE and ax == 1:  # tight: q * s[n // bs, m]
        m, n = x.shape
        out = torch.empty((m, n), dtype=args.out_dtype, device=dev)
        if out.numel() == 0:
            return out
        tile = _tile(tile, m, n, 1, 1)
        fmt = common.fmt_constexprs(x.dtype)
        bf16_bits = common.soft() and out.dtype == torch.bfloat16
        fast_kernel(kernels.dequant_kernel)[common.grid(1, m, n, tile)](
            data, s, out.view(torch.int16) if bf16_bits else out, m, n, 0, *x.stride(), 0, s.stride(1), s.stride(0),
            BM=tile.block_m, BN=tile.block_n, GM=1, GN=args.block_size, MB=fmt["MB"], BIAS=fmt["BIAS"],
            FNUZ=fmt["FNUZ"], SOFT=fmt["SOFT"], ROUND_BF16=bf16_bits, num_warps=tile.num_warps)
        return out
    col_mx = gran == G.MX_BLOCKWISE and ax == 0
    limit, c = (x.shape[1], x.shape[0]) if col_mx else (x.shape[0], x.shape[1])
    out = torch.empty((args.total_m, c), dtype=args.out_dtype, device=dev)
    if col_mx and _fast(fast):
        return _mx_col_dequant(x, s.view(torch.uint8), args.group_offs, args.group_offs_padded, out, tile)
    idx = _unpad_map(args.group_offs, args.group_offs_padded, args.total_m, limit)
    if gran == G.BLOCKWISE:
        strides, pdiv, cdiv, kind, sb = (*x.stride(), *s.stride()), args.block_size, 1, 0, s
    else:
        sb = s.view(torch.uint8)
        if col_mx:
            strides, pdiv, cdiv = (x.stride(1), x.stride(0), sb.stride(1), sb.stride(0)), 32, 1
        else:
            strides, pdiv, cdiv = (*x.stride(), *sb.stride()), 1, 32
        kind = 1
    # MX row-wise, fast: each scale byte loaded once a tile (the dense MX dequantize's way)
    return _launch_dequant(data, sb, idx, out, c, strides, pdiv, cdiv, kind, x.dtype, tile,
                           block_scales=gran == G.MX_BLOCKWISE and not col_mx and _fast(fast))


def grouped_dequantize_fp4(args: GroupedDequantizeFp4Args, tile: Tile | None = None) -> torch.Tensor:
    """Row-wise: the dense ``dequantize_fp4`` (``[M, N_pad]``); col-wise: ``[total_M, N]`` with the
    group padding removed. ``tile`` (over the output) overrides the heuristic."""
    if normalize_axis(args.axis, 2) == 1:
        from turbo_triton.quantization import fp4

        return fp4.dequantize_fp4(DequantizeFp4Args(args.x, args.scale_inv, args.out_dtype, 1, args.block_size), tile)
    x = args.x.view(torch.uint8)
    sb = args.scale_inv.view(torch.uint8)
    idx = _unpad_map(args.group_offs, args.group_offs_padded, args.total_m, 2 * x.shape[1])
    out = torch.empty((args.total_m, x.shape[0]), dtype=args.out_dtype, device=x.device)
    return _launch_dequant(x, sb, idx, out, x.shape[0], (x.stride(1), x.stride(0), sb.stride(1), sb.stride(0)),
                           32, 1, 2, None, tile)
