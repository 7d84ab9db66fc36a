"""Triton grouped GEMM kernels: the forward/dgrad ``C[rows of g] = A_g @ op(B[g])`` and the variable-K
wgrad ``C[g] (+)= A_g^T @ B_g``, fp32 accumulation.

Every kernel is persistent (at most one program per SM) and reads the group offsets on the device,
so a launch needs no host sync and can be captured in a CUDA graph.

Forward schedule: group ``g`` owns rows ``[offs[g], offs[g+1])`` and ``cdiv(len_g, BLOCK_M)`` row
tiles. Each program computes the per-group tile counts and their prefix sum from the offsets (one
vector of ``BLOCK_G >= G`` lanes), then walks the flat tile index with a stride of the program count;
a tile finds its group by counting the prefix sums at or below it. Row tiles start at the group's
first row (not at a multiple of BLOCK_M), so a tile never mixes two groups, and every tile runs the
same K loop (which lets Triton flatten the persistent loop). The rows past the last group
``[offs[G], M_total)`` are written with zeros by the same programs, in a loop of their own, so the
over-allocated rows come out zero in the same launch.

Variable-K schedule: the output is ``G`` fixed ``K x N`` matrices, so the tile count is known on the
host; only each group's contraction length (its rows) is read on the device.
"""

from __future__ import annotations

import triton
import triton.language as tl

from turbo_triton.gemm.kernels import _tile_coords  # grouped order inside one group's tiles


@triton.jit
def _rows_in(offs_ptr, i, M_total):
    """``offs[i]`` clamped to ``[0, M_total]``: offsets that break the contract (checked
    asynchronously, after the launch) never take a kernel outside the tensors."""
    return tl.minimum(tl.maximum(tl.load(offs_ptr + i).to(tl.int32), 0), M_total)


@triton.jit
def _group_table(offs_ptr, G, M_total, n_tiles_n, BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr):
    """Per-group first rows, end rows, tile counts and inclusive prefix sums of the tile counts
    (lanes past G are empty), and the total tile count."""
    idx = tl.arange(0, BLOCK_G)
    starts = tl.load(offs_ptr + idx, mask=idx < G, other=0).to(tl.int32)
    ends = tl.load(offs_ptr + idx + 1, mask=idx < G, other=0).to(tl.int32)
    starts = tl.minimum(tl.maximum(starts, 0), M_total)
    ends = tl.minimum(tl.maximum(ends, starts), M_total)
    rows = ends - starts
    tiles = ((rows + BLOCK_M - 1) // BLOCK_M) * n_tiles_n
    cum = tl.cumsum(tiles, 0)
    return starts, ends, tiles, cum, tl.sum(tiles, 0)


@triton.jit
def _locate(tile_id, starts, ends, tiles, cum, n_tiles_n, BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr,
            GROUP_M: tl.constexpr):
    """``(group, first row of the tile, end row of its group, pid_n)`` of a flat tile index."""
    idx = tl.arange(0, BLOCK_G)
    grp = tl.sum((cum <= tile_id).to(tl.int32), 0)
    here = idx == grp
    first_tile = tl.sum(tl.where(here, cum - tiles, 0), 0)
    row_start = tl.sum(tl.where(here, starts, 0), 0)
    row_end = tl.sum(tl.where(here, ends, 0), 0)
    m_tiles = (row_end - row_start + BLOCK_M - 1) // BLOCK_M
    pid_m, pid_n = _tile_coords(tile_id - first_tile, m_tiles, n_tiles_n, GROUP_M)
    return grp, row_start + pid_m * BLOCK_M, row_end, pid_n


@triton.jit
def _store_rows(c_ptr, acc, off_m, row_end, off_n, N, stride_cm, stride_cn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Masked store of a ``[BLOCK_M, BLOCK_N]`` tile: rows below ``row_end``, columns below N."""
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :].to(tl.int64) * stride_cn
    tl.store(ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < row_end) & (offs_n[None, :] < N))


@triton.jit
def _zero_tail(c_ptr, offs_ptr, G, M_total, N, stride_cm, stride_cn, NUM_PROGRAMS,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Zeros into the rows ``[offs[G], M_total)`` (no group's), tiles dealt round-robin."""
    tail_start = _rows_in(offs_ptr, G, M_total)
    n_tiles_n = tl.cdiv(N, BLOCK_N)
    tail_tiles = ((M_total - tail_start + BLOCK_M - 1) // BLOCK_M) * n_tiles_n
    zeros = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(tl.program_id(0), tail_tiles, NUM_PROGRAMS):
        _store_rows(c_ptr, zeros, tail_start + (t // n_tiles_n) * BLOCK_M, M_total, (t % n_tiles_n) * BLOCK_N, N,
                    stride_cm, stride_cn, BLOCK_M, BLOCK_N)


@triton.jit
def _store_block_tma(c_desc, d, row, col, ACCUMULATE: tl.constexpr, SUBTILE: tl.constexpr,
                     ROWS: tl.constexpr, COLS: tl.constexpr):
    """``C[row:, col:] (+)= d`` (``[ROWS, COLS]``) through a TMA descriptor, in one store or
    (``SUBTILE``; the descriptor's block is then ``[ROWS, COLS // 2]``) two halves, which needs half
    the epilogue's shared memory and lets the first store overlap the second conversion."""
    if SUBTILE:
        d0, d1 = tl.split(tl.permute(tl.reshape(d, (ROWS, 2, COLS // 2)), (0, 2, 1)))
        if ACCUMULATE:
            d0 += c_desc.load([row, col]).to(tl.float32)
            d1 += c_desc.load([row, col + COLS // 2]).to(tl.float32)
        c_desc.store([row, col], d0.to(c_desc.dtype))
        c_desc.store([row, col + COLS // 2], d1.to(c_desc.dtype))
    else:
        if ACCUMULATE:
            d += c_desc.load([row, col]).to(tl.float32)
        c_desc.store([row, col], d.to(c_desc.dtype))


@triton.jit
def _store_tile_tma(c_desc, acc, row, col, ACCUMULATE: tl.constexpr, SUBTILE: tl.constexpr, TRANS: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Store the ``[BLOCK_M, BLOCK_N]`` accumulator, or its transpose (``TRANS``), at ``(row, col)``
    of the descriptor's matrix."""
    if TRANS:
        _store_block_tma(c_desc, tl.trans(acc), row, col, ACCUMULATE, SUBTILE, BLOCK_N, BLOCK_M)
    else:
        _store_block_tma(c_desc, acc, row, col, ACCUMULATE, SUBTILE, BLOCK_M, BLOCK_N)


# -- forward / dgrad ------------------------------------------------------------------------------


@triton.jit
def grouped_gemm_kernel(
    a_ptr, b_ptr, c_ptr, offs_ptr, G, M_total, N, K,
    stride_am, stride_ak, stride_bg, stride_bk, stride_bn, stride_cm, stride_cn,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, BLOCK_G: tl.constexpr, NUM_PROGRAMS,
):
    """Portable kernel: masked pointer loads, any strides (op(B) expressed by its strides).
    ``UPCAST`` multiplies in fp32 (the CPU interpreter's bf16 dot is wrong; products of bf16/fp16
    values are exact in fp32)."""
    _zero_tail(c_ptr, offs_ptr, G, M_total, N, stride_cm, stride_cn, NUM_PROGRAMS, BLOCK_M, BLOCK_N)
    n_tiles_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    starts, ends, tiles, cum, total = _group_table(offs_ptr, G, M_total, n_tiles_n, BLOCK_M, BLOCK_G)
    for tile_id in range(tl.program_id(0), total, NUM_PROGRAMS):
        grp, off_m, row_end, pid_n = _locate(tile_id, starts, ends, tiles, cum, n_tiles_n,
                                              BLOCK_M, BLOCK_G, GROUP_M)
        offs_m = off_m + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = (b_ptr + grp.to(tl.int64) * stride_bg + offs_k[:, None] * stride_bk
                  + offs_n[None, :].to(tl.int64) * stride_bn)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(0, k_tiles):
            k_left = K - ki * BLOCK_K
            a = tl.load(a_ptrs, mask=(offs_m[:, None] < row_end) & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
            if UPCAST:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        _store_rows(c_ptr, acc, off_m, row_end, pid_n * BLOCK_N, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)


@triton.jit
def grouped_gemm_tma_kernel(
    a_desc, b_desc, c_desc, c_ptr, offs_ptr, G, M_total, N, K, stride_cm,
    TRANS_B: tl.constexpr, C_TMA: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, BLOCK_G: tl.constexpr, NUM_PROGRAMS,
    FLATTEN: tl.constexpr = False, SUBTILE: tl.constexpr = False,
):
    """Hopper kernel: operands stream through host-built TMA descriptors over the whole tensors.

    * ``a_desc``: a ``[M_total, K]``, block ``[BLOCK_M, BLOCK_K]``. A tile may run past its group's
      last row into the next group's rows: those only feed output rows that are never stored.
      Columns past K read as zero.
    * ``b_desc``: b viewed as ``[G*N, K]`` (``TRANS_B``; block ``[BLOCK_N, BLOCK_K]``; rows past N
      only feed output columns that are never stored) or ``[G*K, N]`` (block ``[BLOCK_K, BLOCK_N]``;
      the launcher picks a BLOCK_K that divides K, so a tile never reads the next group's rows).
    * the output: ``c_desc`` (``C_TMA``; ``[M_total, N]``, block ``[BLOCK_M, BLOCK_N]``) for tiles that
      end inside their group, a masked pointer store for a group's last, partial, row tile (a TMA
      store there would overwrite the next group's rows).

    ``FLATTEN`` is Triton's flattened persistent loop; ``SUBTILE`` stores a tile in two halves.
    """
    _zero_tail(c_ptr, offs_ptr, G, M_total, N, stride_cm, 1, NUM_PROGRAMS, BLOCK_M, BLOCK_N)
    n_tiles_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    starts, ends, tiles, cum, total = _group_table(offs_ptr, G, M_total, n_tiles_n, BLOCK_M, BLOCK_G)
    for tile_id in tl.range(tl.program_id(0), total, NUM_PROGRAMS, flatten=FLATTEN):
        grp, off_m, row_end, pid_n = _locate(tile_id, starts, ends, tiles, cum, n_tiles_n,
                                              BLOCK_M, BLOCK_G, GROUP_M)
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(0, k_tiles):
            off_k = ki * BLOCK_K
            a = a_desc.load([off_m, off_k])
            if TRANS_B:
                b = b_desc.load([grp * N + off_n, off_k]).T
            else:
                b = b_desc.load([grp * K + off_k, off_n])
            if UPCAST:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
        if C_TMA:
            if off_m + BLOCK_M <= row_end:
                _store_tile_tma(c_desc, acc, off_m, off_n, False, SUBTILE, False, BLOCK_M, BLOCK_N)
            else:
                _store_rows(c_ptr, acc, off_m, row_end, off_n, N, stride_cm, 1, BLOCK_M, BLOCK_N)
        else:
            _store_rows(c_ptr, acc, off_m, row_end, off_n, N, stride_cm, 1, BLOCK_M, BLOCK_N)


# -- variable K (wgrad) ---------------------------------------------------------------------------


@triton.jit
def grouped_gemm_variable_k_kernel(
    a_ptr, b_ptr, c_ptr, offs_ptr, G, M_total, K, N,
    stride_am, stride_ak, stride_bm, stride_bn, stride_cg, stride_ck, stride_cn,
    ACCUMULATE: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, NUM_PROGRAMS,
):
    """Portable kernel: ``C[g][K, N] (+)= A[rows of g, K]^T @ B[rows of g, N]``; the output layout
    (trans_c) is expressed by its strides. BLOCK_M tiles K, BLOCK_N tiles N, BLOCK_K the rows."""
    tiles_m = tl.cdiv(K, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = tiles_m * tiles_n
    for tile_id in range(tl.program_id(0), G * per_group, NUM_PROGRAMS):
        g = tile_id // per_group
        pid_m, pid_n = _tile_coords(tile_id % per_group, tiles_m, tiles_n, GROUP_M)
        row_start = _rows_in(offs_ptr, g, M_total)
        rows = tl.maximum(_rows_in(offs_ptr, g + 1, M_total) - row_start, 0)
        offs_km = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_r = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + (row_start + offs_r[:, None]).to(tl.int64) * stride_am + offs_km[None, :] * stride_ak
        b_ptrs = b_ptr + (row_start + offs_r[:, None]).to(tl.int64) * stride_bm + offs_n[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(0, tl.cdiv(rows, BLOCK_K)):
            r_left = rows - ki * BLOCK_K
            a = tl.load(a_ptrs, mask=(offs_r[:, None] < r_left) & (offs_km[None, :] < K), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_r[:, None] < r_left) & (offs_n[None, :] < N), other=0.0)
            if UPCAST:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(tl.trans(a), b, acc, input_precision=PRECISION)
            a_ptrs += BLOCK_K * stride_am
            b_ptrs += BLOCK_K * stride_bm
        c_ptrs = (c_ptr + g.to(tl.int64) * stride_cg + offs_km[:, None].to(tl.int64) * stride_ck
                  + offs_n[None, :].to(tl.int64) * stride_cn)
        c_mask = (offs_km[:, None] < K) & (offs_n[None, :] < N)
        if ACCUMULATE:
            acc += tl.load(c_ptrs, mask=c_mask, other=0.0).to(tl.float32)
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


@triton.jit
def grouped_gemm_variable_k_tma_kernel(
    a_desc, b_desc, c_desc, c_ptr, offs_ptr, G, M_total, K, N, stride_cg, stride_ck, stride_cn,
    TRANS_C: tl.constexpr, C_TMA: tl.constexpr, ACCUMULATE: tl.constexpr, UPCAST: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, NUM_PROGRAMS, SUBTILE: tl.constexpr = False,
):
    """Hopper kernel: a ``[M_total, K]`` (block ``[BLOCK_K, BLOCK_M]``) and b ``[M_total, N]`` (block
    ``[BLOCK_K, BLOCK_N]``) through TMA descriptors. The full row chunks of a group stream unmasked;
    the last, partial chunk (which would reach into the next group's rows) is masked to the group.
    The output goes through ``c_desc`` (``C_TMA``: c viewed as ``[G*K, N]``, or ``[G*N, K]`` with
    ``TRANS_C``, which the launcher allows only when the tiles divide K (N) exactly, so no tile
    reaches into the next group's matrix) or masked pointer stores. ``SUBTILE`` as in
    :func:`grouped_gemm_tma_kernel`. (The K loop's length differs per group, so
    Triton cannot flatten this persistent loop.)"""
    tiles_m = tl.cdiv(K, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = tiles_m * tiles_n
    for tile_id in range(tl.program_id(0), G * per_group, NUM_PROGRAMS):
        g = tile_id // per_group
        pid_m, pid_n = _tile_coords(tile_id % per_group, tiles_m, tiles_n, GROUP_M)
        row_start = _rows_in(offs_ptr, g, M_total)
        row_end = tl.maximum(_rows_in(offs_ptr, g + 1, M_total), row_start)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        full = (row_end - row_start) // BLOCK_K
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(0, full):
            r = row_start + ki * BLOCK_K
            a = a_desc.load([r, off_m])
            b = b_desc.load([r, off_n])
            if UPCAST:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a.T, b, acc, input_precision=PRECISION)
        r = row_start + full * BLOCK_K
        if r < row_end:
            keep = (r + tl.arange(0, BLOCK_K))[:, None] < row_end
            a_last = tl.where(keep, a_desc.load([r, off_m]), 0.0)
            b_last = tl.where(keep, b_desc.load([r, off_n]), 0.0)
            if UPCAST:
                a_last = a_last.to(tl.float32)
                b_last = b_last.to(tl.float32)
            acc = tl.dot(a_last.T, b_last, acc, input_precision=PRECISION)
        if C_TMA:
            if TRANS_C:
                _store_tile_tma(c_desc, acc, g * N + off_n, off_m, ACCUMULATE, SUBTILE, True, BLOCK_M, BLOCK_N)
            else:
                _store_tile_tma(c_desc, acc, g * K + off_m, off_n, ACCUMULATE, SUBTILE, False, BLOCK_M, BLOCK_N)
        else:
            offs_km = off_m + tl.arange(0, BLOCK_M)
            offs_n = off_n + tl.arange(0, BLOCK_N)
            c_ptrs = (c_ptr + g.to(tl.int64) * stride_cg + offs_km[:, None].to(tl.int64) * stride_ck
                      + offs_n[None, :].to(tl.int64) * stride_cn)
            c_mask = (offs_km[:, None] < K) & (offs_n[None, :] < N)
            if ACCUMULATE:
                acc += tl.load(c_ptrs, mask=c_mask, other=0.0).to(tl.float32)
            tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)
