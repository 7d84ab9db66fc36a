"""MXFP4 on Triton: ``quantize_fp4``, ``quantize_fp4_with_trans``, ``dequantize_fp4`` (launchers and
capability checks; kernels in ``fp4_kernels``).

Layouts are the spec's (``turbo_core.dispatch.specs.quantization``): 1x32 blocks along the last dim
(axis -1: ``q [(B,) M, N_pad/2]``, ``scale_inv [(B,) M, N_pad/32]``) or along the one before
(axis -2, written transposed: ``q [(B,) N, M_pad/2]``, ``scale_inv [(B,) N, M_pad/32]``), the
blocked dim zero-padded to 128; ``q`` is ``torch.float4_e2m1fn_x2`` (two codes a byte, the even
element in the low nibble), ``scale_inv`` E8M0. ``recipe.use_2d_block``: one exponent per 32x32
tile. Bit-identical to the TORCH reference (``turbo_core.reference.quantization``).

Declined (the reason says so): stochastic rounding (``use_sr``), the random Hadamard transform
(``use_rht``) and AITER's pre-shuffled layouts.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.quantization import (
    DequantizeFp4Args,
    QuantizeFp4Args,
    QuantizeFp4WithTransArgs,
    mx_is_rowwise,
    mx_shapes,
)
from turbo_core.low_precision import E8M0_DTYPE, MXFP4_BLOCK_SIZE, MXFP4_PADDING_ALIGN_SIZE
from turbo_triton import _runtime
from turbo_triton.launcher import fast_kernel
from turbo_triton.quantization import common
from turbo_triton.quantization.common import Tile

__all__ = ["can_handle", "can_handle_dequantize", "can_handle_with_trans", "dequantize_fp4", "quantize_fp4",
           "quantize_fp4_with_trans"]

BS = MXFP4_BLOCK_SIZE
_OUT = (torch.float32, torch.float16, torch.bfloat16)
#: The fast encoder's ``x * 2**-X`` through fp32 instead of the bf16x2 multiply (see
#: ``fp4_kernels.encode_pairs_bf16``; the ``quant`` suite times both).
F32MUL = False
#: False: every call takes the generic fp32 kernels (the ``quant`` suite times both).
FAST_ENABLED = True
#: bf16 dequantize decodes each byte by inline PTX (``fp4_kernels._DEC_ASM``) on NVIDIA GPUs.
DEQ_ASM = True
#: Row-wise bf16 quantize through the pair kernels (``fp4_kernels._pairs_row``) instead of the FAST
#: row kernel (the ``quant`` suite times both).
ROW_PAIRS = False
#: Pair-kernel tiles ``(block_n cap, elements a tile, warps)`` of the col-wise quantize and of
#: with_trans (``_pairs_tile``): 64 x 128 x 2 and 32 x 128 x 2 at the model shapes, tuned on sm90 (the
#: ``quant`` suite measures them): col-wise 64-row tiles write whole 32-byte sectors of each output
#: column, which no 32-row tile does; with_trans 32 x 128 x 2 beats 32 x 256 x 4.
COL_TILE = (128, 8192, 2)
TRANS_TILE = (128, 4096, 2)


def _fast(x3: torch.Tensor, row: bool, m: int) -> bool:
    """The kernels' FAST path (inline PTX on bf16x2 pairs): row-wise bf16 input on an NVIDIA GPU (not
    the interpreter, not ROCm), only where the load gives each thread runs of 8 consecutive
    elements, which the encoder's ``pack=2`` pairs rely on (it pairs register neighbours, not
    logical ones): unit stride along N, 16-divisible row/batch strides and a 16-byte aligned base
    (Triton's vectorization hints), and at least 32 rows (32 x 256 tiles: 64 elements a thread).
    That is the configuration the GPU tests check bit-exact; with 1000-wide rows or a 1 x 32 input the
    load is not vectorized, and the col-wise transposed tile keeps pairs across threads: both give
    wrong codes, so they take the generic kernels."""
    return (FAST_ENABLED and row and x3.dtype == torch.bfloat16 and not common.soft() and torch.version.hip is None
            and m >= 32 and x3.stride(2) == 1 and x3.stride(1) % 16 == 0
            and (x3.shape[0] == 1 or x3.stride(0) % 16 == 0) and x3.data_ptr() % 16 == 0)


def _pairs(x3: torch.Tensor) -> bool:
    """The pair kernels (``fp4_kernels._pairs_col`` / ``_pairs_row``): bf16 input, on NVIDIA GPUs with
    the inline-PTX encoder, under the interpreter with the fp32 one (not on ROCm). The pairs are
    formed as separate tensors (two loads of the even and odd rows, or a split of the last dim)
    before the encoder, so no stride or alignment condition applies."""
    return FAST_ENABLED and x3.dtype == torch.bfloat16 and torch.version.hip is None


def _pairs_tile(m: int, n: int, gn: int, cfg: tuple[int, int, int]) -> Tile:
    cap_n, target, warps = cfg
    return common.pick(m, n, BS, gn, cap_n=cap_n, target=target, warps=warps)


def _pairs_ok(tile: Tile, row: bool = False) -> bool:
    """Tiles the pair kernels take: at least two pairs an encoder instance, and col-wise 32-row groups
    (split in halves of even and odd rows)."""
    return (row or tile.block_m >= BS) and tile.block_m * tile.block_n >= 256 * tile.num_warps


def _fast_tile(m: int, n: int, gm: int, gn: int, row: bool) -> Tile:
    """FAST tiles: row-wise 16 x 256 on 2 warps (64 elements a thread amortize the address
    arithmetic; tuned on sm90 at 16384 x 7168, the ``quant`` suite measures it)."""
    return common.pick(m, n, gm, gn, cap_n=256 if row else 128, target=4096, warps=2)


def _recipe_reason(*recipes) -> str | None:
    for r in recipes:
        if r.use_sr:
            return "TRITON does not implement FP4 stochastic rounding (use_sr)"
        if r.use_rht:
            return "TRITON does not implement the random Hadamard transform (use_rht)"
    return common.recipe_reason(*recipes)


def can_handle(args: QuantizeFp4Args) -> str | None:
    return _runtime.device_reason(args.x) or _recipe_reason(args.recipe)


def can_handle_with_trans(args: QuantizeFp4WithTransArgs) -> str | None:
    return _runtime.device_reason(args.x) or _recipe_reason(args.recipe, args.recipe_for_trans)


def can_handle_dequantize(args: DequantizeFp4Args) -> str | None:
    reason = _runtime.device_reason(args.x)
    if reason:
        return reason
    if args.out_dtype not in _OUT:
        return f"TRITON dequantizes to fp32/fp16/bf16, not {args.out_dtype}"
    return None


def _shapes(x: torch.Tensor, axis: int):
    return mx_shapes(tuple(x.shape), axis, packed=True, align=MXFP4_PADDING_ALIGN_SIZE)


def _empty(data_shape, scale_shape, dev):
    from turbo_core.low_precision import FLOAT4_E2M1FN_X2

    return (torch.empty(data_shape, dtype=torch.uint8, device=dev).view(FLOAT4_E2M1FN_X2),
            torch.empty(scale_shape, dtype=E8M0_DTYPE, device=dev))


def quantize_fp4(args: QuantizeFp4Args, tile: Tile | None = None):
    """``(q float4_e2m1fn_x2, scale_inv E8M0)``; ``tile`` (over the padded ``[M, N_pad]`` /
    ``[M_pad, N]`` extent) overrides the heuristic (tests, tuning)."""
    from turbo_triton.quantization import fp4_kernels as kern

    x = args.x
    data_shape, scale_shape = _shapes(x, args.axis)
    q, s = _empty(data_shape, scale_shape, x.device)
    if q.numel() == 0:
        return q, s
    x3 = x if x.dim() == 3 else x.unsqueeze(0)
    b, m, n = x3.shape
    row = mx_is_rowwise(x.dim(), args.axis)
    pad = data_shape[-1] * 2
    m_ext, n_ext = (m, pad) if row else (pad, n)
    two_d = args.recipe.use_2d_block
    gm, gn = ((BS if two_d else 1), BS) if row else (BS, (BS if two_d else 1))
    pairs = _pairs(x3) and (not row or ROW_PAIRS)
    if pairs and tile is None:  # a narrow extent (one or two columns col-wise) picks a tile too small for pairs
        pick = _pairs_tile(m_ext, n_ext, gn, COL_TILE) if not row else _fast_tile(m_ext, n_ext, gm, gn, row)
        pairs, tile = (True, pick) if _pairs_ok(pick, row) else (False, None)
    pairs = pairs and _pairs_ok(tile, row)
    fast = not pairs and _fast(x3, row, m) and (tile is None or tile.block_m * tile.block_n >= 256 * tile.num_warps)
    if tile is None:
        tile = _fast_tile(m_ext, n_ext, gm, gn, row) if fast else common.pick_mx(m_ext, n_ext, gm, gn)
    common.check_tile(tile, gm, gn)
    rows_out = data_shape[-2]
    xa, x_bits = (x3.view(torch.int16), True) if pairs else common.x_arg(x3)
    fast_kernel(kern.quant_fp4_kernel)[common.grid(b, m_ext, n_ext, tile)](
        xa, q.view(torch.uint8), s.view(torch.uint8), m, n, m_ext, n_ext, *x3.stride(),
        rows_out * (pad // 2), pad // 2, rows_out * (pad // BS), pad // BS,
        BM=tile.block_m, BN=tile.block_n, GM=gm, GN=gn, ROW=row, X_BITS=x_bits, FAST=fast, F32MUL=F32MUL,
        PAIRS=pairs, ASM=pairs and not common.soft(), num_warps=tile.num_warps)
    return q, s


def quantize_fp4_with_trans(args: QuantizeFp4WithTransArgs, tile: Tile | None = None):
    """``(q_row, s_row, q_col, s_col)`` (axis -1 and -2 of :func:`quantize_fp4`) from one read of
    each tile of the padded ``[M_pad, N_pad]`` extent; bit-identical to the two separate calls."""
    from turbo_triton.quantization import fp4_kernels as kern

    x = args.x
    nd = x.dim()
    row_data, row_scale = _shapes(x, nd - 1)
    col_data, col_scale = _shapes(x, nd - 2)
    q_row, s_row = _empty(row_data, row_scale, x.device)
    q_col, s_col = _empty(col_data, col_scale, x.device)
    if x.numel() == 0:  # every output is empty too (a zero dim, or a padded dim of 0)
        return q_row, s_row, q_col, s_col
    x3 = x if nd == 3 else x.unsqueeze(0)
    b, m, n = x3.shape
    m_pad, n_pad = col_data[-1] * 2, row_data[-1] * 2
    pairs = _pairs(x3)
    if pairs and tile is None:
        pick = _pairs_tile(m_pad, n_pad, BS, TRANS_TILE)
        pairs, tile = (True, pick) if _pairs_ok(pick) else (False, None)
    pairs = pairs and _pairs_ok(tile)
    tile = tile or common.pick_mx(m_pad, n_pad, BS, BS)
    common.check_tile(tile, BS, BS)
    xa, x_bits = (x3.view(torch.int16), True) if pairs else common.x_arg(x3)
    fast_kernel(kern.fp4_with_trans_kernel)[common.grid(b, m_pad, n_pad, tile)](
        xa, q_row.view(torch.uint8), s_row.view(torch.uint8), q_col.view(torch.uint8), s_col.view(torch.uint8),
        m, n, m_pad, n_pad, *x3.stride(), BM=tile.block_m, BN=tile.block_n,
        R_GM=BS if args.recipe.use_2d_block else 1, C_GN=BS if args.recipe_for_trans.use_2d_block else 1,
        X_BITS=x_bits, PAIRS=pairs, ASM=pairs and not common.soft(), F32MUL=F32MUL, num_warps=tile.num_warps)
    return q_row, s_row, q_col, s_col


def dequantize_fp4(args: DequantizeFp4Args, tile: Tile | None = None) -> torch.Tensor:
    """``out_dtype`` values: row-wise ``[(B,) M, N_pad]``, col-wise ``[(B,) M_pad, N]`` (transposed
    back); ``tile`` (over the packed bytes ``[R, H]``) overrides the heuristic."""
    from turbo_triton.quantization import fp4_kernels as kern

    x, s = args.x, args.scale_inv
    row = mx_is_rowwise(x.dim(), args.axis)
    r, h = x.shape[-2], x.shape[-1]
    out_shape = (*x.shape[:-2], r, 2 * h) if row else (*x.shape[:-2], 2 * h, r)
    out = torch.empty(out_shape, dtype=args.out_dtype, device=x.device)
    if out.numel() == 0:
        return out
    x3 = x.contiguous().view(torch.uint8)
    x3 = x3 if x3.dim() == 3 else x3.unsqueeze(0)
    s3 = s.contiguous().view(torch.uint8)
    s3 = s3 if s3.dim() == 3 else s3.unsqueeze(0)
    b = x3.shape[0]
    so = (r * 2 * h, 2 * h, 1) if row else (r * 2 * h, 1, r)
    # the PTX decoder for every float out (fp32 / fp16 widen its exact bf16 pair: fp4_dequant_kernel)
    asm = (DEQ_ASM and FAST_ENABLED and args.out_dtype in (torch.bfloat16, torch.float32, torch.float16)
           and not common.soft() and torch.version.hip is None)
    # col-wise: 128 rows x 32 bytes on 8 warps, stored transposed (the MX FP8 col dequantize's shape);
    # row-wise with the PTX decoder 8 rows x 256 bytes on 4 warps (tuned on sm90; the `quant` suite
    # measures it)
    if tile is None:
        if not row:
            tile = common.pick(r, h, 1, BS // 2, cap_n=32, target=4096, warps=8)
        elif asm:
            tile = common.pick(r, h, 1, BS // 2, cap_n=256, target=2048, warps=4)
        else:
            tile = common.pick(r, h, 1, BS // 2)
    common.check_tile(tile, 1, BS // 2)
    bf16_bits = common.soft() and args.out_dtype == torch.bfloat16
    asm = asm and tile.block_n >= BS // 2
    fast_kernel(kern.fp4_dequant_kernel)[common.grid(b, r, h, tile)](
        x3, s3, out.view(torch.int16) if bf16_bits or (asm and args.out_dtype == torch.bfloat16) else out, r, h, x3.stride(0), x3.stride(1), s3.stride(0),
        s3.stride(1), *so, BM=tile.block_m, BH=tile.block_n, ROUND_BF16=bf16_bits, TRANS=not row, ASM=asm,
        num_warps=tile.num_warps)
    return out
