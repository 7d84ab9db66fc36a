"""Triton kernels of the fused all-to-all path (:mod:`turbo_deepep.all_to_all.fused`).

Packed rows are handled as int32 words (every field of a fused row is a multiple of 4 bytes), so
values are copied, never converted: bit-identical to the torch path.

* ``route_kernel``: grid ``(W,)``; program ``d`` scans the tokens in order and lists those with a
  valid expert on rank ``d``: ``slot_tok[d, j]`` (-1 past the count), ``pos[t, d]`` (-1: not sent),
  ``counts[d]`` (every token for ``d``, also those past ``slot``, which are not sent).
* ``pack_kernel``: grid ``(rows, column blocks)``; row ``r`` of the send buffer gets source row
  ``tok`` (identity, a row map, or the ``(d, j)`` slot table with row offsets per rank) of ``x``
  words, scale words, fp32 probs and the expert ids (valid global ids, else -1). A row with no
  source is a padding row: zero values, ids -1. In slotted mode the row's token is written out
  (``tok_out``: the send order).
* both with the symmetric-memory transport (``PUT_COUNTS`` / ``DEST`` 1, 2): the counts and the rows
  are stored into the other ranks' buffers (addresses in an int64 table) instead of local tensors.
* ``compact_kernel``: grid ``(1,)``; the received rows holding a local expert, packed to the front
  of ``R`` rows in order: ``recv_from[i]`` (``N``: none) and ``to_recv[n]`` (``R``: none).
* ``unpack_kernel``: grid ``(R, column blocks)``; result row ``r`` from received row
  ``recv_from[r]`` (or ``r``): x and scale words, local expert ids (-1 elsewhere), probs (0 where
  the id is not local), and ``counts[e]`` += 1 once per row holding local expert ``e``.
* ``reduce_kernel``: grid ``(T, column blocks)``; ``out[t] = sum over d in rank order of
  back[base_d + pos[t, d]]`` in the ``ACC`` dtype (the torch path's order: bit-identical), probs too.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _source(tok, n_src, BLOCK: tl.constexpr):
    """``(row, ok)`` as int64 vectors of ``BLOCK``: ``tok`` when it is a row of ``[0, n_src)``
    (``ok``), else row 0 (not ok)."""
    v = tl.zeros([BLOCK], tl.int64) + tok
    ok = (v >= 0) & (v < n_src)
    return tl.where(ok, v, 0), ok


@triton.jit
def _copy_words(dst, src, n, ok, write, BLOCK: tl.constexpr):
    """``dst[:n] = src[:n]`` where ``ok``, zeros where not, stored only where ``write`` (``ok`` and
    ``write``: ``BLOCK`` vectors; nothing is read where nothing is written), in ``BLOCK``-word steps."""
    for s0 in range(0, n, BLOCK):
        ss = s0 + tl.arange(0, BLOCK)
        sm = ss < n
        tl.store(dst + ss, tl.load(src + ss, mask=sm & ok & write, other=0), mask=sm & write)


@triton.jit
def route_kernel(idx_ptr, slot_ptr, pos_ptr, count_ptr, peer_ptr, T, K, per, W, SLOT, ME,
                 BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, PUT_COUNTS: tl.constexpr):
    """``PUT_COUNTS`` (the symmetric-memory transport): the count for rank ``d`` is also stored as
    int64 ``[ME, d]`` of the ``[W, W]`` count matrix at the start of every rank's buffer (``peer_ptr``:
    int64 ``[W]``, the buffers' addresses in this process)."""
    d = tl.program_id(0)
    lo = d * per
    ks = tl.arange(0, BLOCK_K)
    carry = 0
    for t0 in range(0, T, BLOCK_T):
        ts = t0 + tl.arange(0, BLOCK_T)
        tm = ts < T
        ids = tl.load(idx_ptr + ts.to(tl.int64)[:, None] * K + ks[None, :],
                      mask=tm[:, None] & (ks < K)[None, :], other=-1)
        inside = (ids >= lo) & (ids < lo + per)
        hit = (tl.sum(inside.to(tl.int32), 1) > 0) & tm
        j = carry + tl.cumsum(hit.to(tl.int32), 0) - 1
        sent = hit & (j < SLOT)
        tl.store(slot_ptr + d.to(tl.int64) * SLOT + j, ts.to(tl.int64), mask=sent)
        tl.store(pos_ptr + ts.to(tl.int64) * W + d, tl.where(sent, j, -1), mask=tm)
        carry += tl.sum(hit.to(tl.int32), 0)
    tl.store(count_ptr + d, carry.to(tl.int64))
    if PUT_COUNTS:
        for p in range(W):
            hdr = tl.load(peer_ptr + p).to(tl.pointer_type(tl.int64))
            tl.store(hdr + ME * W + d, carry.to(tl.int64))
    for j0 in range(0, SLOT, BLOCK_T):
        js = j0 + tl.arange(0, BLOCK_T)
        tl.store(slot_ptr + d.to(tl.int64) * SLOT + js, tl.full([BLOCK_T], -1, tl.int64),
                 mask=(js < SLOT) & (js >= carry))


@triton.jit
def _pack_compacted(out_ptr, row_ptr, to_recv_ptr, x_ptr, s_ptr, p_ptr, idx_ptr, peer_ptr, so_ptr, roffs_ptr, cnt_ptr,
                    r, c, n_src, row_words, W, SLOT, X_WORDS, S_WORDS, X_OFF, S_OFF, P_OFF, I_OFF, K, E, HDR_WORDS, R,
                    ME, E_L, HAS_S: tl.constexpr, HAS_P: tl.constexpr, HAS_I: tl.constexpr, BLOCK: tl.constexpr,
                    BLOCK_K: tl.constexpr, BLOCK_W: tl.constexpr):
    """``pack_kernel``'s ``DEST`` 3 (see there)."""
    d = r // SLOT
    j = r - d * SLOT
    ws = tl.arange(0, BLOCK_W)
    wm = ws < W
    hdr = tl.load(peer_ptr + ME).to(tl.pointer_type(tl.int64))
    to_d = tl.minimum(tl.load(hdr + ws * W + d, mask=wm, other=0), SLOT)  # rows each source sends rank d
    row = tl.sum(tl.where(ws < ME, to_d, 0), 0) + j
    tok = tl.load(row_ptr + r).to(tl.int64)
    base = tl.load(peer_ptr + d).to(tl.pointer_type(tl.int32))
    dst = base + HDR_WORDS + row * row_words
    if d == ME:
        dst_x = out_ptr + row * X_WORDS
        dst_s = so_ptr + row * S_WORDS
    else:
        dst_x = dst + X_OFF
        dst_s = dst + S_OFF
    cols = c * BLOCK + tl.arange(0, BLOCK)
    src, ok = _source(tok, n_src, BLOCK)
    ok = ok & ((tl.zeros([BLOCK], tl.int64) + row) < R)
    cm = cols < X_WORDS
    tl.store(dst_x + cols, tl.load(x_ptr + src * X_WORDS + cols, mask=cm & ok, other=0), mask=cm & ok)
    if c == 0:
        if HAS_S:
            _copy_words(dst_s, s_ptr + src * S_WORDS, S_WORDS, ok, ok, BLOCK)
        ks = tl.arange(0, BLOCK_K)
        km = ks < K
        src_k, ok_k = _source(tok, n_src, BLOCK_K)
        ok_k = ok_k & ((tl.zeros([BLOCK_K], tl.int64) + row) < R)
        if HAS_P:
            tl.store(dst + P_OFF + ks, tl.load(p_ptr + src_k * K + ks, mask=km & ok_k, other=0), mask=km & ok_k)
        if HAS_I:
            ids = tl.load(idx_ptr + src_k * K + ks, mask=km & ok_k, other=-1)
            good = (ids >= 0) & (ids < E)
            tl.store(dst + I_OFF + ks, tl.where(good, ids, -1).to(tl.int32), mask=km & ok_k)
        # as the receiver: slot row r of source d (= r // SLOT) lands in result row first[d] + j
        to_me = tl.minimum(tl.load(hdr + ws * W + ME, mask=wm, other=0), SLOT)  # rows each source sends me
        first = tl.sum(tl.where(ws < d, to_me, 0), 0)
        got = tl.sum(tl.where(ws == d, to_me, 0), 0)
        tl.store(to_recv_ptr + r, tl.where((j < got) & (first + j < R), first + j, R).to(tl.int64))
        if r == 0:
            tl.store(roffs_ptr + 1 + ws, tl.minimum(tl.cumsum(to_me, 0), R).to(tl.int64), mask=wm)
            tl.store(roffs_ptr + ws, tl.zeros([BLOCK_W], tl.int64), mask=ws == 0)
            for e0 in range(0, E_L, BLOCK):
                es = e0 + tl.arange(0, BLOCK)
                tl.store(cnt_ptr + es, tl.zeros([BLOCK], tl.int64), mask=es < E_L)


@triton.jit
def pack_kernel(out_ptr, row_ptr, offs_ptr, tok_out_ptr, x_ptr, s_ptr, p_ptr, idx_ptr, peer_ptr, row0_ptr,
                so_ptr, roffs_ptr, cnt_ptr,
                n_src, row_words, W, SLOT, X_WORDS, S_WORDS, X_OFF, S_OFF, P_OFF, I_OFF, K, E, HDR_WORDS, R, ME, E_L,
                ROW_MODE: tl.constexpr, DEST: tl.constexpr, IDS_ONLY_PAD: tl.constexpr, HAS_S: tl.constexpr,
                HAS_P: tl.constexpr, HAS_I: tl.constexpr, BLOCK: tl.constexpr, BLOCK_K: tl.constexpr,
                BLOCK_W: tl.constexpr):
    """``ROW_MODE``: 0 row r's source is r; 1 ``row_ptr[r]``; 2 the slot table ``row_ptr [W, SLOT]``
    at ``(d, r - offs[d])`` with ``d`` the rank whose rows ``[offs[d], offs[d + 1])`` hold r.

    ``DEST``: 0 row r of ``out``; 1 and 2 (the symmetric-memory transport) row ``row0[d] + j`` past
    ``HDR_WORDS`` of rank ``d``'s buffer (address ``peer_ptr[d]``), with ``(d, j)`` = ``(the rank
    whose offs range holds r, r - offs[d])`` (1) or ``(r // SLOT, r % SLOT)`` (2).
    ``IDS_ONLY_PAD``: a row with no source gets its ids (-1) only, its values are not written.

    ``DEST`` 3 (worst mode on the symmetric transport, compacted on the way): row ``r`` is slot
    ``(d, j) = (r // SLOT, r % SLOT)`` of the slot table ``row_ptr`` (``ROW_MODE`` 1); it lands in
    rank ``d``'s result row ``sum_{s < ME} min(C[s, d], SLOT) + j`` (``C``: the count matrix in
    this rank's buffer header, every rank's row stored there by ``route_kernel`` before the barrier),
    so the receiver needs no compaction; rows past ``R`` and empty slots are not written. Rows for
    this rank itself (``d == ME``) store ``x`` / scales straight into the results (``out_ptr`` /
    ``so_ptr``: ``[R, X_WORDS]`` / ``[R, S_WORDS]`` words), probs and ids into its own buffer. Also,
    as the receiver: ``tok_out_ptr[r]`` = the result row of received slot row ``r`` (``R``: none),
    ``roffs_ptr`` ``[W + 1]`` = the first result row from each source, then the total; ``cnt_ptr``
    ``[E_L]`` zeroed."""
    r = tl.program_id(0)
    c = tl.program_id(1)
    if DEST == 3:
        _pack_compacted(out_ptr, row_ptr, tok_out_ptr, x_ptr, s_ptr, p_ptr, idx_ptr, peer_ptr, so_ptr, roffs_ptr,
                        cnt_ptr, r, c, n_src, row_words, W, SLOT, X_WORDS, S_WORDS, X_OFF, S_OFF, P_OFF, I_OFF, K, E,
                        HDR_WORDS, R, ME, E_L, HAS_S, HAS_P, HAS_I, BLOCK, BLOCK_K, BLOCK_W)
        return
    if ROW_MODE == 2 or DEST == 1:
        ws = tl.arange(0, BLOCK_W)
        ends = tl.load(offs_ptr + 1 + ws, mask=ws < W, other=2147483647)
        d = tl.sum((ends <= r).to(tl.int32), 0)
        start = tl.load(offs_ptr + d).to(tl.int32)
    else:
        d = r // tl.maximum(SLOT, 1)
        start = d * SLOT
    if ROW_MODE == 0:
        tok = r.to(tl.int64)
    elif ROW_MODE == 1:
        tok = tl.load(row_ptr + r).to(tl.int64)
    else:
        tok = tl.load(row_ptr + d.to(tl.int64) * SLOT + (r - start)).to(tl.int64)
        if c == 0:
            tl.store(tok_out_ptr + r, tok)
    if DEST == 0:
        dst = out_ptr + r.to(tl.int64) * row_words
    else:
        base = tl.load(peer_ptr + d).to(tl.pointer_type(tl.int32))
        dst = base + HDR_WORDS + (tl.load(row0_ptr + d) + (r - start)) * row_words
    cols = c * BLOCK + tl.arange(0, BLOCK)
    src, ok = _source(tok, n_src, BLOCK)  # vectors: masks built from scalars break the interpreter
    cm = cols < X_WORDS
    wm = cm & ok if IDS_ONLY_PAD else cm
    v = tl.load(x_ptr + src * X_WORDS + cols, mask=cm & ok, other=0)
    tl.store(dst + X_OFF + cols, v, mask=wm)
    if c == 0:
        if HAS_S:
            if IDS_ONLY_PAD:
                _copy_words(dst + S_OFF, s_ptr + src * S_WORDS, S_WORDS, ok, ok, BLOCK)
            else:
                _copy_words(dst + S_OFF, s_ptr + src * S_WORDS, S_WORDS, ok, tl.full([BLOCK], 1, tl.int1), BLOCK)
        ks = tl.arange(0, BLOCK_K)
        km = ks < K
        src_k, ok_k = _source(tok, n_src, BLOCK_K)
        if HAS_P:
            pm = km & ok_k if IDS_ONLY_PAD else km
            tl.store(dst + P_OFF + ks, tl.load(p_ptr + src_k * K + ks, mask=km & ok_k, other=0), mask=pm)
        if HAS_I:
            ids = tl.load(idx_ptr + src_k * K + ks, mask=km & ok_k, other=-1)
            good = (ids >= 0) & (ids < E) & ok_k
            tl.store(dst + I_OFF + ks, tl.where(good, ids, -1).to(tl.int32), mask=km)


@triton.jit
def compact_kernel(buf_ptr, recv_from_ptr, to_recv_ptr, N, R, row_words, I_OFF, K, lo, e_l,
                   BLOCK: tl.constexpr, BLOCK_K: tl.constexpr):
    ks = tl.arange(0, BLOCK_K)
    carry = 0
    for n0 in range(0, N, BLOCK):
        ns = n0 + tl.arange(0, BLOCK)
        nm = ns < N
        ids = tl.load(buf_ptr + ns.to(tl.int64)[:, None] * row_words + I_OFF + ks[None, :],
                      mask=nm[:, None] & (ks < K)[None, :], other=-1)
        inside = (ids >= lo) & (ids < lo + e_l)
        valid = (tl.sum(inside.to(tl.int32), 1) > 0) & nm
        pos = carry + tl.cumsum(valid.to(tl.int32), 0) - 1
        keep = valid & (pos < R)
        tl.store(to_recv_ptr + ns, tl.where(keep, pos, R).to(tl.int64), mask=nm)
        tl.store(recv_from_ptr + pos, ns.to(tl.int64), mask=keep)
        carry += tl.sum(valid.to(tl.int32), 0)
    for j0 in range(0, R, BLOCK):
        js = j0 + tl.arange(0, BLOCK)
        tl.store(recv_from_ptr + js, tl.full([BLOCK], 0, tl.int64) + N, mask=(js < R) & (js >= carry))


@triton.jit
def unpack_kernel(buf_ptr, recv_from_ptr, x_ptr, s_ptr, i_ptr, p_ptr, count_ptr, offs_ptr,
                  N, row_words, X_WORDS, S_WORDS, X_OFF, S_OFF, P_OFF, I_OFF, K, lo, e_l, W, SLOT, ME,
                  IDENTITY: tl.constexpr, HAS_S: tl.constexpr, HAS_ROUTE: tl.constexpr, FROM_OFFS: tl.constexpr,
                  BLOCK: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_W: tl.constexpr):
    """``FROM_OFFS`` (worst mode on the symmetric transport, the rows compacted by the sender:
    ``pack_kernel``'s ``DEST`` 3): result row ``r`` is buffer row ``r`` while ``r < offs[W]``, from
    source ``s`` (``offs[s] <= r < offs[s + 1]``), else padding; ``recv_from_ptr[r]`` gets its slot
    row ``s * SLOT + r - offs[s]`` (``W * SLOT``: padding). This rank's own rows (``s == ME``) already
    hold ``x`` and scales (stored by the packing kernel): only their routing fields are written."""
    r = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    cols = c * BLOCK + tl.arange(0, BLOCK)
    cm = cols < X_WORDS
    if FROM_OFFS:
        ws = tl.arange(0, BLOCK_W)
        ends = tl.load(offs_ptr + 1 + ws, mask=ws < W, other=1 << 62)
        s = tl.sum((ends <= r).to(tl.int32), 0)
        start = tl.load(offs_ptr + s)
        live = r < tl.load(offs_ptr + W)
        src = tl.where(live, r, N)
        if c == 0:
            tl.store(recv_from_ptr + r, tl.where(live, s * SLOT + r - start, W * SLOT).to(tl.int64))
        write = (tl.zeros([BLOCK], tl.int64) + s) != ME  # this rank's own rows: x and scales are there
    elif IDENTITY:
        src = r
        write = cols >= 0
    else:
        src = tl.load(recv_from_ptr + r)
        write = cols >= 0
    srcv, ok = _source(src, N, BLOCK)
    row = buf_ptr + srcv * row_words
    # a row not written (this rank's own rows under FROM_OFFS) is not read either: its x is not in the buffer
    tl.store(x_ptr + r * X_WORDS + cols, tl.load(row + X_OFF + cols, mask=cm & ok & write, other=0), mask=cm & write)
    if c == 0:
        if HAS_S:
            _copy_words(s_ptr + r * S_WORDS, row + S_OFF, S_WORDS, ok, write, BLOCK)
        if HAS_ROUTE:
            ks = tl.arange(0, BLOCK_K)
            km = ks < K
            src_k, ok_k = _source(src, N, BLOCK_K)
            row_k = buf_ptr + src_k * row_words
            ids = tl.load(row_k + I_OFF + ks, mask=km & ok_k, other=-1)
            mine = (ids >= lo) & (ids < lo + e_l) & km
            local = tl.where(mine, ids - lo, -1)
            tl.store(i_ptr + r * K + ks, local.to(i_ptr.dtype.element_ty), mask=km)
            p = tl.load(row_k + P_OFF + ks, mask=km & ok_k, other=0).to(tl.float32, bitcast=True)
            tl.store(p_ptr + r * K + ks, tl.where(mine, p, 0.0), mask=km)
            earlier = (local[:, None] == local[None, :]) & (ks[None, :] < ks[:, None])
            first = tl.sum(earlier.to(tl.int32), 1) == 0
            tl.atomic_add(count_ptr + tl.where(mine, local, 0), tl.full([BLOCK_K], 1, tl.int64), mask=mine & first)


@triton.jit
def reduce_kernel(back_ptr, bp_ptr, pos_ptr, base_ptr, out_ptr, outp_ptr, H, K, W, SLOT, row_elems, row_words,
                  P_OFF, BASES: tl.constexpr, HAS_P: tl.constexpr, ACC: tl.constexpr, BF16_BITS: tl.constexpr,
                  BLOCK: tl.constexpr, BLOCK_K: tl.constexpr):
    """``back_ptr``: the returned rows as x's dtype (``row_elems`` per packed row); ``bp_ptr`` the
    same rows as fp32 words (probs at word ``P_OFF``). Row of rank ``d``'s copy of token ``t``:
    ``base_d + pos[t, d]``, ``base_d = bases[d]`` (``BASES``) or ``d * SLOT``. ``BF16_BITS`` (the
    CPU interpreter, whose bf16 conversions are not torch's): bf16 rows and output are int16 bits,
    widened by a shift and rounded to nearest even by integer arithmetic (NaN: 0x7FC0, as torch)."""
    t = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    cols = c * BLOCK + tl.arange(0, BLOCK)
    cm = cols < H
    ks = tl.arange(0, BLOCK_K)
    km = ks < K
    acc = tl.zeros([BLOCK], ACC)
    accp = tl.zeros([BLOCK_K], ACC)
    for d in range(W):
        p = tl.load(pos_ptr + t * W + d)
        if BASES:
            base = tl.load(base_ptr + d)
        else:
            base = d * SLOT
        pv = tl.zeros([BLOCK], tl.int64) + p
        rrow = base + tl.maximum(pv, 0)
        v = tl.load(back_ptr + rrow * row_elems + cols, mask=cm & (pv >= 0), other=0)
        if BF16_BITS:
            v = (v.to(tl.int32) << 16).to(tl.float32, bitcast=True)
        acc += v.to(ACC)
        if HAS_P:
            if c == 0:
                pk = tl.zeros([BLOCK_K], tl.int64) + p
                accp += tl.load(bp_ptr + (base + tl.maximum(pk, 0)) * row_words + P_OFF + ks, mask=km & (pk >= 0),
                                other=0).to(ACC)
    # through fp32, as torch converts a double to a 16-bit float (and the interpreter's fp64 -> bf16 is wrong)
    if BF16_BITS:
        f = acc.to(tl.float32)
        u = f.to(tl.uint32, bitcast=True)
        b = tl.where(f != f, 0x7FC0, (u + 0x7FFF + ((u >> 16) & 1)) >> 16)
        tl.store(out_ptr + t * H + cols, b.to(tl.uint16).to(tl.int16, bitcast=True), mask=cm)
    else:
        tl.store(out_ptr + t * H + cols, acc.to(tl.float32).to(out_ptr.dtype.element_ty), mask=cm)
    if HAS_P:
        if c == 0:
            tl.store(outp_ptr + t * K + ks, accp.to(tl.float32), mask=km)
