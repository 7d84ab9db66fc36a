"""``moe_routing_fwd`` / ``moe_routing_bwd`` on Triton (see ``routing_kernels``): the group-limited
top-k router, one program per block of tokens with the whole expert row in registers.

Math runs in the reference's compute type: fp32 on a GPU (with the correctly rounded exp and
division torch's kernels use, so the sigmoid scores the selection compares are torch's bit for bit),
fp64 on CPU tensors (the interpreter), so the selection, ties included, is the reference's.
Scores and probs are rounded once to logits' dtype. No host sync.
"""

from __future__ import annotations

import torch

from turbo_core.dispatch.specs.moe import MoeRoutingBwdArgs, MoeRoutingFwdArgs
from turbo_triton import _runtime
from turbo_triton.intmath import cdiv, next_power_of_2
from turbo_triton.launcher import fast_kernel
from turbo_triton.moe import common

__all__ = ["can_handle", "can_handle_bwd", "moe_routing_bwd", "moe_routing_fwd"]

#: Elements of one program's tile (tokens x padded expert row): registers on a GPU; larger under
#: the interpreter, whose cost is per program.
_GPU_TILE = 1024
_INTERP_TILE = 8192
#: The backward's tile for rows of at most ``_BWD_NARROW`` (padded) experts on a GPU: elements a program.
#: Tuned at 8 (Mixtral); at 128 and 256 experts smaller tiles than ``_GPU_TILE`` are slower (the ``moe``
#: suite measures them).
_BWD_NARROW = 8
_BWD_NARROW_TILE = 256


def can_handle(args: MoeRoutingFwdArgs) -> str | None:
    return (common.tensors_reason("moe_routing_fwd", {"logits": args.logits})
            or common.experts_reason("moe_routing_fwd", args.logits.shape[1]))


def can_handle_bwd(args: MoeRoutingBwdArgs) -> str | None:
    named = {"logits": args.logits, "routing_map": args.routing_map, "grad_scores": args.grad_scores,
             "grad_probs": args.grad_probs}
    return (common.tensors_reason("moe_routing_bwd", named)
            or common.experts_reason("moe_routing_bwd", args.logits.shape[1]))


def _wide(t: torch.Tensor, wide: bool | None) -> bool:
    """Compute in fp64: the reference's choice (CPU tensors) unless a test forces one."""
    return t.device.type == "cpu" if wide is None else wide


def _tile(width: int, block_t: int | None) -> tuple[int, int]:
    """``(BLOCK_T, num_warps)`` for a padded row of ``width`` elements (``block_t``: a power of two
    that overrides the tokens per program)."""
    if block_t is None:
        target = _INTERP_TILE if _runtime.interpreting() else _GPU_TILE
        block_t = max(1, min(128, target // width))
    return block_t, 4 if block_t * width <= 2048 else 8


def _scale_args(x: torch.Tensor, scale: float, wide: bool) -> tuple[float, torch.Tensor]:
    """The scaling factor as an fp32 argument and, for fp64 math, as an fp64 tensor."""
    ptr = torch.full((1,), scale, dtype=torch.float64, device=x.device) if wide else x
    return float(scale), ptr


def moe_routing_fwd(args: MoeRoutingFwdArgs, *, wide: bool | None = None, block_t: int | None = None):
    """``(scores [T, E], probs [T, E]`` in logits' dtype, ``routing_map`` bool ``[T, E])``.

    ``wide`` forces fp64 (True) or fp32 (False) math; ``None`` follows the reference (fp64 on CPU
    tensors). ``block_t`` overrides the tokens per program (tests, tuning)."""
    from turbo_triton.moe import routing_kernels as kern

    x = args.logits
    t, e = x.shape
    scores, probs = torch.empty_like(x), torch.empty_like(x)
    rmap = torch.empty((t, e), dtype=torch.bool, device=x.device)
    if t == 0:
        return scores, probs, rmap
    wide = _wide(x, wide)
    groups, per_group = args.groups, e // args.groups
    bg, bp = next_power_of_2(groups), next_power_of_2(per_group)
    bt, nw = _tile(bg * bp, block_t)
    interp = _runtime.interpreting()
    scale, scale_ptr = _scale_args(x, args.scaling_factor, wide)
    fast_kernel(kern.routing_fwd_kernel)[(cdiv(t, bt),)](
        x, scores, probs, rmap.view(torch.uint8), t, e, per_group, groups, args.topk,
        args.topk // args.selected_groups, args.selected_groups, scale, scale_ptr,
        SOFTMAX=args.score_function == "softmax", GROUPED=groups > 1,
        CT=kern.tl.float64 if wide else kern.tl.float32, WIDE=wide, EXACT=not interp, PACK=not wide,
        ROUND_BF16=interp and x.dtype == torch.bfloat16,
        BLOCK_T=bt, BLOCK_G=bg, BLOCK_P=bp, num_warps=nw, **common.no_fusion())
    return scores, probs, rmap


def moe_routing_bwd(args: MoeRoutingBwdArgs, *, wide: bool | None = None, block_t: int | None = None,
                    num_warps: int | None = None) -> torch.Tensor:
    """``grad_logits [T, E]`` in logits' dtype (selection fixed by ``routing_map``); ``wide`` and
    ``block_t`` as in :func:`moe_routing_fwd`; ``num_warps`` overrides the warps per program."""
    from turbo_triton.moe import routing_kernels as kern

    x = args.logits
    t, e = x.shape
    out = torch.empty_like(x)
    if t == 0:
        return out
    wide = _wide(x, wide)
    interp = _runtime.interpreting()
    be = next_power_of_2(e)
    if block_t is None and be <= _BWD_NARROW and not interp:
        # Narrow rows (Mixtral's 8 experts): the grid is a few dozen programs and the exact exp /
        # divisions per element are the critical path, so 2 elements a thread (256-element tiles,
        # 4 warps; the `moe` suite measures it beside torch.compile).
        bt, nw = max(1, _BWD_NARROW_TILE // be), 4
    else:
        bt, nw = _tile(be, block_t)
    nw = num_warps or nw
    scale, scale_ptr = _scale_args(x, args.scaling_factor, wide)
    gs, gp = args.grad_scores, args.grad_probs
    fast_kernel(kern.routing_bwd_kernel)[(cdiv(t, bt),)](
        x, x if gs is None else gs, x if gp is None else gp, args.routing_map.view(torch.uint8), out, t, e,
        scale, scale_ptr, SOFTMAX=args.score_function == "softmax", HAS_GS=gs is not None,
        HAS_GP=gp is not None, CT=kern.tl.float64 if wide else kern.tl.float32, WIDE=wide,
        EXACT=not interp, ROUND_BF16=interp and x.dtype == torch.bfloat16, BLOCK_T=bt, BLOCK_E=be, num_warps=nw,
        **common.no_fusion())
    return out
