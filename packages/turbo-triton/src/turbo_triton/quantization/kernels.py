"""Triton kernels of FP8 quantization and dequantization.

Every kernel sees its input as a strided 3-D view ``[B, M, N]`` (the launchers map each
granularity and axis onto it without copying when the strides allow) and walks it in ``BM x BN``
tiles, one program per tile on a 1-D grid (``numerics.tile_of``: no grid-dimension limits).
Outputs are contiguous (``quant_groups_kernel`` and ``cast_kernel`` may store ``q`` transposed: a
transposed view of ``x`` quantized along its last dim, see ``quantize._transposed_view``). Scales are shared by ``GM x GN`` groups of elements (powers of two that
divide the tile), so a tile holds whole groups and is read from memory once:

* ``quant_groups_kernel``: FP32 scales of groups inside a tile (BLOCKWISE 1-D ``1 x bs`` or
  ``bs x 1``, 2-D ``bs x bs``, and ROWWISE when a whole row/column fits one tile).
* ``amax_kernel`` + ``cast_kernel``: groups longer than a tile (TENSORWISE; ROWWISE along a long
  dim): the amax goes to an int32 buffer by ``atomic_max`` on the bits of ``|x|`` (exact and
  deterministic), then the cast reads it. Two reads of ``x``, no host sync. TENSORWISE (one
  group) has each amax program store its own max instead, and every cast program reduce those
  partials: no zero-filled buffer, no atomics.
* ``quant_mx_kernel``: E8M0 scales of 1x32 blocks along N (row-wise) or 32x1 blocks along M
  (col-wise, written transposed), or 32x32 tiles; the grid covers the zero padding to 128.
* ``blockwise_with_trans_kernel`` / ``mx_with_trans_kernel``: both directions from one read of
  each tile (row copy and column copy with their own scales).
* ``rowwise_with_trans_kernel``: ROWWISE both ways in two reads: whole rows quantized while their
  column amax is gathered (per-program partials, ``partial_scale_kernel``; or atomics and
  ``scale_kernel``), then ``cast_kernel`` for the column copy.
* ``dequant_kernel`` / ``mx_dequant_kernel``: ``q * scale_inv``, each scale a tile needs loaded
  once and broadcast (gathered per element only for block sizes that are no power of two),
  output strides given (the MX col-wise data comes back transposed).

Element arithmetic: see ``turbo_triton.quantization.numerics``. Offsets are int64.
"""

from __future__ import annotations

import triton
import triton.language as tl

from turbo_triton.quantization.numerics import (
    e8m0_to_fp32,
    encode_fp8,
    expand,
    fp32_scale,
    from_fp8,
    group_amax,
    group_max,
    load_f32,
    mx_scale,
    nan_amax,
    nan_max,
    saturate,
    tile_of,
    to_fp8,
    to_out,
)


@triton.jit
def _fp32_groups(x, rows, cols, mask, tm, tn, M, N, q_ptr, q_offs, s_ptr, ss_m, ss_n, eps,
                 BM: tl.constexpr, BN: tl.constexpr, GM: tl.constexpr, GN: tl.constexpr,
                 FMAX: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr, FNUZ: tl.constexpr,
                 SOFT: tl.constexpr, HW_SAT: tl.constexpr = False):
    """Quantize tile ``x`` with one FP32 scale per ``GM x GN`` group; store q and scale_inv."""
    scale, s_inv = fp32_scale(group_amax(x, BM, BN, GM, GN), eps, FMAX)
    gm = tm.to(tl.int64) * (BM // GM) + tl.arange(0, BM // GM)
    gn = tn.to(tl.int64) * (BN // GN) + tl.arange(0, BN // GN)
    s_mask = (gm < tl.cdiv(M, GM))[:, None] & (gn < tl.cdiv(N, GN))[None, :]
    tl.store(s_ptr + gm[:, None] * ss_m + gn[None, :] * ss_n, s_inv, mask=s_mask)
    q = x * expand(scale, BM, BN, GM, GN)
    tl.store(q_ptr + q_offs, to_fp8(q, q_ptr, FMAX, MB, BIAS, FNUZ, SOFT, HW_SAT), mask=mask)


@triton.jit
def quant_groups_kernel(x_ptr, q_ptr, s_ptr, M, N, sx_b, sx_m, sx_n, ss_b, ss_m, ss_n, eps, sq_m, sq_n,
                        BM: tl.constexpr, BN: tl.constexpr, GM: tl.constexpr, GN: tl.constexpr,
                        FMAX: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr, FNUZ: tl.constexpr,
                        SOFT: tl.constexpr, X_BITS: tl.constexpr, HW_SAT: tl.constexpr = False):
    """``q [B, M, N]`` (element ``(b, i, j)`` at ``b*M*N + i*sq_m + j*sq_n``: ``(N, 1)`` row-major,
    ``(1, M)`` transposed) and ``scale_inv`` (group ``(b, i, j)`` at ``b*ss_b + i*ss_m + j*ss_n``)."""
    b, tm, tn, rows, cols = tile_of(tl.program_id(0), M, N, BM, BN)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    x = load_f32(x_ptr + b * sx_b + rows[:, None] * sx_m + cols[None, :] * sx_n, mask, X_BITS)
    q_offs = b * M * N + rows[:, None] * sq_m + cols[None, :] * sq_n
    _fp32_groups(x, rows, cols, mask, tm, tn, M, N, q_ptr, q_offs, s_ptr + b * ss_b, ss_m, ss_n,
                 eps, BM, BN, GM, GN, FMAX, MB, BIAS, FNUZ, SOFT, HW_SAT)


@triton.jit
def rowwise_with_trans_kernel(x_ptr, q_ptr, s_ptr, a_ptr, M, N, sx_b, sx_m, sx_n, ss_b, ss_m, sa_b, sa_n, eps,
                              BM: tl.constexpr, BN: tl.constexpr, FMAX: tl.constexpr, MB: tl.constexpr,
                              BIAS: tl.constexpr, FNUZ: tl.constexpr, SOFT: tl.constexpr, X_BITS: tl.constexpr,
                              HW_SAT: tl.constexpr = False, ITERS: tl.constexpr = 1, STAGES: tl.constexpr = 1,
                              PARTIAL: tl.constexpr = False):
    """ROWWISE ``quantize_fp8_with_trans``'s first pass. A program walks ``ITERS`` tiles of ``BM`` whole
    rows (``BN >= N``) down M, quantizing each row with one scale (as ``quant_groups_kernel`` with
    ``GN = BN``: ``q`` ``[B, M, N]`` row-major, ``scale_inv`` at ``b*ss_b + i*ss_m``) and keeping the
    running column amax, which it merges once into the int32 buffer ``a`` (bits of ``|x|``,
    ``atomic_max``, as ``amax_kernel``) for the column copy's ``scale_kernel`` + ``cast_kernel``: ``x`` is
    read twice for both copies instead of three times. ``STAGES`` > 1 software-pipelines the row loads
    across the walk (``tl.range(num_stages=STAGES)``). PARTIAL: no atomics; each program stores its
    column amax bits as row ``(b, program)`` of a ``[B, P, N]`` int32 buffer at ``a_ptr``, which
    ``partial_scale_kernel`` reduces (every program hits the same N addresses, so the atomics
    serialize; at model shapes they cost about as much as the row pass itself)."""
    tiles_m = tl.cdiv(M, BM * ITERS)
    pid = tl.program_id(0)
    tm0 = pid % tiles_m
    b = (pid // tiles_m).to(tl.int64)
    cols = tl.arange(0, BN).to(tl.int64)
    col_amax = tl.zeros((BN,), dtype=tl.float32)
    for i in tl.range(ITERS, num_stages=STAGES):
        tm = tm0 * ITERS + i
        rows = tm.to(tl.int64) * BM + tl.arange(0, BM)
        mask = (rows < M)[:, None] & (cols < N)[None, :]
        x = load_f32(x_ptr + b * sx_b + rows[:, None] * sx_m + cols[None, :] * sx_n, mask, X_BITS)
        q_offs = b * M * N + rows[:, None] * N + cols[None, :]
        _fp32_groups(x, rows, cols, mask, tm, tm * 0, M, N, q_ptr, q_offs, s_ptr + b * ss_b, ss_m, ss_m, eps,
                     BM, BN, 1, BN, FMAX, MB, BIAS, FNUZ, SOFT, HW_SAT)
        col_amax = nan_max(col_amax, nan_amax(tl.abs(x), 0))  # masked elements load as 0
    if PARTIAL:
        tl.store(a_ptr + (b * tiles_m + tm0) * N + cols, col_amax.to(tl.int32, bitcast=True), mask=cols < N)
    else:
        tl.atomic_max(a_ptr + b * sa_b + cols * sa_n, col_amax.to(tl.int32, bitcast=True), mask=cols < N)


@triton.jit
def partial_scale_kernel(p_ptr, scale_ptr, s_ptr, P, N, eps, FMAX: tl.constexpr, BP: tl.constexpr,
                         BN: tl.constexpr):
    """``scale`` and ``scale_inv`` (fp32 ``[B, N]``) of the column amax held as per-program partial
    bits ``p [B, P, N]`` (int32 bits of ``|x|`` maxima, ``rowwise_with_trans_kernel`` PARTIAL): the max
    over P (as ints, so a NaN stays a NaN, as ``atomic_max`` on the bits), then ``fp32_scale``."""
    tiles_n = tl.cdiv(N, BN)
    pid = tl.program_id(0)
    b = (pid // tiles_n).to(tl.int64)
    cols = (pid % tiles_n).to(tl.int64) * BN + tl.arange(0, BN)
    base = p_ptr + b * P * N + cols[None, :]
    acc = tl.zeros((BP, BN), dtype=tl.int32)
    for p0 in range(0, P, BP):
        rows = p0 + tl.arange(0, BP)
        mask = (rows < P)[:, None] & (cols < N)[None, :]
        acc = tl.maximum(acc, tl.load(base + rows[:, None].to(tl.int64) * N, mask=mask, other=0))
    scale, s_inv = fp32_scale(tl.max(acc, 0), eps, FMAX)
    tl.store(scale_ptr + b * N + cols, scale, mask=cols < N)
    tl.store(s_ptr + b * N + cols, s_inv, mask=cols < N)


@triton.jit
def amax_kernel(x_ptr, a_ptr, M, N, sx_b, sx_m, sx_n, sa_b, sa_m, sa_n,
                BM: tl.constexpr, BN: tl.constexpr, RED_M: tl.constexpr, RED_N: tl.constexpr, X_BITS: tl.constexpr,
                ITERS: tl.constexpr = 1, PARTIAL: tl.constexpr = False):
    """``atomic_max`` of the bits of ``|x|`` into the int32 buffer ``a`` (zero-initialised):
    one entry per ``b`` when reducing over both M and N, per ``(b, m)`` (RED_N), or per
    ``(b, n)`` (RED_M). A program walks ``ITERS`` tiles of ``BM x BN`` down M, keeping an
    element-wise running max, and reduces it once: one atomic per ``BM * ITERS`` rows instead
    of one per tile (RED_M and both; RED_N takes ITERS 1). PARTIAL (both, one batch): each program
    stores its own max at ``a[program]`` instead (``a`` uninitialised: no zero fill before the
    launch), and ``cast_kernel`` takes the max of those partials."""
    tiles_n = tl.cdiv(N, BN)
    tiles_m = tl.cdiv(M, BM * ITERS)
    pid = tl.program_id(0)
    tn = pid % tiles_n
    t = pid // tiles_n
    tm = t % tiles_m
    b = (t // tiles_m).to(tl.int64)
    cols = tn.to(tl.int64) * BN + tl.arange(0, BN)
    row0 = tm.to(tl.int64) * (BM * ITERS)
    base = x_ptr + b * sx_b + cols[None, :] * sx_n
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for i in range(ITERS):
        rows = row0 + i * BM + tl.arange(0, BM)
        mask = (rows < M)[:, None] & (cols < N)[None, :]
        acc = nan_max(acc, tl.abs(load_f32(base + rows[:, None] * sx_m, mask, X_BITS)))
    if RED_M and RED_N and PARTIAL:
        tl.store(a_ptr + pid, nan_amax(nan_amax(acc, 1), 0).to(tl.int32, bitcast=True))
    elif RED_M and RED_N:
        amax = nan_amax(nan_amax(acc, 1), 0)
        tl.atomic_max(a_ptr + b * sa_b, amax.to(tl.int32, bitcast=True))
    elif RED_N:
        rows = row0 + tl.arange(0, BM)
        amax = nan_amax(acc, 1)
        tl.atomic_max(a_ptr + b * sa_b + rows * sa_m, amax.to(tl.int32, bitcast=True), mask=rows < M)
    else:
        amax = nan_amax(acc, 0)
        tl.atomic_max(a_ptr + b * sa_b + cols * sa_n, amax.to(tl.int32, bitcast=True), mask=cols < N)


@triton.jit
def scale_kernel(a_ptr, scale_ptr, s_ptr, n, eps, FMAX: tl.constexpr, BLOCK: tl.constexpr):
    """``scale`` and ``scale_inv`` (fp32, contiguous like ``a``) of the amax bits in ``a``: the
    divisions done once a group, before a cast that would otherwise repeat them in every tile."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    scale, s_inv = fp32_scale(tl.load(a_ptr + offs, mask=mask, other=0), eps, FMAX)
    tl.store(scale_ptr + offs, scale, mask=mask)
    tl.store(s_ptr + offs, s_inv, mask=mask)


@triton.jit
def cast_kernel(x_ptr, a_ptr, q_ptr, s_ptr, M, N, sx_b, sx_m, sx_n, sa_b, sa_m, sa_n, eps, sq_m, sq_n, P,
                BM: tl.constexpr, BN: tl.constexpr, RED_M: tl.constexpr, RED_N: tl.constexpr,
                FMAX: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr, FNUZ: tl.constexpr,
                SOFT: tl.constexpr, X_BITS: tl.constexpr, HW_SAT: tl.constexpr = False,
                SCALED: tl.constexpr = False, BP: tl.constexpr = 0):
    """Quantize with the amax that ``amax_kernel`` left in ``a``; ``scale_inv`` has ``a``'s
    layout and is written by the first tile along the reduced dims; q element ``(b, i, j)`` at
    ``b*M*N + i*sq_m + j*sq_n`` (as ``quant_groups_kernel``). SCALED (reductions over M):
    ``a`` holds the fp32 scales that ``scale_kernel`` wrote (``scale_inv`` too): nothing to divide.
    BP > 0 (both reduced, one batch): ``a`` holds ``P <= BP`` per-program amax bits (``amax_kernel``
    PARTIAL), reduced here as integers (a NaN's bits sort above every number's, as with
    ``atomic_max``); ``P`` is unused otherwise."""
    b, tm, tn, rows, cols = tile_of(tl.program_id(0), M, N, BM, BN)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    x = load_f32(x_ptr + b * sx_b + rows[:, None] * sx_m + cols[None, :] * sx_n, mask, X_BITS)
    if SCALED and RED_N:
        q = x * tl.load(a_ptr + b * sa_b)
    elif SCALED:
        q = x * tl.load(a_ptr + b * sa_b + cols * sa_n, mask=cols < N, other=0.0)[None, :]
    elif RED_M and RED_N and BP > 0:
        offs = tl.arange(0, BP)
        amax = tl.max(tl.load(a_ptr + offs, mask=offs < P, other=0), axis=0)
        scale, s_inv = fp32_scale(amax, eps, FMAX)
        q = x * scale
        if (tm == 0) & (tn == 0):
            tl.store(s_ptr, s_inv)
    elif RED_M and RED_N:
        scale, s_inv = fp32_scale(tl.load(a_ptr + b * sa_b), eps, FMAX)
        q = x * scale
        if (tm == 0) & (tn == 0):
            tl.store(s_ptr + b * sa_b, s_inv)
    elif RED_N:
        offs = b * sa_b + rows * sa_m
        scale, s_inv = fp32_scale(tl.load(a_ptr + offs, mask=rows < M, other=0), eps, FMAX)
        q = x * scale[:, None]
        if tn == 0:
            tl.store(s_ptr + offs, s_inv, mask=rows < M)
    else:
        offs = b * sa_b + cols * sa_n
        scale, s_inv = fp32_scale(tl.load(a_ptr + offs, mask=cols < N, other=0), eps, FMAX)
        q = x * scale[None, :]
        if tm == 0:
            tl.store(s_ptr + offs, s_inv, mask=cols < N)
    tl.store(q_ptr + b * M * N + rows[:, None] * sq_m + cols[None, :] * sq_n,
             to_fp8(q, q_ptr, FMAX, MB, BIAS, FNUZ, SOFT, HW_SAT), mask=mask)


@triton.jit
def _mx_part(x, bits, b, tm, tn, rows, cols, lim_m, lim_n, q_ptr, sq_b, sq_r, s_ptr, ss_b, ss_r,
             BM: tl.constexpr, BN: tl.constexpr, GM: tl.constexpr, GN: tl.constexpr, ROW: tl.constexpr,
             FMAX: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr, FNUZ: tl.constexpr, SOFT: tl.constexpr,
             EMAX: tl.constexpr, HW_SAT: tl.constexpr = False):
    """One MX direction of tile ``x`` (``[BM, BN]`` of ``[B, M, N]``). ROW: data ``[B, M, N_pad]``
    at ``(b, row, col)``, scales ``[B, M, N_pad/32]``; else data ``[B, N, M_pad]`` at
    ``(b, col, row)``, scales ``[B, N, M_pad/32]``, each stored from the transposed tile
    (``[BN, BM]``: consecutive rows of x are consecutive bytes of the output). Stores where
    ``rows < lim_m`` and ``cols < lim_n``. ``bits``: ``abs_bits(x)``, or None to take the group
    amax from ``x`` (``group_amax``)."""
    if bits is None:
        amax = group_amax(x, BM, BN, GM, GN)
    else:
        amax = group_max(bits, BM, BN, GM, GN)
    mult, byte = mx_scale(amax, EMAX)
    v = x * expand(mult, BM, BN, GM, GN)
    if ROW:
        q = to_fp8(v, q_ptr, FMAX, MB, BIAS, FNUZ, SOFT, HW_SAT)
        mask = (rows < lim_m)[:, None] & (cols < lim_n)[None, :]
        tl.store(q_ptr + b * sq_b + rows[:, None] * sq_r + cols[None, :], q, mask=mask)
        per_row = expand(byte, BM, BN // 32, GM, 1)  # [BM, BN/32]: each row's byte of each block
        blk = tn.to(tl.int64) * (BN // 32) + tl.arange(0, BN // 32)
        s_mask = (rows < lim_m)[:, None] & (blk < tl.cdiv(lim_n, 32))[None, :]
        tl.store(s_ptr + b * ss_b + rows[:, None] * ss_r + blk[None, :], per_row.to(tl.uint8), mask=s_mask)
    else:
        # The transposed tile's bytes are encoded with integer arithmetic (``encode_fp8``, the same
        # rounding as the hardware conversion), not by ``cvt``: on sm90 the ptxas that Triton bundles
        # miscompiles a hardware-converted FP8 tile stored transposed, and now and then writes bytes
        # that are not the converted values (the ``gpu`` quantization tests repeat such calls).
        q = encode_fp8(saturate(v, FMAX), MB, BIAS, FNUZ).to(tl.uint8)
        mask_t = (cols < lim_n)[:, None] & (rows < lim_m)[None, :]
        tl.store(q_ptr.to(tl.pointer_type(tl.uint8)) + b * sq_b + cols[:, None] * sq_r + rows[None, :], tl.trans(q),
                 mask=mask_t)
        per_col = tl.trans(expand(byte, BM // 32, BN, 1, GN))  # [BN, BM/32]: each column's byte of each block
        blk = tm.to(tl.int64) * (BM // 32) + tl.arange(0, BM // 32)
        s_mask = (cols < lim_n)[:, None] & (blk < tl.cdiv(lim_m, 32))[None, :]
        tl.store(s_ptr + b * ss_b + cols[:, None] * ss_r + blk[None, :], per_col.to(tl.uint8), mask=s_mask)


@triton.jit
def quant_mx_kernel(x_ptr, q_ptr, s_ptr, M, N, M_EXT, N_EXT, sx_b, sx_m, sx_n, sq_b, sq_r, ss_b, ss_r,
                    BM: tl.constexpr, BN: tl.constexpr, GM: tl.constexpr, GN: tl.constexpr, ROW: tl.constexpr,
                    FMAX: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr, FNUZ: tl.constexpr,
                    SOFT: tl.constexpr, EMAX: tl.constexpr, X_BITS: tl.constexpr, HW_SAT: tl.constexpr = False):
    """MX quantization of ``x [B, M, N]`` over the padded extent ``[M_EXT, N_EXT]`` (row-wise:
    ``[M, N_pad]``; col-wise: ``[M_pad, N]``); elements outside ``[M, N]`` read as zero."""
    b, tm, tn, rows, cols = tile_of(tl.program_id(0), M_EXT, N_EXT, BM, BN)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    x = load_f32(x_ptr + b * sx_b + rows[:, None] * sx_m + cols[None, :] * sx_n, mask, X_BITS)
    _mx_part(x, None, b, tm, tn, rows, cols, M_EXT, N_EXT, q_ptr, sq_b, sq_r, s_ptr, ss_b, ss_r,
             BM, BN, GM, GN, ROW, FMAX, MB, BIAS, FNUZ, SOFT, EMAX, HW_SAT)


@triton.jit
def mx_with_trans_kernel(x_ptr, qr_ptr, sr_ptr, qc_ptr, sc_ptr, M, N, M_PAD, N_PAD, sx_b, sx_m, sx_n,
                         BM: tl.constexpr, BN: tl.constexpr, R_GM: tl.constexpr, C_GN: tl.constexpr,
                         FMAX: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr, FNUZ: tl.constexpr,
                         SOFT: tl.constexpr, EMAX: tl.constexpr, X_BITS: tl.constexpr, HW_SAT: tl.constexpr = False):
    """Row-wise (``[B, M, N_pad]``) and col-wise (``[B, N, M_pad]``) MX copies of ``x [B, M, N]``
    from one read of each tile of the padded ``[M_pad, N_pad]`` extent."""
    b, tm, tn, rows, cols = tile_of(tl.program_id(0), M_PAD, N_PAD, BM, BN)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    x = load_f32(x_ptr + b * sx_b + rows[:, None] * sx_m + cols[None, :] * sx_n, mask, X_BITS)
    # batch offsets in int64 (b first): M * N_PAD alone is an int32 product, past 2^31 in one batch
    _mx_part(x, None, b, tm, tn, rows, cols, M, N_PAD, qr_ptr + b * M * N_PAD, 0, N_PAD,
             sr_ptr + b * M * (N_PAD // 32), 0, N_PAD // 32, BM, BN, R_GM, 32, True, FMAX, MB, BIAS, FNUZ, SOFT,
             EMAX, HW_SAT)
    _mx_part(x, None, b, tm, tn, rows, cols, M_PAD, N, qc_ptr + b * N * M_PAD, 0, M_PAD,
             sc_ptr + b * N * (M_PAD // 32), 0, M_PAD // 32, BM, BN, 32, C_GN, False, FMAX, MB, BIAS, FNUZ, SOFT,
             EMAX, HW_SAT)


@triton.jit
def blockwise_with_trans_kernel(x_ptr, qr_ptr, sr_ptr, qc_ptr, sc_ptr, M, N, sx_m, sx_n, eps,
                                BM: tl.constexpr, BN: tl.constexpr, BS: tl.constexpr,
                                FMAX: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr, FNUZ: tl.constexpr,
                                SOFT: tl.constexpr, X_BITS: tl.constexpr, HW_SAT: tl.constexpr = False):
    """``x [M, N]`` to ``q_row [M, N]`` / ``s_row [M, cdiv(N, BS)]`` (1 x BS blocks) and
    ``q_col [M, N]`` / ``s_col [cdiv(M, BS), N]`` (BS x 1 blocks) from one read of each tile."""
    b, tm, tn, rows, cols = tile_of(tl.program_id(0), M, N, BM, BN)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    x = load_f32(x_ptr + rows[:, None] * sx_m + cols[None, :] * sx_n, mask, X_BITS)
    q_offs = rows[:, None] * N + cols[None, :]
    _fp32_groups(x, rows, cols, mask, tm, tn, M, N, qr_ptr, q_offs, sr_ptr, tl.cdiv(N, BS), 1, eps,
                 BM, BN, 1, BS, FMAX, MB, BIAS, FNUZ, SOFT, HW_SAT)
    _fp32_groups(x, rows, cols, mask, tm, tn, M, N, qc_ptr, q_offs, sc_ptr, N, 1, eps,
                 BM, BN, BS, 1, FMAX, MB, BIAS, FNUZ, SOFT, HW_SAT)


@triton.jit
def _group_index(t, B: tl.constexpr, G: tl.constexpr):
    """Indices of the scale groups (size ``G``; 0: one group the whole dim) that tile ``t`` of
    ``B`` elements covers, one entry per ``min(G, B)`` elements: ``[B // G]`` when the tile holds
    whole groups, ``[1]`` when it lies inside one (powers of two: one divides the other)."""
    if G == 0:
        return tl.zeros((1,), dtype=tl.int64)
    elif G >= B:
        return (t.to(tl.int64) * B) // G + tl.arange(0, 1)
    else:
        return t.to(tl.int64) * (B // G) + tl.arange(0, B // G)


@triton.jit
def dequant_kernel(x_ptr, s_ptr, out_ptr, M, N, sx_b, sx_m, sx_n, ss_b, ss_m, ss_n,
                   BM: tl.constexpr, BN: tl.constexpr, GM: tl.constexpr, GN: tl.constexpr,
                   MB: tl.constexpr, BIAS: tl.constexpr, FNUZ: tl.constexpr, SOFT: tl.constexpr,
                   ROUND_BF16: tl.constexpr):
    """``out [B, M, N] = q * scale_inv[b, m // GM, n // GN]`` (fp32 product, rounded once). ``GM``/``GN``
    powers of two, 0 for a dim the scale does not vary along (TENSORWISE; ROWWISE's reduced dim).
    Each scale the tile needs is loaded once and broadcast, whether the tile holds whole groups or
    lies inside one (no per-element gather: the 2-D 128 and TENSORWISE dequantize ran at 68-69% of
    copy with it)."""
    b, tm, tn, rows, cols = tile_of(tl.program_id(0), M, N, BM, BN)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    q = tl.load(x_ptr + b * sx_b + rows[:, None] * sx_m + cols[None, :] * sx_n, mask=mask)
    if GM == 0 and GN == 0:
        s = tl.load(s_ptr + b * ss_b)
    elif (GM > 0 and BM % GM != 0 and GM % BM != 0) or (GN > 0 and BN % GN != 0 and GN % BN != 0):
        # groups and tile not nested (a block size that is no power of two): gathered per element
        r = rows // GM if GM > 0 else tl.zeros_like(rows)
        c = cols // GN if GN > 0 else tl.zeros_like(cols)
        s = tl.load(s_ptr + b * ss_b + r[:, None] * ss_m + c[None, :] * ss_n, mask=mask, other=1.0)
    else:
        gm = _group_index(tm, BM, GM)
        gn = _group_index(tn, BN, GN)
        g_mask = (gm < (tl.cdiv(M, GM) if GM > 0 else 1))[:, None] & (gn < (tl.cdiv(N, GN) if GN > 0 else 1))[None, :]
        s = tl.load(s_ptr + b * ss_b + gm[:, None] * ss_m + gn[None, :] * ss_n, mask=g_mask, other=1.0)
        s = expand(s, BM, BN, BM if GM == 0 or GM > BM else GM, BN if GN == 0 or GN > BN else GN)
    v = from_fp8(q, MB, BIAS, FNUZ, SOFT) * s
    tl.store(out_ptr + b * M * N + rows[:, None] * N + cols[None, :], to_out(v, out_ptr, ROUND_BF16), mask=mask)


@triton.jit
def mx_dequant_kernel(x_ptr, s_ptr, out_ptr, R, C, sx_b, sx_r, sx_c, ss_b, ss_r, ss_c, so_b, so_r, so_c,
                      BM: tl.constexpr, BN: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr,
                      SOFT: tl.constexpr, ROUND_BF16: tl.constexpr, TRANS: tl.constexpr = False):
    """``out[b, r, c] (at so_*) = q[b, r, c] * 2**(scale[b, r, c // 32] - 127)``; exact in fp32
    (every such product is representable), NaN for the scale byte 0xFF. Tiles of 32 columns or
    more load each scale byte once; TRANS (col-wise data, written back transposed): the tile is
    stored transposed (``[BN, BM]``), so that consecutive ``r`` are consecutive in the output."""
    b, tm, tn, rows, cols = tile_of(tl.program_id(0), R, C, BM, BN)
    mask = (rows < R)[:, None] & (cols < C)[None, :]
    q = tl.load(x_ptr + b * sx_b + rows[:, None] * sx_r + cols[None, :] * sx_c, mask=mask)
    if BN >= 32:
        blk = tn.to(tl.int64) * (BN // 32) + tl.arange(0, BN // 32)
        b_mask = (rows < R)[:, None] & (blk < tl.cdiv(C, 32))[None, :]
        byte = tl.load(s_ptr + b * ss_b + rows[:, None] * ss_r + blk[None, :] * ss_c, mask=b_mask, other=127)
        scale = expand(e8m0_to_fp32(byte.to(tl.int32)), BM, BN, 1, 32)
    else:
        byte = tl.load(s_ptr + b * ss_b + rows[:, None] * ss_r + (cols // 32)[None, :] * ss_c, mask=mask, other=127)
        scale = e8m0_to_fp32(byte.to(tl.int32))
    v = to_out(from_fp8(q, MB, BIAS, False, SOFT) * scale, out_ptr, ROUND_BF16)
    if TRANS:
        mask_t = (cols < C)[:, None] & (rows < R)[None, :]
        tl.store(out_ptr + b * so_b + cols[:, None] * so_c + rows[None, :] * so_r, tl.trans(v), mask=mask_t)
    else:
        tl.store(out_ptr + b * so_b + rows[:, None] * so_r + cols[None, :] * so_c, v, mask=mask)
