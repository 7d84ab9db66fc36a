"""Availability of the Composable Kernel backend."""

from __future__ import annotations

import importlib.util

import torch


def probe() -> str | None:
    from turbo_core.platform import gpu_count, torch_build_label

    if not torch.version.hip:
        return (f"needs ROCm with Composable Kernel (gfx942/gfx950); no ROCm found "
                f"(this torch is a {torch_build_label()} build)")
    if importlib.util.find_spec("turbo_ck._C") is None:
        return "built without hipcc and CK headers (compiled extension turbo_ck._C is missing)"
    if gpu_count() == 0:
        return "no GPU"
    return None
