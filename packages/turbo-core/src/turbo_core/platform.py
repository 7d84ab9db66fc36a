"""Where a call runs: CPU, CUDA or ROCm, and the GPU architecture.

Nothing here runs at import. The GPU is only queried for a device that the caller's tensors are
already on (so no new GPU context is created by turbo itself); results are cached per device.
"""

from __future__ import annotations

import functools
import importlib.metadata as md
from dataclasses import dataclass

import torch

__all__ = ["Platform", "platform_of", "describe_process"]


@dataclass(frozen=True)
class Platform:
    """``kind`` is ``"cpu"``, ``"cuda"`` or ``"rocm"``; ``arch`` e.g. ``"sm90"``, ``"gfx942"``."""

    kind: str
    arch: str | None = None
    device_name: str = "cpu"
    device_index: int | None = None

    @property
    def key(self) -> tuple:
        return (self.kind, self.arch, self.device_index)


CPU = Platform("cpu")


@functools.lru_cache(maxsize=64)
def _gpu_platform(index: int) -> Platform:
    props = torch.cuda.get_device_properties(index)
    if torch.version.hip:
        arch = getattr(props, "gcnArchName", "") or ""
        return Platform("rocm", arch.split(":")[0].lower() or None, props.name, index)
    return Platform("cuda", f"sm{props.major}{props.minor}", props.name, index)


def platform_of(device: torch.device | None) -> Platform:
    """The platform of a device (``None`` or a CPU device gives the CPU platform)."""
    if device is None or device.type != "cuda":
        return CPU
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _gpu_platform(index)


def describe_process() -> dict:
    """Versions and GPUs of this process, for ``turbo doctor`` (this one may touch the GPU)."""
    info: dict = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": torch.version.hip,
        "gpus": [],
    }
    try:
        info["triton"] = md.version("triton")
    except Exception:
        info["triton"] = None
    try:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception as exc:  # a broken driver is a problem to report, not a crash
        info["gpu_error"] = f"{type(exc).__name__}: {exc}"
        count = 0
    for i in range(count):
        p = _gpu_platform(i)
        info["gpus"].append({"index": i, "name": p.device_name, "kind": p.kind, "arch": p.arch})
    return info


def torch_build_label() -> str:
    """``"ROCm 7.0"``, ``"CUDA 13.0"`` or ``"CPU-only"``: what this torch was built for."""
    if torch.version.hip:
        return f"ROCm {torch.version.hip}"
    if torch.version.cuda:
        return f"CUDA {torch.version.cuda}"
    return "CPU-only"


def gpu_count() -> int:
    """Visible GPUs (0 when torch has no GPU support or no device); never raises."""
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        return 0
