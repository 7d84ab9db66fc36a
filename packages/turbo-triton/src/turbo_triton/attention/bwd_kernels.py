"""Flash-attention backward kernels (FA2 recomputation from ``out`` and ``lse``).

- ``attn_bwd_preprocess_kernel``: ``delta = rowsum(dout * out)`` (fp32, lse's layout) and, with a
  sink, each query tile's partial ``-sum_rows exp(sink - lse) * delta`` (summed on the host side by
  one ``torch.sum``: deterministic).
- ``attn_bwd_dkdv_kernel``: one program per (key tile, key/value head, sequence) walks every query
  tile of every query head of its GQA group, so ``dk``/``dv`` are summed in registers in a fixed
  order (no atomics). With ``ATOMIC_DQ`` it also adds each tile's ``dS @ K`` into an fp32 ``dq``
  buffer with atomics (five matmuls per tile pair; the order of the additions varies from run to run).
- ``attn_bwd_dq_kernel``: the deterministic ``dq``: one program per (query tile, head, sequence)
  recomputes P and dP (seven matmuls per tile pair in all, about 1.4x the work).

Per tile pair: ``P = exp2(S * log2e - lse * log2e)``, ``dP = dO V^T``, ``dS = P (dP - delta)``,
``dV += P^T dO``, ``dK += scale dS^T Q``, ``dQ += scale dS K``; P and dS are rounded to the input
dtype before their matmuls.
"""

import triton
import triton.language as tl

from turbo_triton.attention.common import LOG2E, key_ranges, mm, query_ranges, sequence, visible


@triton.jit
def attn_bwd_preprocess_kernel(
    Out, DOut, Lse, Delta, Sink, DSinkPart, CuQ,
    stride_ob, stride_os, stride_oh, stride_db, stride_ds, stride_dh, stride_lb, stride_lh,
    seq_q,
    BLOCK_M: tl.constexpr, BLOCK_DV: tl.constexpr, D_V: tl.constexpr, VARLEN: tl.constexpr,
    HAS_SINK: tl.constexpr,
):
    """Grid ``(query tiles, h_q, batch)``. ``DSinkPart`` is fp32 ``[batch, h_q, query tiles]``."""
    pid_m = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.program_id(2)
    q_start, len_q = sequence(CuQ, b, seq_q, VARLEN)
    m0 = pid_m * BLOCK_M
    if m0 >= len_q:
        return
    rows = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_DV)
    mask = (rows < len_q)[:, None] & (offs_d < D_V)[None, :]
    o = tl.load(Out + b * stride_ob + h * stride_oh + (q_start + rows)[:, None] * stride_os + offs_d[None, :],
                mask=mask, other=0.0).to(tl.float32)
    do = tl.load(DOut + b * stride_db + h * stride_dh + (q_start + rows)[:, None] * stride_ds + offs_d[None, :],
                 mask=mask, other=0.0).to(tl.float32)
    delta = tl.sum(o * do, 1)
    lse_off = b * stride_lb + h * stride_lh + q_start + rows
    tl.store(Delta + lse_off, delta, mask=rows < len_q)
    if HAS_SINK:
        lse = tl.load(Lse + lse_off, mask=rows < len_q, other=float("-inf"))
        sink = tl.load(Sink + h).to(tl.float32)
        finite = lse != float("-inf")
        p_sink = tl.where(finite, tl.exp(sink - tl.where(finite, lse, 0.0)), 0.0)
        tl.store(DSinkPart + (b * tl.num_programs(1) + h) * tl.num_programs(0) + pid_m, -tl.sum(p_sink * delta, 0))


@triton.jit
def _dkdv_tiles(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, stride_qs, stride_dos, stride_dqs,
                cols, start, stop, len_q, len_k, left, right, softmax_scale,
                BLOCK_M: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
                D_QK: tl.constexpr, D_V: tl.constexpr, MASK: tl.constexpr, HAS_LEFT: tl.constexpr,
                HAS_RIGHT: tl.constexpr, ATOMIC_DQ: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    offs_m = tl.arange(0, BLOCK_M)
    offs_dk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    dk_ok = offs_dk < D_QK
    dv_ok = offs_dv < D_V
    qk_scale = softmax_scale * LOG2E
    for m0 in range(start, stop, BLOCK_M):
        rows = m0 + offs_m
        row_ok = rows < len_q
        q_ptrs = q_base + rows[:, None] * stride_qs + offs_dk[None, :]
        do_ptrs = do_base + rows[:, None] * stride_dos + offs_dv[None, :]
        if MASK:
            q = tl.load(q_ptrs, mask=row_ok[:, None] & dk_ok[None, :], other=0.0)
            do = tl.load(do_ptrs, mask=row_ok[:, None] & dv_ok[None, :], other=0.0)
            lse = tl.load(lse_base + rows, mask=row_ok, other=0.0)
            delta = tl.load(delta_base + rows, mask=row_ok, other=0.0)
        else:
            q = tl.load(q_ptrs, mask=dk_ok[None, :], other=0.0)
            do = tl.load(do_ptrs, mask=dv_ok[None, :], other=0.0)
            lse = tl.load(lse_base + rows)
            delta = tl.load(delta_base + rows)
        st = mm(k, tl.trans(q), tl.zeros([k.shape[0], BLOCK_M], dtype=tl.float32), UPCAST, PRECISION)
        pt = tl.math.exp2(st * qk_scale - (lse * LOG2E)[None, :])
        if MASK:
            pt = tl.where(tl.trans(visible(rows, cols, len_q, len_k, left, right, HAS_LEFT, HAS_RIGHT)), pt, 0.0)
        dv = mm(pt.to(do.dtype), do, dv, UPCAST, PRECISION)
        dpt = mm(v, tl.trans(do), tl.zeros([k.shape[0], BLOCK_M], dtype=tl.float32), UPCAST, PRECISION)
        dst = (pt * (dpt - delta[None, :])).to(q.dtype)
        dk = mm(dst, q, dk, UPCAST, PRECISION)
        if ATOMIC_DQ:
            dq = mm(tl.trans(dst), k, tl.zeros([BLOCK_M, BLOCK_DQK], dtype=tl.float32), UPCAST, PRECISION)
            tl.atomic_add(dq_base + rows[:, None] * stride_dqs + offs_dk[None, :], dq * softmax_scale,
                          mask=row_ok[:, None] & dk_ok[None, :], sem="relaxed")
    return dk, dv


@triton.jit
def attn_bwd_dkdv_kernel(
    Q, K, V, DOut, Lse, Delta, DQ, DK, DV, CuQ, CuK,
    stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
    stride_dob, stride_dos, stride_doh, stride_dqb, stride_dqs, stride_dqh,
    stride_dkb, stride_dks, stride_dkh, stride_dvb, stride_dvs, stride_dvh, stride_lb, stride_lh,
    seq_q, seq_k, group, softmax_scale, left, right,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
    D_QK: tl.constexpr, D_V: tl.constexpr, VARLEN: tl.constexpr, HAS_LEFT: tl.constexpr,
    HAS_RIGHT: tl.constexpr, ATOMIC_DQ: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
):
    """Grid ``(key tiles, h_kv, batch)``: ``dk``/``dv`` of one key tile (zero where no query sees it)."""
    pid_n = tl.program_id(0)
    hk = tl.program_id(1)
    b = tl.program_id(2)
    q_start, len_q = sequence(CuQ, b, seq_q, VARLEN)
    k_start, len_k = sequence(CuK, b, seq_k, VARLEN)
    n0 = pid_n * BLOCK_N
    if n0 >= len_k:
        return
    cols = n0 + tl.arange(0, BLOCK_N)
    col_ok = cols < len_k
    offs_dk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    k = tl.load(K + b * stride_kb + hk * stride_kh + (k_start + cols)[:, None] * stride_ks + offs_dk[None, :],
                mask=col_ok[:, None] & (offs_dk < D_QK)[None, :], other=0.0)
    v = tl.load(V + b * stride_vb + hk * stride_vh + (k_start + cols)[:, None] * stride_vs + offs_dv[None, :],
                mask=col_ok[:, None] & (offs_dv < D_V)[None, :], other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_DQK], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32)
    lo, full_lo, full_hi, hi = query_ranges(n0, len_q, len_k, left, right, BLOCK_M, BLOCK_N, HAS_LEFT, HAS_RIGHT)
    for g in range(0, group):
        h = hk * group + g
        q_base = Q + b * stride_qb + h * stride_qh + q_start * stride_qs
        do_base = DOut + b * stride_dob + h * stride_doh + q_start * stride_dos
        dq_base = DQ + b * stride_dqb + h * stride_dqh + q_start * stride_dqs
        lse_base = Lse + b * stride_lb + h * stride_lh + q_start
        delta_base = Delta + b * stride_lb + h * stride_lh + q_start
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, stride_qs, stride_dos,
                             stride_dqs, cols, lo, full_lo, len_q, len_k, left, right, softmax_scale, BLOCK_M,
                             BLOCK_DQK, BLOCK_DV, D_QK, D_V, True, HAS_LEFT, HAS_RIGHT, ATOMIC_DQ, UPCAST, PRECISION)
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, stride_qs, stride_dos,
                             stride_dqs, cols, full_lo, full_hi, len_q, len_k, left, right, softmax_scale, BLOCK_M,
                             BLOCK_DQK, BLOCK_DV, D_QK, D_V, False, HAS_LEFT, HAS_RIGHT, ATOMIC_DQ, UPCAST,
                             PRECISION)
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, stride_qs, stride_dos,
                             stride_dqs, cols, full_hi, hi, len_q, len_k, left, right, softmax_scale, BLOCK_M,
                             BLOCK_DQK, BLOCK_DV, D_QK, D_V, True, HAS_LEFT, HAS_RIGHT, ATOMIC_DQ, UPCAST, PRECISION)
    mask_k = col_ok[:, None] & (offs_dk < D_QK)[None, :]
    mask_v = col_ok[:, None] & (offs_dv < D_V)[None, :]
    tl.store(DK + b * stride_dkb + hk * stride_dkh + (k_start + cols)[:, None] * stride_dks + offs_dk[None, :],
             (dk * softmax_scale).to(DK.dtype.element_ty), mask=mask_k)
    tl.store(DV + b * stride_dvb + hk * stride_dvh + (k_start + cols)[:, None] * stride_dvs + offs_dv[None, :],
             dv.to(DV.dtype.element_ty), mask=mask_v)


@triton.jit
def _dq_tiles(dq, q, do, lse, delta, k_base, v_base, stride_ks, stride_vs, rows, start, stop, len_q, len_k,
              left, right, softmax_scale,
              BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr, D_QK: tl.constexpr,
              D_V: tl.constexpr, MASK: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr,
              UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    offs_dk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    dk_ok = offs_dk < D_QK
    dv_ok = offs_dv < D_V
    qk_scale = softmax_scale * LOG2E
    for n0 in range(start, stop, BLOCK_N):
        cols = n0 + offs_n
        k_ptrs = k_base + cols[:, None] * stride_ks + offs_dk[None, :]
        v_ptrs = v_base + cols[:, None] * stride_vs + offs_dv[None, :]
        if MASK:
            k = tl.load(k_ptrs, mask=(cols < len_k)[:, None] & dk_ok[None, :], other=0.0)
            v = tl.load(v_ptrs, mask=(cols < len_k)[:, None] & dv_ok[None, :], other=0.0)
        else:
            k = tl.load(k_ptrs, mask=dk_ok[None, :], other=0.0)
            v = tl.load(v_ptrs, mask=dv_ok[None, :], other=0.0)
        s = mm(q, tl.trans(k), tl.zeros([q.shape[0], BLOCK_N], dtype=tl.float32), UPCAST, PRECISION)
        p = tl.math.exp2(s * qk_scale - (lse * LOG2E)[:, None])
        if MASK:
            p = tl.where(visible(rows, cols, len_q, len_k, left, right, HAS_LEFT, HAS_RIGHT), p, 0.0)
        dp = mm(do, tl.trans(v), tl.zeros([q.shape[0], BLOCK_N], dtype=tl.float32), UPCAST, PRECISION)
        ds = (p * (dp - delta[:, None])).to(k.dtype)
        dq = mm(ds, k, dq, UPCAST, PRECISION)
    return dq


@triton.jit
def attn_bwd_dq_kernel(
    Q, K, V, DOut, Lse, Delta, DQ, CuQ, CuK,
    stride_qb, stride_qs, stride_qh, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
    stride_dob, stride_dos, stride_doh, stride_dqb, stride_dqs, stride_dqh, stride_lb, stride_lh,
    seq_q, seq_k, group, softmax_scale, left, right,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
    D_QK: tl.constexpr, D_V: tl.constexpr, VARLEN: tl.constexpr, HAS_LEFT: tl.constexpr,
    HAS_RIGHT: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
):
    """Grid ``(query tiles, h_q, batch)``: ``dq`` of one query tile, written once (deterministic)."""
    h = tl.program_id(1)
    b = tl.program_id(2)
    q_start, len_q = sequence(CuQ, b, seq_q, VARLEN)
    k_start, len_k = sequence(CuK, b, seq_k, VARLEN)
    m0 = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    if m0 >= len_q:
        return
    hk = h // group
    rows = m0 + tl.arange(0, BLOCK_M)
    row_ok = rows < len_q
    offs_dk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    q = tl.load(Q + b * stride_qb + h * stride_qh + (q_start + rows)[:, None] * stride_qs + offs_dk[None, :],
                mask=row_ok[:, None] & (offs_dk < D_QK)[None, :], other=0.0)
    do = tl.load(DOut + b * stride_dob + h * stride_doh + (q_start + rows)[:, None] * stride_dos + offs_dv[None, :],
                 mask=row_ok[:, None] & (offs_dv < D_V)[None, :], other=0.0)
    lse_off = b * stride_lb + h * stride_lh + q_start + rows
    lse = tl.load(Lse + lse_off, mask=row_ok, other=0.0)
    delta = tl.load(Delta + lse_off, mask=row_ok, other=0.0)
    k_base = K + b * stride_kb + hk * stride_kh + k_start * stride_ks
    v_base = V + b * stride_vb + hk * stride_vh + k_start * stride_vs
    dq = tl.zeros([BLOCK_M, BLOCK_DQK], dtype=tl.float32)
    lo, full_lo, full_hi, hi = key_ranges(m0, len_q, len_k, left, right, BLOCK_M, BLOCK_N, HAS_LEFT, HAS_RIGHT)
    dq = _dq_tiles(dq, q, do, lse, delta, k_base, v_base, stride_ks, stride_vs, rows, lo, full_lo, len_q, len_k,
                   left, right, softmax_scale, BLOCK_N, BLOCK_DQK, BLOCK_DV, D_QK, D_V, True, HAS_LEFT, HAS_RIGHT,
                   UPCAST, PRECISION)
    dq = _dq_tiles(dq, q, do, lse, delta, k_base, v_base, stride_ks, stride_vs, rows, full_lo, full_hi, len_q,
                   len_k, left, right, softmax_scale, BLOCK_N, BLOCK_DQK, BLOCK_DV, D_QK, D_V, False, HAS_LEFT,
                   HAS_RIGHT, UPCAST, PRECISION)
    dq = _dq_tiles(dq, q, do, lse, delta, k_base, v_base, stride_ks, stride_vs, rows, full_hi, hi, len_q, len_k,
                   left, right, softmax_scale, BLOCK_N, BLOCK_DQK, BLOCK_DV, D_QK, D_V, True, HAS_LEFT, HAS_RIGHT,
                   UPCAST, PRECISION)
    tl.store(DQ + b * stride_dqb + h * stride_dqh + (q_start + rows)[:, None] * stride_dqs + offs_dk[None, :],
             (dq * softmax_scale).to(DQ.dtype.element_ty), mask=row_ok[:, None] & (offs_dk < D_QK)[None, :])
