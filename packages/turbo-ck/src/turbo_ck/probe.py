"""Availability of the Composable Kernel backend (never compiles; loads the extension only when shipped)."""

from __future__ import annotations

import torch

from turbo_ck._ext import EXTENSION
from turbo_core.platform import gpu_count, torch_build_label
from turbo_core.plugins.extension import ExtensionUnavailable


def probe() -> str | None:
    reason = EXTENSION.missing_reason()
    if reason:
        return reason
    if not torch.version.hip:
        return (f"needs ROCm with Composable Kernel (gfx942/gfx950); no ROCm found "
                f"(this torch is a {torch_build_label()} build)")
    try:
        EXTENSION.load()
    except ExtensionUnavailable as exc:
        return str(exc)
    if gpu_count() == 0:
        return "no GPU"
    return None
