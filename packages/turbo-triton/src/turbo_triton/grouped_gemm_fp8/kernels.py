"""Triton grouped FP8 GEMM kernels: the forward/dgrad ``C[rows of g] = dequant(A_g) @ dequant(op(B[g]))``
and the variable-K wgrad ``C[g] (+)= dequant(A_g)^T @ dequant(B_g)``, fp32 accumulation.

The schedules are the bf16 grouped GEMM's (``turbo_triton.grouped_gemm.kernels``: persistent programs,
group offsets read on the device, no host sync, the rows past the last group zeroed by the forward;
its helpers are reused). What differs is where the scales enter, chosen by the constexpr
``BLOCKWISE``:

* TENSORWISE / ROWWISE (``BLOCKWISE=False``): the FP8 tiles go straight into ``tl.dot`` (FP8 x FP8 ->
  fp32); the sum is multiplied once in the epilogue by ``s_row[i] * s_col[j]``. A tensorwise scale
  is the same load with stride 0.
* BLOCKWISE: every K step lies inside one scale block (``BLOCK_K`` divides the block size ``BS``);
  its product goes into a fresh fp32 tile that is added as ``partial * s_row[i, kb] * s_col[kb, j]``.
  The variable-K kernels start each group's row chunks on a multiple of ``BLOCK_K`` (masking the
  rows before the group), so a chunk lies in one ``BS``-row block even when the group offsets are not
  multiples of ``BS`` (they are, from the grouped quantizer; then no chunk is masked at the start).

Scale vectors are addressed by strides, ``s[(idx // DIV) * stride + kb * stride_k]``: ``DIV`` is 1
for per-row / 1-D block scales and ``BS`` for ``bs x bs`` tiles, so every layout of the spec table
(``turbo_core.dispatch.specs.grouped_gemm_fp8``) is one code path, without copies.

``UPCAST`` converts both tiles to fp16 before the dot (exact: every E4M3/E5M2 value, FNUZ ones too,
is an fp16 value), for a Triton that cannot multiply mixed (HYBRID) FP8 types natively, and in the
interpreter, which decodes the bytes (its own FP8 conversion reads NaN/Inf codes as numbers); the dot then
runs at the fp16 rate (half the FP8 rate on Hopper), plus the conversions. ``IMPRECISE`` is Triton's
``max_num_imprecise_acc`` for the TENSORWISE/ROWWISE dot: ``None`` keeps Triton's default (on sm90
the wgmma FP8 accumulator is not promoted), ``BLOCK_K`` promotes it into fp32 once per K step (what
the BLOCKWISE scaled add does anyway).
"""

from __future__ import annotations

import triton
import triton.language as tl

from turbo_triton.gemm.kernels import _tile_coords
from turbo_triton.grouped_gemm.kernels import (
    _group_table,
    _locate,
    _rows_in,
    _store_rows,
    _store_tile_tma,
    _zero_tail,
)
from turbo_triton.quantization.numerics import exact_fp8

#: ``UPCAST`` values: the FP8 tiles into the dot as they are, converted to fp16, or decoded from
#: their bytes to fp16 (the interpreter, whose own FP8 conversion reads NaN/Inf codes as numbers).
NATIVE, FP16, DECODED = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)


@triton.jit
def _up(x, UPCAST: tl.constexpr):
    if UPCAST == DECODED:
        return exact_fp8(x).to(tl.float16)
    if UPCAST == FP16:
        return x.to(tl.float16)
    return x


@triton.jit
def _mma(a, b, acc, UPCAST: tl.constexpr, IMPRECISE: tl.constexpr):
    """``acc + a @ b`` in fp32."""
    return tl.dot(_up(a, UPCAST), _up(b, UPCAST), acc, max_num_imprecise_acc=IMPRECISE)


@triton.jit
def _product(a, b, UPCAST: tl.constexpr):
    """``a @ b`` in a fresh fp32 tile."""
    return tl.dot(_up(a, UPCAST), _up(b, UPCAST))


@triton.jit
def _scaled_step(acc, a, b, sa_ptrs, r_ok, sb_ptrs, c_ok, UPCAST: tl.constexpr):
    """BLOCKWISE: ``acc + (a @ b) * sa[:, None] * sb[None, :]``, the product in a fresh fp32 tile
    (``sa_ptrs``/``sb_ptrs`` already point at this K block's scales)."""
    part = _product(a, b, UPCAST)
    sa = tl.load(sa_ptrs, mask=r_ok, other=0.0)
    sb = tl.load(sb_ptrs, mask=c_ok, other=0.0)
    return acc + part * sa[:, None] * sb[None, :]


@triton.jit
def _epilogue_scales(acc, sa_ptrs, r_ok, sb_ptrs, c_ok, BLOCKWISE: tl.constexpr):
    """TENSORWISE/ROWWISE: ``acc * sa[:, None] * sb[None, :]``; BLOCKWISE scaled in the K loop."""
    if not BLOCKWISE:
        sa = tl.load(sa_ptrs, mask=r_ok, other=0.0)
        sb = tl.load(sb_ptrs, mask=c_ok, other=0.0)
        acc = acc * sa[:, None] * sb[None, :]
    return acc


# -- forward / dgrad ------------------------------------------------------------------------------


@triton.jit
def grouped_gemm_fp8_kernel(
    a_ptr, b_ptr, c_ptr, sa_ptr, sb_ptr, offs_ptr, G, M_total, N, K,
    stride_am, stride_ak, stride_bg, stride_bk, stride_bn, stride_cm, stride_cn,
    s_am, s_ak, s_bg, s_bk, s_bn,
    BLOCKWISE: tl.constexpr, BS: tl.constexpr, B_DIV: tl.constexpr, UPCAST: tl.constexpr,
    IMPRECISE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, BLOCK_G: tl.constexpr, NUM_PROGRAMS,
):
    """Portable kernel: masked pointer loads, any strides (op(B) by its strides). Scales: a's at
    ``sa[m * s_am + kb * s_ak]``, b's at ``sb[g * s_bg + kb * s_bk + (n // B_DIV) * s_bn]`` (``kb``
    the K block: BLOCKWISE only)."""
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
        m_ok = offs_m < M_total
        n_ok = offs_n < N
        a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = (b_ptr + grp.to(tl.int64) * stride_bg + offs_k[:, None] * stride_bk
                  + offs_n[None, :].to(tl.int64) * stride_bn)
        sa_ptrs = sa_ptr + offs_m.to(tl.int64) * s_am
        sb_ptrs = sb_ptr + grp.to(tl.int64) * s_bg + (offs_n // B_DIV).to(tl.int64) * s_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(0, k_tiles):
            k_left = K - ki * BLOCK_K
            a = tl.load(a_ptrs, mask=(offs_m[:, None] < row_end) & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & n_ok[None, :], other=0.0)
            if BLOCKWISE:
                kb = tl.cast((ki * BLOCK_K) // BS, tl.int64)
                acc = _scaled_step(acc, a, b, sa_ptrs + kb * s_ak, m_ok, sb_ptrs + kb * s_bk, n_ok, UPCAST)
            else:
                acc = _mma(a, b, acc, UPCAST, IMPRECISE)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        acc = _epilogue_scales(acc, sa_ptrs, m_ok, sb_ptrs, n_ok, BLOCKWISE)
        _store_rows(c_ptr, acc, off_m, row_end, pid_n * BLOCK_N, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)


@triton.jit
def grouped_gemm_fp8_tma_kernel(
    a_desc, b_desc, c_desc, c_ptr, sa_ptr, sb_ptr, offs_ptr, G, M_total, N, K, stride_cm,
    s_am, s_ak, s_bg, s_bk, s_bn,
    TRANS_B: tl.constexpr, C_TMA: tl.constexpr,
    BLOCKWISE: tl.constexpr, BS: tl.constexpr, B_DIV: tl.constexpr, UPCAST: tl.constexpr,
    IMPRECISE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, BLOCK_G: tl.constexpr, NUM_PROGRAMS,
    FLATTEN: tl.constexpr = False, SUBTILE: tl.constexpr = False, DEFER_SCALE: tl.constexpr = False,
):
    """Hopper kernel: the FP8 operands stream through TMA descriptors as in the bf16
    ``grouped_gemm_tma_kernel`` (a ``[M_total, K]``; b ``[G*N, K]`` with ``TRANS_B``, else ``[G*K, N]``
    with a K step that divides K; the output through ``c_desc`` for tiles inside their group and
    masked stores for a group's last row tile); scales as in :func:`grouped_gemm_fp8_kernel`.
    ``DEFER_SCALE`` (BLOCKWISE): each K step's product is scaled and added one step later, so the
    tensor cores need not wait for the scaled add (one more fp32 tile live), as the dense FP8
    kernel's option of the same name."""
    _zero_tail(c_ptr, offs_ptr, G, M_total, N, stride_cm, 1, NUM_PROGRAMS, BLOCK_M, BLOCK_N)
    n_tiles_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    starts, ends, tiles, cum, total = _group_table(offs_ptr, G, M_total, n_tiles_n, BLOCK_M, BLOCK_G)
    for tile_id in tl.range(tl.program_id(0), total, NUM_PROGRAMS, flatten=FLATTEN):
        grp, off_m, row_end, pid_n = _locate(tile_id, starts, ends, tiles, cum, n_tiles_n,
                                              BLOCK_M, BLOCK_G, GROUP_M)
        off_n = pid_n * BLOCK_N
        offs_m = off_m + tl.arange(0, BLOCK_M)
        offs_n = off_n + tl.arange(0, BLOCK_N)
        m_ok = offs_m < M_total
        n_ok = offs_n < N
        sa_ptrs = sa_ptr + offs_m.to(tl.int64) * s_am
        sb_ptrs = sb_ptr + grp.to(tl.int64) * s_bg + (offs_n // B_DIV).to(tl.int64) * s_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if DEFER_SCALE:
            prev = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            sa_prev = tl.zeros((BLOCK_M,), dtype=tl.float32)
            sb_prev = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for ki in range(0, k_tiles):
            off_k = ki * BLOCK_K
            a = a_desc.load([off_m, off_k])
            if TRANS_B:
                b = b_desc.load([grp * N + off_n, off_k]).T
            else:
                b = b_desc.load([grp * K + off_k, off_n])
            if BLOCKWISE:
                kb = tl.cast(off_k // BS, tl.int64)
                if DEFER_SCALE:
                    part = _product(a, b, UPCAST)
                    acc += prev * sa_prev[:, None] * sb_prev[None, :]
                    prev = part
                    sa_prev = tl.load(sa_ptrs + kb * s_ak, mask=m_ok, other=0.0)
                    sb_prev = tl.load(sb_ptrs + kb * s_bk, mask=n_ok, other=0.0)
                else:
                    acc = _scaled_step(acc, a, b, sa_ptrs + kb * s_ak, m_ok, sb_ptrs + kb * s_bk, n_ok, UPCAST)
            else:
                acc = _mma(a, b, acc, UPCAST, IMPRECISE)
        if DEFER_SCALE:
            acc += prev * sa_prev[:, None] * sb_prev[None, :]
        acc = _epilogue_scales(acc, sa_ptrs, m_ok, sb_ptrs, n_ok, BLOCKWISE)
        if C_TMA:
            if off_m + BLOCK_M <= row_end:
                _store_tile_tma(c_desc, acc, off_m, off_n, False, SUBTILE, False, BLOCK_M, BLOCK_N)
            else:
                _store_rows(c_ptr, acc, off_m, row_end, off_n, N, stride_cm, 1, BLOCK_M, BLOCK_N)
        else:
            _store_rows(c_ptr, acc, off_m, row_end, off_n, N, stride_cm, 1, BLOCK_M, BLOCK_N)


# -- variable K (wgrad) ---------------------------------------------------------------------------


@triton.jit
def _chunk_base(row_start, BLOCKWISE: tl.constexpr, BLOCK_K: tl.constexpr, KMAJOR: tl.constexpr = False):
    """The first row of a group's first chunk: the group's first row, rounded down to a multiple of
    ``BLOCK_K`` for BLOCKWISE (a chunk never straddles two scale blocks) and for KMAJOR operands (the
    rows are the descriptors' inner dim, where a TMA load must start 16-byte aligned)."""
    if BLOCKWISE or KMAJOR:
        return row_start - row_start % BLOCK_K
    else:
        return row_start


@triton.jit
def _store_c(c_ptr, acc, g, offs_km, offs_n, K, N, stride_cg, stride_ck, stride_cn, ACCUMULATE: tl.constexpr):
    c_ptrs = (c_ptr + g.to(tl.int64) * stride_cg + offs_km[:, None].to(tl.int64) * stride_ck
              + offs_n[None, :].to(tl.int64) * stride_cn)
    c_mask = (offs_km[:, None] < K) & (offs_n[None, :] < N)
    if ACCUMULATE:
        acc += tl.load(c_ptrs, mask=c_mask, other=0.0).to(tl.float32)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


@triton.jit
def grouped_gemm_fp8_variable_k_kernel(
    a_ptr, b_ptr, c_ptr, sa_ptr, sb_ptr, offs_ptr, G, M_total, K, N,
    stride_am, stride_ak, stride_bm, stride_bn, stride_cg, stride_ck, stride_cn,
    s_ar, s_ak, s_br, s_bn,
    ACCUMULATE: tl.constexpr, BLOCKWISE: tl.constexpr, BS: tl.constexpr, UPCAST: tl.constexpr,
    IMPRECISE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, NUM_PROGRAMS,
):
    """Portable kernel: ``C[g][K, N] (+)= A[rows of g, K]^T @ B[rows of g, N]`` with masked pointer
    loads; the output layout (trans_c) by its strides. BLOCK_M tiles K, BLOCK_N tiles N, BLOCK_K the
    rows. Scales: a's at ``sa[rb * s_ar + k * s_ak]``, b's at ``sb[rb * s_br + n * s_bn]`` (``rb`` the
    row block: BLOCKWISE only)."""
    tiles_m = tl.cdiv(K, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = tiles_m * tiles_n
    for tile_id in range(tl.program_id(0), G * per_group, NUM_PROGRAMS):
        g = tile_id // per_group
        pid_m, pid_n = _tile_coords(tile_id % per_group, tiles_m, tiles_n, GROUP_M)
        row_start = _rows_in(offs_ptr, g, M_total)
        row_end = tl.maximum(_rows_in(offs_ptr, g + 1, M_total), row_start)
        base = _chunk_base(row_start, BLOCKWISE, BLOCK_K)
        offs_km = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_r = tl.arange(0, BLOCK_K)
        km_ok = offs_km < K
        n_ok = offs_n < N
        a_ptrs = a_ptr + (base + offs_r[:, None]).to(tl.int64) * stride_am + offs_km[None, :] * stride_ak
        b_ptrs = b_ptr + (base + offs_r[:, None]).to(tl.int64) * stride_bm + offs_n[None, :] * stride_bn
        sa_ptrs = sa_ptr + offs_km.to(tl.int64) * s_ak
        sb_ptrs = sb_ptr + offs_n.to(tl.int64) * s_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(0, tl.cdiv(row_end - base, BLOCK_K)):
            r0 = base + ki * BLOCK_K
            rows = r0 + offs_r[:, None]
            keep = (rows >= row_start) & (rows < row_end)
            a = tl.load(a_ptrs, mask=keep & km_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=keep & n_ok[None, :], other=0.0)
            if BLOCKWISE:
                rb = tl.cast(r0 // BS, tl.int64)
                acc = _scaled_step(acc, tl.trans(a), b, sa_ptrs + rb * s_ar, km_ok, sb_ptrs + rb * s_br, n_ok,
                                   UPCAST)
            else:
                acc = _mma(tl.trans(a), b, acc, UPCAST, IMPRECISE)
            a_ptrs += BLOCK_K * stride_am
            b_ptrs += BLOCK_K * stride_bm
        acc = _epilogue_scales(acc, sa_ptrs, km_ok, sb_ptrs, n_ok, BLOCKWISE)
        _store_c(c_ptr, acc, g, offs_km, offs_n, K, N, stride_cg, stride_ck, stride_cn, ACCUMULATE)


@triton.jit
def _vk_tiles(a_desc, b_desc, r0, off_m, off_n, KMAJOR: tl.constexpr):
    """The chunk's operand tiles as the dot takes them: ``[BLOCK_M, BLOCK_K]`` and ``[BLOCK_K, BLOCK_N]``.
    KMAJOR: the descriptors are over the transposed copies ``a^T [K, M_total]`` / ``b^T [N, M_total]``."""
    if KMAJOR:
        return a_desc.load([off_m, r0]), b_desc.load([off_n, r0]).T
    else:
        return a_desc.load([r0, off_m]).T, b_desc.load([r0, off_n])


@triton.jit
def _vk_tma_step(acc, a_desc, b_desc, r0, off_m, off_n, lo, hi, sa_ptrs, km_ok, sb_ptrs, n_ok, s_ar, s_br,
                 MASKED: tl.constexpr, BLOCKWISE: tl.constexpr, BS: tl.constexpr, UPCAST: tl.constexpr,
                 IMPRECISE: tl.constexpr, BLOCK_K: tl.constexpr, KMAJOR: tl.constexpr):
    """One chunk of rows ``[r0, r0 + BLOCK_K)``; ``MASKED``: only the rows in ``[lo, hi)`` count."""
    a, b = _vk_tiles(a_desc, b_desc, r0, off_m, off_n, KMAJOR)
    if MASKED:
        rows = r0 + tl.arange(0, BLOCK_K)
        keep = (rows >= lo) & (rows < hi)
        a = tl.where(keep[None, :], a, 0.0)
        b = tl.where(keep[:, None], b, 0.0)
    if BLOCKWISE:
        rb = tl.cast(r0 // BS, tl.int64)
        acc = _scaled_step(acc, a, b, sa_ptrs + rb * s_ar, km_ok, sb_ptrs + rb * s_br, n_ok, UPCAST)
    else:
        acc = _mma(a, b, acc, UPCAST, IMPRECISE)
    return acc


@triton.jit
def grouped_gemm_fp8_variable_k_tma_kernel(
    a_desc, b_desc, c_desc, c_ptr, sa_ptr, sb_ptr, offs_ptr, G, M_total, K, N, stride_cg, stride_ck, stride_cn,
    s_ar, s_ak, s_br, s_bn,
    TRANS_C: tl.constexpr, C_TMA: tl.constexpr, ACCUMULATE: tl.constexpr,
    BLOCKWISE: tl.constexpr, BS: tl.constexpr, UPCAST: tl.constexpr, IMPRECISE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, NUM_PROGRAMS, SUBTILE: tl.constexpr = False, DEFER_SCALE: tl.constexpr = False,
    KMAJOR: tl.constexpr = False,
):
    """Hopper kernel: a ``[M_total, K]`` (block ``[BLOCK_K, BLOCK_M]``) and b ``[M_total, N]`` (block
    ``[BLOCK_K, BLOCK_N]``) through TMA descriptors, or with ``KMAJOR`` their transposed copies
    ``a^T [K, M_total]`` (block ``[BLOCK_M, BLOCK_K]``) and ``b^T [N, M_total]`` (block
    ``[BLOCK_N, BLOCK_K]``), as the bf16 ``grouped_gemm_variable_k_tma_kernel``:
    a group's full row chunks stream unmasked; a chunk that reaches outside the group (the last one,
    and for BLOCKWISE with an unaligned group start the first) is masked to it. The output through
    ``c_desc`` (``C_TMA``) or masked stores. Without KMAJOR both operands are M-major (the contraction
    runs along their rows), which Hopper's FP8 MMA cannot read directly (a much slower path); the
    K-major copies feed it as the forward's operands do.
    ``DEFER_SCALE`` (BLOCKWISE) as in :func:`grouped_gemm_fp8_tma_kernel`, over the unmasked chunks."""
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
        offs_km = off_m + tl.arange(0, BLOCK_M)
        offs_n = off_n + tl.arange(0, BLOCK_N)
        km_ok = offs_km < K
        n_ok = offs_n < N
        sa_ptrs = sa_ptr + offs_km.to(tl.int64) * s_ak
        sb_ptrs = sb_ptr + offs_n.to(tl.int64) * s_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        lo = row_start
        base = _chunk_base(row_start, BLOCKWISE, BLOCK_K, KMAJOR)
        if base < row_start:  # the group starts inside a chunk: a masked first chunk
            acc = _vk_tma_step(acc, a_desc, b_desc, base, off_m, off_n, row_start, row_end, sa_ptrs, km_ok,
                               sb_ptrs, n_ok, s_ar, s_br, True, BLOCKWISE, BS, UPCAST, IMPRECISE, BLOCK_K, KMAJOR)
            lo = tl.minimum(base + BLOCK_K, row_end)
        full = (row_end - lo) // BLOCK_K
        if DEFER_SCALE:
            prev = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            sa_prev = tl.zeros((BLOCK_M,), dtype=tl.float32)
            sb_prev = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for ki in range(0, full):
                r0 = lo + ki * BLOCK_K
                a_t, b_t = _vk_tiles(a_desc, b_desc, r0, off_m, off_n, KMAJOR)
                part = _product(a_t, b_t, UPCAST)
                acc += prev * sa_prev[:, None] * sb_prev[None, :]
                rb = tl.cast(r0 // BS, tl.int64)
                prev = part
                sa_prev = tl.load(sa_ptrs + rb * s_ar, mask=km_ok, other=0.0)
                sb_prev = tl.load(sb_ptrs + rb * s_br, mask=n_ok, other=0.0)
            acc += prev * sa_prev[:, None] * sb_prev[None, :]
        else:
            for ki in range(0, full):
                acc = _vk_tma_step(acc, a_desc, b_desc, lo + ki * BLOCK_K, off_m, off_n, lo, row_end, sa_ptrs,
                                   km_ok, sb_ptrs, n_ok, s_ar, s_br, False, BLOCKWISE, BS, UPCAST, IMPRECISE, BLOCK_K,
                                   KMAJOR)
        r0 = lo + full * BLOCK_K
        if r0 < row_end:
            acc = _vk_tma_step(acc, a_desc, b_desc, r0, off_m, off_n, lo, row_end, sa_ptrs, km_ok,
                               sb_ptrs, n_ok, s_ar, s_br, True, BLOCKWISE, BS, UPCAST, IMPRECISE, BLOCK_K, KMAJOR)
        acc = _epilogue_scales(acc, sa_ptrs, km_ok, sb_ptrs, n_ok, BLOCKWISE)
        if C_TMA:
            if TRANS_C:
                _store_tile_tma(c_desc, acc, g * N + off_n, off_m, ACCUMULATE, SUBTILE, True, BLOCK_M, BLOCK_N)
            else:
                _store_tile_tma(c_desc, acc, g * K + off_m, off_n, ACCUMULATE, SUBTILE, False, BLOCK_M, BLOCK_N)
        else:
            _store_c(c_ptr, acc, g, offs_km, offs_n, K, N, stride_cg, stride_ck, stride_cn, ACCUMULATE)
