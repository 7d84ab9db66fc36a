"""Sparse MLA kernels: one program per (token, block of ``BLOCK_M`` query heads), walking the token's
``topk`` slots ``BLOCK_N`` at a time.

Each tile gathers the selected rows of the shared latent ``kv`` by index (a slot outside
``[0, num_kv)`` loads nothing and is masked out of the softmax), splits them into the value part
(the first ``D_V = kv_lora_rank`` channels, which are also the keys' first channels) and the rope
part (the ``D_R`` channels after it), and computes ``S = q . k`` as two dots.

- ``sparse_mla_fwd_kernel``: online softmax in base 2 (scores times ``scale * log2(e)``), fp32
  running max, denominator and ``[BLOCK_M, D_V]`` accumulator; P is rounded to the input dtype
  before ``P @ V``. A sink starts the running state at ``m = sink * log2(e)``, ``l = 1``. Writes
  ``out`` and ``lse`` (natural log; ``out = 0``, ``lse = -inf`` for a row that sees nothing).
- ``sparse_mla_bwd_kernel``: recomputes ``P = exp2(S * log2e - lse * log2e)`` from the saved
  lse; ``delta = rowsum(out * dout)`` (stored when a sink needs it), ``dP = dO V^T``,
  ``dS = P (dP - delta)`` (rounded to the input dtype before its dots); ``dq`` accumulates in
  registers and is stored once; each tile's ``dkv`` rows (``scale dS^T q``, plus ``P^T dO`` on the
  value channels) are added into an fp32 ``[num_kv, d_qk]`` buffer with atomics, so the order of
  the additions into a row varies from run to run.
"""

import triton
import triton.language as tl

from turbo_triton.attention.common import LN2, LOG2E, mm


@triton.jit
def _gather(KV, Idx, idx_base, k0, topk, num_kv, stride_kvn, offs_v, offs_r,
            BLOCK_N: tl.constexpr, D_V: tl.constexpr, D_R: tl.constexpr, HAS_ROPE: tl.constexpr):
    """The tile's slots: ``(rows (int64, 0 where invalid), valid, k_v [BLOCK_N, BLOCK_DV], k_r)``."""
    slots = k0 + tl.arange(0, BLOCK_N)
    j = tl.load(Idx + idx_base + slots, mask=slots < topk, other=-1)
    valid = (j >= 0) & (j < num_kv)
    rows = tl.where(valid, j, 0).to(tl.int64)
    base = KV + rows[:, None] * stride_kvn
    k_v = tl.load(base + offs_v[None, :], mask=valid[:, None] & (offs_v < D_V)[None, :], other=0.0)
    if HAS_ROPE:
        k_r = tl.load(base + D_V + offs_r[None, :], mask=valid[:, None] & (offs_r < D_R)[None, :], other=0.0)
    else:
        k_r = k_v
    return rows, valid, k_v, k_r


@triton.jit
def _scores(q_v, q_r, k_v, k_r, qk_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_ROPE: tl.constexpr,
            UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """``(q_v k_v^T + q_r k_r^T) * qk_scale``, fp32 ``[BLOCK_M, BLOCK_N]``."""
    s = mm(q_v, tl.trans(k_v), tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), UPCAST, PRECISION)
    if HAS_ROPE:
        s = mm(q_r, tl.trans(k_r), s, UPCAST, PRECISION)
    return s * qk_scale


@triton.jit
def sparse_mla_fwd_kernel(
    Q, KV, Idx, Sink, Out, Lse,
    stride_qt, stride_qh, stride_kvn, stride_it, stride_ot, stride_oh, stride_lt,
    num_heads, num_kv, topk, softmax_scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_DR: tl.constexpr,
    D_V: tl.constexpr, D_R: tl.constexpr, HAS_ROPE: tl.constexpr, HAS_SINK: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr,
):
    """Grid ``(T, cdiv(H, BLOCK_M))``."""
    t = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    h_ok = heads < num_heads
    offs_v = tl.arange(0, BLOCK_DV)
    offs_r = tl.arange(0, BLOCK_DR)
    v_ok = offs_v < D_V
    q_base = Q + t * stride_qt + heads[:, None] * stride_qh
    q_v = tl.load(q_base + offs_v[None, :], mask=h_ok[:, None] & v_ok[None, :], other=0.0)
    if HAS_ROPE:
        q_r = tl.load(q_base + D_V + offs_r[None, :], mask=h_ok[:, None] & (offs_r < D_R)[None, :], other=0.0)
    else:
        q_r = q_v
    qk_scale = softmax_scale * LOG2E

    if HAS_SINK:
        m_i = tl.load(Sink + heads, mask=h_ok, other=0.0).to(tl.float32) * LOG2E
        l_i = tl.full([BLOCK_M], 1.0, dtype=tl.float32)
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)

    idx_base = t * stride_it
    for k0 in range(0, topk, BLOCK_N):
        _rows, valid, k_v, k_r = _gather(KV, Idx, idx_base, k0, topk, num_kv, stride_kvn, offs_v, offs_r,
                                         BLOCK_N, D_V, D_R, HAS_ROPE)
        s = _scores(q_v, q_r, k_v, k_r, qk_scale, BLOCK_M, BLOCK_N, HAS_ROPE, UPCAST, PRECISION)
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_sub[:, None])
        alpha = tl.math.exp2(m_i - m_sub)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = mm(p.to(k_v.dtype), k_v, acc * alpha[:, None], UPCAST, PRECISION)
        m_i = m_new

    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * LN2)
    o_ptrs = Out + t * stride_ot + heads[:, None] * stride_oh + offs_v[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=h_ok[:, None] & v_ok[None, :])
    tl.store(Lse + t * stride_lt + heads, lse, mask=h_ok)


@triton.jit
def sparse_mla_bwd_kernel(
    Q, KV, Idx, Out, DOut, Lse, DQ, DKV, Delta,
    stride_qt, stride_qh, stride_kvn, stride_it, stride_ot, stride_oh, stride_dot, stride_doh,
    stride_dqt, stride_dqh, stride_dkvn, stride_lt,
    num_heads, num_kv, topk, softmax_scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_DR: tl.constexpr,
    D_V: tl.constexpr, D_R: tl.constexpr, HAS_ROPE: tl.constexpr, HAS_SINK: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr,
):
    """Grid ``(T, cdiv(H, BLOCK_M))``. ``DKV`` is fp32 ``[num_kv, d_qk]`` (zeros on entry);
    ``Delta`` fp32 ``[T, H]`` (written with ``HAS_SINK``)."""
    t = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    h_ok = heads < num_heads
    offs_v = tl.arange(0, BLOCK_DV)
    offs_r = tl.arange(0, BLOCK_DR)
    v_ok = offs_v < D_V
    r_ok = offs_r < D_R
    hv_ok = h_ok[:, None] & v_ok[None, :]
    q_base = Q + t * stride_qt + heads[:, None] * stride_qh
    q_v = tl.load(q_base + offs_v[None, :], mask=hv_ok, other=0.0)
    if HAS_ROPE:
        q_r = tl.load(q_base + D_V + offs_r[None, :], mask=h_ok[:, None] & r_ok[None, :], other=0.0)
    else:
        q_r = q_v
    do = tl.load(DOut + t * stride_dot + heads[:, None] * stride_doh + offs_v[None, :], mask=hv_ok, other=0.0)
    o = tl.load(Out + t * stride_ot + heads[:, None] * stride_oh + offs_v[None, :], mask=hv_ok, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    if HAS_SINK:
        tl.store(Delta + t * num_heads + heads, delta, mask=h_ok)
    lse = tl.load(Lse + t * stride_lt + heads, mask=h_ok, other=0.0)
    lse2 = tl.where(lse == float("-inf"), 0.0, lse) * LOG2E  # a row that sees nothing: P = 0
    qk_scale = softmax_scale * LOG2E

    dq_v = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    dq_r = tl.zeros([BLOCK_M, BLOCK_DR], dtype=tl.float32)
    idx_base = t * stride_it
    for k0 in range(0, topk, BLOCK_N):
        rows, valid, k_v, k_r = _gather(KV, Idx, idx_base, k0, topk, num_kv, stride_kvn, offs_v, offs_r,
                                        BLOCK_N, D_V, D_R, HAS_ROPE)
        s = _scores(q_v, q_r, k_v, k_r, qk_scale, BLOCK_M, BLOCK_N, HAS_ROPE, UPCAST, PRECISION)
        seen = valid[None, :] & h_ok[:, None]
        p = tl.where(seen, tl.math.exp2(s - lse2[:, None]), 0.0)
        dp = mm(do, tl.trans(k_v), tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), UPCAST, PRECISION)
        ds = tl.where(seen, p * (dp - delta[:, None]), 0.0).to(k_v.dtype)
        dq_v = mm(ds, k_v, dq_v, UPCAST, PRECISION)
        ds_t = tl.trans(ds)
        dkv_v = mm(ds_t, q_v, tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32), UPCAST, PRECISION) * softmax_scale
        dkv_v = mm(tl.trans(p.to(k_v.dtype)), do, dkv_v, UPCAST, PRECISION)
        dkv_rows = DKV + rows[:, None] * stride_dkvn
        tl.atomic_add(dkv_rows + offs_v[None, :], dkv_v, mask=valid[:, None] & v_ok[None, :], sem="relaxed")
        if HAS_ROPE:
            dq_r = mm(ds, k_r, dq_r, UPCAST, PRECISION)
            dkv_r = mm(ds_t, q_r, tl.zeros([BLOCK_N, BLOCK_DR], dtype=tl.float32), UPCAST, PRECISION) * softmax_scale
            tl.atomic_add(dkv_rows + D_V + offs_r[None, :], dkv_r, mask=valid[:, None] & r_ok[None, :],
                          sem="relaxed")

    dq_base = DQ + t * stride_dqt + heads[:, None] * stride_dqh
    tl.store(dq_base + offs_v[None, :], (dq_v * softmax_scale).to(DQ.dtype.element_ty), mask=hv_ok)
    if HAS_ROPE:
        tl.store(dq_base + D_V + offs_r[None, :], (dq_r * softmax_scale).to(DQ.dtype.element_ty),
                 mask=h_ok[:, None] & r_ok[None, :])
