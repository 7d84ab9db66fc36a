"""Triton kernels of MXFP4 quantization (1x32 blocks, E8M0 scales, packed E2M1) and dequantization.

Same tiling as the MX FP8 kernels (``kernels.quant_mx_kernel``): the input as a strided 3-D view
``[B, M, N]`` walked in ``BM x BN`` tiles of the zero-padded extent, block amax on the int32 bits
of ``|x|`` (NaN above +inf), the shared exponent by ``numerics.mx_scale`` with ``emax_elem = 2``,
``x * 2**-X`` in fp32 (exact: ``2**-X`` is a normal fp32 and the product needs no rounding beyond
the reference's one float64 -> fp32 rounding).

E2M1 encoding (software, so the GPU and the interpreter give the same bits): nearest-even on the
grid ``(0, 0.5, 1, 1.5, 2, 3, 4, 6)`` by integer rounding of the fp32 bits (a dozen integer ops an
element; a magnitude exactly on a midpoint takes the even code), saturating at 6 (Inf too),
NaN -> +0; sign bit 3
(``-0.0`` keeps it, as ``torch.signbit`` does). Packing: the even element of each pair along the
blocked dim in the low nibble, the odd one in the high nibble; col-wise tiles are transposed in
registers first so the packed pairs lie along the stored (contiguous) dim.

bf16 inputs on NVIDIA GPUs take inline-PTX encoders on bf16x2 registers: ``encode_pairs_bf16``
(row-wise, pairs in register neighbours) and ``encode_pair_bits`` (the pair's two elements from two
tensors of one layout: the col-wise quantize, loading a tile as its even and odd rows, and
with_trans); ``encode_pair_bits`` falls back to ``encode_e2m1`` in fp32 under the interpreter.

Dequantization: both nibbles of a byte decoded by bit arithmetic, times ``2**(byte - 127)``
(exact in fp32; NaN for the scale byte 0xFF), rounded once to the output type, written through
strides (col-wise data comes back transposed).
"""

from __future__ import annotations

import re

import triton
import triton.language as tl

from turbo_triton.quantization.numerics import (
    abs_bits,
    e8m0_to_fp32,
    expand,
    group_max,
    load_f32,
    mx_scale,
    tile_of,
    to_out,
)

E2M1_EMAX = tl.constexpr(2)

# Two bf16 inputs ``$1`` (pair: even element low half) scaled by ``$2`` (their ``2**-X`` as bf16) to one
# packed byte in the low half of ``$0`` (see ``encode_pairs_bf16``). PTX for sm90 (bf16x2 arithmetic).
_ENC_HEAD = tl.constexpr("""{
.reg .b32 nm, v, p, s, q, sg, c, k6, k1, k64;
mov.b32 k6, 0x40C040C0;
mov.b32 k1, 0x3F803F80;
mov.b32 k64, 0x42804280;
set.num.u32.bf16x2 nm, $1, $1;
""")
# ``v = x * 2**-X``: bf16x2 multiply (exact: the product is a bf16 unless it is below 2**-126, where the
# code is 0 whatever the rounding), or through fp32 (F32 variant: subnormal-safe on any FTZ policy).
_ENC_MUL16 = tl.constexpr("""mul.rn.bf16x2 v, $1, $2;
""")
_ENC_MUL32 = tl.constexpr("""{
.reg .b16 xl, xh, ml, mh;
.reg .f32 fxl, fxh, fml, fmh;
mov.b32 {xl, xh}, $1;
mov.b32 {ml, mh}, $2;
cvt.f32.bf16 fxl, xl;
cvt.f32.bf16 fxh, xh;
cvt.f32.bf16 fml, ml;
cvt.f32.bf16 fmh, mh;
mul.rn.f32 fxl, fxl, fml;
mul.rn.f32 fxh, fxh, fmh;
cvt.rn.bf16x2.f32 v, fxh, fxl;
}
""")
_ENC_TAIL = tl.constexpr("""and.b32 v, v, 0x7FFF7FFF;
and.b32 v, v, nm;
min.bf16x2 v, v, k6;
and.b32 p, v, 0x7F807F80;
max.bf16x2 p, p, k1;
fma.rn.bf16x2 s, p, k64, v;
sub.s32 c, s, p;
sub.s32 q, p, 0x3F803F80;
shr.u32 q, q, 6;
add.s32 c, c, q;
sub.s32 c, c, 0x03000300;
shr.u32 sg, $1, 12;
and.b32 sg, sg, 0x00080008;
and.b32 sg, sg, nm;
or.b32 c, c, sg;
shr.u32 q, c, 12;
and.b32 q, q, 0xF0;
and.b32 c, c, 0xF;
or.b32 $0, c, q;
}""")
_ENC_ASM16 = tl.constexpr(_ENC_HEAD.value + _ENC_MUL16.value + _ENC_TAIL.value)
_ENC_ASM32 = tl.constexpr(_ENC_HEAD.value + _ENC_MUL32.value + _ENC_TAIL.value)


def _pair_reg(x: str, dst: str, f32mul: bool) -> str:
    """PTX: the codes of the two bf16 lanes of register ``x`` scaled by ``$3`` (the lanes' ``2**-X``),
    each lane's code (0..15, sign bit 3) in the low bits of that lane of ``dst``: the arithmetic of
    ``_ENC_HEAD`` .. ``_ENC_TAIL`` up to the sign, the lanes kept apart."""
    sub = {"$1": x, "$2": "$3"}
    mul = _ENC_MUL32.value if f32mul else _ENC_MUL16.value
    tail = _ENC_TAIL.value.split("shr.u32 q, c, 12;")[0].replace("or.b32 c, c, sg;", f"or.b32 {dst}, c, sg;")
    text = _ENC_HEAD.value + mul + tail + "}\n"
    return re.sub(r"\$[12]", lambda t: sub[t.group(0)], text)


def _pair_asm(f32mul: bool) -> str:
    """PTX of ``encode_pair_bits``: ``$1`` the even elements, ``$2`` the odd ones of two pairs
    (one pair per 16-bit lane), ``$3`` their ``2**-X``; lane ``i`` of ``$0``: the byte
    ``code($1.i) | code($2.i) << 4``. No lane mixes with the other, so the pairs are right in any
    register layout (``pack=2`` only puts two pairs in one instance)."""
    return ("{\n.reg .b32 ce, co;\n" + _pair_reg("$1", "ce", f32mul) + _pair_reg("$2", "co", f32mul)
            + "shl.b32 co, co, 4;\nor.b32 $0, ce, co;\n}")


_PAIR_ASM16 = tl.constexpr(_pair_asm(False))
_PAIR_ASM32 = tl.constexpr(_pair_asm(True))


# One packed byte ``$2`` (two E2M1 codes, the even element in the low nibble) times ``$3`` (the group's
# ``2**(s - 127)`` as bf16, in both halves) to two bf16 values ``$0`` (even), ``$1`` (odd). The
# magnitudes come from two byte tables by ``prmt`` (``L``/``H``: the low/high byte of the bf16 of
# ``(0, 0.5, 1, 1.5, 2, 3, 4, 6)``), the signs from bits 3 and 7 moved to bits 15 and 31 by one
# multiply (``b << 12 | b << 24``, no overlap for a byte), then one bf16x2 multiply: exact
# operands, so it is the exact product rounded once to bf16, as the reference rounds it (subnormal
# results included; NaN for the scale byte 0xFF).
_DEC_ASM = tl.constexpr("""{
.reg .b32 t, l, h, m, u, tl0, tl1, th0, th1;
mov.b32 tl0, 0xC0800000;
mov.b32 tl1, 0xC0804000;
mov.b32 th0, 0x3F3F3F00;
mov.b32 th1, 0x40404040;
and.b32 t, $2, 0x77;
prmt.b32 l, tl0, tl1, t;
prmt.b32 h, th0, th1, t;
prmt.b32 m, l, h, 0x5140;
mul.lo.u32 u, $2, 0x01001000;
and.b32 u, u, 0x80008000;
or.b32 m, m, u;
mul.rn.bf16x2 m, m, $3;
mov.b32 {$0, $1}, m;
}""")


@triton.jit
def encode_e2m1(v):
    """E2M1 codes (int32 0..15) of fp32 ``v`` already scaled into range (see the module doc).

    Integer rounding as ``numerics.encode_fp8`` does it (1 mantissa bit, bias 1): below 1.0 the
    float add of ``2**22`` rounds (RNE) onto the subnormal grid of 0.5; from 1.0 up the exponent is
    rebiased and the mantissa rounded to nearest-even on the bits; magnitudes are clamped to 6 first.
    """
    a = v.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    is_nan = a > 0x7F800000
    a = tl.minimum(a, 0x40C00000)  # 6.0: saturate (Inf too; NaN handled below)
    sub = (a.to(tl.float32, bitcast=True) + 4194304.0).to(tl.int32, bitcast=True) - (149 << 23)
    odd = (a >> 22) & 1
    nrm = (a - (126 << 23) + (1 << 21) - 1 + odd) >> 22
    code = tl.where(a < 0x3F800000, sub, nrm)
    neg = v.to(tl.int32, bitcast=True) < 0
    return tl.where(is_nan, 0, code + tl.where(neg, 8, 0))


@triton.jit
def decode_e2m1(code):
    """fp32 values of E2M1 codes (int32 0..15): ``±(0, 0.5, 1, 1.5, 2, 3, 4, 6)[code & 7]``."""
    e = (code >> 1) & 3
    m = code & 1
    mag = tl.where(e > 0, ((e + 126) << 23) | (m << 22), tl.where(m == 1, 0x3F000000, 0))
    return (mag | ((code & 8) << 28)).to(tl.float32, bitcast=True)


@triton.jit
def encode_pairs_bf16(x, m, F32MUL: tl.constexpr = False):
    """Packed MXFP4 bytes of bf16 ``x`` (``[..., 2K]``, pairs along the last dim) times ``m`` (bf16
    ``2**-X``, equal within a pair): int16 ``[..., 2K]``, the byte of pair ``k`` at ``2k`` (0 at
    ``2k + 1``). NVIDIA sm90 only (inline PTX on bf16x2 pairs, about 9 instructions an element
    against ``encode_e2m1``'s 20 in fp32): ``v = |x| * m`` (NaN -> 0 by a lane mask, then
    ``min(v, 6)``); ``p = max(2**floor(log2 v), 1)``; ``s = v + 64 p`` in one bf16 FMA, whose
    round-to-nearest-even puts ``v`` on the E2M1 grid of its binade (ulp of ``64 p`` = half the grid
    step ``p / 2``); the code is ``bits(s) - bits(64 p)`` plus ``2 log2 p`` (lane-wise integer
    arithmetic on the pair, each lane's result non-negative so no borrow crosses lanes); sign
    bit 3 from ``x`` unless NaN. Checked against the reference for every bf16 value and every
    scale exponent (a bit-level emulation), and bit for bit on the GPU."""
    if F32MUL:
        return tl.inline_asm_elementwise(_ENC_ASM32, "=r,r,r", [x, m], dtype=tl.int16, is_pure=True, pack=2)
    return tl.inline_asm_elementwise(_ENC_ASM16, "=r,r,r", [x, m], dtype=tl.int16, is_pure=True, pack=2)


@triton.jit
def encode_pair_bits(x0, x1, m, ASM: tl.constexpr, F32MUL: tl.constexpr = False):
    """Packed MXFP4 bytes (int16, ``code(x0) | code(x1) << 4``) of pairs given as two tensors of bf16
    bits (int16) of one shape: ``x0`` the even elements, ``x1`` the odd ones, ``m`` the bf16 bits of
    their ``2**-X``. ASM (NVIDIA sm90): ``encode_pairs_bf16``'s bf16x2 arithmetic on two pairs an
    instance, each 16-bit lane a pair of its own, so it holds in any register layout (the pair is
    formed by the caller: a split of the tile, or two loads). Else ``encode_e2m1`` in fp32 (the same
    bits: ``x * 2**-X`` is exact in fp32, and where bf16 would round it, below ``2**-126``, the code
    is 0 either way)."""
    if ASM:
        if F32MUL:
            return tl.inline_asm_elementwise(_PAIR_ASM32, "=r,r,r,r", [x0, x1, m], dtype=tl.int16, is_pure=True,
                                             pack=2)
        return tl.inline_asm_elementwise(_PAIR_ASM16, "=r,r,r,r", [x0, x1, m], dtype=tl.int16, is_pure=True, pack=2)
    mf = (m.to(tl.int32) << 16).to(tl.float32, bitcast=True)
    c0 = encode_e2m1((x0.to(tl.int32) << 16).to(tl.float32, bitcast=True) * mf)
    c1 = encode_e2m1((x1.to(tl.int32) << 16).to(tl.float32, bitcast=True) * mf)
    return (c0 | (c1 << 4)).to(tl.int16)


@triton.jit
def _bf16_scale(amax):
    """``(2**-X as bf16 bits (int16), E8M0 byte (int32))`` of groups whose max ``|x|`` has the bf16
    bits ``amax`` (``numerics.mx_scale`` on the bf16 exponent)."""
    e = amax.to(tl.int32) >> 7  # NaN/Inf: 255
    finite = e < 255
    xe = tl.maximum(e - (127 + E2M1_EMAX), -127)
    byte = tl.where(finite, xe + 127, 255)
    xe = tl.where(finite, xe, 0)
    return ((127 - xe) << 7).to(tl.int16), byte


@triton.jit
def _pair_rows_amax(xe, xo, BH: tl.constexpr, BN: tl.constexpr):
    """``[BH // 16, BN]``: the max ``|x|`` bits of each 32-row group of a tile given as its even rows
    ``xe`` and odd rows ``xo`` (``[BH, BN]`` bf16 bits each)."""
    a = tl.maximum(xe & 0x7FFF, xo & 0x7FFF)
    return tl.max(tl.reshape(a, (BH // 16, 16, BN)), axis=1)


@triton.jit
def _pairs_col(xe, xo, amax, p0, cols, lim_m, lim_n, q_ptr, sq_r, s_ptr, ss_r,
               BH: tl.constexpr, BN: tl.constexpr, GN: tl.constexpr, ASM: tl.constexpr, F32MUL: tl.constexpr):
    """Col-wise MXFP4 of a tile given as its even rows ``xe`` and odd rows ``xo`` (``[BH, BN]`` bf16
    bits; pair-rows ``pr = p0 + arange(BH)``, columns ``cols``), groups of 32 rows x ``GN``
    columns with the row-group amax ``amax`` (``_pair_rows_amax``): bytes at
    ``q_ptr + col * sq_r + pr``, scales at ``s_ptr + col * ss_r + pr // 16``, inside
    ``2 pr < lim_m``, ``col < lim_n``. Only the packed bytes are transposed for the store."""
    if GN > 1:
        amax = expand(tl.max(tl.reshape(amax, (BH // 16, BN // GN, GN)), axis=2), BH // 16, BN, 1, GN)
    m, byte = _bf16_scale(amax)
    mm = tl.reshape(tl.broadcast_to(m[:, None, :], (BH // 16, 16, BN)), (BH, BN))
    packed = encode_pair_bits(xe, xo, mm, ASM, F32MUL)  # [BH, BN]: the byte of rows (2 pr, 2 pr + 1)
    pr = p0 + tl.arange(0, BH)
    mask = (cols < lim_n)[:, None] & (pr < lim_m // 2)[None, :]
    tl.store(q_ptr + cols[:, None] * sq_r + pr[None, :], tl.trans(packed).to(tl.uint8), mask=mask)
    blk = p0 // 16 + tl.arange(0, BH // 16)
    s_mask = (blk < tl.cdiv(lim_m, 32))[:, None] & (cols < lim_n)[None, :]
    tl.store(s_ptr + cols[None, :] * ss_r + blk[:, None], byte.to(tl.uint8), mask=s_mask)


@triton.jit
def _pairs_row(x, amax, rows, c0, lim_m, lim_n, q_ptr, sq_r, s_ptr, ss_r,
               BR: tl.constexpr, BN: tl.constexpr, ASM: tl.constexpr, F32MUL: tl.constexpr):
    """Row-wise MXFP4 of ``x`` (``[BR, BN]`` bf16 bits at global ``rows``, columns from ``c0``) with
    the per-row block amax ``amax`` (``[BR, BN // 32]``): the pairs split off the last dim, bytes at
    ``q_ptr + row * sq_r + c // 2``, scales at ``s_ptr + row * ss_r + c // 32``, inside
    ``row < lim_m``, ``c < lim_n``."""
    m, byte = _bf16_scale(amax)
    mm = tl.reshape(tl.broadcast_to(m[:, :, None], (BR, BN // 32, 16)), (BR, BN // 2))
    x0, x1 = tl.split(tl.reshape(x, (BR, BN // 2, 2)))
    packed = encode_pair_bits(x0, x1, mm, ASM, F32MUL)
    # Byte columns written as runs of 4 (what the split leaves a thread of a 16-byte load), so the
    # store takes the encoder's layout: a 16-byte run would cost a layout conversion through shared
    # memory of each half tile.
    j = tl.arange(0, BN // 2)
    pc = c0 // 2 + (j // 4) * 4 + j % 4
    mask = (rows < lim_m)[:, None] & (pc < lim_n // 2)[None, :]
    tl.store(q_ptr + rows[:, None] * sq_r + pc[None, :], packed.to(tl.uint8), mask=mask)
    blk = c0 // 32 + tl.arange(0, BN // 32)
    s_mask = (rows < lim_m)[:, None] & (blk < tl.cdiv(lim_n, 32))[None, :]
    tl.store(s_ptr + rows[:, None] * ss_r + blk[None, :], byte.to(tl.uint8), mask=s_mask)


@triton.jit
def _row_amax(x, BR: tl.constexpr, BN: tl.constexpr):
    """``[BR, BN // 32]``: the max ``|x|`` bits of each 32-wide block of each row (bf16 bits)."""
    return tl.max(tl.reshape(x & 0x7FFF, (BR, BN // 32, 32)), axis=2)


@triton.jit
def _fp4_fast_part(xb, rows, c0, lim_r, lim_c, q_ptr, sq_r, s_ptr, ss_r,
                   BR: tl.constexpr, BC: tl.constexpr, GR: tl.constexpr, F32MUL: tl.constexpr):
    """MXFP4 of a bf16 tile ``xb [BR, BC]`` whose groups (``GR x 32``) run along dim 1: bytes at
    ``q_ptr + r * sq_r + c // 2``, scales at ``s_ptr + r * ss_r + c // 32`` for ``r < lim_r``,
    ``c < lim_c`` (``rows``: the tile's row indices, ``c0``: its first column)."""
    a = xb.to(tl.int16, bitcast=True) & 0x7FFF  # |x| bits: ordered like the floats, NaN above +inf
    if GR == 1:
        amax = tl.max(tl.reshape(a, (BR, BC // 32, 32)), axis=2)
    else:
        amax = tl.max(tl.max(tl.reshape(a, (BR // GR, GR, BC // 32, 32)), axis=3), axis=1)
        amax = expand(amax, BR, BC // 32, GR, 1)
    e = amax.to(tl.int32) >> 7  # [BR, BC/32]; NaN/Inf: 255
    finite = e < 255
    xe = tl.maximum(e - (127 + E2M1_EMAX), -127)
    byte = tl.where(finite, xe + 127, 255)
    xe = tl.where(finite, xe, 0)
    m = ((127 - xe) << 7).to(tl.int16).to(tl.bfloat16, bitcast=True)
    m = tl.reshape(tl.broadcast_to(m[:, :, None], (BR, BC // 32, 32)), (BR, BC))
    packed, _ = tl.split(tl.reshape(encode_pairs_bf16(xb, m, F32MUL), (BR, BC // 2, 2)))
    pc = c0 // 2 + tl.arange(0, BC // 2)
    mask = (rows < lim_r)[:, None] & (pc < lim_c // 2)[None, :]
    tl.store(q_ptr + rows[:, None] * sq_r + pc[None, :], packed.to(tl.uint8), mask=mask)
    blk = c0 // 32 + tl.arange(0, BC // 32)
    s_mask = (rows < lim_r)[:, None] & (blk < tl.cdiv(lim_c, 32))[None, :]
    tl.store(s_ptr + rows[:, None] * ss_r + blk[None, :], byte.to(tl.uint8), mask=s_mask)


@triton.jit
def _fp4_part(x, bits, b, tm, tn, rows, cols, lim_m, lim_n, q_ptr, sq_b, sq_r, s_ptr, ss_b, ss_r,
              BM: tl.constexpr, BN: tl.constexpr, GM: tl.constexpr, GN: tl.constexpr, ROW: tl.constexpr):
    """One MXFP4 direction of tile ``x`` (``[BM, BN]`` of ``[B, M, N]``). ROW: bytes ``[B, M, N_pad/2]``
    (pairs along N), scales ``[B, M, N_pad/32]``; else bytes ``[B, N, M_pad/2]`` (pairs along M),
    scales ``[B, N, M_pad/32]``. Stores inside ``rows < lim_m``, ``cols < lim_n`` (even limits)."""
    mult, byte = mx_scale(group_max(bits, BM, BN, GM, GN), E2M1_EMAX)
    codes = encode_e2m1(x * expand(mult, BM, BN, GM, GN))
    if ROW:
        lo, hi = tl.split(tl.reshape(codes, (BM, BN // 2, 2)))
        pc = tn.to(tl.int64) * (BN // 2) + tl.arange(0, BN // 2)
        mask = (rows < lim_m)[:, None] & (pc < lim_n // 2)[None, :]
        tl.store(q_ptr + b * sq_b + rows[:, None] * sq_r + pc[None, :], (lo | (hi << 4)).to(tl.uint8), mask=mask)
        per_row = expand(byte, BM, BN // 32, GM, 1)  # [BM, BN/32]: each row's byte of each block
        blk = tn.to(tl.int64) * (BN // 32) + tl.arange(0, BN // 32)
        s_mask = (rows < lim_m)[:, None] & (blk < tl.cdiv(lim_n, 32))[None, :]
        tl.store(s_ptr + b * ss_b + rows[:, None] * ss_r + blk[None, :], per_row.to(tl.uint8), mask=s_mask)
    else:
        lo, hi = tl.split(tl.reshape(tl.trans(codes), (BN, BM // 2, 2)))
        pr = tm.to(tl.int64) * (BM // 2) + tl.arange(0, BM // 2)
        mask = (cols < lim_n)[:, None] & (pr < lim_m // 2)[None, :]
        tl.store(q_ptr + b * sq_b + cols[:, None] * sq_r + pr[None, :], (lo | (hi << 4)).to(tl.uint8), mask=mask)
        per_col = expand(byte, BM // 32, BN, 1, GN)  # [BM/32, BN]: each column's byte of each block
        blk = tm.to(tl.int64) * (BM // 32) + tl.arange(0, BM // 32)
        s_mask = (blk < tl.cdiv(lim_m, 32))[:, None] & (cols < lim_n)[None, :]
        tl.store(s_ptr + b * ss_b + cols[None, :] * ss_r + blk[:, None], per_col.to(tl.uint8), mask=s_mask)


@triton.jit
def quant_fp4_kernel(x_ptr, q_ptr, s_ptr, M, N, M_EXT, N_EXT, sx_b, sx_m, sx_n, sq_b, sq_r, ss_b, ss_r,
                     BM: tl.constexpr, BN: tl.constexpr, GM: tl.constexpr, GN: tl.constexpr, ROW: tl.constexpr,
                     X_BITS: tl.constexpr, FAST: tl.constexpr = False, F32MUL: tl.constexpr = False,
                     PAIRS: tl.constexpr = False, ASM: tl.constexpr = False):
    """MXFP4 of ``x [B, M, N]`` over the padded extent ``[M_EXT, N_EXT]`` (row-wise ``[M, N_pad]``,
    col-wise ``[M_pad, N]``); elements outside ``[M, N]`` read as zero. FAST (row-wise bf16 ``x`` on
    NVIDIA): ``_fp4_fast_part`` on the tile. The encoder pairs register neighbours (``pack=2``), so
    FAST is right only where each thread holds runs of consecutive elements along the rows: the
    launcher takes it on vectorized loads only (``fp4._fast``). PAIRS (bf16 ``x`` as int16 bits):
    the pair kernels, whose encoder (``encode_pair_bits``) takes the two elements of each pair as
    two tensors, right in any layout: col-wise the tile is loaded as its even and odd rows
    (``_pairs_col``), row-wise the pairs are split off the last dim (``_pairs_row``)."""
    b, tm, tn, rows, cols = tile_of(tl.program_id(0), M_EXT, N_EXT, BM, BN)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    if PAIRS and not ROW:
        p0 = tm.to(tl.int64) * (BM // 2)
        r0 = 2 * (p0 + tl.arange(0, BM // 2))
        ptrs = x_ptr + b * sx_b + r0[:, None] * sx_m + cols[None, :] * sx_n
        xe = tl.load(ptrs, mask=(r0 < M)[:, None] & (cols < N)[None, :], other=0)
        xo = tl.load(ptrs + sx_m, mask=(r0 + 1 < M)[:, None] & (cols < N)[None, :], other=0)
        _pairs_col(xe, xo, _pair_rows_amax(xe, xo, BM // 2, BN), p0, cols, M_EXT, N_EXT, q_ptr + b * sq_b, sq_r,
                   s_ptr + b * ss_b, ss_r, BM // 2, BN, GN, ASM, F32MUL)
    elif PAIRS:
        xb = tl.load(x_ptr + b * sx_b + rows[:, None] * sx_m + cols[None, :] * sx_n, mask=mask, other=0)
        amax = _row_amax(xb, BM, BN)
        if GM > 1:
            amax = expand(tl.max(tl.reshape(amax, (BM // GM, GM, BN // 32)), axis=1), BM, BN // 32, GM, 1)
        _pairs_row(xb, amax, rows, tn.to(tl.int64) * BN, M_EXT, N_EXT, q_ptr + b * sq_b, sq_r, s_ptr + b * ss_b,
                   ss_r, BM, BN, ASM, F32MUL)
    elif FAST and ROW:
        xb = tl.load(x_ptr + b * sx_b + rows[:, None] * sx_m + cols[None, :] * sx_n, mask=mask, other=0.0)
        _fp4_fast_part(xb, rows, tn.to(tl.int64) * BN, M_EXT, N_EXT, q_ptr + b * sq_b, sq_r, s_ptr + b * ss_b,
                       ss_r, BM, BN, GM, F32MUL)
    else:
        x = load_f32(x_ptr + b * sx_b + rows[:, None] * sx_m + cols[None, :] * sx_n, mask, X_BITS)
        _fp4_part(x, abs_bits(x), b, tm, tn, rows, cols, M_EXT, N_EXT, q_ptr, sq_b, sq_r, s_ptr, ss_b, ss_r,
                  BM, BN, GM, GN, ROW)


@triton.jit
def fp4_with_trans_kernel(x_ptr, qr_ptr, sr_ptr, qc_ptr, sc_ptr, M, N, M_PAD, N_PAD, sx_b, sx_m, sx_n,
                          BM: tl.constexpr, BN: tl.constexpr, R_GM: tl.constexpr, C_GN: tl.constexpr,
                          X_BITS: tl.constexpr, PAIRS: tl.constexpr = False, ASM: tl.constexpr = False,
                          F32MUL: tl.constexpr = False):
    """Row-wise (``[B, M, N_pad/2]``) and col-wise (``[B, N, M_pad/2]``) MXFP4 copies of
    ``x [B, M, N]`` from one read of each tile of the padded ``[M_pad, N_pad]`` extent. PAIRS (bf16
    ``x`` as int16 bits): the tile loaded as its even and odd rows, which are the col-wise pairs;
    the row-wise pairs split off each half's last dim (``_pairs_row``, ``_pairs_col``). Else the
    fp32 encoder (``_fp4_part``)."""
    b, tm, tn, rows, cols = tile_of(tl.program_id(0), M_PAD, N_PAD, BM, BN)
    if PAIRS:
        c0 = tn.to(tl.int64) * BN
        # batch offsets in int64 (b first): M * (N_PAD // 2) alone is an int32 product
        qr = qr_ptr + b * M * (N_PAD // 2)
        sr = sr_ptr + b * M * (N_PAD // 32)
        p0 = tm.to(tl.int64) * (BM // 2)
        r0 = 2 * (p0 + tl.arange(0, BM // 2))
        ptrs = x_ptr + b * sx_b + r0[:, None] * sx_m + cols[None, :] * sx_n
        xe = tl.load(ptrs, mask=(r0 < M)[:, None] & (cols < N)[None, :], other=0)
        xo = tl.load(ptrs + sx_m, mask=(r0 + 1 < M)[:, None] & (cols < N)[None, :], other=0)
        ae = _row_amax(xe, BM // 2, BN)
        ao = _row_amax(xo, BM // 2, BN)
        if R_GM > 1:
            g = tl.max(tl.reshape(tl.maximum(ae, ao), (BM // 32, 16, BN // 32)), axis=1)  # 32 x 32 blocks
            ae = expand(g, BM // 2, BN // 32, 16, 1)
            ao = ae
        _pairs_row(xe, ae, r0, c0, M, N_PAD, qr, N_PAD // 2, sr, N_PAD // 32, BM // 2, BN, ASM, F32MUL)
        _pairs_row(xo, ao, r0 + 1, c0, M, N_PAD, qr, N_PAD // 2, sr, N_PAD // 32, BM // 2, BN, ASM, F32MUL)
        _pairs_col(xe, xo, _pair_rows_amax(xe, xo, BM // 2, BN), p0, cols, M_PAD, N,
                   qc_ptr + b * N * (M_PAD // 2), M_PAD // 2, sc_ptr + b * N * (M_PAD // 32), M_PAD // 32,
                   BM // 2, BN, C_GN, ASM, F32MUL)
        return
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    x = load_f32(x_ptr + b * sx_b + rows[:, None] * sx_m + cols[None, :] * sx_n, mask, X_BITS)
    bits = abs_bits(x)
    _fp4_part(x, bits, b, tm, tn, rows, cols, M, N_PAD, qr_ptr + b * M * (N_PAD // 2), 0, N_PAD // 2,
              sr_ptr + b * M * (N_PAD // 32), 0, N_PAD // 32, BM, BN, R_GM, 32, True)
    _fp4_part(x, bits, b, tm, tn, rows, cols, M_PAD, N, qc_ptr + b * N * (M_PAD // 2), 0, M_PAD // 2,
              sc_ptr + b * N * (M_PAD // 32), 0, M_PAD // 32, BM, BN, 32, C_GN, False)


@triton.jit
def fp4_dequant_kernel(x_ptr, s_ptr, out_ptr, R, H, sx_b, sx_r, ss_b, ss_r, so_b, so_r, so_c,
                       BM: tl.constexpr, BH: tl.constexpr, ROUND_BF16: tl.constexpr, TRANS: tl.constexpr = False,
                       ASM: tl.constexpr = False):
    """``out[b, r, c]`` (at ``so_*``) ``= e2m1(q[b, r, c // 2] nibble c % 2) * 2**(scale[b, r, c // 32] - 127)``
    over packed data ``[B, R, H]`` (``H`` bytes a row, ``C = 2H`` values). Tiles of 16 bytes or more
    load each scale once a group; TRANS (col-wise data, written back transposed): the tile is
    stored transposed (``[2 BH, BM]``) so that consecutive ``r`` are consecutive in the output. ASM
    (NVIDIA, BH >= 16): each byte decoded to a bf16 pair by ``_DEC_ASM`` (about 4 instructions an
    element against about 25); bf16 out through an int16 view of ``out_ptr``. fp32 / fp16 out widen
    that pair to fp32 and round it once: an E2M1 value times a power of two has at most two
    significant bits, so the bf16 product is the exact fp32 product the reference rounds."""
    b, tm, tn, rows, hs = tile_of(tl.program_id(0), R, H, BM, BH)
    mask = (rows < R)[:, None] & (hs < H)[None, :]
    byte = tl.load(x_ptr + b * sx_b + rows[:, None] * sx_r + hs[None, :], mask=mask, other=0).to(tl.int32)
    if ASM:
        blk = tn.to(tl.int64) * (BH // 16) + tl.arange(0, BH // 16)
        b_mask = (rows < R)[:, None] & (blk < tl.cdiv(H, 16))[None, :]
        sb = tl.load(s_ptr + b * ss_b + rows[:, None] * ss_r + blk[None, :], mask=b_mask, other=127).to(tl.int32)
        sc = tl.where(sb == 0, 0x40, tl.where(sb == 255, 0x7FC0, sb << 7))  # bf16 bits of 2**(s - 127)
        lo, hi = tl.inline_asm_elementwise(_DEC_ASM, "=h,=h,r,r", [byte, expand(sc | (sc << 16), BM, BH, 1, 16)],
                                           dtype=(tl.int16, tl.int16), is_pure=True, pack=1)
        v = tl.reshape(tl.join(lo, hi), (BM, 2 * BH))
        if out_ptr.dtype.element_ty != tl.int16:  # fp32 / fp16 out: the exact bf16 value widened, then rounded once
            v = (v.to(tl.int32) << 16).to(tl.float32, bitcast=True).to(out_ptr.dtype.element_ty)
    else:
        if BH >= 16:
            blk = tn.to(tl.int64) * (BH // 16) + tl.arange(0, BH // 16)
            b_mask = (rows < R)[:, None] & (blk < tl.cdiv(H, 16))[None, :]
            sb = tl.load(s_ptr + b * ss_b + rows[:, None] * ss_r + blk[None, :], mask=b_mask, other=127)
            scale = expand(e8m0_to_fp32(sb.to(tl.int32)), BM, BH, 1, 16)
        else:
            sb = tl.load(s_ptr + b * ss_b + rows[:, None] * ss_r + (hs // 16)[None, :], mask=mask, other=127)
            scale = e8m0_to_fp32(sb.to(tl.int32))
        v = tl.join(decode_e2m1(byte & 15) * scale, decode_e2m1(byte >> 4) * scale)  # [BM, BH, 2]
        v = to_out(tl.reshape(v, (BM, 2 * BH)), out_ptr, ROUND_BF16)
    cs = tn.to(tl.int64) * (2 * BH) + tl.arange(0, 2 * BH)
    if TRANS:
        mask_t = (cs < 2 * H)[:, None] & (rows < R)[None, :]
        tl.store(out_ptr + b * so_b + cs[:, None] * so_c + rows[None, :] * so_r, tl.trans(v), mask=mask_t)
    else:
        out_mask = (rows < R)[:, None] & (cs < 2 * H)[None, :]
        tl.store(out_ptr + b * so_b + rows[:, None] * so_r + cs[None, :] * so_c, v, mask=out_mask)
