"""float64 decoding of quantized operands, written from the spec tables (no backend code): FP8
values, E8M0 scales, packed E2M1 codes, and scales expanded over their blocks."""

from __future__ import annotations

import torch

from turbo_core.low_precision import E8M0_DTYPE
from turbo_core.testing.case import host_copy

__all__ = ["dequant", "e2m1_values", "e8m0_values", "expand_scale", "random_scales"]

_E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)


def e8m0_values(s: torch.Tensor) -> torch.Tensor:
    """``2**(byte - 127)`` in float64, NaN for the byte 0xFF."""
    b = host_copy(s).contiguous().view(torch.uint8).to(torch.float64)
    return torch.where(b == 255, torch.full_like(b, float("nan")), torch.exp2(b - 127))


def e2m1_values(q: torch.Tensor) -> torch.Tensor:
    """Packed E2M1 ``[..., n]`` to float64 ``[..., 2n]``: the even element in the low nibble."""
    b = host_copy(q).contiguous().view(torch.uint8).to(torch.int64)
    codes = torch.stack((b & 15, b >> 4), dim=-1).reshape(*b.shape[:-1], 2 * b.shape[-1])
    mag = _E2M1[codes & 7]
    return torch.where(codes >= 8, -mag, mag)


def expand_scale(s: torch.Tensor, shape: tuple[int, ...], blocks: tuple[int | None, ...]) -> torch.Tensor:
    """float64 scale at every element of ``shape``: along dim ``i`` each scale covers ``blocks[i]``
    consecutive elements (the last block partial), or the whole dim when ``blocks[i]`` is None (a
    scale dim of 1). ``s`` has ``len(shape)`` dims, or none (one scale for everything)."""
    s = e8m0_values(s) if s.dtype in (torch.uint8, E8M0_DTYPE) else host_copy(s).to(torch.float64)
    if s.dim() != len(shape):
        return s.reshape(()).expand(shape)
    for i, (b, n) in enumerate(zip(blocks, shape, strict=True)):
        if b is None:
            s = s.expand(*s.shape[:i], n, *s.shape[i + 1:]) if s.shape[i] == 1 else s
        elif b > 1:
            s = s.repeat_interleave(b, dim=i).narrow(i, 0, n)
    return s


def dequant(data: torch.Tensor, scale: torch.Tensor, blocks: tuple[int | None, ...] | None) -> torch.Tensor:
    """float64 ``value * scale`` of FP8 ``data`` (or packed FP4: its values, last dim doubled);
    ``blocks`` as in :func:`expand_scale` (``None``: one scale)."""
    packed = "float4" in str(data.dtype)
    x = e2m1_values(data) if packed else host_copy(data).to(torch.float64)
    return x * expand_scale(scale, tuple(x.shape), blocks or (None,) * x.dim())


def random_scales(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """Positive fp32 scales spread over ``2**[-3, 3]``."""
    return torch.exp2(torch.rand(shape, generator=g) * 6 - 3)
