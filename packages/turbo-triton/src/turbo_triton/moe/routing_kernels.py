"""Triton kernels of the group-limited top-k router (``moe_routing_fwd`` / ``moe_routing_bwd``).

Forward: one program per ``BLOCK_T`` tokens holding each token's whole expert row in registers as a
``[BLOCK_T, BLOCK_G, BLOCK_P]`` tile (``G`` groups of ``P = E / G`` experts, each padded to a power
of two), so a group's experts share one row of the tile and ``E`` need not be a power of two.

Math in the compute type ``CT`` (the reference's: fp32 on a GPU, fp64 in the CPU interpreter), term
for term the reference's formulas: ``sigmoid = 1 / (1 + exp(-x))``, ``softmax = exp(x - max) / sum``,
with the correctly rounded exp (libdevice on a GPU, the same one torch's CUDA kernels call; ``EXACT``)
and the correctly rounded division (``div_rn``; Triton's fp32 ``/`` is approximate), so the raw scores
the selection compares are torch's on a GPU bit for bit (sigmoid; softmax up to the order of its
row sum).

Selection compares a key: the raw score, NaN mapped to +inf (torch's descending sort puts NaN
first), invalid or already taken entries -1 (below every score, which lies in [0, 1]). Ties go to
the lower index: a group's ``k_g`` best scores are taken one at a time (each time the first
occurrence of the maximum), summed in descending order into the group score; the
``selected_groups`` best groups (lower group first on ties) are kept; then the ``topk`` best experts
among them (lower expert index first). With ``PACK`` (fp32 keys) a key and its index travel as one
int64 (``key_bits << 32 | (IDX_MAX - index)``; the bits of a non-negative float order like the
float), so each pick is one max-reduction; otherwise a max and a min-index reduction.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from turbo_triton.normalization.kernels import to_out

IDX_MAX = tl.constexpr(1 << 20)  # > every padded index
GONE = tl.constexpr(-(1 << 63) + 1)  # a packed entry already taken (below every packed key)


@triton.jit
def _exp(x, EXACT: tl.constexpr):
    if EXACT:
        return libdevice.exp(x)
    return tl.exp(x)


@triton.jit
def _div(a, b, WIDE: tl.constexpr):
    if WIDE:
        return a / b  # fp64 division is correctly rounded
    return tl.math.div_rn(a, b)


@triton.jit
def _pack(key, idx):
    """int64 ``key_bits << 32 | (IDX_MAX - idx)``: ordered by key, then by lower index."""
    kb = key.to(tl.int32, bitcast=True).to(tl.int64)
    return (kb << 32) | (idx.to(tl.int64) * -1 + IDX_MAX)


@triton.jit
def _unpack_key(p):
    return (p >> 32).to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _scale(scale, scale_ptr, WIDE: tl.constexpr):
    """The scaling factor: an fp32 argument, or (``WIDE``) read as fp64 from ``scale_ptr`` (Triton
    passes Python floats as fp32; the fp64 reference multiplies by the double)."""
    if WIDE:
        return tl.load(scale_ptr)
    return scale


@triton.jit
def _to_out(v, ptr, WIDE: tl.constexpr, ROUND_BF16: tl.constexpr):
    """Round to the output type; fp64 goes through fp32 first, as torch converts a double to a
    half or bfloat16 (and the interpreter's direct fp64 -> bf16 conversion is wrong). ``ROUND_BF16``
    (interpreter, bf16 out): round to nearest-even by bit arithmetic (its own cast truncates)."""
    if WIDE:
        v = v.to(tl.float32)
    return to_out(v, ptr, ROUND_BF16)


@triton.jit
def _sum2(x):
    return tl.sum(tl.sum(x, 2), 1)


@triton.jit
def _raw_scores(x, valid, row_ok, SOFTMAX: tl.constexpr, WIDE: tl.constexpr, EXACT: tl.constexpr):
    """Sigmoid or softmax of a ``[BT, BG, BP]`` tile over its valid entries (row = axes 1 and 2);
    rows past the end (``~row_ok``) compute on zeros (no 0/0 there)."""
    if SOFTMAX:
        xm = tl.where(valid, x, float("-inf"))
        m = tl.where(row_ok, tl.max(tl.max(xm, 2), 1), 0.0)
        e = tl.where(valid, _exp(xm - m[:, None, None], EXACT), 0.0)
        return _div(e, tl.where(row_ok, _sum2(e), 1.0)[:, None, None], WIDE)
    return _div(tl.full(x.shape, 1.0, x.dtype), 1.0 + _exp(-x, EXACT), WIDE)


@triton.jit
def _group_mask(key, g, p, G, BLOCK_T: tl.constexpr, BLOCK_G: tl.constexpr, KG, SEL, PACK: tl.constexpr):
    """bool ``[BT, BG]``: the ``SEL`` groups with the largest sum of their ``KG`` best keys."""
    gs = tl.zeros([BLOCK_T, BLOCK_G], dtype=key.dtype)
    if PACK:
        pk = _pack(key, p[None, None, :])
        for _ in range(KG):
            best = tl.max(pk, 2)
            gs += _unpack_key(best)
            pk = tl.where(pk == best[:, :, None], GONE, pk)
    else:
        k = key
        for _ in range(KG):
            best = tl.max(k, 2)
            gs += best
            first = tl.min(tl.where(k == best[:, :, None], p[None, None, :], IDX_MAX), 2)
            k = tl.where(p[None, None, :] == first[:, :, None], -1.0, k)
    gkey = tl.where((g < G)[None, :], gs, -1.0)
    kept = tl.zeros([BLOCK_T, BLOCK_G], dtype=tl.int1)
    if PACK:
        pg = _pack(gkey, g[None, :])
        for _ in range(SEL):
            hit = pg == tl.max(pg, 1)[:, None]
            kept = kept | hit
            pg = tl.where(hit, GONE, pg)
    else:
        for _ in range(SEL):
            best = tl.max(gkey, 1)
            first = tl.min(tl.where(gkey == best[:, None], g[None, :], IDX_MAX), 1)
            hit = g[None, :] == first[:, None]
            kept = kept | hit
            gkey = tl.where(hit, -1.0, gkey)
    return kept


@triton.jit
def routing_fwd_kernel(
    x_ptr, scores_ptr, probs_ptr, map_ptr, T, E, P, G, TOPK, KG, SEL, scale, scale_ptr,
    SOFTMAX: tl.constexpr, GROUPED: tl.constexpr, CT: tl.constexpr, WIDE: tl.constexpr,
    EXACT: tl.constexpr, PACK: tl.constexpr, ROUND_BF16: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_P: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    g = tl.arange(0, BLOCK_G)
    p = tl.arange(0, BLOCK_P)
    col = g[None, :, None] * P + p[None, None, :]  # expert index [1, BG, BP]
    row_ok = rows < T
    valid = row_ok[:, None, None] & (g < G)[None, :, None] & (p < P)[None, None, :]
    offs = rows.to(tl.int64)[:, None, None] * E + col
    x = tl.load(x_ptr + offs, mask=valid, other=0.0).to(CT)

    raw = _raw_scores(x, valid, row_ok, SOFTMAX, WIDE, EXACT)
    if SOFTMAX:
        scores = raw
    else:
        total = tl.where(row_ok, _sum2(tl.where(valid, raw, 0.0)), 1.0)
        scores = _div(raw, total[:, None, None], WIDE)
    key = tl.where(valid, tl.where(raw != raw, float("inf"), raw), -1.0)
    if GROUPED:
        kept = _group_mask(key, g, p, G, BLOCK_T, BLOCK_G, KG, SEL, PACK)
        key = tl.where(kept[:, :, None], key, -1.0)

    # top-k: pick the best key TOPK times; z sums the picked raw scores in pick order (NaN as NaN).
    chosen = tl.zeros([BLOCK_T, BLOCK_G, BLOCK_P], dtype=tl.int1)
    z = tl.zeros([BLOCK_T], dtype=CT)
    if PACK:
        pk = _pack(key, col)
        for _ in range(TOPK):
            best = tl.max(tl.max(pk, 2), 1)
            hit = pk == best[:, None, None]
            chosen = chosen | hit
            pk = tl.where(hit, GONE, pk)
            v = _unpack_key(best)
            z += tl.where(v == float("inf"), float("nan"), v)
    else:
        k = key
        for _ in range(TOPK):
            best = tl.max(tl.max(k, 2), 1)
            first = tl.min(tl.min(tl.where(k == best[:, None, None], col, IDX_MAX), 2), 1)
            hit = col == first[:, None, None]
            chosen = chosen | hit
            k = tl.where(hit, -1.0, k)
            z += tl.where(best == float("inf"), float("nan"), best)

    sc = _scale(scale, scale_ptr, WIDE)
    if SOFTMAX:
        probs = raw * sc
    else:
        probs = _div(raw, z[:, None, None], WIDE) * sc
    probs = tl.where(chosen, probs, 0.0)
    tl.store(scores_ptr + offs, _to_out(scores, scores_ptr, WIDE, ROUND_BF16), mask=valid)
    tl.store(probs_ptr + offs, _to_out(probs, probs_ptr, WIDE, ROUND_BF16), mask=valid)
    tl.store(map_ptr + offs, chosen.to(map_ptr.dtype.element_ty), mask=valid)


@triton.jit
def _aux_grad(g, s, z, dsig, SOFTMAX: tl.constexpr, WIDE: tl.constexpr):
    """d/dx of ``s / z`` (sigmoid, ``z`` the row sum; ``dsig = s (1 - s)``) or of the softmax ``s``,
    against the output gradient ``g`` (``[BT, BE]``, zero where the output does not depend on x)."""
    gs = tl.sum(g * s, 1)[:, None]
    if SOFTMAX:
        return s * (g - gs)
    return (_div(g, z, WIDE) - _div(gs, z * z, WIDE)) * dsig


@triton.jit
def routing_bwd_kernel(
    x_ptr, gs_ptr, gp_ptr, map_ptr, out_ptr, T, E, scale, scale_ptr,
    SOFTMAX: tl.constexpr, HAS_GS: tl.constexpr, HAS_GP: tl.constexpr, CT: tl.constexpr,
    WIDE: tl.constexpr, EXACT: tl.constexpr, ROUND_BF16: tl.constexpr, BLOCK_T: tl.constexpr,
    BLOCK_E: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, BLOCK_E)
    row_ok = rows < T
    valid = row_ok[:, None] & (cols < E)[None, :]
    offs = rows.to(tl.int64)[:, None] * E + cols[None, :]
    x = tl.load(x_ptr + offs, mask=valid, other=0.0).to(CT)
    if SOFTMAX:
        xm = tl.where(valid, x, float("-inf"))
        e = tl.where(valid, _exp(xm - tl.where(row_ok, tl.max(xm, 1), 0.0)[:, None], EXACT), 0.0)
        s = _div(e, tl.where(row_ok, tl.sum(e, 1), 1.0)[:, None], WIDE)
        dsig = s
    else:
        s = tl.where(valid, _div(tl.full(x.shape, 1.0, CT), 1.0 + _exp(-x, EXACT), WIDE), 0.0)
        dsig = s * (1.0 - s)
    grad = tl.zeros([BLOCK_T, BLOCK_E], dtype=CT)
    if HAS_GS:
        g = tl.load(gs_ptr + offs, mask=valid, other=0.0).to(CT)
        grad += _aux_grad(g, s, tl.where(row_ok, tl.sum(s, 1), 1.0)[:, None], dsig, SOFTMAX, WIDE)
    if HAS_GP:
        m = tl.load(map_ptr + offs, mask=valid, other=0).to(CT)
        g = tl.load(gp_ptr + offs, mask=valid, other=0.0).to(CT) * m * _scale(scale, scale_ptr, WIDE)
        if SOFTMAX:
            grad += _aux_grad(g, s, s, dsig, SOFTMAX, WIDE)
        else:
            z = tl.sum(s * m, 1)[:, None]
            z = tl.where(z > 0, z, 1.0)
            grad += _aux_grad(g, s, z, dsig, SOFTMAX, WIDE) * m
    tl.store(out_ptr + offs, _to_out(grad, out_ptr, WIDE, ROUND_BF16), mask=valid)
