"""Reference dense FP8 / FP4 GEMM: dequantize each operand exactly as the spec says, then one matmul.

Compute dtype: float64 on the CPU (every dequantized value and every product is exact there, and
the sum is accumulated in float64: an oracle tighter than fp32 accumulation), fp32 on a GPU
(honouring torch's TF32 setting, off by default). The result is rounded once to ``out_dtype``;
accumulate-into-``out`` adds in the compute dtype and rounds once to out's dtype.

The dequantization helpers here are shared with the grouped reference. E8M0 scales decode to
``2**(byte - 127)`` exactly (byte 0xFF is NaN); E2M1 codes decode through a 16-entry table.
"""

from __future__ import annotations

import torch

from turbo_core.backend import BackendType
from turbo_core.dispatch.specs.gemm_fp8 import GemmFp4Args, GemmFp8Args, blockwise_layout
from turbo_core.low_precision import MXFP8_BLOCK_SIZE, ScalingGranularity
from turbo_core.plugins.types import Kernel

G = ScalingGranularity
#: E2M1 code (sign in bit 3) -> value.
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def compute_dtype(device: torch.device) -> torch.dtype:
    return torch.float64 if device.type == "cpu" else torch.float32


def expand_blocks(s: torch.Tensor, dim: int, block: int, size: int) -> torch.Tensor:
    """Repeat each scale ``block`` times along ``dim`` and cut to ``size``."""
    return s.repeat_interleave(block, dim=dim).narrow(dim, 0, size)


def e8m0_values(scale: torch.Tensor, ct: torch.dtype) -> torch.Tensor:
    """``2**(byte - 127)`` (exact), NaN for the byte 0xFF, in ``ct``."""
    byte = scale.contiguous().view(torch.uint8).to(torch.int64)
    pow2 = ((byte - 127 + 1023) << 52).view(torch.float64)  # exact: the exponent field of a float64
    return torch.where(byte == 255, torch.full_like(pow2, float("nan")), pow2).to(ct)


def e2m1_values(data: torch.Tensor, ct: torch.dtype) -> torch.Tensor:
    """Unpack ``float4_e2m1fn_x2`` ``[..., n]`` to values ``[..., 2n]`` (low nibble = even element):
    code ``s eem`` is ``(-1)^s * m / 2`` for ``ee = 0``, else ``(-1)^s * 2^(ee-1) * (1 + m / 2)``
    (``_E2M1``), computed on the data's device (no table copied from the host, so a CUDA graph can
    capture it)."""
    b = data.contiguous().view(torch.uint8)
    codes = torch.stack((b & 15, b >> 4), dim=-1).reshape(*b.shape[:-1], 2 * b.shape[-1]).to(torch.int32)
    exp, man = (codes >> 1) & 3, (codes & 1).to(ct)
    mag = torch.where(exp == 0, man * 0.5, torch.exp2((exp - 1).to(ct)) * (1 + man * 0.5))
    return torch.where(codes >= 8, -mag, mag)


def dequant_mx(data: torch.Tensor, scale: torch.Tensor, ct: torch.dtype, *, packed: bool) -> torch.Tensor:
    """MX operand ``[..., rows, K(/2)]`` with E8M0 ``[..., rows, K/32]``: values ``[..., rows, K]``."""
    x = e2m1_values(data, ct) if packed else data.to(ct)
    return x * expand_blocks(e8m0_values(scale, ct), -1, MXFP8_BLOCK_SIZE, x.shape[-1])


def dequant_fp8(data: torch.Tensor, scale: torch.Tensor, granularity: G, contraction_dim: int,
                block_size: int | None, ct: torch.dtype) -> torch.Tensor:
    """Dequantize a stored FP8 operand (same shape/orientation) to ``ct``. ``contraction_dim``
    (-1 or -2) is the dim of ``data`` that the GEMM contracts over; BLOCKWISE reads its layout
    (1-D blocks along that dim, or 2-D tiles) from the scale's shape."""
    if granularity == G.MX_BLOCKWISE:
        return dequant_mx(data, scale, ct, packed=False)
    x = data.to(ct)
    s = scale.to(ct)
    if granularity == G.TENSORWISE:
        return x * s.reshape(())
    if granularity == G.ROWWISE:
        return x * s
    rows, cols = x.shape[-2], x.shape[-1]
    if blockwise_layout(tuple(data.shape), tuple(scale.shape), contraction_dim, block_size) == "2d":
        s = expand_blocks(expand_blocks(s, -2, block_size, rows), -1, block_size, cols)
    else:
        s = expand_blocks(s, contraction_dim, block_size, x.shape[contraction_dim])
    return x * s


def finish(c: torch.Tensor, out_dtype: torch.dtype | None, out: torch.Tensor | None, ct: torch.dtype,
           trans_c: bool = False) -> torch.Tensor:
    """Apply trans_c (2-D) and either accumulate into ``out`` or round to ``out_dtype``."""
    if trans_c:
        c = c.transpose(-1, -2)
    if out is not None:
        out.copy_(out.to(ct) + c)
        return out
    return c.to(out_dtype).contiguous()


def gemm_fp8(args: GemmFp8Args) -> torch.Tensor:
    ct = compute_dtype(args.a.device)
    gran = G(args.granularity)
    bs = MXFP8_BLOCK_SIZE if gran == G.MX_BLOCKWISE else args.block_size
    a = dequant_fp8(args.a, args.a_scale_inv, gran, -2 if args.trans_a else -1, bs, ct)
    b = dequant_fp8(args.b, args.b_scale_inv, gran, -1 if args.trans_b else -2, bs, ct)
    a = a.t() if args.trans_a else a
    b = b.t() if args.trans_b else b
    return finish(a @ b, args.out_dtype, args.out, ct, args.trans_c)


def gemm_fp4(args: GemmFp4Args) -> torch.Tensor:
    ct = compute_dtype(args.a.device)
    a = dequant_mx(args.a, args.a_scale_inv, ct, packed=True)
    b = dequant_mx(args.b, args.b_scale_inv, ct, packed=True)
    return finish(a @ b.t(), args.out_dtype, args.out, ct, args.trans_c)


KERNELS = [
    Kernel("gemm_fp8", BackendType.TORCH, gemm_fp8, priority=-100,
           variants=("TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE", "e4m3", "e5m2", "hybrid", "fnuz")),
    Kernel("gemm_fp4", BackendType.TORCH, gemm_fp4, priority=-100, variants=("MX_BLOCKWISE", "e2m1")),
]
