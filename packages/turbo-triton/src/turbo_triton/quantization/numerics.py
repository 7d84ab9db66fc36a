"""Element and scale arithmetic of the FP8 quantization kernels (Triton ``@jit`` helpers).

Everything is written to give the TORCH reference's bits (``turbo_core.reference.quantization``):

* amax: the max of ``|x|`` taken on the int32 bits of ``|x|`` (for non-negative floats the integer
  order is the float order, and every NaN sorts above +inf), so a NaN anywhere in a group gives a
  NaN amax exactly as ``torch.amax`` does, with no float max whose NaN rule differs per target.
  The same bits make the TENSORWISE/long-ROWWISE ``atomic_max`` exact and deterministic. Compiled,
  the reductions over a tile take a NaN-keeping float max (``nan_amax``); under the interpreter,
  which runs a custom ``tl.reduce`` combiner element by element in Python, they take numpy's integer
  max of those bits: the same amax, NaN for NaN.
* FP32 scales: ``scale = (1 / max(amax, eps)) * fp8_max`` and ``scale_inv = 1 / scale``, each
  division correctly rounded (``div_rn``): torch evaluates ``fp8_max / t`` as
  ``t.reciprocal() * fp8_max`` (``Tensor.__rtruediv__``), two roundings that are replicated here.
  A NaN amax stays NaN (``torch.clamp_min`` propagates it).
* E8M0 scales: from the amax's biased exponent ``e``: ``X = max(e - 127 - emax, -127)``
  (``floor(log2(amax)) - emax`` for normal amax; subnormal and zero amax clamp to -127),
  byte ``X + 127``, or 0xFF with ``X = 0`` when amax is NaN/Inf. ``2**-X`` is a normal fp32
  (``-X`` lies in [-119, 127]) so ``x * 2**-X`` is the reference's exact float64 product
  rounded once to fp32.
* Saturation ``clamp(v, -max, max)`` keeps NaN (``torch.clamp`` does; a float min/max may not). On
  NVIDIA GPUs the FP8 conversion's own ``satfinite`` does exactly this (``HW_SAT``).
* FP8 encoding: native ``.to(fp8, rtne)`` on GPUs; under the CPU interpreter (whose own float8
  cast rounds half-up and mishandles NaN) a bit-exact software encoder of c10's conversion
  (``Float8_e4m3fn.h`` ... ``Float8_e5m2fnuz.h``): round-to-nearest-even, NaN 0x7F|sign (OCP) or
  0x80 (FNUZ, which has no negative zero). Decoding likewise (``SOFT``), and bf16 is read as
  bits and written through ``bf16_bits`` there, the interpreter's bf16 casts being inexact.

Format constexprs: ``MB`` mantissa bits (3 E4M3, 2 E5M2), ``BIAS`` exponent bias (7/15 OCP,
8/16 FNUZ), ``FNUZ``, ``FMAX`` the largest finite value, ``EMAX`` the OCP MX ``emax_elem``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from turbo_triton import _runtime

#: ``TRITON_INTERPRET=1`` when this module was imported (the interpreter and compiled kernels never mix
#: in one process): picks the interpreter's form of :func:`nan_amax`.
INTERPRETED: tl.constexpr = tl.constexpr(_runtime.interpreting())


@triton.jit
def abs_bits(x):
    """int32 bits of ``|x|`` (fp32 ``x``): ordered like the floats, NaN above +inf."""
    return x.to(tl.int32, bitcast=True) & 0x7FFFFFFF


@triton.jit
def group_max(t, BM: tl.constexpr, BN: tl.constexpr, GM: tl.constexpr, GN: tl.constexpr):
    """``[BM, BN]`` -> ``[BM // GM, BN // GN]``: the max over each ``GM x GN`` group.

    Groups spanning whole rows, whole columns or single elements of the tile reduce without the
    4-D reshape (which the compiler may lower to a layout conversion through shared memory)."""
    if GM == 1 and GN == 1:
        return t
    elif GM == 1 and GN == BN:
        return tl.max(t, axis=1, keep_dims=True)
    elif GM == BM and GN == 1:
        return tl.max(t, axis=0, keep_dims=True)
    elif GM == BM and GN == BN:
        return tl.max(tl.max(t, axis=1, keep_dims=True), axis=0, keep_dims=True)
    else:
        t = tl.reshape(t, (BM // GM, GM, BN // GN, GN))
        return tl.max(tl.max(t, axis=3), axis=1)


@triton.jit
def nan_max(a, b):
    """``max(a, b)``, NaN if either is NaN (``max.NaN``; the reduction combiner of ``nan_amax``)."""
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def nan_amax(a, axis: tl.constexpr, keep_dims: tl.constexpr = False):
    """The max of fp32 ``a`` (magnitudes: no sign bit set) along ``axis``, NaN where any element is
    NaN. Compiled: ``tl.reduce`` with :func:`nan_max`. Interpreted: the integer max of the bits
    (numpy's, where a combiner would run in Python per element), whose order is the float order
    here with every NaN above +inf."""
    if INTERPRETED:
        bits = tl.max(a.to(tl.int32, bitcast=True), axis=axis, keep_dims=keep_dims)
        return bits.to(tl.float32, bitcast=True)
    else:
        return tl.reduce(a, axis, nan_max, keep_dims=keep_dims)


@triton.jit
def group_amax(x, BM: tl.constexpr, BN: tl.constexpr, GM: tl.constexpr, GN: tl.constexpr):
    """``[BM, BN]`` fp32 -> ``[BM // GM, BN // GN]``: the int32 bits of each group's max ``|x|``
    (see ``abs_bits``: a NaN anywhere gives a NaN, here the canonical ``0x7FFFFFFF``).

    The same values as ``group_max(abs_bits(x))`` up to the NaN payload, taken with a NaN-keeping
    float max: the ``|.|`` folds into the max instruction, and on bf16 inputs the compiler takes
    the max on the packed bf16 pairs (``HMNMX2``), about a third of the integer reduction's
    instructions; nor does the tile keep a second array of bits next to ``x``."""
    a = tl.abs(x)
    if GM == 1 and GN == 1:
        r = a
    elif GM == 1 and GN == BN:
        r = nan_amax(a, 1, keep_dims=True)
    elif GM == BM and GN == 1:
        r = nan_amax(a, 0, keep_dims=True)
    elif GM == BM and GN == BN:
        r = nan_amax(nan_amax(a, 1, keep_dims=True), 0, keep_dims=True)
    else:
        a = tl.reshape(a, (BM // GM, GM, BN // GN, GN))
        r = nan_amax(nan_amax(a, 3), 1)
    return r.to(tl.int32, bitcast=True)


@triton.jit
def expand(s, BM: tl.constexpr, BN: tl.constexpr, GM: tl.constexpr, GN: tl.constexpr):
    """``[BM // GM, BN // GN]`` -> ``[BM, BN]``: each group's value on each of its elements."""
    if (GM == 1 or GM == BM) and (GN == 1 or GN == BN):
        return tl.broadcast_to(s, (BM, BN))
    else:
        s = tl.broadcast_to(s[:, None, :, None], (BM // GM, GM, BN // GN, GN))
        return tl.reshape(s, (BM, BN))


@triton.jit
def fp32_scale(amax_bits, eps, FMAX: tl.constexpr):
    """``(scale, scale_inv)`` (fp32) of groups with amax bits ``amax_bits`` (see the module doc)."""
    amax = amax_bits.to(tl.float32, bitcast=True)
    amax = tl.where(amax != amax, amax, tl.maximum(amax, eps))
    one = tl.full(amax.shape, 1.0, tl.float32)
    scale = tl.math.div_rn(one, amax) * FMAX
    return scale, tl.math.div_rn(one, scale)


@triton.jit
def mx_scale(amax_bits, EMAX: tl.constexpr):
    """``(2**-X as fp32, E8M0 byte as int32)`` of groups with amax bits ``amax_bits``."""
    e = amax_bits >> 23
    finite = e < 255
    x = tl.maximum(e - (127 + EMAX), -127)
    byte = tl.where(finite, x + 127, 255)
    x = tl.where(finite, x, 0)
    return ((127 - x) << 23).to(tl.float32, bitcast=True), byte


@triton.jit
def saturate(v, FMAX: tl.constexpr):
    """``clamp(v, -FMAX, FMAX)`` keeping NaN."""
    c = tl.minimum(tl.maximum(v, -FMAX), FMAX)
    return tl.where(v != v, v, c)


@triton.jit
def encode_fp8(v, MB: tl.constexpr, BIAS: tl.constexpr, FNUZ: tl.constexpr):
    """FP8 byte (int32) of fp32 ``v`` already within ``±max`` or NaN: c10's round-to-nearest-even."""
    bits = v.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    a = bits & 0x7FFFFFFF
    # Below the smallest normal: adding 2**(24 - BIAS - MB) rounds (fp32 RNE) to the subnormal grid.
    sub = (a.to(tl.float32, bitcast=True) + (1 << (24 - BIAS - MB))).to(tl.int32, bitcast=True)
    sub = sub - ((151 - BIAS - MB) << 23)
    odd = (a >> (23 - MB)) & 1
    nrm = (a + (((BIAS - 127) << 23) + (1 << (22 - MB)) - 1) + odd) >> (23 - MB)
    code = tl.where(a < ((128 - BIAS) << 23), sub, nrm)
    is_nan = a > 0x7F800000
    if FNUZ:
        out = tl.where(code == 0, 0, code | sign)
        out = tl.where(is_nan, 0x80, out)
    else:
        out = tl.where(is_nan, 0x7F, code) | sign
    return out


@triton.jit
def decode_fp8(byte, MB: tl.constexpr, BIAS: tl.constexpr, FNUZ: tl.constexpr):
    """fp32 value of FP8 bytes (int32 0..255)."""
    mag_bits = byte & 0x7F
    e = mag_bits >> MB
    m = mag_bits & ((1 << MB) - 1)
    nrm = (((e + (127 - BIAS)) << 23) | (m << (23 - MB))).to(tl.float32, bitcast=True)
    sub_unit = ((128 - BIAS - MB) << 23)  # bits of 2**(1 - BIAS - MB), the smallest subnormal
    sub = m.to(tl.float32) * tl.full(byte.shape, sub_unit, tl.int32).to(tl.float32, bitcast=True)
    mag = tl.where(e == 0, sub, nrm)
    special = tl.full(byte.shape, 0x7FC00000, tl.int32).to(tl.float32, bitcast=True)  # NaN
    if FNUZ:
        is_special = byte == 0x80
    elif MB == 3:
        is_special = mag_bits == 0x7F
    else:
        is_special = e == 31
        special = tl.where(m == 0, tl.full(byte.shape, 0x7F800000, tl.int32).to(tl.float32, bitcast=True),
                           special)
    mag = tl.where(is_special, special, mag)
    return tl.where((byte & 0x80) != 0, -mag, mag)


@triton.jit
def exact_fp8(x):
    """fp32 values of an FP8 tile with its NaN and Inf codes kept. Triton's interpreter converts
    FP8 by the finite formula alone (the E4M3 NaN code 0x7F reads 480, E5M2's Inf 65536): kernels
    that run there decode the bytes instead; hardware conversions are exact and need not."""
    byte = x.to(tl.uint8, bitcast=True).to(tl.int32)
    if x.dtype == tl.float8e4nv:
        return decode_fp8(byte, 3, 7, False)
    elif x.dtype == tl.float8e5:
        return decode_fp8(byte, 2, 15, False)
    elif x.dtype == tl.float8e4b8:
        return decode_fp8(byte, 3, 8, True)
    else:
        return decode_fp8(byte, 2, 16, True)


@triton.jit
def to_fp8(v, q_ptr, FMAX: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr, FNUZ: tl.constexpr,
           SOFT: tl.constexpr, HW_SAT: tl.constexpr = False):
    """``v`` (fp32) saturated and rounded to the element type of ``q_ptr`` (uint8 bytes when SOFT).

    ``HW_SAT``: the conversion saturates by itself (NVIDIA sm89+: ``cvt.rn.satfinite.e4m3x2/e5m2x2.f32``
    clamps finite overflow and +-Inf to +-max and keeps NaN, i.e. ``clamp`` then round, since the
    rounding is monotonic and max is representable), so the explicit clamp (3 instructions an
    element) is skipped."""
    if SOFT:
        return encode_fp8(saturate(v, FMAX), MB, BIAS, FNUZ).to(tl.uint8)
    if not HW_SAT:
        v = saturate(v, FMAX)
    return v.to(q_ptr.dtype.element_ty, fp_downcast_rounding="rtne")


@triton.jit
def from_fp8(q, MB: tl.constexpr, BIAS: tl.constexpr, FNUZ: tl.constexpr, SOFT: tl.constexpr):
    """fp32 value of loaded FP8 data (uint8 bytes when SOFT)."""
    if SOFT:
        return decode_fp8(q.to(tl.int32), MB, BIAS, FNUZ)
    return q.to(tl.float32)


@triton.jit
def bf16_bits(v):
    """fp32 -> bf16 round-to-nearest-even, as the int16 bits (stored through an int16 view: the
    interpreter's own fp32 -> bf16 cast truncates and flushes subnormals)."""
    bits = v.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    bits = tl.where(v != v, bits >> 16, rounded)
    return bits.to(tl.int16)


@triton.jit
def to_out(v, out_ptr, ROUND_BF16: tl.constexpr):
    """``v`` (fp32) rounded once to the element type of ``out_ptr`` (bf16 bits when ROUND_BF16)."""
    if ROUND_BF16:
        return bf16_bits(v)
    return v.to(out_ptr.dtype.element_ty)


@triton.jit
def e8m0_to_fp32(byte):
    """``2**(byte - 127)`` (fp32; byte 0 is the subnormal 2**-127), NaN for the byte 0xFF."""
    bits = tl.where(byte == 0, 0x00400000, byte << 23)
    bits = tl.where(byte == 255, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def load_f32(ptrs, mask, BF16_BITS: tl.constexpr):
    """Masked load (0 outside) as fp32; ``BF16_BITS``: bf16 read as int16 bits and widened by a
    shift (the interpreter's bf16 -> fp32 cast loses subnormals)."""
    if BF16_BITS:
        bits = tl.load(ptrs, mask=mask, other=0).to(tl.int32) << 16
        return bits.to(tl.float32, bitcast=True)
    return tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def tile_of(pid, M, N, BM: tl.constexpr, BN: tl.constexpr):
    """``(b, tm, tn, rows, cols)`` of program ``pid`` over ``[B, M, N]`` in ``BM x BN`` tiles
    (n fastest); ``b``, ``rows`` and ``cols`` are int64."""
    tiles_n = tl.cdiv(N, BN)
    tiles_m = tl.cdiv(M, BM)
    tn = pid % tiles_n
    t = pid // tiles_n
    tm = t % tiles_m
    b = (t // tiles_m).to(tl.int64)
    rows = tm.to(tl.int64) * BM + tl.arange(0, BM)
    cols = tn.to(tl.int64) * BN + tl.arange(0, BN)
    return b, tm, tn, rows, cols
