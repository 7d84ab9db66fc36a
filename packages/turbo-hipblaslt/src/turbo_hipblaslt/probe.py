"""Availability of the hipBLASLt/cuBLASLt backend."""

from __future__ import annotations

import importlib.util


def probe() -> str | None:
    if importlib.util.find_spec("turbo_hipblaslt._C") is None:
        return ("built without a BLASLt toolkit; found neither ROCm hipBLASLt nor CUDA cuBLASLt "
                "(compiled extension turbo_hipblaslt._C is missing)")
    from turbo_core.platform import gpu_count

    if gpu_count() == 0:
        return "no GPU"
    return None
