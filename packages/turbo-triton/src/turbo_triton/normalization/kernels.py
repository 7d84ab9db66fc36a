"""Triton RMSNorm kernels over rows of a contiguous ``[T, H]`` tensor; all math in fp32.

Forward: one program per block of ``BLOCK_M`` rows. When the whole row fits one ``BLOCK_N`` tile
the row is read once; otherwise (``*_chunked_kernel``) the row is walked twice in ``BLOCK_N``
chunks (sum of squares, then the normalized output; the second walk is served by the cache).

Backward: a persistent grid; each program walks its share of the rows, writes ``dx`` and keeps
its own fp32 partial sum of ``dy * x * rstd`` (dgamma), written to row ``pid`` of a
``[programs, H]`` fp32 buffer that the launcher reduces: no atomics, deterministic. With
``HAS_DRES`` each kernel also reads ``dresidual`` (``dr_ptr``) where it writes ``dx`` and adds it in
fp32 before the one rounding (``rmsnorm_residual``'s backward: no second pass for the add).

Row offsets are int64 (``T * H`` passes 2^31 at 65536 x 32768). ``ROUND_BF16`` rounds fp32 to
bf16 to nearest-even by bit arithmetic: the CPU interpreter's own conversion truncates (the GPU's
is already round-to-nearest-even, so the launcher sets it only under the interpreter).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def round_bf16(v):
    """fp32 -> bf16 rounded to nearest, ties to even (NaN kept, overflow to inf), as a bf16 tensor."""
    bits = v.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    rounded = bits.to(tl.float32, bitcast=True)
    return tl.where(v != v, v, rounded).to(tl.bfloat16)


@triton.jit
def to_out(v, ptr, ROUND_BF16: tl.constexpr):
    """``v`` (fp32) rounded once to the element type of ``ptr``."""
    if ROUND_BF16:
        return round_bf16(v)
    return v.to(ptr.dtype.element_ty)


@triton.jit
def _load_s(x_ptr, r_ptr, s_ptr, offs, mask, HAS_RESIDUAL: tl.constexpr, STORE_S: tl.constexpr,
            ROUND_BF16: tl.constexpr):
    """The normalized input as fp32: ``x``, or ``x + residual`` rounded once to x's dtype (stored
    to ``s_ptr`` when ``STORE_S``)."""
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        r = tl.load(r_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        s = to_out(x + r, s_ptr, ROUND_BF16)
        if STORE_S:
            tl.store(s_ptr + offs, s, mask=mask)
        return s.to(tl.float32)
    return x


@triton.jit
def _weight(g_ptr, cols, col_ok, ZERO_CENTERED: tl.constexpr):
    g = tl.load(g_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    if ZERO_CENTERED:
        g = g + 1.0
    return g


@triton.jit
def rmsnorm_fwd_kernel(
    x_ptr, r_ptr, g_ptr, y_ptr, s_ptr, rstd_ptr, T, H, eps,
    HAS_RESIDUAL: tl.constexpr, HAS_GAMMA: tl.constexpr, ZERO_CENTERED: tl.constexpr,
    ROUND_BF16: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Rows ``[pid * BLOCK_M, +BLOCK_M)``, whole rows in one tile (``H <= BLOCK_N``)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < T
    col_ok = cols < H
    mask = row_ok[:, None] & col_ok[None, :]
    offs = rows.to(tl.int64)[:, None] * H + cols[None, :]
    s = _load_s(x_ptr, r_ptr, s_ptr, offs, mask, HAS_RESIDUAL, True, ROUND_BF16)
    rstd = 1.0 / tl.sqrt_rn(tl.sum(s * s, axis=1) / H + eps)
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)
    y = s * rstd[:, None]
    if HAS_GAMMA:
        y = y * _weight(g_ptr, cols, col_ok, ZERO_CENTERED)[None, :]
    tl.store(y_ptr + offs, to_out(y, y_ptr, ROUND_BF16), mask=mask)


@triton.jit
def rmsnorm_fwd_chunked_kernel(
    x_ptr, r_ptr, g_ptr, y_ptr, s_ptr, rstd_ptr, T, H, eps,
    HAS_RESIDUAL: tl.constexpr, HAS_GAMMA: tl.constexpr, ZERO_CENTERED: tl.constexpr,
    ROUND_BF16: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Row ``pid`` in chunks of ``BLOCK_N`` (``H > BLOCK_N``): two walks over the row. The
    residual sum is recomputed in the second walk rather than read back from ``s_ptr``."""
    row = tl.program_id(0)
    base = row.to(tl.int64) * H
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, H, BLOCK_N):
        c = start + cols
        s = _load_s(x_ptr, r_ptr, s_ptr, base + c, c < H, HAS_RESIDUAL, False, ROUND_BF16)
        acc += s * s
    rstd = 1.0 / tl.sqrt_rn(tl.sum(acc, axis=0) / H + eps)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, H, BLOCK_N):
        c = start + cols
        col_ok = c < H
        s = _load_s(x_ptr, r_ptr, s_ptr, base + c, col_ok, HAS_RESIDUAL, True, ROUND_BF16)
        y = s * rstd
        if HAS_GAMMA:
            y = y * _weight(g_ptr, c, col_ok, ZERO_CENTERED)
        tl.store(y_ptr + base + c, to_out(y, y_ptr, ROUND_BF16), mask=col_ok)


@triton.jit
def rmsnorm_bwd_kernel(
    dy_ptr, x_ptr, g_ptr, rstd_ptr, dx_ptr, dr_ptr, dg_ptr, T, H, num_programs,
    HAS_GAMMA: tl.constexpr, ZERO_CENTERED: tl.constexpr, ROUND_BF16: tl.constexpr, HAS_DRES: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr = 1,
):
    """Whole rows in one tile; row blocks ``pid, pid + num_programs, ...``; the dgamma partial
    stays in registers and is written once to ``dg_ptr[pid, :]``. ``STAGES`` > 1 lets Triton's
    pipeliner load the next row blocks' ``x`` and ``dy`` while this one is computed."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < H
    if HAS_GAMMA:
        g = _weight(g_ptr, cols, col_ok, ZERO_CENTERED)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for block in tl.range(pid, tl.cdiv(T, BLOCK_M), num_programs, num_stages=STAGES):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < T
        mask = row_ok[:, None] & col_ok[None, :]
        offs = rows.to(tl.int64)[:, None] * H + cols[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
        n = x * rstd[:, None]
        dn = dy
        if HAS_GAMMA:
            dn = dy * g[None, :]
        c = tl.sum(dn * n, axis=1) / H
        dx = rstd[:, None] * (dn - n * c[:, None])
        if HAS_DRES:
            dx += tl.load(dr_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_ptr + offs, to_out(dx, dx_ptr, ROUND_BF16), mask=mask)
        if HAS_GAMMA:
            acc += tl.sum(dy * n, axis=0)
    if HAS_GAMMA:
        tl.store(dg_ptr + pid.to(tl.int64) * H + cols, acc, mask=col_ok)


@triton.jit
def _chunk(dy_ptr, x_ptr, g_ptr, base, rstd, row_ok, cols, start, H,
           HAS_GAMMA: tl.constexpr, ZERO_CENTERED: tl.constexpr):
    """The chunk of a row block at columns ``start + cols``: ``(c, col_ok, mask, n, dy, dn)`` in fp32,
    ``n = x * rstd`` and ``dn = dy * gamma`` (``dy`` itself without gamma)."""
    c = start + cols
    col_ok = c < H
    mask = row_ok[:, None] & col_ok[None, :]
    n = tl.load(x_ptr + base + c[None, :], mask=mask, other=0.0).to(tl.float32) * rstd
    dy = tl.load(dy_ptr + base + c[None, :], mask=mask, other=0.0).to(tl.float32)
    dn = dy
    if HAS_GAMMA:
        dn = dy * _weight(g_ptr, c, col_ok, ZERO_CENTERED)[None, :]
    return c, col_ok, mask, n, dy, dn


@triton.jit
def _store_dx(dx_ptr, dr_ptr, base, c, mask, dx, ROUND_BF16: tl.constexpr, HAS_DRES: tl.constexpr):
    """Store a chunk's ``dx`` (plus ``dresidual``, read here, with ``HAS_DRES``), rounded once."""
    if HAS_DRES:
        dx += tl.load(dr_ptr + base + c[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(dx_ptr + base + c[None, :], to_out(dx, dx_ptr, ROUND_BF16), mask=mask)


@triton.jit
def rmsnorm_bwd_chunked_kernel(
    dy_ptr, x_ptr, g_ptr, rstd_ptr, dx_ptr, dr_ptr, dg_ptr, T, H, num_programs,
    HAS_GAMMA: tl.constexpr, ZERO_CENTERED: tl.constexpr, ROUND_BF16: tl.constexpr, HAS_DRES: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Row blocks ``pid, pid + num_programs, ...`` of ``BLOCK_M`` rows, in ``BLOCK_M x BLOCK_N``
    chunks (``H > BLOCK_N``): a first walk for ``mean(dn * n)`` per row, a second for ``dx``.
    The dgamma partial lives in ``dg_ptr[pid, :]`` (read-modify-write of the program's own row,
    once per chunk and row block; no other program touches it); a CTA barrier at the top of each
    row block orders one block's stores before the next block's loads, whichever threads the
    compiler's layouts assign them to."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    dg_row = dg_ptr + pid.to(tl.int64) * H
    for block in range(pid, tl.cdiv(T, BLOCK_M), num_programs):
        tl.debug_barrier()
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < T
        base = rows.to(tl.int64)[:, None] * H
        rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)[:, None]
        later = block != pid  # not the program's first block: its partial row holds a sum
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for start in range(0, H, BLOCK_N):
            _, _, _, n, _, dn = _chunk(dy_ptr, x_ptr, g_ptr, base, rstd, row_ok, cols, start, H, HAS_GAMMA,
                                       ZERO_CENTERED)
            acc += dn * n
        mean = (tl.sum(acc, axis=1) / H)[:, None]
        for start in range(0, H, BLOCK_N):
            c, col_ok, mask, n, dy, dn = _chunk(dy_ptr, x_ptr, g_ptr, base, rstd, row_ok, cols, start, H,
                                                HAS_GAMMA, ZERO_CENTERED)
            _store_dx(dx_ptr, dr_ptr, base, c, mask, rstd * (dn - n * mean), ROUND_BF16, HAS_DRES)
            if HAS_GAMMA:
                part = tl.sum(dy * n, axis=0)
                prev = tl.load(dg_row + c, mask=col_ok, other=0.0)  # (garbage before the first block)
                part += tl.where(later, prev, 0.0)
                tl.store(dg_row + c, part, mask=col_ok)


@triton.jit
def _split_pass1(dy_ptr, x_ptr, g_ptr, base, rstd, row_ok, cols, start, H,
                 HAS_GAMMA: tl.constexpr, ZERO_CENTERED: tl.constexpr, ACC_M: tl.constexpr):
    """One chunk of the first walk: ``(dn * n, dy * n)``, the latter summed over the rows unless
    ``ACC_M`` (one row: kept ``[1, BLOCK_N]``, no layout change)."""
    _, _, _, n, dy, dn = _chunk(dy_ptr, x_ptr, g_ptr, base, rstd, row_ok, cols, start, H, HAS_GAMMA, ZERO_CENTERED)
    if ACC_M == 1:
        part = dy * n
    else:
        part = tl.sum(dy * n, axis=0)
    return dn * n, part


@triton.jit
def _split_pass2(dy_ptr, x_ptr, g_ptr, dx_ptr, dr_ptr, base, rstd, mean, row_ok, cols, start, H,
                 HAS_GAMMA: tl.constexpr, ZERO_CENTERED: tl.constexpr, ROUND_BF16: tl.constexpr,
                 HAS_DRES: tl.constexpr):
    """One chunk of the second walk: ``dx`` from ``x`` and ``dy`` read again (cache hits), plus
    ``dresidual`` (read once, here) with ``HAS_DRES``."""
    c, _, mask, n, _, dn = _chunk(dy_ptr, x_ptr, g_ptr, base, rstd, row_ok, cols, start, H, HAS_GAMMA,
                                  ZERO_CENTERED)
    _store_dx(dx_ptr, dr_ptr, base, c, mask, rstd * (dn - n * mean), ROUND_BF16, HAS_DRES)


@triton.jit
def _split_store(dg_row, acc, cols, start, H, ACC_M: tl.constexpr):
    c = start + cols
    if ACC_M == 1:
        tl.store(dg_row + c[None, :], acc, mask=(c < H)[None, :])
    else:
        tl.store(dg_row + c, acc, mask=c < H)


@triton.jit
def rmsnorm_bwd_split_kernel(
    dy_ptr, x_ptr, g_ptr, rstd_ptr, dx_ptr, dr_ptr, dg_ptr, T, H, num_programs,
    HAS_GAMMA: tl.constexpr, ZERO_CENTERED: tl.constexpr, ROUND_BF16: tl.constexpr, HAS_DRES: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS: tl.constexpr, STAGES: tl.constexpr = 1,
):
    """Rows too wide to hold whole in registers (``H <= CHUNKS * BLOCK_N``, ``CHUNKS`` in 2..4):
    row blocks ``pid, pid + num_programs, ...`` walked twice in ``CHUNKS`` chunks, unrolled: the
    first walk sums ``dn * n`` per row and adds ``dy * n`` into the program's dgamma partial, which
    stays in registers (one ``BLOCK_N`` tensor a chunk) across all its rows; the second walk reads
    ``x`` and ``dy`` again (the row block was just read: L1/L2 hits) and writes ``dx``. Only the
    dgamma partial and a chunk or two are live, where the whole-row kernel holds the row's ``x``,
    ``dy`` and gamma in fp32 as well (spills at 16384). ``STAGES`` > 1: the row loop goes through
    Triton's pipeliner (the next block's loads issued while this one is computed)."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    ACC_M: tl.constexpr = 1 if BLOCK_M == 1 else 0  # one row a step: the partial keeps the chunk's 2-D layout
    acc0 = tl.zeros([BLOCK_N], dtype=tl.float32) if ACC_M == 0 else tl.zeros([1, BLOCK_N], dtype=tl.float32)
    acc1 = tl.zeros([BLOCK_N], dtype=tl.float32) if ACC_M == 0 else tl.zeros([1, BLOCK_N], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_N], dtype=tl.float32) if ACC_M == 0 else tl.zeros([1, BLOCK_N], dtype=tl.float32)
    acc3 = tl.zeros([BLOCK_N], dtype=tl.float32) if ACC_M == 0 else tl.zeros([1, BLOCK_N], dtype=tl.float32)
    blocks = tl.cdiv(T, BLOCK_M)
    for block in tl.range(pid, blocks, num_programs, num_stages=STAGES):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < T
        base = rows.to(tl.int64)[:, None] * H
        rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)[:, None]
        prod, part = _split_pass1(dy_ptr, x_ptr, g_ptr, base, rstd, row_ok, cols, 0, H, HAS_GAMMA, ZERO_CENTERED,
                                  ACC_M)
        acc0 += part
        p1, part = _split_pass1(dy_ptr, x_ptr, g_ptr, base, rstd, row_ok, cols, BLOCK_N, H, HAS_GAMMA,
                                ZERO_CENTERED, ACC_M)
        prod += p1
        acc1 += part
        if CHUNKS > 2:
            p2, part = _split_pass1(dy_ptr, x_ptr, g_ptr, base, rstd, row_ok, cols, 2 * BLOCK_N, H, HAS_GAMMA,
                                    ZERO_CENTERED, ACC_M)
            prod += p2
            acc2 += part
        if CHUNKS > 3:
            p3, part = _split_pass1(dy_ptr, x_ptr, g_ptr, base, rstd, row_ok, cols, 3 * BLOCK_N, H, HAS_GAMMA,
                                    ZERO_CENTERED, ACC_M)
            prod += p3
            acc3 += part
        mean = (tl.sum(prod, axis=1) / H)[:, None]
        for k in tl.static_range(CHUNKS):
            _split_pass2(dy_ptr, x_ptr, g_ptr, dx_ptr, dr_ptr, base, rstd, mean, row_ok, cols, k * BLOCK_N, H,
                         HAS_GAMMA, ZERO_CENTERED, ROUND_BF16, HAS_DRES)
    if HAS_GAMMA:
        dg_row = dg_ptr + pid.to(tl.int64) * H
        _split_store(dg_row, acc0, cols, 0, H, ACC_M)
        _split_store(dg_row, acc1, cols, BLOCK_N, H, ACC_M)
        if CHUNKS > 2:
            _split_store(dg_row, acc2, cols, 2 * BLOCK_N, H, ACC_M)
        if CHUNKS > 3:
            _split_store(dg_row, acc3, cols, 3 * BLOCK_N, H, ACC_M)
