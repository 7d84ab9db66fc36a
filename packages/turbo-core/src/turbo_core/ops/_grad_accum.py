"""The ``fuse_bgrad_accum_pattern="megatron"`` contract, shared by every GEMM-like op.

The weight ``b`` carries ``b.main_grad`` (a tensor of b's shape, usually fp32). The forward sets
``b.grad_added_to_main_grad = True``; the backward accumulates the weight gradient straight into
``main_grad`` (a beta=1 GEMM) and returns a cached dummy tensor as b's grad, which Megatron never
reads.
"""

from __future__ import annotations

import threading

import torch

PATTERNS = (None, "megatron")

_dummies: dict[tuple, torch.Tensor] = {}
_lock = threading.Lock()


def check_pattern(pattern: object, b: torch.Tensor) -> bool:
    """Validate ``fuse_bgrad_accum_pattern``; return whether fused accumulation is on."""
    if pattern not in PATTERNS:
        raise ValueError(f"fuse_bgrad_accum_pattern: expected None or 'megatron', got {pattern!r}")
    if pattern is None:
        return False
    main_grad = getattr(b, "main_grad", None)
    if not isinstance(main_grad, torch.Tensor):
        raise ValueError("fuse_bgrad_accum_pattern='megatron': b must carry a main_grad tensor")
    if main_grad.shape != b.shape or main_grad.device != b.device:
        raise ValueError(
            f"b.main_grad: expected shape {tuple(b.shape)} on {b.device}, "
            f"got {tuple(main_grad.shape)} on {main_grad.device}"
        )
    return True


def dummy_grad(b: torch.Tensor) -> torch.Tensor:
    """A cached tensor of b's shape/dtype/device to return as b's gradient (never read).
    Inside a compiled graph a fresh one (the cache's lock cannot be traced)."""
    if torch.compiler.is_compiling():
        return torch.zeros(b.shape, dtype=b.dtype, device=b.device)
    key = (tuple(b.shape), b.dtype, b.device)
    with _lock:
        t = _dummies.get(key)
        if t is None:
            t = torch.zeros(b.shape, dtype=b.dtype, device=b.device)
            _dummies[key] = t
        return t
