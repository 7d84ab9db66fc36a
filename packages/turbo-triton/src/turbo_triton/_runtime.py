"""Facts about where Triton kernels run: interpreter mode, GPU arch, multiprocessor count.

Imported only by kernel modules (on first use), never by the plugin module.
"""

from __future__ import annotations

import functools
import os

import torch

__all__ = ["device_reason", "interpreting", "num_sms", "arch_of", "has_tensor_descriptors"]


def interpreting() -> bool:
    """``TRITON_INTERPRET=1``: kernels run on the CPU interpreter, on CPU tensors."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def device_reason(t: torch.Tensor) -> str | None:
    """Why a tensor's device cannot be served in this mode, or ``None``."""
    if interpreting():
        if t.device.type != "cpu":
            return "TRITON_INTERPRET=1 runs the Triton kernels on CPU tensors only"
        return None
    if t.device.type != "cuda":
        return "CPU tensors need TRITON_INTERPRET=1 (the Triton CPU interpreter)"
    return None


@functools.lru_cache(maxsize=16)
def num_sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


@functools.lru_cache(maxsize=16)
def arch_of(index: int) -> str:
    from turbo_core.platform import platform_of

    return platform_of(torch.device("cuda", index)).arch or "unknown"


@functools.lru_cache(maxsize=1)
def has_tensor_descriptors() -> bool:
    """Host-side TMA tensor descriptors (triton >= 3.4 on sm90+)."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:
        return False
    return True
