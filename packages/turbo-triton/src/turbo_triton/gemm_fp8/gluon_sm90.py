"""Hopper FP8 GEMM written in Gluon (Triton's explicit-layout dialect): ``C[M, N] = (A @ B^T) * scales``.

Why a second kernel. Hopper's FP8 tensor cores add products at reduced precision, so an accurate
FP8 GEMM adds each 128-deep partial product into an fp32 sum on the CUDA cores ("promotion", what
cuBLAS and ``torch._scaled_mm`` do by default). The plain Triton kernel (``kernels.py``) promotes
through ``max_num_imprecise_acc``, which leaves it behind ``torch._scaled_mm`` (the ``gemm-fp8`` suite
measures both). Here the schedule is written out:

* one producer warp streams ``128 x 128`` A and ``BLOCK_N x 128`` B tiles into a ring of ``STAGES``
  shared-memory buffers with TMA (``ready`` / ``empty`` mbarriers per stage);
* two consumer warpgroups, each its own partition (``DECOUPLED``), each computing 64 rows of every
  ``128 x BLOCK_N`` tile from the same buffers; a stage is refilled once both have released it, so
  neither waits for the other and one's adds and epilogue overlap the other's wgmmas;
* a K step's product is computed in 64-wide parts (``BLOCK_N / 64`` of them) into two alternating
  temporaries: a part is issued, the previous one is waited for and added into its fp32 sum, so a
  wgmma is queued while the CUDA cores add. Registers per consumer thread: the sums (``BLOCK_N / 2``)
  plus two temporaries (32 each), 192 at ``BLOCK_N = 256``, within the 232 it gets;
* no wgmma is in flight across the K loop's back edge: ptxas cannot follow a wgmma group around a
  loop, and reading its result in the next iteration made it serialize every wgmma of the kernel
  (ptxas C7514), which costs a large part of the throughput;
* the epilogue multiplies by the scales (TENSORWISE: one number each; ROWWISE: ``sa[m] * sb[n]``),
  rounds to the output dtype and stores each 64-wide part through shared memory with TMA,
  asynchronously, while the producer already fills the next tile's stages.

Operands are K-major: ``a`` is ``[M, K]`` and ``b`` is ``[N, K]``, both row-major (the layout Hopper's
FP8 MMA reads; ``launch.py`` copies other layouts K-major first). Tiles are walked persistently in
grouped order. Numerics: the products are exact, each 128-deep partial sum is the tensor core's,
everything above it fp32 — ``torch._scaled_mm``'s result bit for bit on sm90 (TENSORWISE).

Runs only on sm90 GPUs (``triton.experimental.gluon``, written against Triton 3.6); the interpreter
and other GPUs take the portable kernels in ``turbo_triton.gemm_fp8.kernels``, and ``launch.py``
falls back to them for good if this one fails to compile.
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

TENSORWISE = gl.constexpr(0)
ROWWISE = gl.constexpr(1)
BLOCKWISE = gl.constexpr(2)  # b scales per 128 x 128 tile
BLOCKWISE_VEC = gl.constexpr(3)  # b scales per column and 128-deep block (wgrad's 1 x 128 gradients)


@gluon.constexpr_function
def acc_layout(w, num_warps):
    """The wgmma accumulator layout of a consumer's ``[rows, w]`` part: ``num_warps`` warps down the rows."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, w, 32])


@gluon.jit
def _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    group = GROUP_M * num_pid_n
    first_m = (tile // group) * GROUP_M
    size_m = gl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % group) % size_m
    pid_n = (tile % group) // size_m
    return pid_m, pid_n


@gluon.jit
def _load_stage(a_desc, b_desc, a_bufs, b_bufs, ready, empty, it, a_row, b_row, k):
    """Ring position ``it``: once both consumers have released its stage, the A tile at ``[a_row, k]``
    and the B tile at ``[b_row, k]`` by TMA, landing on the stage's ``ready`` barrier."""
    STAGES: gl.constexpr = a_bufs.type.shape[0]
    s = it % STAGES
    # A stage's empty barrier starts in the completed phase 1: the first lap does not wait.
    mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
    bar = ready.index(s)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(a_desc, [a_row, k], bar, a_bufs.index(s))
    tma.async_copy_global_to_shared(b_desc, [b_row, k], bar, b_bufs.index(s))


@gluon.jit
def _producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K,
              GROUP_M: gl.constexpr, NUM_PROGRAMS: gl.constexpr):
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    k_steps = gl.cdiv(K, BK)
    it = 0
    for tile in range(gl.program_id(0), num_pid_m * num_pid_n, NUM_PROGRAMS):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        for kk in range(k_steps):
            _load_stage(a_desc, b_desc, a_bufs, b_bufs, ready, empty, it, pid_m * BM, pid_n * BN, kk * BK)
            it += 1


@gluon.jit
def _part(b, p: gl.constexpr, W: gl.constexpr):
    """Columns ``[p * W, (p + 1) * W)`` of a ``[BLOCK_N, BLOCK_K]`` B buffer, as the ``[K, W]`` wgmma operand."""
    return b.slice(p * W, W).permute((1, 0))


@gluon.jit
def _rows(a_smem, ROW0: gl.constexpr, ROWS: gl.constexpr, BM: gl.constexpr):
    if ROWS == BM:
        return a_smem
    else:
        return a_smem.slice(ROW0, ROWS)


@gluon.jit
def _scaled(acc, sa, sb_ptr, col0, N, s_bn, scale, SCALING: gl.constexpr, col_layout: gl.constexpr):
    if SCALING == ROWWISE:
        W: gl.constexpr = acc.shape[1]
        cols = col0 + gl.arange(0, W, layout=col_layout)
        sb = gl.load(sb_ptr + cols * s_bn, mask=cols < N, other=0.0)
        return acc * gl.expand_dims(sa, 1) * gl.expand_dims(sb, 0)
    elif SCALING == TENSORWISE:
        return acc * scale
    else:  # BLOCKWISE: scaled as the partial sums were promoted
        return acc


@gluon.jit
def _promote(acc, t, sa_k, sb_k, SCALING: gl.constexpr):
    """``acc + t``, or for BLOCKWISE ``acc + t * sa[m, kb] * sb[kb, n block]`` (``sb[kb, n]``)."""
    if SCALING == BLOCKWISE:
        return acc + t * gl.expand_dims(sa_k * sb_k, 1)
    elif SCALING == BLOCKWISE_VEC:
        return acc + (t * gl.expand_dims(sa_k, 1)) * gl.expand_dims(sb_k, 0)
    else:
        return acc + t


@gluon.jit
def _block_scales(sa_ptr, sb_ptr, rows, off_n, kb, M, N, s_am, s_ak, s_bk, s_bn, A_ROW_DIV: gl.constexpr,
                  BN: gl.constexpr, SCALING: gl.constexpr, col_layout: gl.constexpr):
    """K block ``kb``'s scales: ``sa`` for the rows (``rows // A_ROW_DIV``: 1 for 1 x 128 blocks, 128 for
    128 x 128 tiles) and the weights' 128 x 128 tile scales of the tile's columns: the low half's and
    (``BLOCK_N = 256``) the high half's."""
    sa = gl.load(sa_ptr + (rows // A_ROW_DIV) * s_am + kb * s_ak, mask=rows < M, other=0.0)
    base = sb_ptr + kb * s_bk
    if SCALING == BLOCKWISE_VEC:  # BLOCK_N = 128: one vector per 64-wide part
        cols = off_n + gl.arange(0, BN // 2, layout=col_layout)
        sb_lo = gl.load(base + cols * s_bn, mask=cols < N, other=0.0)
        sb_hi = gl.load(base + (cols + BN // 2) * s_bn, mask=cols + BN // 2 < N, other=0.0)
    else:
        sb_lo = gl.load(base + (off_n // 128) * s_bn)
        sb_hi = sb_lo
        if BN == 256:
            sb_hi = gl.load(base + (gl.minimum(off_n + 128, N - 1) // 128) * s_bn)
    return sa, sb_lo, sb_hi


@gluon.jit
def _second_half(sb_lo, sb_hi, SCALING: gl.constexpr):
    """Part 1's b scale when ``BLOCK_N = 128``: the high half's vector, or the one tile's scale."""
    if SCALING == BLOCKWISE_VEC:
        return sb_hi
    else:
        return sb_lo


@gluon.jit
def _store(acc, c_desc, c_smem, p: gl.constexpr, off_m, off_n):
    W: gl.constexpr = c_desc.block_type.shape[1]
    buf = c_smem.index(p)
    buf.store(acc.to(c_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(c_desc, [off_m, off_n + p * W], buf)


@gluon.jit
def _tile_sums(a_bufs, b_bufs, ready, empty, it, rows, off_n, M, N, K, sa_ptr, sb_ptr, s_am, s_ak, s_bk, s_bn,
               SCALING: gl.constexpr, A_ROW_DIV: gl.constexpr, ROW0: gl.constexpr, ROWS: gl.constexpr,
               W: gl.constexpr, layout: gl.constexpr):
    """One tile's K loop for its rows ``rows`` (``[ROW0, ROW0 + ROWS)`` of the stage buffers' ``BLOCK_M``;
    rows at or past ``M`` get zero BLOCKWISE scales): ``(sum0, sum1, sum2, sum3, it)``, the fp32 sums of
    the tile's 64-wide parts (``sum2`` and ``sum3`` stay zero when ``BLOCK_N = 2 W``) and the ring
    position after the tile's ``cdiv(K, BLOCK_K)`` stages."""
    BM: gl.constexpr = a_bufs.type.shape[1]
    BK: gl.constexpr = a_bufs.type.shape[2]
    BN: gl.constexpr = b_bufs.type.shape[1]
    P: gl.constexpr = BN // W
    STAGES: gl.constexpr = a_bufs.type.shape[0]
    col_layout: gl.constexpr = gl.SliceLayout(0, layout)
    k_steps = gl.cdiv(K, BK)
    zero = gl.zeros([ROWS, W], gl.float32, layout)
    # BLOCKWISE: each K step's scales at the top of the step, their loads in flight while the stage's
    # barrier is awaited and the first parts run.
    sa_k = 1.0
    sb_lo = 1.0
    sb_hi = 1.0
    if SCALING >= BLOCKWISE:  # typed like the K loop's loads below (a loop-carried value keeps its type)
        sa_k, sb_lo, sb_hi = _block_scales(sa_ptr, sb_ptr, rows, off_n, 0, M, N, s_am, s_ak, s_bk, s_bn,
                                           A_ROW_DIV, BN, SCALING, col_layout)
    # A K step's parts go through two temporaries, tA (even parts) and tB (odd parts): a part is
    # issued, then the one before it is waited for (wgmma groups retire in order) and added into
    # its sum, so a wgmma is queued while the CUDA cores add. Nothing stays in flight across the
    # loop's back edge: ptxas cannot follow a wgmma group through it and would serialize every
    # wgmma of the kernel (C7514) when its result is read in the next iteration.
    sum0 = zero
    sum1 = zero
    sum2 = zero
    sum3 = zero
    tA = zero
    tB = zero
    for _step in range(k_steps):
        s = it % STAGES
        if SCALING >= BLOCKWISE:  # fetched while the stage's TMA lands and the first part runs
            sa_k, sb_lo, sb_hi = _block_scales(sa_ptr, sb_ptr, rows, off_n, _step, M, N, s_am, s_ak, s_bk, s_bn,
                                               A_ROW_DIV, BN, SCALING, col_layout)
        mbarrier.wait(ready.index(s), (it // STAGES) & 1)
        a = _rows(a_bufs.index(s), ROW0, ROWS, BM)
        b = b_bufs.index(s)
        tA = warpgroup_mma(a, _part(b, 0, W), tA, use_acc=False, is_async=True)
        tB = warpgroup_mma(a, _part(b, 1, W), tB, use_acc=False, is_async=True)
        tA = warpgroup_mma_wait(num_outstanding=1, deps=(tA,))
        sum0 = _promote(sum0, tA, sa_k, sb_lo, SCALING)
        if P == 4:
            tA = warpgroup_mma(a, _part(b, 2, W), tA, use_acc=False, is_async=True)
            tB = warpgroup_mma_wait(num_outstanding=1, deps=(tB,))
            sum1 = _promote(sum1, tB, sa_k, sb_lo, SCALING)
            tB = warpgroup_mma(a, _part(b, 3, W), tB, use_acc=False, is_async=True)
            tA = warpgroup_mma_wait(num_outstanding=1, deps=(tA,))
            sum2 = _promote(sum2, tA, sa_k, sb_hi, SCALING)
            tB = warpgroup_mma_wait(num_outstanding=0, deps=(tB,))
            sum3 = _promote(sum3, tB, sa_k, sb_hi, SCALING)
        else:
            tB = warpgroup_mma_wait(num_outstanding=0, deps=(tB,))
            sum1 = _promote(sum1, tB, sa_k, _second_half(sb_lo, sb_hi, SCALING), SCALING)
        mbarrier.arrive(empty.index(s), count=1)
        it += 1
    return sum0, sum1, sum2, sum3, it


@gluon.jit
def _epilogue_scales(sa_ptr, sb_ptr, rows, M, s_am, SCALING: gl.constexpr):
    """``(sa, scale)``: ROWWISE the rows' scales (fetched before the K loop: a few registers; the
    column scales are read per part in the epilogue), TENSORWISE the product of the two scalars."""
    sa = 1.0
    scale = 1.0
    if SCALING == ROWWISE:
        sa = gl.load(sa_ptr + rows * s_am, mask=rows < M, other=0.0)
    elif SCALING == TENSORWISE:
        scale = gl.load(sa_ptr) * gl.load(sb_ptr)
    return sa, scale


@gluon.jit
def _consumer(a_bufs, b_bufs, ready, empty, c_desc, c_smem, sa_ptr, sb_ptr, M, N, K, s_am, s_ak, s_bk, s_bn,
              SCALING: gl.constexpr, A_ROW_DIV: gl.constexpr, GROUP_M: gl.constexpr,
              NUM_PROGRAMS: gl.constexpr, ROW0: gl.constexpr, num_warps: gl.constexpr):
    """Rows ``[ROW0, ROW0 + ROWS)`` of every tile, ``ROWS`` being ``c_desc``'s block height (the whole
    ``BLOCK_M`` on 8 warps, or one warpgroup's 64 rows when each warpgroup is its own partition)."""
    BM: gl.constexpr = a_bufs.type.shape[1]
    ROWS: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = b_bufs.type.shape[1]
    W: gl.constexpr = c_desc.block_type.shape[1]
    P: gl.constexpr = BN // W
    gl.static_assert(P == 2 or P == 4, "BLOCK_N must be 2 or 4 parts of the store width")
    layout: gl.constexpr = acc_layout(W, num_warps)
    row_layout: gl.constexpr = gl.SliceLayout(1, layout)
    col_layout: gl.constexpr = gl.SliceLayout(0, layout)
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    it = 0
    for tile in range(gl.program_id(0), num_pid_m * num_pid_n, NUM_PROGRAMS):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BM
        off_n = pid_n * BN
        rows = off_m + ROW0 + gl.arange(0, ROWS, layout=row_layout)
        sa, scale = _epilogue_scales(sa_ptr, sb_ptr, rows, M, s_am, SCALING)
        sum0, sum1, sum2, sum3, it = _tile_sums(a_bufs, b_bufs, ready, empty, it, rows, off_n, M, N, K, sa_ptr,
                                                sb_ptr, s_am, s_ak, s_bk, s_bn, SCALING, A_ROW_DIV, ROW0, ROWS, W,
                                                layout)
        tma.store_wait(pendings=0)  # the previous tile's stores have read c_smem
        _store(_scaled(sum0, sa, sb_ptr, off_n, N, s_bn, scale, SCALING, col_layout), c_desc, c_smem, 0,
               off_m + ROW0, off_n)
        _store(_scaled(sum1, sa, sb_ptr, off_n + W, N, s_bn, scale, SCALING, col_layout), c_desc, c_smem, 1,
               off_m + ROW0, off_n)
        if P == 4:
            _store(_scaled(sum2, sa, sb_ptr, off_n + 2 * W, N, s_bn, scale, SCALING, col_layout), c_desc, c_smem, 2,
                   off_m + ROW0, off_n)
            _store(_scaled(sum3, sa, sb_ptr, off_n + 3 * W, N, s_bn, scale, SCALING, col_layout), c_desc, c_smem, 3,
                   off_m + ROW0, off_n)
    tma.store_wait(pendings=0)


@gluon.jit
def gemm_fp8_ws_kernel(a_desc, b_desc, c_desc, sa_ptr, sb_ptr, M, N, K, s_am, s_ak, s_bk, s_bn,
                       SCALING: gl.constexpr, A_ROW_DIV: gl.constexpr,
                       STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                       NUM_PROGRAMS: gl.constexpr, PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                       DECOUPLED: gl.constexpr, num_warps: gl.constexpr):
    """``c_desc`` blocks are ``[ROWS, W]``, one part of a tile each (``BLOCK_N = 2 W`` or ``4 W``).

    ``DECOUPLED``: the two consumer warpgroups are separate partitions (the default one and a worker,
    ``num_warps == 4``), each computing 64 rows of every tile; a stage is free once both have
    arrived on its ``empty`` barrier, so neither waits for the other and one's adds and epilogue
    overlap the other's wgmmas. Otherwise one 8-warp partition computes the whole tile."""
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    P: gl.constexpr = b_desc.block_type.shape[0] // c_desc.block_type.shape[1]
    c_smem = gl.allocate_shared_memory(c_desc.dtype, [P] + c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2 if DECOUPLED else 1)
    ROW_LO: gl.constexpr = 0
    ROW_HI: gl.constexpr = c_desc.block_type.shape[0]
    if DECOUPLED:
        c_smem1 = gl.allocate_shared_memory(c_desc.dtype, [P] + c_desc.block_type.shape, c_desc.layout)
        gl.warp_specialize([
            (_consumer, (a_bufs, b_bufs, ready, empty, c_desc, c_smem, sa_ptr, sb_ptr, M, N, K, s_am, s_ak, s_bk,
                         s_bn, SCALING, A_ROW_DIV, GROUP_M, NUM_PROGRAMS, ROW_LO, num_warps)),
            (_consumer, (a_bufs, b_bufs, ready, empty, c_desc, c_smem1, sa_ptr, sb_ptr, M, N, K, s_am, s_ak, s_bk,
                         s_bn, SCALING, A_ROW_DIV, GROUP_M, NUM_PROGRAMS, ROW_HI, num_warps)),
            (_producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, GROUP_M, NUM_PROGRAMS)),
        ], [num_warps, 1], [CONSUMER_REGS, PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (a_bufs, b_bufs, ready, empty, c_desc, c_smem, sa_ptr, sb_ptr, M, N, K, s_am, s_ak, s_bk,
                         s_bn, SCALING, A_ROW_DIV, GROUP_M, NUM_PROGRAMS, ROW_LO, num_warps)),
            (_producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, GROUP_M, NUM_PROGRAMS)),
        ], [1], [PRODUCER_REGS])


# ----------------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------------

BLOCK_M = 128
BLOCK_K = 128
PART_N = 64  # width of one wgmma / one stored part
_SMEM_BYTES = 227 * 1024  # sm90's largest dynamic shared memory per block
_GL_DTYPES = {torch.float8_e4m3fn: gl.float8e4nv, torch.float8_e5m2: gl.float8e5, torch.bfloat16: gl.bfloat16,
              torch.float16: gl.float16, torch.float32: gl.float32}


def stages_for(block_n: int, out_bytes: int) -> int:
    """The most operand stages (at most 6) that fit beside the output staging buffers."""
    per_stage = (BLOCK_M + block_n) * BLOCK_K
    out = BLOCK_M * block_n * out_bytes
    return max(0, min(6, (_SMEM_BYTES - out - 2048) // per_stage))


def gemm_fp8_nt(a, b, sa, sb, c, scaling: str, num_sms: int, *, block_n: int = 256, stages: int | None = None,
                group_m: int = 8, decoupled: bool = True, s_am: int | None = None,
                s_ak: int = 0, s_bk: int = 0, s_bn: int | None = None, a_row_div: int = 1,
                b_col_div: int = 128) -> None:
    """``c[M, N] = dequant(a[M, K]) @ dequant(b[N, K])^T`` on sm90.

    ``a``, ``b``: FP8 (E4M3 / E5M2, any pairing), row-major, ``K % 16 == 0``, 16-byte aligned.
    ``scaling``: ``"TENSORWISE"`` (``sa``, ``sb`` one-element fp32 tensors), ``"ROWWISE"`` (``M`` fp32
    values ``sa[m * s_am]``, ``N`` values ``sb[n * s_bn]``; by default the strides of ``[M, 1]`` and
    ``[N, 1]`` / ``[1, N]`` tensors) or ``"BLOCKWISE"`` with 128-deep K blocks (``sa[(m // a_row_div)
    * s_am + kb * s_ak]``: ``a_row_div`` 1 for 1 x 128 blocks, 128 for 128 x 128 tiles;
    ``sb[kb * s_bk + (n // b_col_div) * s_bn]``: ``b_col_div`` 128 for the weights' 128 x 128 tiles, 1
    for per-column 1 x 128 blocks as wgrad's gradients have, with ``block_n=128``). ``c``: ``[M, N]``
    row-major bf16, fp16 or fp32, written (not accumulated).
    ``block_n``: 128 or 256; ``stages``: operand buffers (default: as many as fit); ``group_m``: tiles
    per group of the grouped order; ``decoupled``: one partition per consumer warpgroup (else one 8-warp
    partition, slower).
    """
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    m, k = a.shape
    n = b.shape[0]
    modes = {"TENSORWISE": TENSORWISE, "ROWWISE": ROWWISE, "BLOCKWISE": BLOCKWISE}
    mode = modes.get(scaling)
    if scaling == "BLOCKWISE" and b_col_div == 1:
        mode = BLOCKWISE_VEC
        if block_n != 2 * PART_N:
            raise ValueError(f"BLOCKWISE with per-column b scales (b_col_div=1) runs with block_n={2 * PART_N}")
    if scaling not in modes:
        raise ValueError(f"scaling: expected one of {sorted(modes)}, got {scaling!r}")
    if block_n not in (2 * PART_N, 4 * PART_N):
        raise ValueError(f"block_n: expected {2 * PART_N} or {4 * PART_N}, got {block_n}")
    if scaling == "BLOCKWISE" and (a_row_div not in (1, BLOCK_M) or b_col_div not in (1, 128)):
        raise ValueError(f"BLOCKWISE: a_row_div must be 1 or {BLOCK_M} and b_col_div 1 or 128, got {a_row_div} "
                         f"and {b_col_div}")
    stages = stages or stages_for(block_n, c.element_size())
    if stages < 2:
        raise ValueError(f"block_n={block_n} with a {c.dtype} output leaves room for {stages} stages (need 2)")
    rows = BLOCK_M // 2 if decoupled else BLOCK_M
    a_layout = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], _GL_DTYPES[a.dtype])
    b_layout = gl.NVMMASharedLayout.get_default_for([block_n, BLOCK_K], _GL_DTYPES[b.dtype])
    c_layout = gl.NVMMASharedLayout.get_default_for([rows, PART_N], _GL_DTYPES[c.dtype])
    a_desc = TensorDescriptor.from_tensor(a, [BLOCK_M, BLOCK_K], a_layout)
    b_desc = TensorDescriptor.from_tensor(b, [block_n, BLOCK_K], b_layout)
    c_desc = TensorDescriptor.from_tensor(c, [rows, PART_N], c_layout)
    tiles = -(-m // BLOCK_M) * -(-n // block_n)
    programs = max(1, min(num_sms, tiles))
    rowwise = scaling == "ROWWISE"
    if s_am is None:
        s_am = sa.stride(0) if rowwise else 0
    if s_bn is None:
        s_bn = (sb.stride(0) if sb.shape[0] == n else sb.stride(-1)) if rowwise else 0
    # Two consumer warpgroups at 232 registers and one producer warp at 40 (its warpgroup): 168 on average.
    gemm_fp8_ws_kernel[(programs,)](
        a_desc, b_desc, c_desc, sa, sb, m, n, k, s_am, s_ak, s_bk, s_bn,
        SCALING=mode, A_ROW_DIV=a_row_div, STAGES=stages, GROUP_M=group_m,
        NUM_PROGRAMS=programs, PRODUCER_REGS=40, CONSUMER_REGS=232, DECOUPLED=decoupled,
        num_warps=4 if decoupled else 8, maxnreg=168,
    )
