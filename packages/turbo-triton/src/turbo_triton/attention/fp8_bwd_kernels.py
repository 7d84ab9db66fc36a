"""FP8 flash-attention backward kernels (the spec's math: P recomputed from ``q_q, k_q`` and lse).

Operands from ``fp8_quant`` (E4M3, zero padded, fp32 scales per (b, h, 64 rows)): ``q_q``, ``k_q``,
``v_q`` and ``dout_q`` rows-major ``[b, h, rows, BLOCK_D]``, and ``dout_q`` head-dim-major
``[b, h_q, BLOCK_DV, rows_q]`` too (the K-major operand of ``P_q^T @ dout_q``). Per tile pair:

- ``S = (q_q @ k_q^T) s_q s_k softmax_scale`` and ``dP = (dout_q @ v_q^T) s_do s_v``: FP8 dots,
  scales on the fp32 results; ``P = exp2(S log2e - lse log2e)`` in fp32.
- ``dv += (P_q^T @ dout_q) s_do / 448`` with ``P_q = e4m3(P * 448)``: an FP8 dot over the
  ``BLOCK_M`` query rows of a tile, which lie in one 64-row scale block of dout.
- ``dS = P (dP - delta)`` in fp32 with the spec's ``delta = rowsum(P * dP)`` (not ``rowsum(dout *
  out)``, which differs by the forward's quantization of P); the ``dq`` kernel computes it exactly
  in a first pass over the keys, before its ``dq`` pass, and hands it to the ``dk/dv`` kernel.
- ``dq += (dS * s_k) @ k_q`` and ``dk += (dS * s_q)^T @ q_q``: the dequantization scales are folded
  into dS's columns/rows in fp32, and these two matmuls run in bf16 (dS rounded once to bf16, the
  E4M3 operands exactly representable in bf16) with fp32 accumulation; under the CPU interpreter,
  whose bf16 dot is wrong, they run in fp32 (dS not rounded).

Kernels (both deterministic: every sum in a fixed order, no atomics):

- ``attn_fp8_bwd_dq_kernel``: grid ``(query tiles, h_q, batch)``; writes ``dq`` and ``delta``.
- ``attn_fp8_bwd_dkdv_kernel``: grid ``(key tiles, h_kv, batch)``; walks every query tile of each
  query head of its GQA group; writes ``dk`` and ``dv``.
"""

import triton
import triton.language as tl

from turbo_triton.attention.common import LOG2E, key_ranges, query_ranges, visible
from turbo_triton.attention.fp8_fwd_kernel import P_SCALE, SCALE_ROWS, as_fp8, quant_p
from turbo_triton.quantization.numerics import decode_fp8


@triton.jit
def _mm_ds(ds, x, acc, SOFT: tl.constexpr):
    """``acc + ds @ x`` for fp32 ``ds`` and E4M3 ``x``: bf16 on GPUs, fp32 under the interpreter."""
    if SOFT:
        xf = decode_fp8(x.to(tl.uint8, bitcast=True).to(tl.int32), 3, 7, False)
        return tl.dot(ds, xf, acc, input_precision="ieee")
    return tl.dot(ds.to(tl.bfloat16), x.to(tl.bfloat16), acc)


@triton.jit
def _dq_tiles(dq, delta, q, do, qk_row, do_row, lse2, k_base, v_base, sk_base, sv_base, rows, start, stop,
              len_q, len_k, left, right,
              BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr, MASK: tl.constexpr,
              HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, DELTA_PASS: tl.constexpr, SOFT: tl.constexpr):
    """``DELTA_PASS``: accumulate ``delta += rowsum(P * dP)``; else ``dq += (dS * s_k) @ k_q``."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_dk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    for n0 in range(start, stop, BLOCK_N):
        cols = n0 + offs_n
        kt = as_fp8(tl.load(k_base + cols[None, :] * BLOCK_DQK + offs_dk[:, None]), SOFT)  # [D, BN]
        vt = as_fp8(tl.load(v_base + cols[None, :] * BLOCK_DV + offs_dv[:, None]), SOFT)  # [D, BN]
        sk = tl.load(sk_base + cols // SCALE_ROWS)
        sv = tl.load(sv_base + cols // SCALE_ROWS)
        s = tl.dot(q, kt) * qk_row[:, None] * sk[None, :]
        p = tl.math.exp2(s - lse2[:, None])
        if MASK:
            p = tl.where(visible(rows, cols, len_q, len_k, left, right, HAS_LEFT, HAS_RIGHT), p, 0.0)
        dp = tl.dot(do, vt) * do_row[:, None] * sv[None, :]
        if DELTA_PASS:
            delta += tl.sum(p * dp, 1)
        else:
            ds = p * (dp - delta[:, None]) * sk[None, :]
            dq = _mm_ds(ds, tl.trans(kt), dq, SOFT)
    return dq, delta


@triton.jit
def attn_fp8_bwd_dq_kernel(
    Q, K, V, DO, SQ, SK, SV, SDO, Lse, Delta, DQ,
    stride_dqb, stride_dqs, stride_dqh,
    seq_q, seq_k, rows_q, rows_k, group, softmax_scale, left, right,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
    D_QK: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFT: tl.constexpr,
):
    """Grid ``(query tiles, h_q, batch)``: ``delta`` (fp32 ``[b, h_q, seq_q]``, lse's layout) and
    ``dq`` (``[b, seq_q, h_q, D_QK]``, unit head-dim stride) of one query tile, each written once."""
    h = tl.program_id(1)
    b = tl.program_id(2)
    nh = tl.num_programs(1)
    m0 = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    len_q = seq_q
    len_k = seq_k
    hk = h // group
    h_kv = nh // group
    rows = m0 + tl.arange(0, BLOCK_M)
    row_ok = rows < len_q
    offs_dk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    bh = (b * nh + h).to(tl.int64)
    bhk = (b * h_kv + hk).to(tl.int64)
    q = as_fp8(tl.load(Q + bh * rows_q * BLOCK_DQK + rows[:, None] * BLOCK_DQK + offs_dk[None, :]), SOFT)
    do = as_fp8(tl.load(DO + bh * rows_q * BLOCK_DV + rows[:, None] * BLOCK_DV + offs_dv[None, :]), SOFT)
    qk_row = tl.load(SQ + bh * (rows_q // SCALE_ROWS) + rows // SCALE_ROWS) * (softmax_scale * LOG2E)
    do_row = tl.load(SDO + bh * (rows_q // SCALE_ROWS) + rows // SCALE_ROWS)
    lse2 = tl.load(Lse + bh * seq_q + rows, mask=row_ok, other=0.0) * LOG2E
    k_base = K + bhk * rows_k * BLOCK_DQK
    v_base = V + bhk * rows_k * BLOCK_DV
    sk_base = SK + bhk * (rows_k // SCALE_ROWS)
    sv_base = SV + bhk * (rows_k // SCALE_ROWS)
    dq = tl.zeros([BLOCK_M, BLOCK_DQK], dtype=tl.float32)
    delta = tl.zeros([BLOCK_M], dtype=tl.float32)
    lo, full_lo, full_hi, hi = key_ranges(m0, len_q, len_k, left, right, BLOCK_M, BLOCK_N, HAS_LEFT, HAS_RIGHT)
    for DELTA_PASS in tl.static_range(2):
        dq, delta = _dq_tiles(dq, delta, q, do, qk_row, do_row, lse2, k_base, v_base, sk_base, sv_base, rows, lo,
                              full_lo, len_q, len_k, left, right, BLOCK_N, BLOCK_DQK, BLOCK_DV, True, HAS_LEFT,
                              HAS_RIGHT, DELTA_PASS == 0, SOFT)
        dq, delta = _dq_tiles(dq, delta, q, do, qk_row, do_row, lse2, k_base, v_base, sk_base, sv_base, rows,
                              full_lo, full_hi, len_q, len_k, left, right, BLOCK_N, BLOCK_DQK, BLOCK_DV, False,
                              HAS_LEFT, HAS_RIGHT, DELTA_PASS == 0, SOFT)
        dq, delta = _dq_tiles(dq, delta, q, do, qk_row, do_row, lse2, k_base, v_base, sk_base, sv_base, rows,
                              full_hi, hi, len_q, len_k, left, right, BLOCK_N, BLOCK_DQK, BLOCK_DV, True, HAS_LEFT,
                              HAS_RIGHT, DELTA_PASS == 0, SOFT)
    tl.store(Delta + bh * seq_q + rows, delta, mask=row_ok)
    dq_ptrs = DQ + b.to(tl.int64) * stride_dqb + h * stride_dqh + rows[:, None].to(tl.int64) * stride_dqs \
        + offs_dk[None, :]
    tl.store(dq_ptrs, (dq * softmax_scale).to(DQ.dtype.element_ty), mask=row_ok[:, None] & (offs_dk < D_QK)[None, :])


@triton.jit
def _dkdv_tiles(dk, dv, k, v, cols, sk_col, sv_col, q_base, do_base, dot_base, sq_base, sdo_base, lse_base,
                delta_base, rows_q, start, stop, len_q, len_k, left, right, qk_scale,
                BLOCK_M: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr, MASK: tl.constexpr,
                HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFT: tl.constexpr):
    offs_m = tl.arange(0, BLOCK_M)
    offs_dk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    for m0 in range(start, stop, BLOCK_M):
        rows = m0 + offs_m
        qt = as_fp8(tl.load(q_base + rows[None, :] * BLOCK_DQK + offs_dk[:, None]), SOFT)  # [D, BM], d contiguous
        do_t = as_fp8(tl.load(do_base + rows[None, :] * BLOCK_DV + offs_dv[:, None]), SOFT)  # [D, BM], d contiguous
        dot_ = as_fp8(tl.load(dot_base + offs_dv[:, None] * rows_q + rows[None, :]), SOFT)  # [D, BM], rows contiguous
        sq = tl.load(sq_base + m0 // SCALE_ROWS)  # BLOCK_M divides 64: one scale of q and of dout per tile
        sdo = tl.load(sdo_base + m0 // SCALE_ROWS)
        if MASK:
            lse = tl.load(lse_base + rows, mask=rows < len_q, other=0.0)
            delta = tl.load(delta_base + rows, mask=rows < len_q, other=0.0)
        else:
            lse = tl.load(lse_base + rows)
            delta = tl.load(delta_base + rows)
        st = tl.dot(k, qt) * (sk_col * (qk_scale * sq))[:, None]
        pt = tl.math.exp2(st - (lse * LOG2E)[None, :])
        if MASK:
            pt = tl.where(tl.trans(visible(rows, cols, len_q, len_k, left, right, HAS_LEFT, HAS_RIGHT)), pt, 0.0)
        dv += tl.dot(quant_p(pt, SOFT), tl.trans(dot_)) * (sdo / P_SCALE)
        dpt = tl.dot(v, do_t) * (sv_col[:, None] * sdo)
        dst = pt * (dpt - delta[None, :]) * sq
        dk = _mm_ds(dst, tl.trans(qt), dk, SOFT)
    return dk, dv


@triton.jit
def attn_fp8_bwd_dkdv_kernel(
    Q, K, V, DO, DOT, SQ, SK, SV, SDO, Lse, Delta, DK, DV,
    stride_dkb, stride_dks, stride_dkh, stride_dvb, stride_dvs, stride_dvh,
    seq_q, seq_k, rows_q, rows_k, group, softmax_scale, left, right,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
    D_QK: tl.constexpr, D_V: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFT: tl.constexpr,
):
    """Grid ``(key tiles, h_kv, batch)``: ``dk``/``dv`` of one key tile (zero where no query sees
    it); ``BLOCK_M`` divides 64. ``DOT`` is dout_q head-dim-major; ``Delta`` from the dq kernel."""
    pid_n = tl.program_id(0)
    hk = tl.program_id(1)
    b = tl.program_id(2)
    h_kv = tl.num_programs(1)
    nh = h_kv * group
    len_q = seq_q
    len_k = seq_k
    n0 = pid_n * BLOCK_N
    cols = n0 + tl.arange(0, BLOCK_N)
    col_ok = cols < len_k
    offs_dk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    bhk = (b * h_kv + hk).to(tl.int64)
    k = as_fp8(tl.load(K + bhk * rows_k * BLOCK_DQK + cols[:, None] * BLOCK_DQK + offs_dk[None, :]), SOFT)
    v = as_fp8(tl.load(V + bhk * rows_k * BLOCK_DV + cols[:, None] * BLOCK_DV + offs_dv[None, :]), SOFT)
    sk_col = tl.load(SK + bhk * (rows_k // SCALE_ROWS) + cols // SCALE_ROWS)
    sv_col = tl.load(SV + bhk * (rows_k // SCALE_ROWS) + cols // SCALE_ROWS)
    qk_scale = softmax_scale * LOG2E
    dk = tl.zeros([BLOCK_N, BLOCK_DQK], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32)
    lo, full_lo, full_hi, hi = query_ranges(n0, len_q, len_k, left, right, BLOCK_M, BLOCK_N, HAS_LEFT, HAS_RIGHT)
    for g in range(0, group):
        bh = (b * nh + hk * group + g).to(tl.int64)
        q_base = Q + bh * rows_q * BLOCK_DQK
        do_base = DO + bh * rows_q * BLOCK_DV
        dot_base = DOT + bh * rows_q * BLOCK_DV
        sq_base = SQ + bh * (rows_q // SCALE_ROWS)
        sdo_base = SDO + bh * (rows_q // SCALE_ROWS)
        lse_base = Lse + bh * seq_q
        delta_base = Delta + bh * seq_q
        dk, dv = _dkdv_tiles(dk, dv, k, v, cols, sk_col, sv_col, q_base, do_base, dot_base, sq_base, sdo_base,
                             lse_base, delta_base, rows_q, lo, full_lo, len_q, len_k, left, right, qk_scale, BLOCK_M,
                             BLOCK_DQK, BLOCK_DV, True, HAS_LEFT, HAS_RIGHT, SOFT)
        dk, dv = _dkdv_tiles(dk, dv, k, v, cols, sk_col, sv_col, q_base, do_base, dot_base, sq_base, sdo_base,
                             lse_base, delta_base, rows_q, full_lo, full_hi, len_q, len_k, left, right, qk_scale,
                             BLOCK_M, BLOCK_DQK, BLOCK_DV, False, HAS_LEFT, HAS_RIGHT, SOFT)
        dk, dv = _dkdv_tiles(dk, dv, k, v, cols, sk_col, sv_col, q_base, do_base, dot_base, sq_base, sdo_base,
                             lse_base, delta_base, rows_q, full_hi, hi, len_q, len_k, left, right, qk_scale, BLOCK_M,
                             BLOCK_DQK, BLOCK_DV, True, HAS_LEFT, HAS_RIGHT, SOFT)
    dk = dk * softmax_scale
    mask_k = col_ok[:, None] & (offs_dk < D_QK)[None, :]
    mask_v = col_ok[:, None] & (offs_dv < D_V)[None, :]
    tl.store(DK + b.to(tl.int64) * stride_dkb + hk * stride_dkh + cols[:, None].to(tl.int64) * stride_dks
             + offs_dk[None, :], dk.to(DK.dtype.element_ty), mask=mask_k)
    tl.store(DV + b.to(tl.int64) * stride_dvb + hk * stride_dvh + cols[:, None].to(tl.int64) * stride_dvs
             + offs_dv[None, :], dv.to(DV.dtype.element_ty), mask=mask_v)
