"""``no_host_sync()``: a block in which a host synchronisation raises, for GPU tests of paths that
promise none (static shapes, worst-case sizes, CUDA-graph-safe calls)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["no_host_sync"]


@contextlib.contextmanager
def no_host_sync() -> Iterator[None]:
    """Queued work first finishes; then, until the block ends, any host synchronisation raises
    (``torch.cuda.set_sync_debug_mode("error")``). Needs CUDA/ROCm."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")
