"""Availability of the CUDNN backend: a CUDA build of PyTorch with cuDNN whose cuDNN attention
operators take the arguments the adapters pass, a GPU, and cuDNN's fused attention switched on in
PyTorch (``torch.backends.cuda.enable_cudnn_sdp``)."""

from __future__ import annotations

import torch


def probe() -> str | None:
    """``None`` when the backend can run here, else the first reason it cannot."""
    from turbo_core.platform import gpu_count, torch_build_label

    if torch.version.cuda is None or torch.version.hip:
        return f"needs a CUDA build of PyTorch (NVIDIA GPUs); this torch is a {torch_build_label()} build"
    if not torch.backends.cudnn.is_available():
        return "this CUDA build of PyTorch has no cuDNN"
    from turbo_cudnn.attention import schema_reason

    reason = schema_reason()
    if reason:
        return reason
    if gpu_count() == 0:
        return "no GPU"
    if not torch.backends.cuda.cudnn_sdp_enabled():
        return "cuDNN attention is switched off in PyTorch (torch.backends.cuda.enable_cudnn_sdp(False))"
    return None
