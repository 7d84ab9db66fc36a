"""``gemm_fp4`` (MXFP4, NT) over aiter's ``gemm_a4w4`` (gfx950 only), with preshuffled weights.

aiter function called (amd-aiter 0.1.7.post2.dev18): ``aiter.gemm_a4w4(A, B, A_scale, B_scale,
out, bias=None, alpha=1.0, beta=0.0, bpreshuffle=True)`` with ``A [M, K/2]`` packed E2M1, ``B
[N, K/2]`` packed E2M1 in the 16x16 preshuffled layout, ``A_scale``/``B_scale`` E8M0 in aiter's
shuffled scale layout (rows padded to 256, columns to 8), and ``out`` bf16 with its rows padded to
a multiple of 256 (aiter's asm path asserts a multiple of 32; its op test pads to 256). It raises
on gfx942. Writes ``out`` and returns it; this adapter returns ``out[:M]``.

The weight is preshuffled on every call (a copy of ``N * K / 2`` bytes): turbo's ``gemm_fp4`` takes
plain ``[N, K/2]`` operands. Declined: gfx942, results other than bf16, accumulation into ``out``,
N not a multiple of 16 and K not a multiple of 64 (the 16x16 preshuffle tiles 16 rows x 32 bytes).
"""

from __future__ import annotations

import torch

from turbo_aiter import library
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp4Args, gemm_fp4_dims
from turbo_core.low_precision import E8M0_DTYPE

__all__ = ["can_handle", "decline_reason", "gemm_fp4", "out_rows", "preshuffle_weight", "shuffle_scales"]

#: The 16x16 preshuffle: tiles of 16 rows x 32 bytes, each stored as two 16-byte K halves, and
#: within a half the 16 rows' 16-byte vectors one after another.
TILE_ROWS, TILE_BYTES, VEC_BYTES = 16, 32, 16
#: aiter pads E8M0 scale matrices to multiples of 256 rows and 8 columns before shuffling them.
SCALE_ROW_PAD, SCALE_COL_PAD = 256, 8
OUT_ROW_PAD = 256


def decline_reason(args: GemmFp4Args, arch: str | None) -> str | None:
    """Why aiter's a4w4 GEMM declines these arguments on ``arch`` (metadata only), or ``None``."""
    if arch != "gfx950":
        return f"AITER gemm_fp4: aiter's a4w4 GEMM runs on gfx950 only (this is {arch}; it raises on gfx942)"
    if args.out is not None:
        return "AITER gemm_fp4: accumulation into out (beta=1) not served (aiter's a4w4 adds no prior out)"
    if args.out_dtype != torch.bfloat16:
        return f"AITER gemm_fp4 (gfx950): aiter's a4w4 GEMM writes bf16, not {args.out_dtype}"
    _, n, k = gemm_fp4_dims(args)
    if n % TILE_ROWS:
        return f"AITER gemm_fp4: N={n} is not a multiple of {TILE_ROWS} (aiter's 16x16 weight preshuffle)"
    if (k // 2) % TILE_BYTES:
        return f"AITER gemm_fp4: K={k} is not a multiple of {2 * TILE_BYTES} (aiter's 16x16 weight preshuffle)"
    return None


def can_handle(args: GemmFp4Args) -> str | None:
    reason = library.gpu_reason(args.a, "gemm_fp4")
    if reason:
        return reason
    return decline_reason(args, library.arch_of(args.a))


def preshuffle_weight(b: torch.Tensor) -> torch.Tensor:
    """``b [N, K/2]`` (bytes, or packed FP4) in aiter's 16x16 preshuffled layout, same shape/dtype.

    Byte ``(n, c)`` with ``n = 16 * nt + r`` and ``c = 32 * kt + 16 * h + e`` goes to flat position
    ``(((nt * KT + kt) * 2 + h) * 16 + r) * 16 + e`` (``KT = K/2 / 32``): row tiles of 16, K tiles of
    32 bytes, each tile holding its two 16-byte halves in turn, each half the 16 rows' vectors.
    """
    n, kb = b.shape
    if n % TILE_ROWS or kb % TILE_BYTES:
        raise ValueError(f"b: preshuffle needs N % {TILE_ROWS} == 0 and K/2 % {TILE_BYTES} == 0, got shape {tuple(b.shape)}")
    raw = b.view(torch.uint8)
    tiles = raw.reshape(n // TILE_ROWS, TILE_ROWS, kb // TILE_BYTES, TILE_BYTES // VEC_BYTES, VEC_BYTES)
    out = tiles.permute(0, 2, 3, 1, 4).contiguous().reshape(n, kb)
    return out.view(b.dtype)


def shuffle_scales(s: torch.Tensor) -> torch.Tensor:
    """E8M0 scales ``[R, C]`` in aiter's shuffled layout: zero-padded to ``[R', C']`` (``R'`` a
    multiple of 256, ``C'`` of 8), then element ``(r, c)`` with ``r = 32 * a + 16 * i1 + i2`` and
    ``c = 8 * b + 4 * j1 + j2`` goes to flat position
    ``((((a * C'/8 + b) * 4 + j2) * 16 + i2) * 2 + j1) * 2 + i1``. Returned as ``[R', C']``."""
    rows, cols = s.shape
    rp = -(-rows // SCALE_ROW_PAD) * SCALE_ROW_PAD
    cp = -(-cols // SCALE_COL_PAD) * SCALE_COL_PAD
    raw = s.view(torch.uint8)
    padded = torch.zeros((rp, cp), dtype=torch.uint8, device=s.device)
    padded[:rows, :cols] = raw
    blocks = padded.reshape(rp // 32, 2, 16, cp // 8, 2, 4)  # [a, i1, i2, b, j1, j2]
    out = blocks.permute(0, 3, 5, 2, 4, 1).contiguous().reshape(rp, cp)  # [a, b, j2, i2, j1, i1]
    return out.view(s.dtype)


def out_rows(m: int) -> int:
    """Rows of the ``out`` buffer handed to aiter: M rounded up to a multiple of 256."""
    return -(-m // OUT_ROW_PAD) * OUT_ROW_PAD


def _e8m0(s: torch.Tensor) -> torch.Tensor:
    return s.view(E8M0_DTYPE) if E8M0_DTYPE is not None and s.dtype == torch.uint8 else s


def gemm_fp4(args: GemmFp4Args) -> torch.Tensor:
    """``dequant(A) @ dequant(B)^T`` as bf16 ``[M, N]`` (``[N, M]`` when trans_c)."""
    m, n, k = gemm_fp4_dims(args)
    if m == 0 or n == 0 or k == 0:
        return torch.zeros((n, m) if args.trans_c else (m, n), dtype=args.out_dtype, device=args.a.device)
    aiter = library.load()
    a = args.a if args.a.is_contiguous() else args.a.contiguous()
    w = preshuffle_weight(args.b.contiguous())
    sa, sb = _e8m0(shuffle_scales(args.a_scale_inv)), _e8m0(shuffle_scales(args.b_scale_inv))
    out = torch.empty((out_rows(m), n), dtype=torch.bfloat16, device=a.device)
    aiter.gemm_a4w4(a, w, sa, sb, out, None, 1.0, 0.0, True)
    y = out[:m]
    return y.t().contiguous() if args.trans_c else y
