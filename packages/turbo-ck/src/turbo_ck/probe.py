"""Availability of the Composable Kernel backend (never compiles; loads the extension only when shipped)."""

from __future__ import annotations

import torch


def probe() -> str | None:
    from turbo_ck import _ext
    from turbo_core.platform import gpu_count, torch_build_label

    reason = _ext.missing_reason()
    if reason:
        return reason
    if not torch.version.hip:
        return (f"needs ROCm with Composable Kernel (gfx942/gfx950); no ROCm found "
                f"(this torch is a {torch_build_label()} build)")
    try:
        _ext.load()
    except _ext.ExtensionUnavailable as exc:
        return str(exc)
    if gpu_count() == 0:
        return "no GPU"
    return None
