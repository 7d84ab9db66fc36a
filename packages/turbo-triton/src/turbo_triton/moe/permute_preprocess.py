"""``moe_permute_preprocess`` on Triton: the row map, per-expert layout, overflow flag and
dispatched count, all on the device (no host sync) by a deterministic two-level prefix sum (see
``preprocess_kernels``; one launch when the tokens fit one block). Bit-identical to the reference.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.moe import MoePermutePreprocessArgs
from turbo_triton.intmath import cdiv, next_power_of_2
from turbo_triton.launcher import fast_kernel
from turbo_triton.moe import common

__all__ = ["can_handle", "moe_permute_preprocess"]


def can_handle(args: MoePermutePreprocessArgs) -> str | None:
    return (common.tensors_reason("moe_permute_preprocess", {"expert_map": args.expert_map})
            or common.experts_reason("moe_permute_preprocess", args.num_local_experts))


def _block_t(block_e: int) -> int:
    return max(1, min(128, 8192 // block_e))


def moe_permute_preprocess(args: MoePermutePreprocessArgs, *, block_t: int | None = None,
                           block_b: int | None = None, single: bool | None = None):
    """``(row_id_map int32 [T, 2E + 1], tokens_per_expert int64 [E], overflow_flag int32 [1],
    num_dispatched_tokens int32 [1])``, equal to the reference bit for bit. ``block_t`` (tokens a
    program) and ``block_b`` (blocks a scan step), powers of two, override the heuristics (tests).

    ``single``: None (default) computes everything in one launch (``single_block_kernel``) when the
    tokens fit one block (``T <= block_t``: up to 32 tokens at 256 experts, 128 at 64 or fewer),
    else the three launches; False always takes the three (side-by-side timing); True requires
    one block."""
    from turbo_triton.moe import preprocess_kernels as kern

    emap, e = args.expert_map, args.num_local_experts
    t = emap.shape[0]
    dev = emap.device
    is_mask = emap.dtype == torch.bool
    k = 0 if is_mask else emap.shape[1]
    if is_mask:
        emap = emap.view(torch.uint8)
    block_e = next_power_of_2(e)
    explicit_t = block_t is not None
    block_t = block_t or _block_t(block_e)
    block_b = block_b or max(1, min(64, 8192 // block_e))
    blocks = cdiv(t, block_t)
    if single is None:
        single = blocks <= 1
    elif single and blocks > 1:
        raise ValueError(f"moe_permute_preprocess: single=True needs the {t} tokens in one block, "
                         f"got block_t={block_t}")
    offsets = torch.empty((e,), dtype=torch.int32, device=dev)
    row_id_map = torch.empty((t, 2 * e + 1), dtype=torch.int32, device=dev)
    tpe = torch.empty((e,), dtype=torch.int64, device=dev)
    overflow = torch.empty((1,), dtype=torch.int32, device=dev)
    dispatched = torch.empty((1,), dtype=torch.int32, device=dev)
    has_capacity = args.expert_capacity >= 0
    has_cap = args.num_permuted_tokens >= 0
    if single:  # the tile shrinks to the tokens there are (one compiled variant per power of two)
        bt = block_t if explicit_t else next_power_of_2(max(t, 1))
        fast_kernel(kern.single_block_kernel)[(1,)](
            emap, row_id_map, offsets, tpe, overflow, dispatched, t, k, e, max(args.pad_multiple, 1),
            max(args.expert_capacity, 0), max(args.num_permuted_tokens, 0), IS_MASK=is_mask,
            TOPK_LAYOUT=args.probs_layout == "topk", HAS_PAD=args.pad_multiple > 0, HAS_CAPACITY=has_capacity,
            HAS_CAP=has_cap, BLOCK_T=bt, BLOCK_E=block_e, num_warps=common.warps(bt * block_e))
        return row_id_map, tpe, overflow, dispatched
    nw = common.warps(block_t * block_e)
    counts = torch.empty((max(blocks, 1), e + 1), dtype=torch.int32, device=dev)
    prefix = torch.empty((max(blocks, 1), e), dtype=torch.int32, device=dev)
    if blocks:
        fast_kernel(kern.block_counts_kernel)[(blocks,)](emap, counts, t, k, e, IS_MASK=is_mask,
                                            BLOCK_T=block_t, BLOCK_E=block_e, num_warps=nw)
    fast_kernel(kern.scan_kernel)[(1,)](counts, prefix, offsets, tpe, overflow, dispatched, blocks, e,
                           max(args.pad_multiple, 1), max(args.expert_capacity, 0), max(args.num_permuted_tokens, 0),
                           HAS_PAD=args.pad_multiple > 0, HAS_CAPACITY=has_capacity, HAS_CAP=has_cap,
                           BLOCK_B=block_b, BLOCK_E=block_e, num_warps=common.warps(block_e * block_b))
    if blocks:
        fast_kernel(kern.row_map_kernel)[(blocks,)](emap, prefix, offsets, row_id_map, t, k, e,
                                       max(args.expert_capacity, 0), max(args.num_permuted_tokens, 0),
                                       IS_MASK=is_mask, TOPK_LAYOUT=args.probs_layout == "topk",
                                       HAS_CAPACITY=has_capacity, HAS_CAP=has_cap,
                                       BLOCK_T=block_t, BLOCK_E=block_e, num_warps=nw)
    return row_id_map, tpe, overflow, dispatched
