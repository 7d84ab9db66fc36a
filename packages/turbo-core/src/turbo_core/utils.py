"""Device queries under Primus-Turbo's names (its ``primus_turbo.pytorch.core.utils``).

Each takes an optional ``device`` (a ``torch.device``, ``"cuda:1"``, a GPU index, or ``None`` for
the current GPU, or the CPU when torch sees no GPU) and reads ``turbo_core.platform``: the GPU is
only queried when a function is called, never at import, and each device's answer is cached.
"""

from __future__ import annotations

import importlib.util

import torch

from turbo_core.platform import Platform, platform_of

__all__ = [
    "build_ck",
    "capability_of",
    "get_device_compute_capability",
    "get_num_cus",
    "is_gfx942",
    "is_gfx950",
    "is_gfx1250",
    "resolve_device",
]

DeviceLike = torch.device | str | int | None


def resolve_device(device: DeviceLike = None) -> torch.device:
    """``device`` as a ``torch.device``; ``None``: the current GPU, or the CPU without one."""
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    if isinstance(device, bool) or not isinstance(device, (torch.device, str, int)):
        raise TypeError(f"device: expected a torch.device, a device string, a GPU index or None, got {device!r}")
    if isinstance(device, int):
        if device < 0:
            raise ValueError(f"device: a GPU index must be >= 0, got {device}")
        return torch.device("cuda", device)
    return torch.device(device)


def capability_of(platform: Platform) -> tuple[int, int]:
    """``(major, minor)`` of a platform's architecture: ``gfx942`` -> (9, 4), ``gfx950`` -> (9, 5),
    ``gfx90a`` -> (9, 0), ``gfx1250`` -> (12, 5) (the last two hex digits are minor and stepping, as
    ROCm reports them); ``sm90`` -> (9, 0), ``sm100`` -> (10, 0); (0, 0) for the CPU or an
    architecture without a name."""
    arch = platform.arch
    if platform.kind == "rocm" and arch and arch.startswith("gfx") and len(arch) >= 6:
        digits = arch[3:]
        try:
            return int(digits[:-2]), int(digits[-2], 16)
        except ValueError:
            return 0, 0
    if platform.kind == "cuda" and arch and arch.startswith("sm") and len(arch) >= 4:
        try:
            return int(arch[2:-1]), int(arch[-1])
        except ValueError:
            return 0, 0
    return 0, 0


def get_device_compute_capability(device: DeviceLike = None) -> tuple[int, int]:
    """The GPU's ``(major, minor)`` (:func:`capability_of`); (0, 0) on the CPU."""
    return capability_of(platform_of(resolve_device(device)))


def _is_rocm(device: DeviceLike, capability: tuple[int, int]) -> bool:
    platform = platform_of(resolve_device(device))
    return platform.kind == "rocm" and capability_of(platform) == capability


def is_gfx942(device: DeviceLike = None) -> bool:
    """An AMD GPU of capability (9, 4): MI300 / MI325 (gfx940, gfx941, gfx942)."""
    return _is_rocm(device, (9, 4))


def is_gfx950(device: DeviceLike = None) -> bool:
    """An AMD GPU of capability (9, 5): MI350 / MI355 (gfx950)."""
    return _is_rocm(device, (9, 5))


def is_gfx1250(device: DeviceLike = None) -> bool:
    """An AMD GPU of capability (12, 5) (gfx1250)."""
    return _is_rocm(device, (12, 5))


def get_num_cus(device: DeviceLike = None) -> int:
    """Compute units (AMD) or streaming multiprocessors (NVIDIA) of the GPU; ``RuntimeError`` on
    the CPU, which has none."""
    dev = resolve_device(device)
    if dev.type != "cuda":
        raise RuntimeError("get_num_cus: no GPU (the device is the CPU)")
    return torch.cuda.get_device_properties(platform_of(dev).device_index).multi_processor_count


def build_ck() -> bool:
    """Whether the Composable Kernel backend (the ``turbo-ck`` package) is installed; whether it
    can run here is ``turbo backends``' answer."""
    return importlib.util.find_spec("turbo_ck") is not None
