"""FP8 scales in turbo's layouts -> the layouts BLASLt's scale modes read. Pure tensor reshuffles
(no GPU needed; unit-tested on the CPU).

An operand of the BLAS call has an outer dim ``R`` (M for a, N for b) and the contraction dim ``K``.
turbo stores its scales by the *stored* matrix (``turbo_core.dispatch.specs.gemm_fp8``); BLASLt wants
them by the logical ``R x K`` operand, whichever way its data is stored:

* TENSORWISE (``SCALAR_32F``): one fp32.
* ROWWISE (``OUTER_VEC_32F``): ``R`` fp32 values, contiguous.
* BLOCKWISE 1 x 128 along K (``VEC128_32F``): value ``(r, kb)`` at offset ``kb * R + r`` (outer dim
  fastest), i.e. a contiguous ``[K/128, R]`` tensor.
* BLOCKWISE 128 x 128 tiles (``BLK128x128_32F``): value ``(rb, kb)`` at ``rb * L4 + kb`` with
  ``L4 = round_up(K/128, 4)`` (the K blocks of each row block fastest, padded to a multiple of 4):
  a contiguous ``[R/128, L4]`` tensor, zero in the padding.

``contraction_dim`` below is the dim (0 or 1) of the stored 2-D data that the GEMM contracts over:
for ``a`` it is 0 when ``trans_a`` (``a`` is ``[K, M]``) else 1; for ``b`` it is 1 when ``trans_b``
(``[N, K]``) else 0.
"""

from __future__ import annotations

import torch

__all__ = ["blk128_scales", "outer_vector", "round_up", "vec128_scales"]


def round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def outer_vector(scale: torch.Tensor) -> torch.Tensor:
    """ROWWISE: ``[R, 1]`` / ``[1, R]`` fp32 -> ``[R]`` contiguous (a view when already contiguous)."""
    return scale.reshape(-1).contiguous()


def vec128_scales(scale: torch.Tensor, contraction_dim: int) -> torch.Tensor:
    """1 x bs blocks along K: turbo's ``[R, K/bs]`` (data ``[R, K]``) or ``[K/bs, R]`` (data
    ``[K, R]``) -> contiguous ``[K/bs, R]``."""
    s = scale.t() if contraction_dim == 1 else scale
    return s.contiguous()


def blk128_scales(scale: torch.Tensor, contraction_dim: int) -> torch.Tensor:
    """bs x bs tiles of the stored data: turbo's ``[R/bs, K/bs]`` (data ``[R, K]``) or ``[K/bs, R/bs]``
    (data ``[K, R]``) -> contiguous ``[R/bs, round_up(K/bs, 4)]``, zero-padded along K."""
    s = scale if contraction_dim == 1 else scale.t()  # [R/bs, K/bs]
    rows, kb = s.shape
    width = round_up(kb, 4)
    if width == kb and s.is_contiguous():
        return s
    out = torch.zeros((rows, width), dtype=s.dtype, device=s.device)
    out[:, :kb] = s
    return out
