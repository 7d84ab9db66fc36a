"""Triton FP8 GEMM kernels: ``C[M, N] (+)= dequant(op(A)) @ dequant(op(B))``, fp32 accumulation.

The schedule is the dense GEMM's (persistent, grouped tile order; ``turbo_triton.gemm.kernels``).
What differs is where the scales enter, chosen by the constexpr ``SCALING``:

* ``EPILOGUE`` (TENSORWISE, ROWWISE): the FP8 tiles go straight into ``tl.dot``; the fp32 sum is
  multiplied once by ``sa[m] * sb[n]`` at the end (a tensorwise scale is read with stride 0).
* ``BLOCKWISE``: ``BLOCK_K`` equals the block size, so one K step lies in one scale block; each
  step's product goes into a fresh fp32 tile that is added as ``partial * sa[m, kb] * sb[kb, n]``.
* ``MX``: 1x32 blocks with power-of-two E8M0 scales. Where there are no MX instructions (Hopper,
  gfx942) it is emulated: each operand tile is multiplied by its scales in fp32 and rounded to
  ``DEQ`` (bf16 on GPUs, which holds an E4M3/E5M2 value times a power of two exactly unless the
  result leaves bf16's range; fp32 in the interpreter), then multiplied in that type.

Scales are addressed as ``s[(row // ROW_DIV) * stride_row + kb * stride_k]``: 1-D blocks along K
have ``ROW_DIV == 1``, ``bs x bs`` tiles ``ROW_DIV == bs``; every scale layout of the spec is a
choice of strides (``turbo_triton.gemm_fp8.launch``), with no copies.
"""

from __future__ import annotations

import triton
import triton.language as tl

from turbo_triton.gemm.kernels import _tile_coords
from turbo_triton.quantization.numerics import exact_fp8

EPILOGUE = tl.constexpr(0)
BLOCKWISE = tl.constexpr(1)
MX = tl.constexpr(2)


@triton.jit
def _e8m0_to_fp32(byte):
    """``2**(byte - 127)`` exactly (byte 0 is the subnormal 2**-127), NaN for 0xFF."""
    b = byte.to(tl.int32)
    bits = tl.where(b == 0, 0x00400000, b << 23)
    bits = tl.where(b == 255, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _f32(x, EXACT: tl.constexpr):
    """fp32 values of an FP8 tile; ``EXACT`` (the interpreter) decodes the bytes, keeping NaN/Inf."""
    if EXACT:
        return exact_fp8(x)
    return x.to(tl.float32)


@triton.jit
def _mx_dequant_a(x, s_ptrs, mask, DEQ: tl.constexpr, EXACT: tl.constexpr = False):
    """An FP8 ``[R, BLOCK_K]`` tile times its E8M0 scales ``[R, BLOCK_K // 32]`` (one per 1x32
    block along K), rounded to ``DEQ``."""
    R: tl.constexpr = x.shape[0]
    KB: tl.constexpr = x.shape[1] // 32
    s = _e8m0_to_fp32(tl.load(s_ptrs, mask=mask, other=127))
    x3 = tl.reshape(_f32(x, EXACT), (R, KB, 32)) * s[:, :, None]
    return tl.reshape(x3, (R, KB * 32)).to(DEQ)


@triton.jit
def _mx_dequant_b(x, s_ptrs, mask, DEQ: tl.constexpr, EXACT: tl.constexpr = False):
    """An FP8 ``[BLOCK_K, C]`` tile times its E8M0 scales ``[BLOCK_K // 32, C]``, rounded to ``DEQ``."""
    KB: tl.constexpr = x.shape[0] // 32
    C: tl.constexpr = x.shape[1]
    s = _e8m0_to_fp32(tl.load(s_ptrs, mask=mask, other=127))
    x3 = tl.reshape(_f32(x, EXACT), (KB, 32, C)) * s[:, None, :]
    return tl.reshape(x3, (KB * 32, C)).to(DEQ)


@triton.jit
def _apply_row_col_scales(acc, sa_ptr, sb_ptr, offs_m, offs_n, M, N, s_am, s_bn, SCALING: tl.constexpr):
    """TENSORWISE/ROWWISE: ``acc * sa[m] * sb[n]``; other modes scaled ``acc`` in the K loop."""
    if SCALING == EPILOGUE:
        sa = tl.load(sa_ptr + offs_m * s_am, mask=offs_m < M, other=0.0)
        sb = tl.load(sb_ptr + offs_n * s_bn, mask=offs_n < N, other=0.0)
        acc = acc * sa[:, None] * sb[None, :]
    return acc


@triton.jit
def _store_masked(acc, c_ptr, offs_m, offs_n, M, N, stride_cm, stride_cn, ACCUMULATE: tl.constexpr):
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :].to(tl.int64) * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if ACCUMULATE:
        acc += tl.load(c_ptrs, mask=c_mask, other=0.0).to(tl.float32)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


@triton.jit
def _store_tma(acc, c_desc, off_m, off_n, BLOCK_N: tl.constexpr, TRANS_C: tl.constexpr,
               SUBTILE: tl.constexpr, ACCUMULATE: tl.constexpr):
    """Store through a TMA descriptor (out-of-bounds writes dropped); ``SUBTILE`` in two halves."""
    if TRANS_C:
        if ACCUMULATE:
            acc += c_desc.load([off_n, off_m]).T.to(tl.float32)
        c_desc.store([off_n, off_m], acc.T.to(c_desc.dtype))
    elif SUBTILE:
        halves = tl.permute(tl.reshape(acc, (acc.shape[0], 2, BLOCK_N // 2)), (0, 2, 1))
        c0, c1 = tl.split(halves)
        if ACCUMULATE:
            c0 += c_desc.load([off_m, off_n]).to(tl.float32)
            c1 += c_desc.load([off_m, off_n + BLOCK_N // 2]).to(tl.float32)
        c_desc.store([off_m, off_n], c0.to(c_desc.dtype))
        c_desc.store([off_m, off_n + BLOCK_N // 2], c1.to(c_desc.dtype))
    else:
        if ACCUMULATE:
            acc += c_desc.load([off_m, off_n]).to(tl.float32)
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def gemm_fp8_persistent_kernel(
    a_ptr, b_ptr, c_ptr, sa_ptr, sb_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    s_am, s_ak, s_bk, s_bn,
    SCALING: tl.constexpr, A_ROW_DIV: tl.constexpr, B_COL_DIV: tl.constexpr,
    ACCUMULATE: tl.constexpr, UPCAST: tl.constexpr, DEQ: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr, IMPRECISE_ACC: tl.constexpr = None,
):
    """Portable kernel: masked pointer loads, any strides. ``UPCAST`` multiplies FP8 tiles in
    fp32 (exact products; the interpreter's path, which decodes the FP8 bytes itself so that NaN and
    Inf codes stay NaN and Inf). ``IMPRECISE_ACC`` as in the TMA kernel."""
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile_id in range(start, num_pid_m * num_pid_n, NUM_PROGRAMS):
        pid_m, pid_n = _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :].to(tl.int64) * stride_bn
        sa_rows = sa_ptr + (offs_m // A_ROW_DIV) * s_am
        sb_cols = sb_ptr + (offs_n // B_COL_DIV) * s_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            k_left = K - ki * BLOCK_K
            a_mask = (offs_m[:, None] < M) & (offs_k[None, :] < k_left)
            b_mask = (offs_k[:, None] < k_left) & (offs_n[None, :] < N)
            a = tl.load(a_ptrs, mask=a_mask, other=0.0)
            b = tl.load(b_ptrs, mask=b_mask, other=0.0)
            if SCALING == MX:
                kb = ki * (BLOCK_K // 32) + tl.arange(0, BLOCK_K // 32)
                kb_ok = kb < tl.cdiv(K, 32)
                a = _mx_dequant_a(a, sa_rows[:, None] + kb[None, :] * s_ak, (offs_m[:, None] < M) & kb_ok[None, :], DEQ,
                                  UPCAST)
                b = _mx_dequant_b(b, sb_cols[None, :] + kb[:, None] * s_bk, (offs_n[None, :] < N) & kb_ok[:, None], DEQ,
                                  UPCAST)
                acc = tl.dot(a, b, acc)
            else:
                if UPCAST:
                    a = exact_fp8(a)
                    b = exact_fp8(b)
                if SCALING == BLOCKWISE:
                    sa = tl.load(sa_rows + ki * s_ak, mask=offs_m < M, other=0.0)
                    sb = tl.load(sb_cols + ki * s_bk, mask=offs_n < N, other=0.0)
                    part = tl.dot(a, b, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32))
                    acc += part * sa[:, None] * sb[None, :]
                else:
                    acc = tl.dot(a, b, acc, max_num_imprecise_acc=IMPRECISE_ACC)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        acc = _apply_row_col_scales(acc, sa_ptr, sb_ptr, offs_m, offs_n, M, N, s_am, s_bn, SCALING)
        _store_masked(acc, c_ptr, offs_m, offs_n, M, N, stride_cm, stride_cn, ACCUMULATE)


@triton.jit
def gemm_fp8_tma_persistent_kernel(
    a_desc, b_desc, c, sa_ptr, sb_ptr, M, N, K, stride_cm, stride_cn,
    s_am, s_ak, s_bk, s_bn,
    TRANS_A: tl.constexpr, TRANS_B: tl.constexpr, TRANS_C: tl.constexpr, C_DESC: tl.constexpr,
    SCALING: tl.constexpr, A_ROW_DIV: tl.constexpr, B_COL_DIV: tl.constexpr,
    ACCUMULATE: tl.constexpr, DEQ: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr, FLATTEN: tl.constexpr = False,
    SUBTILE: tl.constexpr = False, WARP_SPECIALIZE: tl.constexpr = False, IMPRECISE_ACC: tl.constexpr = None,
):
    """Hopper kernel: FP8 operands stream through TMA descriptors (out-of-bounds reads are zero).
    ``C_DESC``: ``c`` is a TMA descriptor of the output (block ``[BLOCK_M, BLOCK_N]``, half as
    wide with ``SUBTILE``, ``[BLOCK_N, BLOCK_M]`` with ``TRANS_C``); otherwise a pointer written
    with masked stores (strides already swapped for ``trans_c``). ``WARP_SPECIALIZE``: Triton's
    producer/consumer split of the persistent loop. ``IMPRECISE_ACC`` (TENSORWISE/ROWWISE): Hopper's
    FP8 tensor cores add products at reduced precision; Triton then promotes the running sum into
    the fp32 accumulator every ``IMPRECISE_ACC`` products along K (``None``: never, the fastest)."""
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile_id in tl.range(start, num_pid_m * num_pid_n, NUM_PROGRAMS, flatten=FLATTEN,
                            warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        offs_m = off_m + tl.arange(0, BLOCK_M)
        offs_n = off_n + tl.arange(0, BLOCK_N)
        sa_rows = sa_ptr + (offs_m // A_ROW_DIV) * s_am
        sb_cols = sb_ptr + (offs_n // B_COL_DIV) * s_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            if TRANS_A:
                a = a_desc.load([off_k, off_m]).T
            else:
                a = a_desc.load([off_m, off_k])
            if TRANS_B:
                b = b_desc.load([off_n, off_k]).T
            else:
                b = b_desc.load([off_k, off_n])
            if SCALING == MX:
                kb = ki * (BLOCK_K // 32) + tl.arange(0, BLOCK_K // 32)
                kb_ok = kb < tl.cdiv(K, 32)
                a = _mx_dequant_a(a, sa_rows[:, None] + kb[None, :] * s_ak, (offs_m[:, None] < M) & kb_ok[None, :], DEQ)
                b = _mx_dequant_b(b, sb_cols[None, :] + kb[:, None] * s_bk, (offs_n[None, :] < N) & kb_ok[:, None], DEQ)
                acc = tl.dot(a, b, acc)
            elif SCALING == BLOCKWISE:
                sa = tl.load(sa_rows + ki * s_ak, mask=offs_m < M, other=0.0)
                sb = tl.load(sb_cols + ki * s_bk, mask=offs_n < N, other=0.0)
                part = tl.dot(a, b, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32))
                acc += part * sa[:, None] * sb[None, :]
            else:
                acc = tl.dot(a, b, acc, max_num_imprecise_acc=IMPRECISE_ACC)
        acc = _apply_row_col_scales(acc, sa_ptr, sb_ptr, offs_m, offs_n, M, N, s_am, s_bn, SCALING)
        if C_DESC:
            _store_tma(acc, c, off_m, off_n, BLOCK_N, TRANS_C, SUBTILE, ACCUMULATE)
        else:
            _store_masked(acc, c, offs_m, offs_n, M, N, stride_cm, stride_cn, ACCUMULATE)
