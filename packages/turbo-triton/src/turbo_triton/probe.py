"""Availability of the Triton backend, without importing triton."""

from __future__ import annotations

import importlib.util
import os


def probe() -> str | None:
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed (pip install triton)"
    if os.environ.get("TRITON_INTERPRET") == "1":
        if importlib.util.find_spec("numpy") is None:  # Triton's interpreter runs kernels on numpy arrays
            return "TRITON_INTERPRET=1 needs numpy, which is not installed (pip install numpy)"
        return None
    from turbo_core.platform import gpu_count

    if gpu_count() == 0:
        return "no GPU (set TRITON_INTERPRET=1 to run the Triton kernels on the CPU interpreter)"
    return None
