"""Availability of the AITER backend. Never imports aiter (importing it without ROCm raises, and
discovery must stay cheap): the import happens on the first kernel call
(:func:`turbo_aiter.library.load`)."""

from __future__ import annotations

import importlib.util

import torch


def probe() -> str | None:
    """``None`` when the backend can run here, else the first reason it cannot."""
    from turbo_core.platform import gpu_count, torch_build_label

    if not torch.version.hip:
        return f"needs ROCm (gfx942/gfx950); no ROCm found (this torch is a {torch_build_label()} build)"
    if importlib.util.find_spec("aiter") is None:
        return "aiter is not importable: amd-aiter is not installed (pip install turbo-aiter[rocm])"
    if gpu_count() == 0:
        return "no GPU"
    return None
