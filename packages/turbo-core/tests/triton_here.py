"""Whether TRITON's kernels can run in this test process on the CPU interpreter."""

from __future__ import annotations

import os
import sys


def triton_interpretable() -> str | None:
    """``None`` when turbo-triton is installed and Triton runs interpreted here, else why not."""
    try:
        import turbo_triton  # noqa: F401
    except ImportError:
        return "turbo-triton is not installed"
    if "triton.language" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        # its own @triton.jit helpers (tl.zeros, ...) were built for a GPU then: the interpreter cannot call them
        return "triton was imported without TRITON_INTERPRET=1 in this process"
    return None
