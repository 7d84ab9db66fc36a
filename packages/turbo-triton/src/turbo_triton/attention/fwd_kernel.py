"""Flash-attention forward kernel: one program per (query tile, head, sequence).

Online softmax in base 2 (the scores are scaled by ``softmax_scale * log2(e)``), fp32 running max
``m``, denominator ``l`` and accumulator; P is rounded to the input dtype before ``P @ V`` (as in
every flash-attention kernel). A sink starts the running state at ``m = sink * log2(e)``, ``l = 1``
(it joins the denominator and carries no value). Key tiles fully inside the window run unmasked;
the tiles at the window's edges and the sequence end are masked (``common.key_ranges``).
Writes ``out`` (q's dtype) and ``lse`` (natural log, fp32; ``-inf`` and ``out = 0`` for a row that
sees no key and has no sink).
"""

import triton
import triton.language as tl

from turbo_triton.attention.common import LN2, LOG2E, key_ranges, mm, online_softmax, sequence


@triton.jit
def _tiles(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, k_row0, hk, rows, start, stop, len_q, len_k,
           left, right, qk_scale,
           BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
           D_QK: tl.constexpr, D_V: tl.constexpr, MASK: tl.constexpr, HAS_LEFT: tl.constexpr,
           HAS_RIGHT: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr, TMA: tl.constexpr,
           WS: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    offs_dk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    dk_ok = offs_dk < D_QK
    dv_ok = offs_dv < D_V
    for n0 in tl.range(start, stop, BLOCK_N, warp_specialize=WS):
        cols = n0 + offs_n
        if TMA:  # descriptors over [rows, heads * d]; rows past the sequence are another's: masked below
            kt = k_base.load([k_row0 + n0, hk * D_QK]).T
            v = v_base.load([k_row0 + n0, hk * D_V])
            if MASK:  # whatever those rows hold (NaN padding included) must not reach P @ V
                v = tl.where((cols < len_k)[:, None], v, 0.0)
        elif MASK:
            kt_ptrs = k_base + cols[None, :] * stride_kn + offs_dk[:, None]
            v_ptrs = v_base + cols[:, None] * stride_vn + offs_dv[None, :]
            kt = tl.load(kt_ptrs, mask=dk_ok[:, None] & (cols[None, :] < len_k), other=0.0)
            v = tl.load(v_ptrs, mask=(cols[:, None] < len_k) & dv_ok[None, :], other=0.0)
        else:
            kt_ptrs = k_base + cols[None, :] * stride_kn + offs_dk[:, None]
            v_ptrs = v_base + cols[:, None] * stride_vn + offs_dv[None, :]
            if BLOCK_DQK == D_QK:
                kt = tl.load(kt_ptrs)
            else:
                kt = tl.load(kt_ptrs, mask=dk_ok[:, None], other=0.0)
            if BLOCK_DV == D_V:
                v = tl.load(v_ptrs)
            else:
                v = tl.load(v_ptrs, mask=dv_ok[None, :], other=0.0)
        s = mm(q, kt, tl.zeros([q.shape[0], BLOCK_N], dtype=tl.float32), UPCAST, PRECISION) * qk_scale
        p, alpha, l_i, m_i = online_softmax(s, m_i, l_i, rows, cols, len_q, len_k, left, right, MASK, HAS_LEFT,
                                            HAS_RIGHT)
        acc = mm(p.to(v.dtype), v, acc * alpha[:, None], UPCAST, PRECISION)
    return acc, l_i, m_i


@triton.jit
def attn_fwd_kernel(
    Q, K, V, Out, Lse, Sink, CuQ, CuK,
    stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
    stride_ob, stride_os, stride_oh, stride_lb, stride_lh,
    seq_q, seq_k, group, softmax_scale, left, right,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
    D_QK: tl.constexpr, D_V: tl.constexpr, VARLEN: tl.constexpr, HAS_SINK: tl.constexpr,
    HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    TMA: tl.constexpr, WS: tl.constexpr,
):
    """Grid ``(query tiles, h_q, batch)``; the query tiles run last-first (the longest causal rows
    start first). Dense: ``seq_q``/``seq_k`` are the lengths; varlen: ``CuQ``/``CuK`` give each
    sequence's start and length and the batch strides are 0. ``TMA`` (Hopper, contiguous q/k/v with
    power-of-two head dims): ``Q``/``K``/``V`` are tensor descriptors over the ``[rows, heads * d]``
    views, with blocks ``[BLOCK_M or BLOCK_N, d]``. ``WS``: the unmasked key loop is
    warp-specialized (``tl.range(warp_specialize=True)``; the masked edge loops never are)."""
    h = tl.program_id(1)
    b = tl.program_id(2)
    q_start, len_q = sequence(CuQ, b, seq_q, VARLEN)
    k_start, len_k = sequence(CuK, b, seq_k, VARLEN)
    m0 = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    if m0 >= len_q:
        return
    hk = h // group
    qk_scale = softmax_scale * LOG2E
    rows = m0 + tl.arange(0, BLOCK_M)
    row_ok = rows < len_q
    offs_dk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    if TMA:
        if VARLEN:
            q_row0 = q_start
            k_row0 = k_start
        else:
            q_row0 = b * seq_q
            k_row0 = b * seq_k
        q = Q.load([q_row0 + m0, h * D_QK])
        k_base = K
        v_base = V
    else:
        q_ptrs = Q + b * stride_qb + h * stride_qh + (q_start + rows)[:, None] * stride_qs + offs_dk[None, :]
        q = tl.load(q_ptrs, mask=row_ok[:, None] & (offs_dk[None, :] < D_QK), other=0.0)
        k_row0 = 0
        k_base = K + b * stride_kb + hk * stride_kh + k_start * stride_ks
        v_base = V + b * stride_vb + hk * stride_vh + k_start * stride_vs

    if HAS_SINK:
        sink = tl.load(Sink + h).to(tl.float32) * LOG2E
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) + sink
        l_i = tl.full([BLOCK_M], 1.0, dtype=tl.float32)
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)

    lo, full_lo, full_hi, hi = key_ranges(m0, len_q, len_k, left, right, BLOCK_M, BLOCK_N, HAS_LEFT, HAS_RIGHT)
    acc, l_i, m_i = _tiles(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs, k_row0, hk, rows, lo, full_lo, len_q,
                           len_k, left, right, qk_scale, BLOCK_N, BLOCK_DQK, BLOCK_DV, D_QK, D_V, True,
                           HAS_LEFT, HAS_RIGHT, UPCAST, PRECISION, TMA, False)
    acc, l_i, m_i = _tiles(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs, k_row0, hk, rows, full_lo, full_hi,
                           len_q, len_k, left, right, qk_scale, BLOCK_N, BLOCK_DQK, BLOCK_DV, D_QK, D_V, False,
                           HAS_LEFT, HAS_RIGHT, UPCAST, PRECISION, TMA, WS)
    acc, l_i, m_i = _tiles(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_vs, k_row0, hk, rows, full_hi, hi, len_q,
                           len_k, left, right, qk_scale, BLOCK_N, BLOCK_DQK, BLOCK_DV, D_QK, D_V, True,
                           HAS_LEFT, HAS_RIGHT, UPCAST, PRECISION, TMA, False)

    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * LN2)
    o_ptrs = Out + b * stride_ob + h * stride_oh + (q_start + rows)[:, None] * stride_os + offs_dv[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_ok[:, None] & (offs_dv[None, :] < D_V))
    tl.store(Lse + b * stride_lb + h * stride_lh + q_start + rows, lse, mask=row_ok)
