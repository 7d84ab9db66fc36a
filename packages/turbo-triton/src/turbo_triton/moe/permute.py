"""``moe_permute`` on Triton: tokens (any float or fp8 dtype), per-token FP8 scales and probs
copied bit-exactly into their permuted rows; rows no token maps to are zero. No host sync.

Three launches: a fill of the inverse row map with -1, ``sources_kernel`` (the inverse map), and
``permute_kernel`` (the scatter of tokens, scales and probs plus the zeroing of padding rows; see
``permute_kernels``). Small batches (``T x E`` up to ``SEARCH_MAX`` row ids) take one launch instead,
``search_gather_kernel``: each program searches the row map for its rows' tokens; at a few tokens the
launches, not the bytes, are the cost. Bytes: each token row is read once and written once per kept copy; padding
rows are written once (zeros); the inverse row map costs ``4 * num_out`` bytes written twice and
read once.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.moe import MoePermuteArgs
from turbo_triton.intmath import cdiv, next_power_of_2
from turbo_triton.launcher import fast_kernel
from turbo_triton.moe import common

__all__ = ["can_handle", "moe_permute", "row_sources"]

#: Rows of a padding-row block; copies of a token a step (their row ids load together).
_BLOCK_R = 16
_UNROLL = 2
#: The most row-map entries (tokens x experts) the one-launch search path scans per program: at 2 rows
#: a program the search beats the three launches up to 4096 entries on DeepSeek-V3, Qwen3-235B and
#: Mixtral, and loses at 8192 (tuned on sm90; the ``moe`` suite measures both paths).
SEARCH_MAX = 4096
_SEARCH_F = 2048  # row-map entries compared a step by default (2 rows x 2048 entries; tuned with SEARCH_MAX)


def can_handle(args: MoePermuteArgs) -> str | None:
    e = (args.row_id_map.shape[1] - 1) // 2
    return (common.tensors_reason("moe_permute", {"tokens": args.tokens, "row_id_map": args.row_id_map,
                                                  "scaling_factor": args.scaling_factor, "probs": args.probs})
            or common.experts_reason("moe_permute", e))


def row_sources(row_id_map: torch.Tensor, num_out: int, *, cols: bool = True,
                zero_rows_of: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(src int32 [num_out], col int32 [num_out] or None)``: token and probs column of each
    permuted row (-1: no token, a padding row), from the row map by a race-free scatter on the
    device, in one buffer (one fill). ``zero_rows_of`` ``[T, W]`` (contiguous): zeroed by the same
    programs (``moe_unpermute_bwd``'s ``grad_merging_probs``, which then gets only the entries a
    copy reaches)."""
    from turbo_triton.moe import permute_kernels as kern

    t, e = row_id_map.shape[0], (row_id_map.shape[1] - 1) // 2
    inv = torch.full((2 if cols else 1, num_out), -1, dtype=torch.int32, device=row_id_map.device)
    src, col = inv[0], (inv[1] if cols else None)
    gm = zero_rows_of
    width = 0 if gm is None else gm.shape[1]
    zero_gm = gm is not None and gm.numel() > 0
    if t and (num_out or zero_gm):
        block_e = next_power_of_2(e)
        block_t = max(1, min(128, 4096 // block_e))
        block_w = max(2, min(next_power_of_2(max(width, 1)), 4096 // block_t))
        fast_kernel(kern.sources_kernel)[(cdiv(t, block_t),)](
            row_id_map, src, col if cols else src, gm if zero_gm else src, t, e, num_out, width,
            HAS_COL=cols, ZERO_GM=zero_gm, BLOCK_T=block_t, BLOCK_E=block_e, BLOCK_W=block_w,
            num_warps=common.warps(block_t * block_e))
    return src, col


def moe_permute(args: MoePermuteArgs, *, block_h: int | None = None, unroll: int | None = None,
                num_warps: int | None = None, gather: bool = False, search: bool | None = None,
                search_rows: int | None = None):
    """``(permuted [num_out, H] tokens' dtype, scales [num_out, S] fp32 or None, probs [num_out]
    probs' dtype or None)``, equal to the reference bit for bit. ``block_h`` (a power of two),
    ``unroll`` (copies a step) and ``num_warps`` override the tile heuristics (tests, tuning);
    ``gather``: the row-major form (``gather_kernel``: each permuted row reads its token; the same
    three launches); ``search``: the one-launch search path on or off (default: when ``T x E <=
    SEARCH_MAX``); ``search_rows``: its rows a program (a power of two; each step compares them with
    ``4096 / search_rows`` row-map entries; default 2, for sweeps)."""
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
    has_scales = scales is not None and scales.shape[1] > 0
    has_probs = probs is not None
    width = 0 if pr is None else pr.shape[1]
    bh = block_h or common.block_h(h)
    s = sf.shape[1] if has_scales else 0
    block_s = max(2, next_power_of_2(max(s, 1)))
    if not gather and (search if search is not None else t * e <= SEARCH_MAX):
        br = search_rows or 4096 // _SEARCH_F
        if br < 1 or br & (br - 1) or br > 4096:
            raise ValueError(f"search_rows: expected a power of two from 1 to 4096, got {search_rows}")
        fast_kernel(kern.search_gather_kernel)[(cdiv(n, br), max(1, cdiv(h, bh)))](
            common.bits(x) if t else common.bits(out), rmap, common.bits(out),
            sf.view(torch.int32) if has_scales and t else rmap, scales.view(torch.int32) if has_scales else rmap,
            common.bits(pr) if has_probs and pr.numel() else rmap, common.bits(probs) if has_probs else rmap,
            t, e, n, h, s, width, HAS_SCALES=has_scales, HAS_PROBS=has_probs, BLOCK_R=br, BLOCK_F=4096 // br,
            BLOCK_H=bh, BLOCK_S=block_s, num_warps=num_warps or common.warps(br * bh))
        return out, scales, probs
    src, col = row_sources(rmap, n, cols=gather and has_probs)
    dummy = src
    if gather:
        br = max(1, min(16, 4096 // bh))
        fast_kernel(kern.gather_kernel)[(cdiv(n, br), max(1, cdiv(h, bh)))](
            common.bits(x) if t else common.bits(out), src, col if col is not None else dummy, common.bits(out),
            sf.view(torch.int32) if has_scales and t else dummy, scales.view(torch.int32) if has_scales else dummy,
            common.bits(pr) if has_probs and pr.numel() else dummy, common.bits(probs) if has_probs else dummy,
            n, h, s, width, HAS_SCALES=has_scales, HAS_PROBS=has_probs, BLOCK_R=br, BLOCK_H=bh,
            BLOCK_S=block_s, num_warps=num_warps or common.warps(br * bh))
        return out, scales, probs
    fast_kernel(kern.permute_kernel)[(t + cdiv(n, _BLOCK_R), max(1, cdiv(h, bh)))](
        common.bits(x), rmap, src, common.bits(out),
        sf.view(torch.int32) if has_scales and t else dummy, scales.view(torch.int32) if has_scales else dummy,
        common.bits(pr) if has_probs and pr.numel() else dummy, common.bits(probs) if has_probs else dummy,
        t, h, e, n, s, width, HAS_SCALES=has_scales, HAS_PROBS=has_probs, UNROLL=unroll or _UNROLL,
        BLOCK_H=bh, BLOCK_R=_BLOCK_R, BLOCK_S=block_s, num_warps=num_warps or common.warps(bh))
    return out, scales, probs
