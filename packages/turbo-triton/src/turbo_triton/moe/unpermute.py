"""``moe_unpermute`` and ``moe_unpermute_bwd`` on Triton (see ``unpermute_kernels``).

Numerics: fp32 products and sums in the row map's copy order, rounded once to the output dtype.
On a GPU, with fp-fusion off, ``moe_unpermute`` equals torch's fp32 reference bit for bit; the
reduction order of the backward's dots (``grad_merging_probs``) differs from ``torch.sum``'s, so
those agree to fp32 rounding (a few ulp of ``sum |g * x|``). On the CPU the reference accumulates in
float64: the kernels agree to fp32 rounding. Padding rows of ``grad_permuted`` (no token maps to
them) are written as zeros by the kernel that writes the other rows. No host sync.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.moe import MoeUnpermuteArgs, MoeUnpermuteBwdArgs
from turbo_triton import _runtime
from turbo_triton.intmath import cdiv, next_power_of_2
from turbo_triton.launcher import fast_kernel
from turbo_triton.moe import common
from turbo_triton.moe.permute import row_sources

__all__ = ["can_handle", "can_handle_bwd", "moe_unpermute", "moe_unpermute_bwd"]

#: Copies of a token a step (their row ids, weights and rows load together).
_UNROLL = 2


def can_handle(args: MoeUnpermuteArgs) -> str | None:
    e = (args.row_id_map.shape[1] - 1) // 2
    return (common.tensors_reason("moe_unpermute", {
        "permuted_tokens": args.permuted_tokens, "row_id_map": args.row_id_map,
        "permuted_probs": args.permuted_probs, "merging_probs": args.merging_probs})
        or common.experts_reason("moe_unpermute", e))


def can_handle_bwd(args: MoeUnpermuteBwdArgs) -> str | None:
    e = (args.row_id_map.shape[1] - 1) // 2
    return (common.tensors_reason("moe_unpermute_bwd", {
        "grad_tokens": args.grad_tokens, "permuted_tokens": args.permuted_tokens,
        "row_id_map": args.row_id_map, "merging_probs": args.merging_probs})
        or common.experts_reason("moe_unpermute_bwd", e))


def _round_bf16(t: torch.Tensor) -> bool:
    return _runtime.interpreting() and t.dtype == torch.bfloat16


def moe_unpermute(args: MoeUnpermuteArgs, *, block_h: int | None = None, unroll: int | None = None,
                  num_warps: int | None = None):
    """``(tokens [T, H] permuted_tokens' dtype, unpermuted_probs [T, probs_width] or None)``, one
    launch. ``block_h`` (a power of two), ``unroll`` (copies a step) and ``num_warps`` override the
    tile heuristics (tests, tuning)."""
    from turbo_triton.moe import unpermute_kernels as kern

    x, rmap, merge, pp = args.permuted_tokens, args.row_id_map, args.merging_probs, args.permuted_probs
    n, h = x.shape
    t, e = rmap.shape[0], (rmap.shape[1] - 1) // 2
    out = torch.empty((t, h), dtype=x.dtype, device=x.device)
    probs = None if pp is None else torch.empty((t, args.probs_width), dtype=pp.dtype, device=pp.device)
    has_pp = probs is not None and args.probs_width > 0
    if t and (h or has_pp):
        bh = block_h or common.block_h(h)
        width = merge.shape[1] if merge is not None else 0
        pw = args.probs_width if has_pp else 0
        # Zero-width merging probs, no permuted probs, N = 0: the pointer stands in, never dereferenced.
        pp_bits = common.bits(pp) if has_pp and n else x
        fast_kernel(kern.unpermute_kernel)[(t, max(1, cdiv(h, bh)))](
            x, rmap, merge if width else x, out, pp_bits, common.bits(probs) if has_pp else x, h, e, n, width, pw,
            HAS_MERGE=merge is not None, HAS_PP=has_pp, ROUND_BF16=_round_bf16(x), UNROLL=unroll or _UNROLL,
            BLOCK_H=bh, BLOCK_PW=max(2, next_power_of_2(max(pw, 1))),
            num_warps=num_warps or common.warps(bh), **common.no_fusion())
    return out, probs


def moe_unpermute_bwd(args: MoeUnpermuteBwdArgs, *, block_h: int | None = None, num_warps: int | None = None):
    """``(grad_permuted [N, H] grad_tokens' dtype, grad_merging_probs [T, W] merging_probs' dtype)``:
    three launches (a fill, ``sources_kernel``, ``unpermute_bwd_kernel``). ``block_h`` and
    ``num_warps`` override the tile heuristics (tests, tuning)."""
    from turbo_triton.moe import unpermute_kernels as kern

    g, x, rmap, merge = args.grad_tokens, args.permuted_tokens, args.row_id_map, args.merging_probs
    n, h = x.shape
    t, width = rmap.shape[0], merge.shape[1]
    gx = torch.empty((n, h), dtype=g.dtype, device=g.device)
    gm = torch.empty((t, width), dtype=merge.dtype, device=g.device)
    if n == 0:
        return gx, gm.zero_()
    src, col = row_sources(rmap, n, zero_rows_of=gm)
    bh = block_h or common.block_h(h)
    # Zero-width merging probs: no column is valid (w = 0); the pointers are never dereferenced.
    fast_kernel(kern.unpermute_bwd_kernel)[(n,)](
        g if t else gx, x, src, col, merge if width else gx, gx, gm if width else gx, h, width,
        ROUND_BF16=_round_bf16(g), ROUND_BF16_M=_round_bf16(merge), BLOCK_H=bh,
        num_warps=num_warps or common.warps(bh), **common.no_fusion())
    return gx, gm
