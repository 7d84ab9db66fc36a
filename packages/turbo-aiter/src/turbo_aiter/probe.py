"""Availability of the AITER backend. Never imports aiter (importing it without ROCm raises)."""

from __future__ import annotations

import importlib.util

import torch


def probe() -> str | None:
    from turbo_core.platform import gpu_count, torch_build_label

    if not torch.version.hip:
        return f"needs ROCm (gfx942/gfx950); no ROCm found (this torch is a {torch_build_label()} build)"
    if importlib.util.find_spec("aiter") is None:
        return "amd-aiter is not installed (pip install amd-aiter)"
    if gpu_count() == 0:
        return "no GPU"
    return None
