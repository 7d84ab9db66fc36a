"""Hopper grouped FP8 GEMM written in Gluon: ``C[rows of g] = dequant(A_g) @ dequant(B[g])^T`` for the
forward of ``grouped_gemm_fp8`` (and its dgrad, on the K-major copy of the weights ``launch.py`` makes).

The dense Gluon kernel's schedule (``turbo_triton.gemm_fp8.gluon_sm90``, whose K loop ``_tile_sums``,
scale and store helpers this reuses; its docstring says why): one producer warp streams ``128 x 128``
A and ``BLOCK_N x 128`` B tiles with TMA into a ring of stages, two consumer warpgroups (separate
partitions) each compute 64 rows of every tile in 64-wide parts, promoting each 128-deep partial
product into fp32 sums on the CUDA cores. What the groups change:

* tiles: each group's row tiles (128 rows from the group's first row; its last one partial) times the
  column tiles, in one flat list over the groups, dealt round-robin to the persistent programs. Each
  partition walks the groups in order, reading ``group_offs`` on the device (``G + 1`` scalars per
  program, not per tile): no host sync, and a CUDA graph can capture the call;
* operands: ``a`` ``[M_total, K]`` through one descriptor (a partial tile also loads the next group's
  first rows, or TMA's zeros past ``M_total``: their sums are never stored); ``b`` ``[G * N, K]``, group
  ``g``'s weights at rows ``g * N``;
* output: a consumer's 64 rows of a tile go out through TMA as in the dense kernel when they lie in
  the group, else from registers with the rows past the group's end masked;
* the rows past ``group_offs[G]`` (no group's) are written with zeros, as the Triton kernels do.

Scales (fp32): TENSORWISE ``sa[0] * sb[0]``; ROWWISE ``sa[m * s_am] * sb[g * s_bg + n * s_bn]``;
BLOCKWISE 1 x 128 activation blocks ``sa[m * s_am + kb * s_ak]`` and 128 x 128 weight tiles
``sb[g * s_bg + kb * s_bk + (n // 128) * s_bn]``. Numerics as the dense kernel: exact products, each
128-deep partial sum the tensor core's, everything above it fp32.

Runs only on sm90 (``triton.experimental.gluon``, written against Triton 3.6); the launcher falls back
to the Triton kernels (``kernels.py``) for good if it fails to compile or launch.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from turbo_triton.gemm_fp8.gluon_sm90 import (
    _GL_DTYPES,
    BLOCK_K,
    BLOCK_M,
    BLOCKWISE,
    PART_N,
    ROWWISE,
    TENSORWISE,
    _epilogue_scales,
    _load_stage,
    _scaled,
    _tile_coords,
    _tile_sums,
    acc_layout,
    stages_for,
)


@gluon.jit
def _group_rows(offs_ptr, g, M):
    """Group ``g``'s rows ``[start, end)``, clamped into ``[0, M]`` (a malformed offset table gives
    empty groups, never a read or write out of bounds)."""
    start = gl.minimum(gl.maximum(gl.load(offs_ptr + g).to(gl.int32), 0), M)
    end = gl.minimum(gl.maximum(gl.load(offs_ptr + g + 1).to(gl.int32), start), M)
    return start, end


@gluon.jit
def _first_tile(tile_base, NUM_PROGRAMS: gl.constexpr):
    """This program's first tile at or after ``tile_base`` (tile ``t`` goes to program ``t % NUM_PROGRAMS``)."""
    return tile_base + (gl.program_id(0) - tile_base % NUM_PROGRAMS + NUM_PROGRAMS) % NUM_PROGRAMS


@gluon.jit
def _producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, offs_ptr, G, M, N, K,
              GROUP_M: gl.constexpr, NUM_PROGRAMS: gl.constexpr):
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    n_tiles = gl.cdiv(N, BN)
    k_steps = gl.cdiv(K, BK)
    it = 0
    tile_base = 0
    for g in range(G):
        start, end = _group_rows(offs_ptr, g, M)
        m_tiles = gl.cdiv(end - start, BM)
        for tile in range(_first_tile(tile_base, NUM_PROGRAMS), tile_base + m_tiles * n_tiles, NUM_PROGRAMS):
            pid_m, pid_n = _tile_coords(tile - tile_base, m_tiles, n_tiles, GROUP_M)
            off_m = start + pid_m * BM
            row_b = g * N + pid_n * BN
            for kk in range(k_steps):
                _load_stage(a_desc, b_desc, a_bufs, b_bufs, ready, empty, it, off_m, row_b, kk * BK)
                it += 1
        tile_base += m_tiles * n_tiles


@gluon.jit
def _store_part(acc, c_desc, c_smem, c_ptr, stride_cm, p: gl.constexpr, rows, row0, end, off_n, N,
                IN_GROUP: gl.constexpr, col_layout: gl.constexpr):
    """Part ``p`` (columns ``off_n + p * W``) of a consumer's rows ``rows`` (first ``row0``): through shared
    memory and TMA (``IN_GROUP``: every row is the group's), or from registers, rows below ``end`` and
    columns below ``N`` only."""
    W: gl.constexpr = c_desc.block_type.shape[1]
    if IN_GROUP:
        buf = c_smem.index(p)
        buf.store(acc.to(c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [row0, off_n + p * W], buf)
    else:
        cols = off_n + p * W + gl.arange(0, W, layout=col_layout)
        ptrs = c_ptr + gl.expand_dims(rows.to(gl.int64) * stride_cm, 1) + gl.expand_dims(cols, 0)
        mask = gl.expand_dims(rows < end, 1) & gl.expand_dims(cols < N, 0)
        gl.store(ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


@gluon.jit
def _store_tile(sum0, sum1, sum2, sum3, c_desc, c_smem, c_ptr, stride_cm, sa, sb_ptr, scale, rows, row0, end,
                off_n, N, s_bn, SCALING: gl.constexpr, IN_GROUP: gl.constexpr, col_layout: gl.constexpr):
    W: gl.constexpr = c_desc.block_type.shape[1]
    P: gl.constexpr = c_smem.type.shape[0]
    _store_part(_scaled(sum0, sa, sb_ptr, off_n, N, s_bn, scale, SCALING, col_layout), c_desc, c_smem, c_ptr,
                stride_cm, 0, rows, row0, end, off_n, N, IN_GROUP, col_layout)
    _store_part(_scaled(sum1, sa, sb_ptr, off_n + W, N, s_bn, scale, SCALING, col_layout), c_desc, c_smem, c_ptr,
                stride_cm, 1, rows, row0, end, off_n, N, IN_GROUP, col_layout)
    if P == 4:
        _store_part(_scaled(sum2, sa, sb_ptr, off_n + 2 * W, N, s_bn, scale, SCALING, col_layout), c_desc, c_smem,
                    c_ptr, stride_cm, 2, rows, row0, end, off_n, N, IN_GROUP, col_layout)
        _store_part(_scaled(sum3, sa, sb_ptr, off_n + 3 * W, N, s_bn, scale, SCALING, col_layout), c_desc, c_smem,
                    c_ptr, stride_cm, 3, rows, row0, end, off_n, N, IN_GROUP, col_layout)


@gluon.jit
def _zero_tail(c_ptr, stride_cm, tail, M, N, ROW0: gl.constexpr, ROWS: gl.constexpr, BM: gl.constexpr,
               W: gl.constexpr, NUM_PROGRAMS: gl.constexpr, num_warps: gl.constexpr):
    """Zeros into this consumer's rows of the ``BM x W`` blocks of rows ``[tail, M)`` (no group's), the
    blocks dealt round-robin over the programs."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    n_blocks = gl.cdiv(N, W)
    zeros = gl.zeros([ROWS, W], c_ptr.dtype.element_ty, layout)
    for t in range(gl.program_id(0), gl.cdiv(M - tail, BM) * n_blocks, NUM_PROGRAMS):
        rows = tail + (t // n_blocks) * BM + ROW0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
        cols = (t % n_blocks) * W + gl.arange(0, W, layout=gl.SliceLayout(0, layout))
        ptrs = c_ptr + gl.expand_dims(rows.to(gl.int64) * stride_cm, 1) + gl.expand_dims(cols, 0)
        gl.store(ptrs, zeros, mask=gl.expand_dims(rows < M, 1) & gl.expand_dims(cols < N, 0))


@gluon.jit
def _consumer(a_bufs, b_bufs, ready, empty, c_desc, c_smem, c_ptr, stride_cm, sa_ptr, sb_ptr, offs_ptr, G, M, N, K,
              s_am, s_ak, s_bg, s_bk, s_bn, SCALING: gl.constexpr, GROUP_M: gl.constexpr,
              NUM_PROGRAMS: gl.constexpr, ROW0: gl.constexpr, num_warps: gl.constexpr):
    """Rows ``[ROW0, ROW0 + 64)`` of every tile (one warpgroup's)."""
    BM: gl.constexpr = a_bufs.type.shape[1]
    ROWS: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = b_bufs.type.shape[1]
    W: gl.constexpr = c_desc.block_type.shape[1]
    P: gl.constexpr = BN // W
    gl.static_assert(P == 2 or P == 4, "BLOCK_N must be 2 or 4 parts of the store width")
    layout: gl.constexpr = acc_layout(W, num_warps)
    row_layout: gl.constexpr = gl.SliceLayout(1, layout)
    col_layout: gl.constexpr = gl.SliceLayout(0, layout)
    n_tiles = gl.cdiv(N, BN)
    _, tail = _group_rows(offs_ptr, G - 1, M)
    _zero_tail(c_ptr, stride_cm, tail, M, N, ROW0, ROWS, BM, W, NUM_PROGRAMS, num_warps)
    it = 0
    tile_base = 0
    for g in range(G):
        start, end = _group_rows(offs_ptr, g, M)
        m_tiles = gl.cdiv(end - start, BM)
        sb_g = sb_ptr + g * s_bg
        for tile in range(_first_tile(tile_base, NUM_PROGRAMS), tile_base + m_tiles * n_tiles, NUM_PROGRAMS):
            pid_m, pid_n = _tile_coords(tile - tile_base, m_tiles, n_tiles, GROUP_M)
            row0 = start + pid_m * BM + ROW0
            off_n = pid_n * BN
            rows = row0 + gl.arange(0, ROWS, layout=row_layout)
            sa, scale = _epilogue_scales(sa_ptr, sb_g, rows, end, s_am, SCALING)
            sum0, sum1, sum2, sum3, it = _tile_sums(a_bufs, b_bufs, ready, empty, it, rows, off_n, end, N, K, sa_ptr,
                                                    sb_g, s_am, s_ak, s_bk, s_bn, SCALING, 1, ROW0, ROWS, W,
                                                    layout)
            tma.store_wait(pendings=0)  # the previous tile's stores have read c_smem
            if row0 + ROWS <= end:
                _store_tile(sum0, sum1, sum2, sum3, c_desc, c_smem, c_ptr, stride_cm, sa, sb_g, scale, rows, row0,
                            end, off_n, N, s_bn, SCALING, True, col_layout)
            else:
                _store_tile(sum0, sum1, sum2, sum3, c_desc, c_smem, c_ptr, stride_cm, sa, sb_g, scale, rows, row0,
                            end, off_n, N, s_bn, SCALING, False, col_layout)
        tile_base += m_tiles * n_tiles
    tma.store_wait(pendings=0)


@gluon.jit
def grouped_gemm_fp8_ws_kernel(a_desc, b_desc, c_desc, c_ptr, stride_cm, sa_ptr, sb_ptr, offs_ptr, G, M, N, K,
                               s_am, s_ak, s_bg, s_bk, s_bn,
                               SCALING: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                               NUM_PROGRAMS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                               CONSUMER_REGS: gl.constexpr, num_warps: gl.constexpr):
    """``c_desc`` blocks are ``[64, W]`` (one warpgroup's rows of one part; ``BLOCK_N = 2 W`` or ``4 W``);
    ``c_ptr`` the same ``[M, N]`` output (row stride ``stride_cm``) for the masked stores;
    ``offs_ptr`` the ``G + 1`` group offsets (int32 or int64)."""
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    P: gl.constexpr = b_desc.block_type.shape[0] // c_desc.block_type.shape[1]
    c_lo = gl.allocate_shared_memory(c_desc.dtype, [P] + c_desc.block_type.shape, c_desc.layout)
    c_hi = gl.allocate_shared_memory(c_desc.dtype, [P] + c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    ROW_HI: gl.constexpr = c_desc.block_type.shape[0]
    gl.warp_specialize([
        (_consumer, (a_bufs, b_bufs, ready, empty, c_desc, c_lo, c_ptr, stride_cm, sa_ptr, sb_ptr, offs_ptr, G, M,
                     N, K, s_am, s_ak, s_bg, s_bk, s_bn, SCALING, GROUP_M, NUM_PROGRAMS, 0, num_warps)),
        (_consumer, (a_bufs, b_bufs, ready, empty, c_desc, c_hi, c_ptr, stride_cm, sa_ptr, sb_ptr, offs_ptr, G, M,
                     N, K, s_am, s_ak, s_bg, s_bk, s_bn, SCALING, GROUP_M, NUM_PROGRAMS, ROW_HI, num_warps)),
        (_producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, offs_ptr, G, M, N, K, GROUP_M, NUM_PROGRAMS)),
    ], [num_warps, 1], [CONSUMER_REGS, PRODUCER_REGS])


# ----------------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------------

_MODES = {"TENSORWISE": TENSORWISE, "ROWWISE": ROWWISE, "BLOCKWISE": BLOCKWISE}


def grouped_gemm_fp8_nt(a, b, sa, sb, offs, c, scaling: str, programs: int, *, block_n: int = 256,
                        stages: int | None = None, group_m: int = 8, s_am: int = 0, s_ak: int = 0, s_bg: int = 0,
                        s_bk: int = 0, s_bn: int = 0) -> None:
    """``c[rows of g] = dequant(a[rows of g]) @ dequant(b[g])^T`` on sm90, zeros in the rows past
    ``offs[G]``.

    ``a``: ``[M, K]`` FP8 (E4M3 / E5M2), row-major; ``b``: ``[G, N, K]`` FP8, contiguous; ``K % 16 == 0``,
    16-byte aligned bases. ``offs``: ``G + 1`` nondecreasing row offsets on the device (int32/int64).
    ``c``: ``[M, N]`` bf16, fp16 or fp32, row-major, 16-byte aligned rows. Scales (fp32) by the
    strides in the module docstring (``scaling``: ``"TENSORWISE"``, ``"ROWWISE"`` or ``"BLOCKWISE"``
    with 1 x 128 blocks for ``a`` and 128 x 128 tiles for ``b``). ``programs``: persistent programs
    (at most the SM count); ``block_n``: 128 or 256 (BLOCKWISE: 128); ``stages``: operand buffers
    (default: as many as fit)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    if scaling not in _MODES:
        raise ValueError(f"scaling: expected one of {sorted(_MODES)}, got {scaling!r}")
    if block_n not in (2 * PART_N, 4 * PART_N) or (scaling == "BLOCKWISE" and block_n != 2 * PART_N):
        raise ValueError(f"block_n: expected {2 * PART_N} or {4 * PART_N} ({2 * PART_N} for BLOCKWISE), got {block_n}")
    m, k = a.shape
    g, n = b.shape[0], b.shape[1]
    stages = stages or stages_for(block_n, c.element_size())
    if stages < 2:
        raise ValueError(f"block_n={block_n} with a {c.dtype} output leaves room for {stages} stages (need 2)")
    rows = BLOCK_M // 2
    a_layout = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], _GL_DTYPES[a.dtype])
    b_layout = gl.NVMMASharedLayout.get_default_for([block_n, BLOCK_K], _GL_DTYPES[b.dtype])
    c_layout = gl.NVMMASharedLayout.get_default_for([rows, PART_N], _GL_DTYPES[c.dtype])
    a_desc = TensorDescriptor.from_tensor(a, [BLOCK_M, BLOCK_K], a_layout)
    b_desc = TensorDescriptor.from_tensor(b.view(g * n, k), [block_n, BLOCK_K], b_layout)
    c_desc = TensorDescriptor.from_tensor(c, [rows, PART_N], c_layout)
    # Two consumer warpgroups at 232 registers and one producer warp at 40 (its warpgroup): 168 on average.
    grouped_gemm_fp8_ws_kernel[(programs,)](
        a_desc, b_desc, c_desc, c, c.stride(0), sa, sb, offs, g, m, n, k, s_am, s_ak, s_bg, s_bk, s_bn,
        SCALING=_MODES[scaling], STAGES=stages, GROUP_M=group_m, NUM_PROGRAMS=programs,
        PRODUCER_REGS=40, CONSUMER_REGS=232, num_warps=4, maxnreg=168,
    )
