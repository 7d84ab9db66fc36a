"""Shared helpers of the MoE launchers: capability checks, bit views, tile sizes."""

from __future__ import annotations

import torch

from turbo_triton import _runtime
from turbo_triton.intmath import next_power_of_2

#: Largest expert count served (the routing tile holds ``next_pow2(E)`` columns per token).
MAX_EXPERTS = 1024
#: Columns of a hidden-dimension tile (elements): wide under the interpreter (its cost is per
#: program), narrower on a GPU (more programs, less tail waste at H = 7168).
MAX_BLOCK_H = 4096
GPU_BLOCK_H = 2048

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def tensors_reason(op: str, named: dict[str, torch.Tensor | None]) -> str | None:
    """Why a set of tensors cannot be served (device, contiguity), or ``None``."""
    first = next((t for t in named.values() if t is not None), None)
    if first is not None:
        reason = _runtime.device_reason(first)
        if reason:
            return reason
    for name, t in named.items():
        if t is not None and t.numel() and not t.is_contiguous():
            return f"TRITON {op} needs a contiguous {name}"
    return None


def experts_reason(op: str, e: int) -> str | None:
    if e > MAX_EXPERTS:
        return f"TRITON {op} serves at most {MAX_EXPERTS} local experts, got {e}"
    return None


def bits(t: torch.Tensor) -> torch.Tensor:
    """``t`` viewed as same-width integers: copies through it are bit-exact (NaN payloads, fp8)."""
    return t.view(_BITS[t.element_size()])


def block_h(hidden: int) -> int:
    cap = MAX_BLOCK_H if _runtime.interpreting() else GPU_BLOCK_H
    return max(16, min(cap, next_power_of_2(max(1, hidden))))


def warps(elements: int) -> int:
    """About 8-16 elements per thread."""
    return max(1, min(8, next_power_of_2(max(1, elements // 512))))


def no_fusion() -> dict:
    """Launch options that keep ``a * b + c`` as two roundings (as torch computes it) on a GPU."""
    return {} if _runtime.interpreting() else {"enable_fp_fusion": False}
