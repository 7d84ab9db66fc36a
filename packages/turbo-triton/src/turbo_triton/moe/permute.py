"""``moe_permute`` on Triton: tokens (any float or fp8 dtype), per-token FP8 scales and probs
copied bit-exactly into their permuted rows; rows no token maps to are zero. No host sync.

Bytes: each token row is read once and written once per kept copy; padding rows are written once
(zeros); the inverse row map costs ``8 * num_out`` bytes written twice.
"""

from __future__ import annotations

import torch
import triton

from turbo_core.dispatch.specs.moe import MoePermuteArgs
from turbo_triton.moe import common

__all__ = ["can_handle", "moe_permute", "row_sources", "zero_rows_block"]

_BLOCK_R = 16


def can_handle(args: MoePermuteArgs) -> str | None:
    e = (args.row_id_map.shape[1] - 1) // 2
    return (common.tensors_reason("moe_permute", {"tokens": args.tokens, "row_id_map": args.row_id_map,
                                                  "scaling_factor": args.scaling_factor, "probs": args.probs})
            or common.experts_reason("moe_permute", e))


def row_sources(row_id_map: torch.Tensor, num_out: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(src int32 [num_out], col int32 [num_out])``: token and probs column of each permuted row
    (-1: no token, a padding row), from the row map by a race-free scatter on the device."""
    from turbo_triton.moe import permute_kernels as kern

    t, e = row_id_map.shape[0], (row_id_map.shape[1] - 1) // 2
    src = torch.full((num_out,), -1, dtype=torch.int32, device=row_id_map.device)
    col = torch.full((num_out,), -1, dtype=torch.int32, device=row_id_map.device)
    if t and num_out:
        block_e = triton.next_power_of_2(e)
        block_t = max(1, min(128, 4096 // block_e))
        kern.sources_kernel[(triton.cdiv(t, block_t),)](row_id_map, src, col, t, e, num_out,
                                                        BLOCK_T=block_t, BLOCK_E=block_e,
                                                        num_warps=common.warps(block_t * block_e))
    return src, col


def zero_rows_block(hidden: int) -> int:
    return common.block_h(hidden) if hidden <= 1024 else 1024


def moe_permute(args: MoePermuteArgs):
    """``(permuted [num_out, H] tokens' dtype, scales [num_out, S] fp32 or None, probs [num_out]
    probs' dtype or None)``, equal to the reference bit for bit."""
    from turbo_triton.moe import permute_kernels as kern

    x, rmap, n = args.tokens, args.row_id_map, args.num_out
    t, h = x.shape
    e = (rmap.shape[1] - 1) // 2
    dev = x.device
    out = torch.empty((n, h), dtype=x.dtype, device=dev)
    sf, pr = args.scaling_factor, args.probs
    scales = None if sf is None else torch.empty((n, sf.shape[1]), dtype=sf.dtype, device=dev)
    probs = None if pr is None else torch.empty((n,), dtype=pr.dtype, device=dev)
    if n == 0:
        return out, scales, probs
    src, col = row_sources(rmap, n)
    if t and h:
        bh = common.block_h(h)
        kern.scatter_rows_kernel[(t, triton.cdiv(h, bh))](common.bits(x), rmap, common.bits(out), h, e, n,
                                                         BLOCK_H=bh, num_warps=common.warps(bh))
    has_scales = scales is not None and scales.shape[1] > 0
    width = 0 if pr is None else pr.shape[1]
    has_probs = probs is not None and width > 0
    if probs is not None and not has_probs:
        probs.zero_()
    bh = zero_rows_block(h)
    dummy = src
    kern.fill_rows_kernel[(triton.cdiv(n, _BLOCK_R),)](
        common.bits(out), src, col,
        sf.view(torch.int32) if has_scales else dummy, scales.view(torch.int32) if has_scales else dummy,
        common.bits(pr) if has_probs else dummy, common.bits(probs) if has_probs else dummy,
        n, h, sf.shape[1] if has_scales else 1, max(width, 1),
        ZERO_ROWS=h > 0, HAS_SCALES=has_scales, HAS_PROBS=has_probs, BLOCK_R=_BLOCK_R, BLOCK_H=bh,
        BLOCK_S=triton.next_power_of_2(sf.shape[1]) if has_scales else 1,
        num_warps=common.warps(_BLOCK_R * bh))
    return out, scales, probs
