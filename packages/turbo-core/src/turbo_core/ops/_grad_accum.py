"""The ``fuse_bgrad_accum_pattern="megatron"`` contract, shared by every GEMM-like op.

The weight ``b`` carries ``b.main_grad`` (a tensor of b's shape, usually fp32). The forward sets
``b.grad_added_to_main_grad = True``; the backward accumulates the weight gradient straight into
``main_grad`` (a beta=1 GEMM) and returns a dummy tensor as b's grad, which Megatron never reads.

The dummies are a documented cache (``turbo_core.graph_pool`` gives the rule): one zero tensor per
(shape, dtype, device), made on the first fused backward outside CUDA-graph capture and reused by
every later one. Inside a capture or a CUDA-graph trees warm-up a missing entry is not stored: that
backward returns a fresh zero tensor of its own (in the graph's pool, an output of the graph).
"""

from __future__ import annotations

import threading

import torch

from turbo_core.graph_pool import may_cache

PATTERNS = (None, "megatron")

_dummies: dict[tuple, torch.Tensor] = {}  # (shape, dtype, device) -> zeros, filled only while may_cache()
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
    """A zero tensor of b's shape/dtype/device to return as b's gradient (never read): the cached
    one, else a new one, stored only while ``may_cache()`` (not during CUDA-graph capture or a
    CUDA-graph trees warm-up, where it would stay in the graph's pool). While torch.compile traces,
    a fresh one (traced into the graph; the cache's lock cannot be traced)."""
    if torch.compiler.is_compiling():
        return torch.zeros(b.shape, dtype=b.dtype, device=b.device)
    key = (tuple(b.shape), b.dtype, b.device)
    t = _dummies.get(key)
    if t is not None:
        return t
    t = torch.zeros(b.shape, dtype=b.dtype, device=b.device)
    if not may_cache():
        return t
    with _lock:
        return _dummies.setdefault(key, t)
