"""Triton kernels of the grouped quantization primitives (FP8 BLOCKWISE / MX and MXFP4).

A grouped quantization of ``x [M, N]`` (rows packed by group: group ``g`` is rows
``[offs[g], offs[g] + lens[g])``) writes a *padded* layout in which each group's rows start at
``offs_pad[g]`` and take ``lens_pad[g] = roundup(lens[g], align)`` rows; the rows in between and
past the last group are zero. Nothing about the groups is read on the host:

* ``pad_map_kernel`` computes ``lens_pad``/``offs_pad`` (exclusive prefix sum from 0, in chunks of
  ``BG`` groups with ``tl.cumsum`` and a carry) and, for every padded row ``p``, the source row
  ``src[p]`` (int32, -1 for a zero row). With ``WITH_ROW`` it also maps each row of that
  (column-direction) layout to a row of a second, row-direction layout ``dst[p]`` (the sentinel
  ``M_R`` for none): the group's first ``lens_r[g]`` rows go to ``offs_r[g] + j``, and the rows
  past the last group (there are at least as many as the second layout has: see ``grouped.py``)
  cover its tail, so one pass over the first layout writes every row of both.
* The quantization kernels walk the padded extent in tiles, read ``x`` through ``src`` (each row
  once, zero for padding rows) and reuse the element/scale code of the dense kernels
  (``kernels._fp32_groups``, ``kernels._mx_part``, ``fp4_kernels._fp4_part``): bit-identical to the
  reference's scatter into a zero buffer followed by the dense quantization.
* ``unpad_map_kernel`` gives, for each output row ``r`` of a grouped dequantization, its padded
  row (the reference's ``searchsorted`` rule: group 0 also takes the rows before ``offs[1]``;
  -1 when the row is in no group or maps outside the data), and ``grouped_dequant_kernel`` gathers
  those rows, ``q * scale`` in fp32 (exact for E8M0), zero for unmapped rows. The MX col-wise data
  (``[N, M_pad]``, transposed) takes ``grouped_mx_dequant_trans_kernel``: tiles of the transposed
  output ``[N, total_M]`` loaded along the padded rows and stored transposed (the dense
  ``mx_dequant_kernel``'s TRANS path).

Row maps are int32 (the launchers decline more than 2**31 - 1 padded rows); addresses are int64.
Element arithmetic: ``turbo_triton.quantization.numerics``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from turbo_triton.quantization.fp4_kernels import _fp4_part, decode_e2m1
from turbo_triton.quantization.kernels import _fp32_groups, _mx_part
from turbo_triton.quantization.numerics import (
    abs_bits,
    e8m0_to_fp32,
    expand,
    fp32_scale,
    from_fp8,
    group_amax,
    group_max,
    load_f32,
    tile_of,
    to_fp8,
    to_out,
)

__all__ = ["grouped_blockwise_with_trans_kernel", "grouped_dequant_kernel", "grouped_mx_dequant_trans_kernel",
           "grouped_mx_with_trans_kernel", "grouped_quant_groups_kernel", "grouped_quant_mx_kernel", "pad_map_kernel",
           "unpad_map_kernel"]


@triton.jit
def pad_map_kernel(lens_ptr, offs_ptr, lens_pad_ptr, offs_pad_ptr, src_ptr, lens_r_ptr, offs_r_ptr, dst_ptr,
                   G, M, M_PAD, M_R, ALIGN: tl.constexpr, R_ALIGN: tl.constexpr, WITH_ROW: tl.constexpr,
                   BR: tl.constexpr, BG: tl.constexpr):
    """Padded layout (``ALIGN``): ``lens_pad [G]``, ``offs_pad [G+1]`` (program 0 writes them) and
    ``src [M_PAD]``. ``WITH_ROW``: the row-direction layout (``R_ALIGN``; 1 = tight, whose
    lens/offs are the inputs and whose tail rows ``[offs[G], M)`` are real rows of no group):
    ``lens_r``/``offs_r`` (when ``R_ALIGN > 1``) and ``dst [M_PAD]`` (``M_R`` = no row)."""
    pid = tl.program_id(0)
    p = pid * BR + tl.arange(0, BR)
    src = tl.full((BR,), -1, tl.int32)
    dst = tl.full((BR,), -1, tl.int32)
    carry = pid * 0
    carry_r = pid * 0
    for c in range(0, G, BG):
        k = c + tl.arange(0, BG)
        km = k < G
        ln = tl.load(lens_ptr + k, mask=km, other=0).to(tl.int32)
        of = tl.load(offs_ptr + k, mask=km, other=0).to(tl.int32)
        lp = (ln + (ALIGN - 1)) // ALIGN * ALIGN
        incl = tl.cumsum(lp, 0) + carry
        if pid == 0:
            tl.store(lens_pad_ptr + k, lp, mask=km)
            tl.store(offs_pad_ptr + k + 1, incl, mask=km)
        carry += tl.sum(lp, 0)
        j = p[:, None] - (incl - lp)[None, :]  # [BR, BG]: row p's index inside group k
        real = (j >= 0) & (j < ln[None, :]) & km[None, :]
        src = tl.maximum(src, tl.max(tl.where(real, of[None, :] + j, -1), 1))
        if WITH_ROW:
            if R_ALIGN > 1:
                lr = (ln + (R_ALIGN - 1)) // R_ALIGN * R_ALIGN
                incl_r = tl.cumsum(lr, 0) + carry_r
                if pid == 0:
                    tl.store(lens_r_ptr + k, lr, mask=km)
                    tl.store(offs_r_ptr + k + 1, incl_r, mask=km)
                carry_r += tl.sum(lr, 0)
                in_r = (j >= 0) & (j < lr[None, :]) & km[None, :]
                dst = tl.maximum(dst, tl.max(tl.where(in_r, (incl_r - lr)[None, :] + j, -1), 1))
    if pid == 0:
        tl.store(offs_pad_ptr, carry * 0)
        if WITH_ROW:
            if R_ALIGN > 1:
                tl.store(offs_r_ptr, carry * 0)
    src = tl.where(src < M, src, -1)  # groups that claim rows past M (a broken contract) read zeros
    if WITH_ROW:
        t = p - carry  # index among the rows past the last padded group
        if R_ALIGN == 1:
            tail_row = tl.load(offs_ptr + G).to(tl.int32) + t
            tail = (t >= 0) & (tail_row < M)
            src = tl.where(tail, tail_row, src)
            dst = src  # tight: a row's place in the row copy is its row in x
        else:
            tail_row = carry_r + t
            dst = tl.where(t >= 0, tail_row, dst)
        dst = tl.where((dst >= 0) & (dst < M_R), dst, M_R)
        tl.store(dst_ptr + p, dst, mask=p < M_PAD)
    tl.store(src_ptr + p, src, mask=p < M_PAD)


@triton.jit
def unpad_map_kernel(offs_ptr, offs_pad_ptr, map_ptr, inv_ptr, G, TOTAL, LIMIT, BR: tl.constexpr, BG: tl.constexpr,
                     WITH_INV: tl.constexpr = False):
    """``map[r]`` for output rows ``r < TOTAL``: ``offs_pad[g] + r - offs[g]`` for the group ``g`` of
    ``r`` if that lies in ``[0, LIMIT)``, else -1. ``WITH_INV``: also ``inv[p]`` for padded rows
    ``p < LIMIT``: ``offs[g] + p - offs_pad[g]`` for the padded group ``g`` of ``p`` if that is a row
    of group ``g`` below ``TOTAL``, else -1 (the inverse of ``map`` where the groups are consistent;
    its users check ``map[inv[p]] == p``)."""
    i = tl.program_id(0).to(tl.int64) * BR + tl.arange(0, BR)
    dest = tl.full((BR,), -1, tl.int64)
    back = tl.full((BR,), -1, tl.int64)
    for c in range(0, G, BG):
        k = c + tl.arange(0, BG)
        km = k < G
        lo = tl.load(offs_ptr + k, mask=km, other=0).to(tl.int64)
        hi = tl.load(offs_ptr + k + 1, mask=km, other=0).to(tl.int64)
        pad = tl.load(offs_pad_ptr + k, mask=km, other=0).to(tl.int64)
        inside = ((k == 0)[None, :] | (lo[None, :] <= i[:, None])) & (i[:, None] < hi[None, :]) & km[None, :]
        d = tl.where(inside, pad[None, :] + i[:, None] - lo[None, :], -1)
        dest = tl.maximum(dest, tl.max(d, 1))
        if WITH_INV:
            pad_hi = tl.load(offs_pad_ptr + k + 1, mask=km, other=0).to(tl.int64)
            rel = i[:, None] - pad[None, :]
            own = (rel >= 0) & (i[:, None] < pad_hi[None, :]) & (rel < (hi - lo)[None, :]) & km[None, :]
            back = tl.maximum(back, tl.max(tl.where(own, lo[None, :] + rel, -1), 1))
    dest = tl.where((dest >= 0) & (dest < LIMIT), dest, -1)
    tl.store(map_ptr + i, dest.to(tl.int32), mask=i < TOTAL)
    if WITH_INV:
        back = tl.where(back < TOTAL, back, -1)
        tl.store(inv_ptr + i, back.to(tl.int32), mask=i < LIMIT)


@triton.jit
def _rows_via(x_ptr, src, cols, N, sx_m, sx_n, X_BITS: tl.constexpr):
    """``[BM, BN]`` fp32 tile of rows ``src`` of ``x`` (zeros where ``src < 0`` or ``cols >= N``)."""
    ok = (src >= 0)[:, None] & (cols < N)[None, :]
    return load_f32(x_ptr + src.to(tl.int64)[:, None] * sx_m + cols[None, :] * sx_n, ok, X_BITS)


@triton.jit
def grouped_quant_groups_kernel(x_ptr, src_ptr, q_ptr, s_ptr, M_PAD, N, sx_m, sx_n, eps,
                                BM: tl.constexpr, BN: tl.constexpr, BS: tl.constexpr,
                                FMAX: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr, FNUZ: tl.constexpr,
                                SOFT: tl.constexpr, X_BITS: tl.constexpr, HW_SAT: tl.constexpr = False):
    """BLOCKWISE col-wise: ``q [M_PAD, N]`` and ``s [cdiv(M_PAD, BS), N]`` of the padded layout.
    ``HW_SAT``: the conversion's saturation instead of the clamp (``to_fp8``; NVIDIA GPUs)."""
    b, tm, tn, rows, cols = tile_of(tl.program_id(0), M_PAD, N, BM, BN)
    src = tl.load(src_ptr + rows, mask=rows < M_PAD, other=-1)
    x = _rows_via(x_ptr, src, cols, N, sx_m, sx_n, X_BITS)
    mask = (rows < M_PAD)[:, None] & (cols < N)[None, :]
    _fp32_groups(x, rows, cols, mask, tm, tn, M_PAD, N, q_ptr, rows[:, None] * N + cols[None, :], s_ptr, N, 1, eps,
                 BM, BN, BS, 1, FMAX, MB, BIAS, FNUZ, SOFT, HW_SAT)


@triton.jit
def grouped_quant_mx_kernel(x_ptr, src_ptr, q_ptr, s_ptr, M_PAD, N, N_EXT, sx_m, sx_n, sq_r, ss_r,
                            BM: tl.constexpr, BN: tl.constexpr, GM: tl.constexpr, GN: tl.constexpr,
                            ROW: tl.constexpr, FP4: tl.constexpr, FMAX: tl.constexpr, MB: tl.constexpr,
                            BIAS: tl.constexpr, FNUZ: tl.constexpr, SOFT: tl.constexpr, EMAX: tl.constexpr,
                            X_BITS: tl.constexpr, FAST: tl.constexpr = False, HW_SAT: tl.constexpr = False):
    """MX (FP8, or MXFP4 when ``FP4``) of the padded layout ``[M_PAD, N]`` over the extent
    ``[M_PAD, N_EXT]``: ROW ``q [M_PAD, N_pad]`` (1x32 blocks); else ``q [N, M_PAD]`` (32x1 blocks,
    transposed); ``sq_r``/``ss_r``: row strides of the data (bytes for FP4) and the scales. FAST
    (FP8): the dense ``quant_mx_kernel``'s arithmetic: the group amax by the NaN-keeping float max
    (``group_amax``, no array of bits beside the tile) and ``HW_SAT`` (the conversion's saturation)."""
    b, tm, tn, rows, cols = tile_of(tl.program_id(0), M_PAD, N_EXT, BM, BN)
    src = tl.load(src_ptr + rows, mask=rows < M_PAD, other=-1)
    x = _rows_via(x_ptr, src, cols, N, sx_m, sx_n, X_BITS)
    if FP4:
        _fp4_part(x, abs_bits(x), b, tm, tn, rows, cols, M_PAD, N_EXT, q_ptr, 0, sq_r, s_ptr, 0, ss_r,
                  BM, BN, GM, GN, ROW)
    elif FAST:
        _mx_part(x, None, b, tm, tn, rows, cols, M_PAD, N_EXT, q_ptr, 0, sq_r, s_ptr, 0, ss_r,
                 BM, BN, GM, GN, ROW, FMAX, MB, BIAS, FNUZ, SOFT, EMAX, HW_SAT)
    else:
        _mx_part(x, abs_bits(x), b, tm, tn, rows, cols, M_PAD, N_EXT, q_ptr, 0, sq_r, s_ptr, 0, ss_r,
                 BM, BN, GM, GN, ROW, FMAX, MB, BIAS, FNUZ, SOFT, EMAX)


@triton.jit
def _col_tile(x, rows, offs_c_ptr, G):
    """The column layout's view of a tile: rows past its last group (loaded only for a tight row
    copy) are zero there."""
    return tl.where((rows < tl.load(offs_c_ptr + G))[:, None], x, 0.0)


@triton.jit
def grouped_mx_with_trans_kernel(x_ptr, src_ptr, dst_ptr, offs_c_ptr, G, qr_ptr, sr_ptr, qc_ptr, sc_ptr,
                                 M_C, M_R, N, N_PAD, sx_m, sx_n,
                                 BM: tl.constexpr, BN: tl.constexpr, FP4: tl.constexpr,
                                 FMAX: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr, FNUZ: tl.constexpr,
                                 SOFT: tl.constexpr, EMAX: tl.constexpr, X_BITS: tl.constexpr,
                                 FAST: tl.constexpr = False, HW_SAT: tl.constexpr = False):
    """Both copies from one read of each tile of the column layout's extent ``[M_C, N_PAD]``: the
    col-wise copy ``[N, M_C]`` (scales ``[N, M_C/32]``) and, through ``dst``, the row-wise copy
    ``[M_R, N_PAD]`` (scales ``[M_R, N_PAD/32]``); FP4 data halves the last dims. FAST (FP8): the
    dense ``mx_with_trans_kernel``'s arithmetic (float group amax, ``HW_SAT``)."""
    b, tm, tn, rows, cols = tile_of(tl.program_id(0), M_C, N_PAD, BM, BN)
    src = tl.load(src_ptr + rows, mask=rows < M_C, other=-1)
    dst = tl.load(dst_ptr + rows, mask=rows < M_C, other=M_R).to(tl.int64)
    x = _rows_via(x_ptr, src, cols, N, sx_m, sx_n, X_BITS)
    xc = _col_tile(x, rows, offs_c_ptr, G)
    if FP4:
        _fp4_part(x, abs_bits(x), b, tm, tn, dst, cols, M_R, N_PAD, qr_ptr, 0, N_PAD // 2, sr_ptr, 0, N_PAD // 32,
                  BM, BN, 1, 32, True)
        _fp4_part(xc, abs_bits(xc), b, tm, tn, rows, cols, M_C, N, qc_ptr, 0, M_C // 2, sc_ptr, 0, M_C // 32,
                  BM, BN, 32, 1, False)
    elif FAST:
        _mx_part(x, None, b, tm, tn, dst, cols, M_R, N_PAD, qr_ptr, 0, N_PAD, sr_ptr, 0, N_PAD // 32,
                 BM, BN, 1, 32, True, FMAX, MB, BIAS, FNUZ, SOFT, EMAX, HW_SAT)
        _mx_part(xc, None, b, tm, tn, rows, cols, M_C, N, qc_ptr, 0, M_C, sc_ptr, 0, M_C // 32,
                 BM, BN, 32, 1, False, FMAX, MB, BIAS, FNUZ, SOFT, EMAX, HW_SAT)
    else:
        _mx_part(x, abs_bits(x), b, tm, tn, dst, cols, M_R, N_PAD, qr_ptr, 0, N_PAD, sr_ptr, 0, N_PAD // 32,
                 BM, BN, 1, 32, True, FMAX, MB, BIAS, FNUZ, SOFT, EMAX)
        _mx_part(xc, abs_bits(xc), b, tm, tn, rows, cols, M_C, N, qc_ptr, 0, M_C, sc_ptr, 0, M_C // 32,
                 BM, BN, 32, 1, False, FMAX, MB, BIAS, FNUZ, SOFT, EMAX)


@triton.jit
def grouped_blockwise_with_trans_kernel(x_ptr, src_ptr, dst_ptr, offs_c_ptr, G, qr_ptr, sr_ptr, qc_ptr, sc_ptr,
                                        M, M_C, N, sx_m, sx_n, eps,
                                        BM: tl.constexpr, BN: tl.constexpr, BS: tl.constexpr,
                                        FMAX: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr,
                                        FNUZ: tl.constexpr, SOFT: tl.constexpr, X_BITS: tl.constexpr,
                                        FAST: tl.constexpr = False, HW_SAT: tl.constexpr = False):
    """BLOCKWISE segment quantization from one read of each tile of the column layout ``[M_C, N]``:
    ``q_col [M_C, N]`` / ``s_col [cdiv(M_C, BS), N]`` (BS x 1 blocks), and through ``dst`` the
    tight row copy ``q_row [M, N]`` with transposed scales ``s_row [cdiv(N, BS), M]`` (1 x BS).
    FAST: the row copy's amax by the float max (``group_amax``, as the column copy and the dense
    ``blockwise_with_trans_kernel``); ``HW_SAT``: the conversion's saturation on both copies."""
    b, tm, tn, rows, cols = tile_of(tl.program_id(0), M_C, N, BM, BN)
    src = tl.load(src_ptr + rows, mask=rows < M_C, other=-1)
    dst = tl.load(dst_ptr + rows, mask=rows < M_C, other=M).to(tl.int64)
    x = _rows_via(x_ptr, src, cols, N, sx_m, sx_n, X_BITS)
    # Row copy: 1 x BS blocks of the tile's rows, stored at their rows dst.
    if FAST:
        scale, s_inv = fp32_scale(group_amax(x, BM, BN, 1, BS), eps, FMAX)
    else:
        scale, s_inv = fp32_scale(group_max(abs_bits(x), BM, BN, 1, BS), eps, FMAX)
    blk = tn.to(tl.int64) * (BN // BS) + tl.arange(0, BN // BS)
    ok = dst < M
    tl.store(sr_ptr + blk[None, :] * M + dst[:, None], s_inv, mask=ok[:, None] & (blk < tl.cdiv(N, BS))[None, :])
    q = to_fp8(x * expand(scale, BM, BN, 1, BS), qr_ptr, FMAX, MB, BIAS, FNUZ, SOFT, HW_SAT)
    tl.store(qr_ptr + dst[:, None] * N + cols[None, :], q, mask=ok[:, None] & (cols < N)[None, :])
    # Column copy: BS x 1 blocks of the padded layout.
    xc = _col_tile(x, rows, offs_c_ptr, G)
    mask = (rows < M_C)[:, None] & (cols < N)[None, :]
    _fp32_groups(xc, rows, cols, mask, tm, tn, M_C, N, qc_ptr, rows[:, None] * N + cols[None, :], sc_ptr, N, 1, eps,
                 BM, BN, BS, 1, FMAX, MB, BIAS, FNUZ, SOFT, HW_SAT)


@triton.jit
def grouped_dequant_kernel(x_ptr, s_ptr, map_ptr, out_ptr, TOTAL, C, sx_p, sx_c, ss_p, ss_c,
                           BM: tl.constexpr, BN: tl.constexpr, PDIV: tl.constexpr, CDIV: tl.constexpr,
                           KIND: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr, FNUZ: tl.constexpr,
                           SOFT: tl.constexpr, ROUND_BF16: tl.constexpr, BLOCK_SCALES: tl.constexpr = False):
    """``out [TOTAL, C]``: element ``(r, c)`` is padded element ``(p = map[r], c)`` -- data at
    ``p*sx_p + c*sx_c`` (FP4: the byte of ``p // 2``, nibble ``p % 2``), scale at
    ``(p // PDIV)*ss_p + (c // CDIV)*ss_c`` -- dequantized in fp32 and rounded once; 0 where
    ``map[r] < 0``. KIND 0: FP8 with fp32 scales; 1: FP8 with E8M0 bytes; 2: packed E2M1 (the
    blocked dim is ``p``) with E8M0 bytes. BLOCK_SCALES (KIND 1 with ``CDIV`` 32, ``PDIV`` 1 and
    ``BN`` a multiple of 32: MX row-wise): each scale byte is loaded once a tile and broadcast to its
    32 columns (``expand``, as the dense ``mx_dequant_kernel``), not gathered per element."""
    b, tm, tn, rows, cols = tile_of(tl.program_id(0), TOTAL, C, BM, BN)
    p = tl.load(map_ptr + rows, mask=rows < TOTAL, other=-1).to(tl.int64)
    ok = (p >= 0)[:, None] & (cols < C)[None, :]
    s_offs = (p // PDIV)[:, None] * ss_p + (cols // CDIV)[None, :] * ss_c
    if KIND == 2:
        byte = tl.load(x_ptr + (p // 2)[:, None] * sx_p + cols[None, :] * sx_c, mask=ok, other=0).to(tl.int32)
        vals = decode_e2m1((byte >> ((p % 2) * 4).to(tl.int32)[:, None]) & 15)
    else:
        # No ``other``: masked lanes are replaced below (an int fill may not convert to FP8).
        vals = from_fp8(tl.load(x_ptr + p[:, None] * sx_p + cols[None, :] * sx_c, mask=ok), MB, BIAS, FNUZ, SOFT)
    if KIND == 0:
        scale = tl.load(s_ptr + s_offs, mask=ok, other=1.0)
    elif BLOCK_SCALES:
        blk = tn.to(tl.int64) * (BN // 32) + tl.arange(0, BN // 32)
        b_ok = (p >= 0)[:, None] & (blk < tl.cdiv(C, 32))[None, :]
        byte = tl.load(s_ptr + p[:, None] * ss_p + blk[None, :] * ss_c, mask=b_ok, other=127)
        scale = expand(e8m0_to_fp32(byte.to(tl.int32)), BM, BN, 1, 32)
    else:
        scale = e8m0_to_fp32(tl.load(s_ptr + s_offs, mask=ok, other=127).to(tl.int32))
    v = tl.where(ok, vals * scale, 0.0)
    tl.store(out_ptr + rows[:, None] * C + cols[None, :], to_out(v, out_ptr, ROUND_BF16),
             mask=(rows < TOTAL)[:, None] & (cols < C)[None, :])



@triton.jit
def grouped_mx_dequant_trans_kernel(x_ptr, s_ptr, map_ptr, inv_ptr, out_ptr, C, P, sx_c, sx_p, ss_c, ss_p,
                                    BM: tl.constexpr, BN: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr,
                                    FNUZ: tl.constexpr, SOFT: tl.constexpr, ROUND_BF16: tl.constexpr):
    """MX col-wise FP8 data ``q [C, P]`` (``P = M_pad``; at ``c*sx_c + p*sx_p``; E8M0 scales at
    ``c*ss_c + (p // 32)*ss_p``) to ``out [TOTAL, C]``, ``out[r, c] = q[c, map[r]] * scale``, from
    ``map`` and its inverse ``inv`` (``unpad_map_kernel`` ``WITH_INV``): ``BM x BN`` tiles of the
    padded data, as the dense MX col-wise dequantize (loads along ``p``, aligned and contiguous;
    each scale byte loaded once where ``BN >= 32``), stored transposed to the rows ``inv[p]``
    (``BM`` consecutive ``c`` a row) where ``map[inv[p]] == p``; the padding rows are read and
    dropped. ``grouped_mx_dequant_fix_kernel`` writes the output rows this leaves."""
    _, tm, tn, cs, ps = tile_of(tl.program_id(0), C, P, BM, BN)
    r = tl.load(inv_ptr + ps, mask=ps < P, other=-1).to(tl.int64)
    back = tl.load(map_ptr + r, mask=r >= 0, other=-1).to(tl.int64)
    w = (r >= 0) & (back == ps)
    cm = cs < C
    ok = cm[:, None] & (ps < P)[None, :]
    vals = from_fp8(tl.load(x_ptr + cs[:, None] * sx_c + ps[None, :] * sx_p, mask=ok), MB, BIAS, FNUZ, SOFT)
    if BN >= 32:
        blk = tn.to(tl.int64) * (BN // 32) + tl.arange(0, BN // 32)
        b_ok = cm[:, None] & (blk < tl.cdiv(P, 32))[None, :]
        byte = tl.load(s_ptr + cs[:, None] * ss_c + blk[None, :] * ss_p, mask=b_ok, other=127)
        scale = expand(e8m0_to_fp32(byte.to(tl.int32)), BM, BN, 1, 32)
    else:
        byte = tl.load(s_ptr + cs[:, None] * ss_c + (ps // 32)[None, :] * ss_p, mask=ok, other=127)
        scale = e8m0_to_fp32(byte.to(tl.int32))
    v = to_out(vals * scale, out_ptr, ROUND_BF16)
    tl.store(out_ptr + r[:, None] * C + cs[None, :], tl.trans(v), mask=w[:, None] & cm[None, :])


@triton.jit
def grouped_mx_dequant_fix_kernel(x_ptr, s_ptr, map_ptr, inv_ptr, out_ptr, TOTAL, C, sx_c, sx_p, ss_c, ss_p,
                                  BR: tl.constexpr, BC: tl.constexpr, GC: tl.constexpr, MB: tl.constexpr,
                                  BIAS: tl.constexpr, FNUZ: tl.constexpr, SOFT: tl.constexpr,
                                  ROUND_BF16: tl.constexpr):
    """The output rows ``grouped_mx_dequant_trans_kernel`` does not write, ``BR x BC`` tiles of
    ``out [TOTAL, C]``: rows of no group (``map[r] < 0``) get zeros (a plain store); rows whose
    padded row maps back elsewhere (``inv[map[r]] != r``: inconsistent offsets) are gathered,
    ``GC`` columns a step (the gather's layout change stays small). A tile with neither returns
    after reading its ``BR`` map entries (the usual case)."""
    _, _, tn, rows, cs = tile_of(tl.program_id(0), TOTAL, C, BR, BC)
    rm = rows < TOTAL
    p = tl.load(map_ptr + rows, mask=rm, other=-1).to(tl.int64)
    fwd = tl.load(inv_ptr + p, mask=rm & (p >= 0), other=-1).to(tl.int64)
    zero = rm & (p < 0)
    gather = rm & (p >= 0) & (fwd != rows)
    if tl.max(zero.to(tl.int32), 0) > 0:
        tl.store(out_ptr + rows[:, None] * C + cs[None, :], tl.zeros([BR, BC], out_ptr.dtype.element_ty),
                 mask=zero[:, None] & (cs < C)[None, :])
    if tl.max(gather.to(tl.int32), 0) > 0:
        for c0 in range(0, BC, GC):
            cg = tn.to(tl.int64) * BC + c0 + tl.arange(0, GC)
            ok = gather[:, None] & (cg < C)[None, :]
            # No ``other``: the masked lanes are not stored (an int fill may not convert to FP8).
            vals = from_fp8(tl.load(x_ptr + cg[None, :] * sx_c + p[:, None] * sx_p, mask=ok), MB, BIAS, FNUZ, SOFT)
            byte = tl.load(s_ptr + cg[None, :] * ss_c + (p // 32)[:, None] * ss_p, mask=ok, other=127)
            v = to_out(vals * e8m0_to_fp32(byte.to(tl.int32)), out_ptr, ROUND_BF16)
            tl.store(out_ptr + rows[:, None] * C + cg[None, :], v, mask=ok)
