"""Triton GLU kernels with per-token probs: ``out = act(a) * b * p`` over ``x = [a | b]`` rows.

``x`` is ``[T, 2H]`` contiguous (gate half ``a`` then up half ``b``), ``out``/``grad_out`` ``[T, H]``.
Math in fp32; the formulas are the reference's, term for term, so NaN/Inf propagate alike
(e.g. ``silu'(inf)`` is ``1 * (1 + inf * 0) = NaN`` in both).

Inactive rows (``row_mask == 0``) are masked out of every load (their x, probs and grad_out are
never read) and their outputs are written as zeros. Row offsets are int64.

Forward: a 2-D grid of ``BLOCK_M x BLOCK_N`` tiles (row blocks on axis 0, which has no 65535
limit). Backward: one program per row block walking the columns in ``BLOCK_N`` chunks, so
``grad_probs`` (a row sum) is accumulated in registers and written once.
"""

from __future__ import annotations

import triton
import triton.language as tl

from turbo_triton.normalization.kernels import to_out

_INV_SQRT2 = tl.constexpr(0.7071067811865476)
_INV_SQRT_2PI = tl.constexpr(0.3989422804014327)


@triton.jit
def _act(a, GELU: tl.constexpr):
    if GELU:
        return 0.5 * a * (1.0 + tl.math.erf(a * _INV_SQRT2))
    return a * (1.0 / (1.0 + tl.exp(-a)))


@triton.jit
def _act_and_grad(a, GELU: tl.constexpr):
    if GELU:
        cdf = 0.5 * (1.0 + tl.math.erf(a * _INV_SQRT2))
        return a * cdf, cdf + a * tl.exp(-0.5 * a * a) * _INV_SQRT_2PI
    s = 1.0 / (1.0 + tl.exp(-a))
    return a * s, s * (1.0 + a * (1.0 - s))


@triton.jit
def _active_rows(m_ptr, rows, T, HAS_MASK: tl.constexpr):
    row_ok = rows < T
    if HAS_MASK:
        return row_ok & (tl.load(m_ptr + rows, mask=row_ok, other=0) != 0)
    return row_ok


@triton.jit
def glu_fwd_kernel(
    x_ptr, p_ptr, m_ptr, out_ptr, T, H,
    GELU: tl.constexpr, HAS_MASK: tl.constexpr, ROUND_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    active = _active_rows(m_ptr, rows, T, HAS_MASK)
    col_ok = cols < H
    load_mask = active[:, None] & col_ok[None, :]
    rows64 = rows.to(tl.int64)[:, None]
    x_offs = rows64 * (2 * H) + cols[None, :]
    a = tl.load(x_ptr + x_offs, mask=load_mask, other=0.0).to(tl.float32)
    b = tl.load(x_ptr + x_offs + H, mask=load_mask, other=0.0).to(tl.float32)
    p = tl.load(p_ptr + rows, mask=active, other=0.0)
    out = tl.where(load_mask, _act(a, GELU) * b * p[:, None], 0.0)
    store_mask = (rows < T)[:, None] & col_ok[None, :]
    tl.store(out_ptr + rows64 * H + cols[None, :], to_out(out, out_ptr, ROUND_BF16), mask=store_mask)


@triton.jit
def glu_bwd_kernel(
    g_ptr, x_ptr, p_ptr, m_ptr, gx_ptr, gp_ptr, T, H,
    GELU: tl.constexpr, HAS_MASK: tl.constexpr, ROUND_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    active = _active_rows(m_ptr, rows, T, HAS_MASK)
    row_ok = rows < T
    rows64 = rows.to(tl.int64)[:, None]
    p = tl.load(p_ptr + rows, mask=active, other=0.0)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, H, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < H
        load_mask = active[:, None] & col_ok[None, :]
        store_mask = row_ok[:, None] & col_ok[None, :]
        x_offs = rows64 * (2 * H) + cols[None, :]
        g = tl.load(g_ptr + rows64 * H + cols[None, :], mask=load_mask, other=0.0).to(tl.float32)
        a = tl.load(x_ptr + x_offs, mask=load_mask, other=0.0).to(tl.float32)
        b = tl.load(x_ptr + x_offs + H, mask=load_mask, other=0.0).to(tl.float32)
        act, act_grad = _act_and_grad(a, GELU)
        grad_a = tl.where(load_mask, g * b * p[:, None] * act_grad, 0.0)
        grad_b = tl.where(load_mask, g * act * p[:, None], 0.0)
        acc += tl.where(load_mask, g * act * b, 0.0)
        tl.store(gx_ptr + x_offs, to_out(grad_a, gx_ptr, ROUND_BF16), mask=store_mask)
        tl.store(gx_ptr + x_offs + H, to_out(grad_b, gx_ptr, ROUND_BF16), mask=store_mask)
    tl.store(gp_ptr + rows, tl.where(active, tl.sum(acc, axis=1), 0.0), mask=row_ok)
