"""``dequantize_fp8`` on Triton: ``q * scale_inv`` rounded once to ``out_dtype``.

FP32 scales: the data as the strided 3-D view its granularity gives (see ``quantize.py``), the
scale of element ``(b, m, n)`` gathered at ``(b, m // GM, n // GN)`` (strides 0 along the dims a
scale spans), the product in fp32. MX: ``q * 2**(byte - 127)``, exact in fp32 (the reference's
float64 product is representable), NaN for the byte 0xFF; col-wise data ``[(B,) N, M_pad]``
comes back transposed as ``[(B,) M_pad, N]`` (strided stores). bf16 output under the CPU
interpreter is rounded by bit arithmetic (the interpreter's cast truncates).
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.quantization import DequantizeFp8Args, mx_is_rowwise, normalize_axis
from turbo_core.low_precision import ScalingGranularity
from turbo_triton.launcher import fast_kernel
from turbo_triton.quantization import common
from turbo_triton.quantization.common import Tile

__all__ = ["can_handle", "dequantize_fp8"]

G = ScalingGranularity
_OUT = (torch.float32, torch.float16, torch.bfloat16)


def can_handle(args: DequantizeFp8Args) -> str | None:
    reason = common.device_reason(args.x, args.x.dtype) or common.recipe_reason(args.recipe)
    if reason:
        return reason
    if args.out_dtype not in _OUT:
        return f"TRITON dequantizes to fp32/fp16/bf16, not {args.out_dtype}"
    return None


def _soft_bf16(out_dtype: torch.dtype) -> bool:
    return common.soft() and out_dtype == torch.bfloat16


def _out_arg(out: torch.Tensor) -> torch.Tensor:
    """bf16 output as int16 bits under the interpreter (see ``numerics.bf16_bits``)."""
    return out.view(torch.int16) if _soft_bf16(out.dtype) else out


def _fp32_scaled(args: DequantizeFp8Args, tile: Tile | None) -> torch.Tensor:
    from turbo_triton.quantization import kernels

    x, s = args.x, args.scale_inv
    gran = G(args.granularity)
    out = torch.empty(x.shape, dtype=args.out_dtype, device=x.device)
    if x.numel() == 0:
        return out
    bs = args.block_size
    if gran == G.TENSORWISE:  # rows of 1024 as the quantize's flat view: the 8 x 1024 tiles of 1 x 128 (93% of copy)
        shape3 = (common.flat_rows(x.numel()) if x.is_contiguous() or x.dim() < 2
                  else (1, x.numel() // x.shape[-1], x.shape[-1]))
        x3, s3, ss, gm, gn = common.view3(x, *shape3), s, (0, 0, 0), 0, 0
    elif gran == G.BLOCKWISE and args.recipe.use_2d_block:
        b = x.shape[0] if x.dim() == 3 else 1
        x3 = common.view3(x, b, x.shape[-2], x.shape[-1])
        s3 = common.view3(s, b, *s.shape[-2:])
        ss, gm, gn = s3.stride(), bs, bs
    else:
        ax = normalize_axis(args.axis, x.dim())
        shape3, along_n = common.around_axis(tuple(x.shape), ax)
        x3 = common.view3(x, *shape3)
        k = s.shape[ax]  # 1 (ROWWISE) or the number of blocks
        rowwise = gran == G.ROWWISE
        step = 0 if rowwise else bs  # 0: one scale along the whole dim
        if along_n:  # element (0, m, n) -> scale (m, n // bs), or (m, 0)
            s3 = common.view3(s, 1, shape3[1], k)
            ss, gm, gn = (0, s3.stride(1), 0 if rowwise else s3.stride(2)), 1, step
        else:  # element (p, l, q) -> scale (p, l // bs, q), or (p, 0, q)
            s3 = common.view3(s, shape3[0], k, shape3[2])
            ss, gm, gn = (s3.stride(0), 0 if rowwise else s3.stride(1), s3.stride(2)), step, 1
    b3, m3, n3 = x3.shape
    tile = tile or common.pick(m3, n3, 1, 1, cap_n=4096 if m3 == 1 else 1024)
    fmt = common.fmt_constexprs(x.dtype)
    fast_kernel(kernels.dequant_kernel)[common.grid(b3, m3, n3, tile)](
        common.data_arg(x3), s3, _out_arg(out), m3, n3, *x3.stride(), *ss, BM=tile.block_m, BN=tile.block_n, GM=gm, GN=gn,
        MB=fmt["MB"], BIAS=fmt["BIAS"], FNUZ=fmt["FNUZ"], SOFT=fmt["SOFT"], ROUND_BF16=_soft_bf16(args.out_dtype),
        num_warps=tile.num_warps)
    return out


def _mx(args: DequantizeFp8Args, tile: Tile | None) -> torch.Tensor:
    from turbo_triton.quantization import kernels

    x, s = args.x, args.scale_inv
    row = mx_is_rowwise(x.dim(), args.axis)
    out_shape = tuple(x.shape) if row else (*x.shape[:-2], x.shape[-1], x.shape[-2])
    out = torch.empty(out_shape, dtype=args.out_dtype, device=x.device)
    if x.numel() == 0:
        return out
    x3 = x if x.dim() == 3 else x.unsqueeze(0)
    s3 = s.view(torch.uint8)
    s3 = s3 if s3.dim() == 3 else s3.unsqueeze(0)
    b, r, c = x3.shape
    so = (r * c, c, 1) if row else (r * c, 1, r)
    # col-wise: tiles of 128 rows of q on 8 warps, so that each column of the transposed output gets 256
    # bytes (a row-direction 8 x 1024 tile writes 16-byte runs, several times slower)
    tile = tile or (common.pick(r, c, 1, 1) if row else common.pick(r, c, 1, 1, cap_n=64, warps=8))
    fmt = common.fmt_constexprs(x.dtype)
    fast_kernel(kernels.mx_dequant_kernel)[common.grid(b, r, c, tile)](
        common.data_arg(x3), s3, _out_arg(out), r, c, *x3.stride(), *s3.stride(), *so, BM=tile.block_m, BN=tile.block_n,
        MB=fmt["MB"], BIAS=fmt["BIAS"], SOFT=fmt["SOFT"], ROUND_BF16=_soft_bf16(args.out_dtype), TRANS=not row,
        num_warps=tile.num_warps)
    return out


def dequantize_fp8(args: DequantizeFp8Args, tile: Tile | None = None) -> torch.Tensor:
    """``q * scale_inv`` in ``args.out_dtype`` (contiguous); ``tile`` overrides the heuristic."""
    if G(args.granularity) == G.MX_BLOCKWISE:
        return _mx(args, tile)
    return _fp32_scaled(args, tile)
