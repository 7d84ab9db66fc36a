"""Triton GEMM kernels: ``C[M, N] (+)= op(A)[M, K] @ op(B)[K, N]``, fp32 accumulation.

Both kernels are persistent: a grid of at most one program per SM walks the output tiles in
grouped order (GROUP_M rows of tiles at a time, for L2 reuse). Layouts (trans_a, trans_b, trans_c)
are expressed as strides (pointer kernel) or as descriptor block shapes (TMA kernel): no copies.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def gemm_persistent_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    ACCUMULATE: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
):
    """Portable kernel: masked pointer loads, any strides. ``UPCAST`` multiplies in fp32
    (the CPU interpreter's bf16 dot is wrong; products of bf16/fp16 values are exact in fp32)."""
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
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            k_left = K - ki * BLOCK_K
            a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
            if UPCAST:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :].to(tl.int64) * stride_cn
        c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        if ACCUMULATE:
            acc += tl.load(c_ptrs, mask=c_mask, other=0.0).to(tl.float32)
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


@triton.jit
def gemm_tma_persistent_kernel(
    a_desc, b_desc, c_desc, M, N, K,
    TRANS_A: tl.constexpr, TRANS_B: tl.constexpr, TRANS_C: tl.constexpr,
    ACCUMULATE: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
    FLATTEN: tl.constexpr = False, WARP_SPECIALIZE: tl.constexpr = False, SUBTILE: tl.constexpr = False,
):
    """Hopper kernel: operands stream through TMA descriptors (out-of-bounds reads are zero,
    out-of-bounds writes are dropped), so no masks; the K loop is software-pipelined.
    ``FLATTEN``/``WARP_SPECIALIZE`` are Triton's loop options for the persistent loop; ``SUBTILE``
    stores the output tile in two halves (the C descriptor's block is then half as wide)."""
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile_id in tl.range(start, num_pid_m * num_pid_n, NUM_PROGRAMS, flatten=FLATTEN,
                            warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
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
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
        if TRANS_C:
            if ACCUMULATE:
                acc += c_desc.load([off_n, off_m]).T.to(tl.float32)
            c_desc.store([off_n, off_m], acc.T.to(c_desc.dtype))
        elif SUBTILE:
            halves = tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2))
            halves = tl.permute(halves, (0, 2, 1))
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
