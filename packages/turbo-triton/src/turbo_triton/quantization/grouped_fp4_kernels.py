"""Triton pair kernels of the grouped MXFP4 quantization (bf16 input): the dense PAIRS paths of
``fp4_kernels`` (``quant_fp4_kernel`` col-wise, ``fp4_with_trans_kernel``) read through the grouped
row maps.

A tile of the padded column layout (``[M_PAD, N]``, see ``grouped_kernels``) is loaded as its even
padded rows ``xe`` (``2 pr``) and odd ones ``xo`` (``2 pr + 1``), each from its source row
``src[p]`` of ``x`` as bf16 bits (int16; 0 where ``src[p] < 0``): the two elements of each
col-wise pair, which ``fp4_kernels._pairs_col`` encodes (``encode_pair_bits``: inline PTX on
NVIDIA, the fp32 encoder under the interpreter) and stores with only the packed bytes
transposed. with_trans also writes each of the two halves row-wise (``_pairs_row``: the pairs
split off the last dim) to its rows ``dst[p]`` of the tight row copy. Bit-identical to the
generic grouped kernels (``grouped_quant_mx_kernel`` / ``grouped_mx_with_trans_kernel`` with
``FP4``) and so to the reference.
"""

from __future__ import annotations

import triton
import triton.language as tl

from turbo_triton.quantization.fp4_kernels import _pair_rows_amax, _pairs_col, _pairs_row, _row_amax
from turbo_triton.quantization.numerics import tile_of

__all__ = ["grouped_fp4_pairs_col_kernel", "grouped_fp4_pairs_with_trans_kernel"]


@triton.jit
def _pair_rows_via(x_ptr, src_ptr, r0, cols, M_PAD, N, sx_m, sx_n):
    """``(xe, xo)``: padded rows ``r0`` and ``r0 + 1`` (``[BH]`` even rows) over ``cols`` as bf16
    bits (int16 ``[BH, BN]``), each from its row ``src[p]`` of ``x``; 0 for padding rows
    (``src < 0``), rows past ``M_PAD`` and columns past ``N``."""
    se = tl.load(src_ptr + r0, mask=r0 < M_PAD, other=-1)
    so = tl.load(src_ptr + r0 + 1, mask=r0 + 1 < M_PAD, other=-1)
    cm = (cols < N)[None, :]
    xe = tl.load(x_ptr + se.to(tl.int64)[:, None] * sx_m + cols[None, :] * sx_n, mask=(se >= 0)[:, None] & cm,
                 other=0)
    xo = tl.load(x_ptr + so.to(tl.int64)[:, None] * sx_m + cols[None, :] * sx_n, mask=(so >= 0)[:, None] & cm,
                 other=0)
    return xe, xo


@triton.jit
def grouped_fp4_pairs_col_kernel(x_ptr, src_ptr, q_ptr, s_ptr, M_PAD, N, sx_m, sx_n,
                                 BM: tl.constexpr, BN: tl.constexpr, ASM: tl.constexpr, F32MUL: tl.constexpr):
    """Col-wise MXFP4 (32 x 1 blocks) of the padded layout ``[M_PAD, N]`` of bf16 ``x`` (int16 bits,
    ``[M, N]`` at strides ``sx_m``/``sx_n``) through ``src [M_PAD]``: bytes ``q [N, M_PAD/2]``,
    E8M0 scales ``s [N, M_PAD/32]``. ``BM x BN`` tiles of the padded extent, ``BM >= 32``."""
    b, tm, tn, rows, cols = tile_of(tl.program_id(0), M_PAD, N, BM, BN)
    p0 = tm.to(tl.int64) * (BM // 2)
    r0 = 2 * (p0 + tl.arange(0, BM // 2))
    xe, xo = _pair_rows_via(x_ptr, src_ptr, r0, cols, M_PAD, N, sx_m, sx_n)
    _pairs_col(xe, xo, _pair_rows_amax(xe, xo, BM // 2, BN), p0, cols, M_PAD, N, q_ptr, M_PAD // 2, s_ptr,
               M_PAD // 32, BM // 2, BN, 1, ASM, F32MUL)


@triton.jit
def grouped_fp4_pairs_with_trans_kernel(x_ptr, src_ptr, dst_ptr, offs_c_ptr, G, qr_ptr, sr_ptr, qc_ptr, sc_ptr,
                                        M_C, M_R, N, N_PAD, sx_m, sx_n, BM: tl.constexpr, BN: tl.constexpr,
                                        ASM: tl.constexpr, F32MUL: tl.constexpr):
    """Both MXFP4 copies of bf16 ``x`` (int16 bits) from one read of each ``BM x BN`` tile of the
    column layout's extent ``[M_C, N_PAD]`` (``BM >= 32``): through ``dst [M_C]`` (``M_R`` = no row)
    the row-wise copy ``q_row [M_R, N_PAD/2]`` / ``s_row [M_R, N_PAD/32]`` (1 x 32 blocks), and the
    col-wise copy of the padded layout ``q_col [N, M_C/2]`` / ``s_col [N, M_C/32]`` (32 x 1 blocks),
    in which rows from ``offs_c[G]`` on (loaded for the tight row copy's tail) are zero."""
    b, tm, tn, rows, cols = tile_of(tl.program_id(0), M_C, N_PAD, BM, BN)
    p0 = tm.to(tl.int64) * (BM // 2)
    r0 = 2 * (p0 + tl.arange(0, BM // 2))
    xe, xo = _pair_rows_via(x_ptr, src_ptr, r0, cols, M_C, N, sx_m, sx_n)
    de = tl.load(dst_ptr + r0, mask=r0 < M_C, other=M_R).to(tl.int64)
    do = tl.load(dst_ptr + r0 + 1, mask=r0 + 1 < M_C, other=M_R).to(tl.int64)
    c0 = tn.to(tl.int64) * BN
    _pairs_row(xe, _row_amax(xe, BM // 2, BN), de, c0, M_R, N_PAD, qr_ptr, N_PAD // 2, sr_ptr, N_PAD // 32,
               BM // 2, BN, ASM, F32MUL)
    _pairs_row(xo, _row_amax(xo, BM // 2, BN), do, c0, M_R, N_PAD, qr_ptr, N_PAD // 2, sr_ptr, N_PAD // 32,
               BM // 2, BN, ASM, F32MUL)
    last = tl.load(offs_c_ptr + G)  # the column layout's rows past its last group are zero there
    xe = tl.where((r0 < last)[:, None], xe, 0).to(tl.int16)
    xo = tl.where((r0 + 1 < last)[:, None], xo, 0).to(tl.int16)
    _pairs_col(xe, xo, _pair_rows_amax(xe, xo, BM // 2, BN), p0, cols, M_C, N, qc_ptr, M_C // 2, sc_ptr,
               M_C // 32, BM // 2, BN, 1, ASM, F32MUL)
