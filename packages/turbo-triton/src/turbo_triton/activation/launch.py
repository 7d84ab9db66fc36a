"""``swiglu_fwd/bwd`` and ``geglu_fwd/bwd`` on Triton: capability check, tiles and launchers.

No host syncs: the row mask is read by the kernels, and every output row is written (zeros for
inactive rows), so outputs come from ``torch.empty``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from turbo_core.dispatch.specs.activation import GluBwdArgs, GluFwdArgs
from turbo_triton import _runtime
from turbo_triton.intmath import cdiv, next_power_of_2
from turbo_triton.launcher import fast_kernel

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class GluConfig:
    """One program's tile: ``block_m`` rows x ``block_n`` columns of the half width ``H``."""

    block_m: int
    block_n: int
    num_warps: int


def pick(half: int, backward: bool, interp: bool) -> GluConfig:
    """Tile heuristic for a half width of ``half`` elements (about 4096 elements a tile on a GPU:
    16 per thread at 8 warps, two 16-byte vectors of bf16 per operand)."""
    width = next_power_of_2(max(1, half))
    if interp:
        block_n = min(width, 1024)
        return GluConfig(max(1, min(64, 8192 // block_n)), block_n, 4)
    block_n = min(width, 2048)
    tile = 2048 if backward else 4096
    block_m = max(1, tile // block_n)
    return GluConfig(block_m, block_n, 8 if block_m * block_n >= 4096 else 4)


def can_handle(args: GluFwdArgs | GluBwdArgs) -> str | None:
    reason = _runtime.device_reason(args.x)
    if reason:
        return reason
    named = {"x": args.x, "probs": args.probs, "row_mask": args.row_mask}
    if isinstance(args, GluBwdArgs):
        named["grad_out"] = args.grad_out
    if args.x.dtype not in _DTYPES:
        return f"TRITON glu serves fp16/bf16/fp32 x, not {args.x.dtype}"
    for name, t in named.items():
        if t is not None and not t.is_contiguous():
            return f"TRITON glu needs a contiguous {name}"
    return None


def _flags(kind: str, args, interp: bool) -> dict:
    return dict(GELU=kind == "geglu", HAS_MASK=args.row_mask is not None,
                ROUND_BF16=interp and args.x.dtype == torch.bfloat16)


def glu_fwd(kind: str, args: GluFwdArgs, config: GluConfig | None = None) -> torch.Tensor:
    """``out [T, H]``; ``kind`` is ``"swiglu"`` or ``"geglu"``; ``config`` overrides the tiles."""
    from turbo_triton.activation import kernels

    x = args.x
    tokens, half = x.shape[0], x.shape[1] // 2
    out = x.new_empty((tokens, half))
    if out.numel() == 0:
        return out
    interp = _runtime.interpreting()
    cfg = config or pick(half, False, _runtime.interpreter_tiles())
    mask = args.row_mask if args.row_mask is not None else args.probs
    grid = (cdiv(tokens, cfg.block_m), cdiv(half, cfg.block_n))
    fast_kernel(kernels.glu_fwd_kernel)[grid](x, args.probs, mask, out, tokens, half, **_flags(kind, args, interp),
                                 BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, num_warps=cfg.num_warps)
    return out


def glu_bwd(kind: str, args: GluBwdArgs, config: GluConfig | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_x [T, 2H], grad_probs [T] fp32)``."""
    from turbo_triton.activation import kernels

    x = args.x
    tokens, half = x.shape[0], x.shape[1] // 2
    grad_x = torch.empty_like(x)
    if half == 0 or tokens == 0:
        return grad_x, torch.zeros_like(args.probs)
    grad_probs = torch.empty_like(args.probs)
    interp = _runtime.interpreting()
    cfg = config or pick(half, True, _runtime.interpreter_tiles())
    mask = args.row_mask if args.row_mask is not None else args.probs
    fast_kernel(kernels.glu_bwd_kernel)[(cdiv(tokens, cfg.block_m),)](
        args.grad_out, x, args.probs, mask, grad_x, grad_probs, tokens, half, **_flags(kind, args, interp),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, num_warps=cfg.num_warps)
    return grad_x, grad_probs


def swiglu_fwd(args: GluFwdArgs) -> torch.Tensor:
    return glu_fwd("swiglu", args)


def swiglu_bwd(args: GluBwdArgs) -> tuple[torch.Tensor, torch.Tensor]:
    return glu_bwd("swiglu", args)


def geglu_fwd(args: GluFwdArgs) -> torch.Tensor:
    return glu_fwd("geglu", args)


def geglu_bwd(args: GluBwdArgs) -> tuple[torch.Tensor, torch.Tensor]:
    return glu_bwd("geglu", args)
