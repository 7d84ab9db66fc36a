"""Where a CK call runs: the device's arch, its current stream, the loaded extension. Imported by the
kernels on first use (never by the plugin module)."""

from __future__ import annotations

import contextlib
import functools

import torch

from turbo_ck._ext import EXTENSION
from turbo_ck.codes import arch_code

__all__ = ["arch", "ext", "gpu_reason", "on_device", "stream"]


def ext():
    return EXTENSION.load()


def gpu_reason(t: torch.Tensor, what: str) -> str | None:
    if not torch.version.hip:
        return f"CK {what} needs ROCm"
    if t.device.type != "cuda":
        return f"CK {what} runs on ROCm GPUs; the tensors are on {t.device}"
    return None


def _index(t: torch.Tensor) -> int:
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


@functools.lru_cache(maxsize=16)
def _arch(index: int) -> str | None:
    return arch_code(getattr(torch.cuda.get_device_properties(index), "gcnArchName", ""))


def arch(t: torch.Tensor) -> str | None:
    """``"gfx942"``/``"gfx950"`` for t's GPU, else None."""
    return _arch(_index(t))


def stream(t: torch.Tensor) -> int:
    return int(torch.cuda.current_stream(_index(t)).cuda_stream)


def on_device(t: torch.Tensor):
    index = _index(t)
    return contextlib.nullcontext() if torch.cuda.current_device() == index else torch.cuda.device(index)
