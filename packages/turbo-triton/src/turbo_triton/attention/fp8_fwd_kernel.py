"""FP8 flash-attention forward kernel: one program per (query tile, head, sequence).

Operands come from ``fp8_quant``: ``q_q [b, h_q, rows_q, BLOCK_DQK]``, ``k_q [b, h_kv, rows_k,
BLOCK_DQK]`` and ``v_q`` head-dim-major ``[b, h_kv, BLOCK_DV, rows_k]`` (E4M3, zero padded), with
fp32 scales per (b, h, 64 rows). Per key tile:

- ``S = (q_q @ k_q^T) * s_q[row // 64] * s_k[key // 64] * softmax_scale``: an FP8 dot accumulated
  in fp32, the scales applied to the fp32 scores (exact products; fp32 rounding only).
- Online softmax in base 2 with fp32 running max ``m``, denominator ``l`` (the sum of the
  *unquantized* probabilities, so lse is the spec's) and accumulator.
- ``p = exp2(S log2e - m)`` (in [0, 1], the row maximum 1) is quantized as ``P_q = e4m3(p * 448)``
  (round to nearest even) and ``acc += (P_q @ v_q) * s_v[key tile] / 448``: an FP8 dot whose
  contraction runs over the ``BLOCK_N`` keys of one tile. ``BLOCK_N`` divides 64, so the tile lies in
  one 64-row scale block of v and the product by ``s_v / 448`` after the dot is exactly the spec's
  ``P_q/448 @ (v_q s_v)`` (no rescaling of P by v's scale, which would change P's rounding).

One departure from the spec, inherent to a one-pass forward: P is quantized relative to the running
row maximum (``p = P * exp(lse - m)``) rather than after normalization by the final lse, i.e. the
same E4M3 rounding applied to P times a per-row factor (each row's largest entry lands on 448, the
top of the E4M3 range). Its error is the same size; ``out = acc / l`` and lse are exact softmax
statistics. Writes ``out`` (q's dtype) and ``lse`` (natural log, fp32; ``-inf`` and ``out = 0`` for
a row that sees no key).
"""

import triton
import triton.language as tl

from turbo_triton.attention.common import LN2, LOG2E, key_ranges, online_softmax
from turbo_triton.quantization.numerics import encode_fp8

SCALE_ROWS = tl.constexpr(64)
P_SCALE = tl.constexpr(448.0)


@triton.jit
def as_fp8(x, SOFT: tl.constexpr):
    """E4M3 view of loaded quantized data (raw bytes under the interpreter)."""
    if SOFT:
        return x.to(tl.float8e4nv, bitcast=True)
    return x


@triton.jit
def quant_p(p, SOFT: tl.constexpr):
    """``e4m3(p * 448)`` (round to nearest even) of probabilities ``p`` in [0, 1]."""
    v = p * P_SCALE
    if SOFT:
        return encode_fp8(v, 3, 7, False).to(tl.uint8).to(tl.float8e4nv, bitcast=True)
    return v.to(tl.float8e4nv, fp_downcast_rounding="rtne")


@triton.jit
def _tiles(acc, l_i, m_i, q, qk_row, k_base, vt_base, sk_base, sv_base, rows_k, rows, start, stop, len_q, len_k,
           left, right,
           BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr, MASK: tl.constexpr,
           HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFT: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    offs_dk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    for n0 in range(start, stop, BLOCK_N):
        cols = n0 + offs_n
        kt = as_fp8(tl.load(k_base + cols[None, :] * BLOCK_DQK + offs_dk[:, None]), SOFT)  # [D, BN], d contiguous
        vt = as_fp8(tl.load(vt_base + offs_dv[:, None] * rows_k + cols[None, :]), SOFT)  # [D, BN], keys contiguous
        sk = tl.load(sk_base + n0 // SCALE_ROWS)
        sv = tl.load(sv_base + n0 // SCALE_ROWS)
        s = tl.dot(q, kt) * (qk_row * sk)[:, None]
        p, alpha, l_i, m_i = online_softmax(s, m_i, l_i, rows, cols, len_q, len_k, left, right, MASK, HAS_LEFT,
                                            HAS_RIGHT)
        pv = tl.dot(quant_p(p, SOFT), tl.trans(vt))
        acc = acc * alpha[:, None] + pv * (sv / P_SCALE)
    return acc, l_i, m_i


@triton.jit
def attn_fp8_fwd_kernel(
    Q, K, VT, SQ, SK, SV, Out, Lse,
    stride_ob, stride_os, stride_oh,
    seq_q, seq_k, rows_q, rows_k, group, softmax_scale, left, right,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
    D_V: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr, SOFT: tl.constexpr,
):
    """Grid ``(query tiles, h_q, batch)``, query tiles last-first (the longest causal rows start
    first). ``rows_q``/``rows_k``: the padded sequence lengths of the quantized tensors; ``Lse`` fp32
    ``[b, h_q, seq_q]`` contiguous; ``Out`` ``[b, seq_q, h_q, D_V]`` with a unit head-dim stride."""
    h = tl.program_id(1)
    b = tl.program_id(2)
    nh = tl.num_programs(1)
    m0 = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    len_q = seq_q
    len_k = seq_k
    hk = h // group
    h_kv = nh // group
    rows = m0 + tl.arange(0, BLOCK_M)
    offs_dk = tl.arange(0, BLOCK_DQK)
    offs_dv = tl.arange(0, BLOCK_DV)
    bh = (b * nh + h).to(tl.int64)
    bhk = (b * h_kv + hk).to(tl.int64)
    q = as_fp8(tl.load(Q + bh * rows_q * BLOCK_DQK + rows[:, None] * BLOCK_DQK + offs_dk[None, :]), SOFT)
    qk_row = tl.load(SQ + bh * (rows_q // SCALE_ROWS) + rows // SCALE_ROWS) * (softmax_scale * LOG2E)
    k_base = K + bhk * rows_k * BLOCK_DQK
    vt_base = VT + bhk * rows_k * BLOCK_DV
    sk_base = SK + bhk * (rows_k // SCALE_ROWS)
    sv_base = SV + bhk * (rows_k // SCALE_ROWS)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    lo, full_lo, full_hi, hi = key_ranges(m0, len_q, len_k, left, right, BLOCK_M, BLOCK_N, HAS_LEFT, HAS_RIGHT)
    acc, l_i, m_i = _tiles(acc, l_i, m_i, q, qk_row, k_base, vt_base, sk_base, sv_base, rows_k, rows, lo, full_lo,
                           len_q, len_k, left, right, BLOCK_N, BLOCK_DQK, BLOCK_DV, True, HAS_LEFT, HAS_RIGHT, SOFT)
    acc, l_i, m_i = _tiles(acc, l_i, m_i, q, qk_row, k_base, vt_base, sk_base, sv_base, rows_k, rows, full_lo,
                           full_hi, len_q, len_k, left, right, BLOCK_N, BLOCK_DQK, BLOCK_DV, False, HAS_LEFT,
                           HAS_RIGHT, SOFT)
    acc, l_i, m_i = _tiles(acc, l_i, m_i, q, qk_row, k_base, vt_base, sk_base, sv_base, rows_k, rows, full_hi, hi,
                           len_q, len_k, left, right, BLOCK_N, BLOCK_DQK, BLOCK_DV, True, HAS_LEFT, HAS_RIGHT, SOFT)

    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * LN2)
    row_ok = rows < len_q
    o_ptrs = Out + b.to(tl.int64) * stride_ob + h * stride_oh + rows[:, None].to(tl.int64) * stride_os + offs_dv[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_ok[:, None] & (offs_dv[None, :] < D_V))
    tl.store(Lse + bh * seq_q + rows, lse, mask=row_ok)
