"""Hopper grouped FP8 wgrad (variable K) in Gluon, BLOCKWISE: ``C[g] (+)= dequant(X_g)^T @ dequant(Y_g)``, the
contraction running over group ``g``'s rows (tokens).

The operands come K-major (the launcher copies them so): ``x_t`` ``[R, M]`` and ``y_t`` ``[C, M]``, the
tokens along the contiguous dim; ``C[g]`` is ``[R, C]``. With 1 x 128 blocks along the tokens for both
(the col-wise layout of ``grouped_quantize_fp8``: ``sx[rb, r]``, ``sy[rb, c]``) each 128-token step has
a scale per row and one per column, which is the dense Gluon kernel's per-column BLOCKWISE mode
(``BLOCKWISE_VEC``, ``turbo_triton.gemm_fp8.gluon_sm90``): this kernel is that kernel's schedule (its
``_tile_sums``: one TMA producer warp, two consumer warpgroups, every step's partial product promoted
into fp32 sums by its scales) over a per-group K range:

* tiles: ``G x cdiv(R, 128) x cdiv(C, 128)``, known on the host; tile ``t`` is group ``t // (tiles per
  group)``; a tile's K loop runs over its group's rows ``[offs[g], offs[g + 1])`` read on the device (no
  host sync), 128 at a time from ``offs[g]``, with the scale blocks from ``offs[g] / 128``.
* The group offsets must be multiples of 128 — the spec's precondition for BLOCKWISE variable K, the
  padded offsets the grouped quantizer returns — so no step straddles two groups or two scale blocks.
  Rows past ``M`` load as zeros (TMA). Offsets that break the precondition give wrong sums, never an
  access out of bounds.
* output: ``C`` as ``[G * R, C]`` (``R`` a multiple of 128), each warpgroup's 64 rows of a part stored
  through TMA; with ``ACCUMULATE`` read, added in fp32 and stored from registers (``out[g] += C[g]``,
  rounded once). An empty group gives zeros (``ACCUMULATE``: leaves ``out[g]``).

Runs only on sm90; the launcher falls back to the Triton kernels for good if it fails to compile or launch.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from turbo_triton.gemm_fp8.gluon_sm90 import (
    _GL_DTYPES,
    BLOCK_K,
    BLOCK_M,
    BLOCKWISE_VEC,
    PART_N,
    _load_stage,
    _tile_coords,
    _tile_sums,
    acc_layout,
    stages_for,
)
from turbo_triton.grouped_gemm_fp8.gluon_sm90 import _group_rows


@gluon.jit
def _locate(tile, m_tiles, n_tiles, GROUP_M: gl.constexpr):
    """``(group, pid_m, pid_n)`` of a flat tile index (every group has ``m_tiles x n_tiles`` tiles)."""
    per_group = m_tiles * n_tiles
    pid_m, pid_n = _tile_coords(tile % per_group, m_tiles, n_tiles, GROUP_M)
    return tile // per_group, pid_m, pid_n


@gluon.jit
def _producer(x_desc, y_desc, x_bufs, y_bufs, ready, empty, offs_ptr, G, M, R, C,
              GROUP_M: gl.constexpr, NUM_PROGRAMS: gl.constexpr):
    BM: gl.constexpr = x_desc.block_type.shape[0]
    BK: gl.constexpr = x_desc.block_type.shape[1]
    BN: gl.constexpr = y_desc.block_type.shape[0]
    m_tiles = gl.cdiv(R, BM)
    n_tiles = gl.cdiv(C, BN)
    it = 0
    for tile in range(gl.program_id(0), G * m_tiles * n_tiles, NUM_PROGRAMS):
        g, pid_m, pid_n = _locate(tile, m_tiles, n_tiles, GROUP_M)
        start, end = _group_rows(offs_ptr, g, M)
        for kk in range(gl.cdiv(end - start, BK)):
            _load_stage(x_desc, y_desc, x_bufs, y_bufs, ready, empty, it, pid_m * BM, pid_n * BN, start + kk * BK)
            it += 1


@gluon.jit
def _store_part(acc, c_desc, c_smem, c_ptr, stride_cg, stride_cr, p: gl.constexpr, g, rows, row0, off_n, R, C,
                ACCUMULATE: gl.constexpr, col_layout: gl.constexpr):
    """Part ``p`` (columns ``off_n + p * W``) of group ``g``'s rows ``rows``: through TMA (the view
    ``[G * R, C]``, first row ``g * R + row0``), or (``ACCUMULATE``) added to what ``c_ptr`` holds, in
    fp32, from registers."""
    W: gl.constexpr = c_desc.block_type.shape[1]
    if ACCUMULATE:
        cols = off_n + p * W + gl.arange(0, W, layout=col_layout)
        ptrs = (c_ptr + g.to(gl.int64) * stride_cg + gl.expand_dims(rows.to(gl.int64) * stride_cr, 1)
                + gl.expand_dims(cols, 0))
        mask = gl.expand_dims(rows < R, 1) & gl.expand_dims(cols < C, 0)
        old = gl.load(ptrs, mask=mask, other=0.0).to(gl.float32)
        gl.store(ptrs, (old + acc).to(c_ptr.dtype.element_ty), mask=mask)
    else:
        buf = c_smem.index(p)
        buf.store(acc.to(c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [g * R + row0, off_n + p * W], buf)


@gluon.jit
def _consumer(x_bufs, y_bufs, ready, empty, c_desc, c_smem, c_ptr, stride_cg, stride_cr, sx_ptr, sy_ptr, offs_ptr,
              G, M, R, C, s_xr, s_xb, s_yb, ACCUMULATE: gl.constexpr, GROUP_M: gl.constexpr,
              NUM_PROGRAMS: gl.constexpr, ROW0: gl.constexpr, num_warps: gl.constexpr):
    """Rows ``[ROW0, ROW0 + 64)`` of every tile (one warpgroup's)."""
    BM: gl.constexpr = x_bufs.type.shape[1]
    BK: gl.constexpr = x_bufs.type.shape[2]
    ROWS: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = y_bufs.type.shape[1]
    W: gl.constexpr = c_desc.block_type.shape[1]
    gl.static_assert(BN == 2 * W, "the per-column scales take BLOCK_N = 2 parts of the store width")
    layout: gl.constexpr = acc_layout(W, num_warps)
    row_layout: gl.constexpr = gl.SliceLayout(1, layout)
    col_layout: gl.constexpr = gl.SliceLayout(0, layout)
    m_tiles = gl.cdiv(R, BM)
    n_tiles = gl.cdiv(C, BN)
    it = 0
    for tile in range(gl.program_id(0), G * m_tiles * n_tiles, NUM_PROGRAMS):
        g, pid_m, pid_n = _locate(tile, m_tiles, n_tiles, GROUP_M)
        start, end = _group_rows(offs_ptr, g, M)
        row0 = pid_m * BM + ROW0
        off_n = pid_n * BN
        rows = row0 + gl.arange(0, ROWS, layout=row_layout)
        # the group's first scale block (an empty group: a block that exists, its scales multiply nothing;
        # M > 0, so (end - 1) // BK is one even for an empty group at M)
        first = gl.minimum(start, gl.maximum(end - 1, 0)) // BK
        sum0, sum1, _, _, it = _tile_sums(x_bufs, y_bufs, ready, empty, it, rows, off_n, R, C, end - start,
                                          sx_ptr + first * s_xb, sy_ptr + first * s_yb, s_xr, s_xb, s_yb, 1,
                                          BLOCKWISE_VEC, 1, ROW0, ROWS, W, layout)
        tma.store_wait(pendings=0)  # the previous tile's stores have read c_smem
        _store_part(sum0, c_desc, c_smem, c_ptr, stride_cg, stride_cr, 0, g, rows, row0, off_n, R, C, ACCUMULATE,
                    col_layout)
        _store_part(sum1, c_desc, c_smem, c_ptr, stride_cg, stride_cr, 1, g, rows, row0, off_n, R, C, ACCUMULATE,
                    col_layout)
    tma.store_wait(pendings=0)


@gluon.jit
def grouped_gemm_fp8_variable_k_ws_kernel(x_desc, y_desc, c_desc, c_ptr, stride_cg, stride_cr, sx_ptr, sy_ptr,
                                          offs_ptr, G, M, R, C, s_xr, s_xb, s_yb,
                                          ACCUMULATE: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                                          NUM_PROGRAMS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                                          CONSUMER_REGS: gl.constexpr, num_warps: gl.constexpr):
    """``x_desc`` blocks ``[128, 128]`` of ``x_t [R, M]``, ``y_desc`` ``[128, 128]`` of ``y_t [C, M]``,
    ``c_desc`` ``[64, 64]`` of ``C`` viewed ``[G * R, C]`` (also ``c_ptr`` with strides ``stride_cg``,
    ``stride_cr`` and unit columns); scales ``sx[rb * s_xb + r * s_xr]``, ``sy[rb * s_yb + c]``."""
    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    y_bufs = gl.allocate_shared_memory(y_desc.dtype, [STAGES] + y_desc.block_type.shape, y_desc.layout)
    c_lo = gl.allocate_shared_memory(c_desc.dtype, [2] + c_desc.block_type.shape, c_desc.layout)
    c_hi = gl.allocate_shared_memory(c_desc.dtype, [2] + c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    ROW_HI: gl.constexpr = c_desc.block_type.shape[0]
    gl.warp_specialize([
        (_consumer, (x_bufs, y_bufs, ready, empty, c_desc, c_lo, c_ptr, stride_cg, stride_cr, sx_ptr, sy_ptr,
                     offs_ptr, G, M, R, C, s_xr, s_xb, s_yb, ACCUMULATE, GROUP_M, NUM_PROGRAMS, 0, num_warps)),
        (_consumer, (x_bufs, y_bufs, ready, empty, c_desc, c_hi, c_ptr, stride_cg, stride_cr, sx_ptr, sy_ptr,
                     offs_ptr, G, M, R, C, s_xr, s_xb, s_yb, ACCUMULATE, GROUP_M, NUM_PROGRAMS, ROW_HI,
                     num_warps)),
        (_producer, (x_desc, y_desc, x_bufs, y_bufs, ready, empty, offs_ptr, G, M, R, C, GROUP_M, NUM_PROGRAMS)),
    ], [num_warps, 1], [CONSUMER_REGS, PRODUCER_REGS])


# ----------------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------------

BLOCK_N = 2 * PART_N  # the per-column scale mode's tile width


def grouped_gemm_fp8_variable_k_nt(x_t, y_t, sx, sy, offs, c, programs: int, *, accumulate: bool,
                                   stages: int | None = None, group_m: int = 8) -> None:
    """``c[g] (+)= dequant(x_t[:, rows of g]) @ dequant(y_t[:, rows of g])^T`` on sm90 (BLOCKWISE, 1 x 128
    blocks along the rows ``M``).

    ``x_t``: ``[R, M]`` FP8 (E4M3 / E5M2), ``R`` a multiple of 128; ``y_t``: ``[C, M]`` FP8; both with
    unit column stride and 16-byte aligned rows. ``sx``: fp32 ``[cdiv(M, 128), R]``, ``sy``: fp32
    ``[cdiv(M, 128), C]``, unit column stride. ``offs``: ``G + 1`` group offsets on the device, multiples
    of 128. ``c``: ``[G, R, C]`` bf16 / fp16 / fp32 with unit column stride (and, unless ``accumulate``,
    contiguous with 16-byte aligned rows): written, or (``accumulate``) added to in fp32.
    ``programs``: persistent programs (at most the SM count)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    r, m = x_t.shape
    g, cols = c.shape[0], y_t.shape[0]
    if r % BLOCK_M or c.shape[1] != r or c.shape[2] != cols:
        raise ValueError(f"c: expected [G, R, C] with R = {r} a multiple of {BLOCK_M} and C = {cols}, got "
                         f"{tuple(c.shape)}")
    if sx.stride(1) != 1 or sy.stride(1) != 1:
        raise ValueError("sx, sy: the scales must have unit column stride ([cdiv(M, 128), R] / [cdiv(M, 128), C])")
    # accumulating, the output goes from registers: no staging buffers, room for more operand stages
    stages = stages or stages_for(BLOCK_N, 0 if accumulate else c.element_size())
    rows = BLOCK_M // 2
    x_layout = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], _GL_DTYPES[x_t.dtype])
    y_layout = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_K], _GL_DTYPES[y_t.dtype])
    c_layout = gl.NVMMASharedLayout.get_default_for([rows, PART_N], _GL_DTYPES[c.dtype])
    x_desc = TensorDescriptor.from_tensor(x_t, [BLOCK_M, BLOCK_K], x_layout)
    y_desc = TensorDescriptor.from_tensor(y_t, [BLOCK_N, BLOCK_K], y_layout)
    # with accumulate the output is read and written through c_ptr; the descriptor is unused (any view)
    c_desc = TensorDescriptor.from_tensor(c.view(g * r, cols) if not accumulate else c[0], [rows, PART_N], c_layout)
    grouped_gemm_fp8_variable_k_ws_kernel[(programs,)](
        x_desc, y_desc, c_desc, c, c.stride(0), c.stride(1), sx, sy, offs, g, m, r, cols, sx.stride(1), sx.stride(0),
        sy.stride(0), ACCUMULATE=accumulate, STAGES=stages, GROUP_M=group_m, NUM_PROGRAMS=programs,
        PRODUCER_REGS=40, CONSUMER_REGS=232, num_warps=4, maxnreg=168,
    )
