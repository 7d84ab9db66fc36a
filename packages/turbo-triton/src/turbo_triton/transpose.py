"""A tiled transpose of the last two dims for 1-byte (FP8) tensors: ``y[..., c, r] = x[..., r, c]``.

Used where an FP8 GEMM operand must be re-laid K-major on Hopper (``turbo_triton.gemm_fp8.launch``,
``turbo_triton.grouped_gemm_fp8.launch``). torch's ``x.transpose(-1, -2).contiguous()`` goes through
its generic strided copy, slow for 1-byte elements; this kernel reads a ``BLOCK x BLOCK`` tile with
coalesced loads and writes its transpose with coalesced stores (Triton stages the tile through
shared memory). The bytes are moved as ``uint8``: FP8 values are copied, never converted.
"""

from __future__ import annotations

import torch

from turbo_triton.launcher import fast_kernel

__all__ = ["transpose_last2"]


def transpose_last2(x: torch.Tensor, *, row_align: int = 1) -> torch.Tensor:
    """``x.transpose(-1, -2).contiguous()`` for a 2-D or 3-D tensor of 1-byte elements (any strides).

    Args:
        x: ``[R, C]`` or ``[B, R, C]``, element size 1 (float8 dtypes, uint8, int8).
        row_align: the output's rows are stored ``round_up(R, row_align)`` elements apart (a TMA
            descriptor needs 16-byte row strides); the padding is never read as data.
    Returns:
        a new ``[C, R]`` / ``[B, C, R]`` tensor of x's dtype, contiguous when ``R`` is a multiple of
        ``row_align`` (else a view of the padded storage).
    """
    if x.element_size() != 1 or x.dim() not in (2, 3):
        raise ValueError(f"x: expected a 2-D or 3-D tensor of 1-byte elements, got {x.dtype} {tuple(x.shape)}")
    from turbo_triton.transpose_kernel import transpose_kernel

    x3 = x if x.dim() == 3 else x.unsqueeze(0)
    b, r, c = x3.shape
    r_pad = -(-r // row_align) * row_align
    y3 = torch.empty((b, c, r_pad), dtype=x.dtype, device=x.device)[:, :, :r]
    if y3.numel():
        xs, ys = x3.view(torch.uint8), y3.view(torch.uint8)
        block = 64
        grid = (-(-r // block), -(-c // block), b)
        fast_kernel(transpose_kernel)[grid](xs, ys, r, c, *xs.stride(), *ys.stride(), BLOCK_R=block, BLOCK_C=block, num_warps=4)
    return y3 if x.dim() == 3 else y3.squeeze(0)
