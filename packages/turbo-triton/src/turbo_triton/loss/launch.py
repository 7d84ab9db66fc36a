"""``cross_entropy_fwd`` / ``cross_entropy_bwd`` on Triton: capability check, chunk heuristic and
launchers.

No host syncs: one program per row, every output element written by the kernels (ignored rows get
their zeros there), so outputs come from ``torch.empty``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from turbo_core.dispatch.specs.loss import CrossEntropyBwdArgs, CrossEntropyFwdArgs
from turbo_triton import _runtime
from turbo_triton.intmath import next_power_of_2
from turbo_triton.launcher import fast_kernel

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

#: Chunk of a row on a GPU (elements): 8 KB of bf16, 16 elements a thread at 8 warps.
GPU_CHUNK = 4096
#: Chunk under the interpreter: vocabularies of a few hundred classes still take several chunks.
INTERPRETER_CHUNK = 256


@dataclass(frozen=True)
class RowConfig:
    """One program's walk over its row: ``block_v`` elements a chunk, ``num_warps``."""

    block_v: int
    num_warps: int


@functools.lru_cache(maxsize=256)
def pick(classes: int, interp: bool) -> RowConfig:
    """The chunk for rows of ``classes`` logits: the whole row when it is shorter than a chunk."""
    width = next_power_of_2(classes)
    if interp:
        return RowConfig(min(width, INTERPRETER_CHUNK), 4)
    block = min(width, GPU_CHUNK)
    return RowConfig(block, max(1, min(8, block // 512)))


def can_handle(args: CrossEntropyFwdArgs | CrossEntropyBwdArgs) -> str | None:
    reason = _runtime.device_reason(args.logits)
    if reason:
        return reason
    if args.logits.dtype not in _DTYPES:
        return f"TRITON cross entropy serves fp16/bf16/fp32 logits, not {args.logits.dtype}"
    named = {"logits": args.logits, "target": args.target}
    if isinstance(args, CrossEntropyBwdArgs):
        named.update(dloss=args.dloss, lse=args.lse)
    for name, t in named.items():
        if not t.is_contiguous():
            return f"TRITON cross entropy needs a contiguous {name}"
    return None


def cross_entropy_fwd(args: CrossEntropyFwdArgs, config: RowConfig | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss [N] fp32, lse [N] fp32)``; ``config`` overrides the chunk heuristic (tests, tuning)."""
    from turbo_triton.loss import kernels

    logits = args.logits
    rows, classes = logits.shape
    loss = torch.empty(rows, dtype=torch.float32, device=logits.device)
    lse = torch.empty(rows, dtype=torch.float32, device=logits.device)
    if rows == 0:
        return loss, lse
    cfg = config or pick(classes, _runtime.interpreting())
    eps = float(args.label_smoothing)
    fast_kernel(kernels.cross_entropy_fwd_kernel)[(rows,)](
        logits, args.target, loss, lse, classes, args.ignore_index, eps,
        SMOOTHING=eps > 0.0, BLOCK_V=cfg.block_v, num_warps=cfg.num_warps)
    return loss, lse


def cross_entropy_bwd(args: CrossEntropyBwdArgs, config: RowConfig | None = None) -> torch.Tensor:
    """``dlogits [N, V]`` in logits' dtype; ``config`` overrides the chunk heuristic."""
    from turbo_triton.loss import kernels

    logits = args.logits
    rows, classes = logits.shape
    dlogits = torch.empty_like(logits)
    if rows == 0:
        return dlogits
    interp = _runtime.interpreting()
    cfg = config or pick(classes, interp)
    eps = float(args.label_smoothing)
    fast_kernel(kernels.cross_entropy_bwd_kernel)[(rows,)](
        args.dloss, logits, args.target, args.lse, dlogits, classes, args.ignore_index, eps,
        SMOOTHING=eps > 0.0, ROUND_BF16=interp and logits.dtype == torch.bfloat16, BLOCK_V=cfg.block_v,
        num_warps=cfg.num_warps)
    return dlogits
