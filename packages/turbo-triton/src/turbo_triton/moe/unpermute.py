"""``moe_unpermute`` and ``moe_unpermute_bwd`` on Triton (see ``unpermute_kernels``).

Numerics: fp32 products and sums in the row map's copy order, rounded once to the output dtype.
On a GPU, with fp-fusion off, ``moe_unpermute`` equals torch's fp32 reference bit for bit; the
reduction order of the backward's dots (``grad_merging_probs``) differs from ``torch.sum``'s, so
those agree to fp32 rounding (a few ulp of ``sum |g * x|``). On the CPU the reference accumulates in
float64: the kernels agree to fp32 rounding. Padding rows of ``grad_permuted`` (no token maps to
them) are written as zeros. No host sync.
"""

from __future__ import annotations

import torch
import triton

from turbo_core.dispatch.specs.moe import MoeUnpermuteArgs, MoeUnpermuteBwdArgs
from turbo_triton import _runtime
from turbo_triton.moe import common
from turbo_triton.moe.permute import row_sources, zero_rows_block

__all__ = ["can_handle", "can_handle_bwd", "moe_unpermute", "moe_unpermute_bwd"]

_BLOCK_R = 16


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


def moe_unpermute(args: MoeUnpermuteArgs):
    """``(tokens [T, H] permuted_tokens' dtype, unpermuted_probs [T, probs_width] or None)``."""
    from turbo_triton.moe import unpermute_kernels as kern

    x, rmap, merge, pp = args.permuted_tokens, args.row_id_map, args.merging_probs, args.permuted_probs
    n, h = x.shape
    t, e = rmap.shape[0], (rmap.shape[1] - 1) // 2
    out = torch.empty((t, h), dtype=x.dtype, device=x.device)
    if t and h:
        bh = common.block_h(h)
        width = merge.shape[1] if merge is not None else 0
        # Zero-width merging probs: no column is valid (w = 0); the pointer is never dereferenced.
        kern.unpermute_kernel[(t, triton.cdiv(h, bh))](
            x, rmap, merge if width else x, out, h, e, n, width, HAS_MERGE=merge is not None,
            ROUND_BF16=_round_bf16(x), BLOCK_H=bh, num_warps=common.warps(bh), **common.no_fusion())
    probs = None
    if pp is not None:
        width = args.probs_width
        probs = torch.empty((t, width), dtype=pp.dtype, device=pp.device)
        if t and width:
            bw = triton.next_power_of_2(width)
            bt = max(1, min(64, 4096 // bw))
            kern.unpermute_probs_kernel[(triton.cdiv(t, bt),)](
                common.bits(pp) if n else common.bits(probs), rmap, common.bits(probs), t, e, n, width,
                BLOCK_T=bt, BLOCK_W=bw, num_warps=common.warps(bt * bw))
    return out, probs


def moe_unpermute_bwd(args: MoeUnpermuteBwdArgs):
    """``(grad_permuted [N, H] grad_tokens' dtype, grad_merging_probs [T, W] merging_probs' dtype)``."""
    from turbo_triton.moe import permute_kernels as pkern
    from turbo_triton.moe import unpermute_kernels as kern

    g, x, rmap, merge = args.grad_tokens, args.permuted_tokens, args.row_id_map, args.merging_probs
    n, h = x.shape
    t, e, width = rmap.shape[0], (rmap.shape[1] - 1) // 2, merge.shape[1]
    gx = torch.empty((n, h), dtype=g.dtype, device=g.device)
    gm = torch.empty((t, width), dtype=merge.dtype, device=g.device)
    if n == 0:
        return gx.zero_(), gm.zero_()
    if t:
        bh = common.block_h(h)
        # Zero-width merging probs: no column is valid (w = 0); the pointers are never dereferenced.
        kern.unpermute_bwd_kernel[(t,)](
            g, x, rmap, merge if width else g, gx, gm if width else g, h, e, n, width,
            ROUND_BF16=_round_bf16(g), ROUND_BF16_M=_round_bf16(merge), BLOCK_H=bh,
            BLOCK_W=triton.next_power_of_2(max(width, 1)), num_warps=common.warps(bh), **common.no_fusion())
    if h:
        src, _ = row_sources(rmap, n)
        bh = zero_rows_block(h)
        pkern.fill_rows_kernel[(triton.cdiv(n, _BLOCK_R),)](
            common.bits(gx), src, src, src, src, src, src, n, h, 1, 1,
            ZERO_ROWS=True, HAS_SCALES=False, HAS_PROBS=False, BLOCK_R=_BLOCK_R, BLOCK_H=bh, BLOCK_S=1,
            num_warps=common.warps(_BLOCK_R * bh))
    return gx, gm
