"""Availability of the hipBLASLt/cuBLASLt backend, and the version of the library it loads (for the
tuning database). Never compiles: with ``TURBO_HIPBLASLT_JIT=1`` and a toolkit found, the backend is
reported available and the build happens on first use."""

from __future__ import annotations

import torch

from turbo_core.platform import gpu_count
from turbo_core.plugins.extension import ExtensionUnavailable
from turbo_hipblaslt import _ext, _jit
from turbo_hipblaslt._ext import EXTENSION

__all__ = ["cublaslt_version", "format_version", "hipblaslt_version", "library_version", "probe"]


def probe() -> str | None:
    reason = EXTENSION.missing_reason()
    if reason:
        return reason
    torch_platform = _ext.torch_platform()
    if torch_platform is None:
        return "needs a CUDA or ROCm build of torch (this torch is CPU-only)"
    if EXTENSION.installed() or EXTENSION.loaded() is not None:
        try:
            module = EXTENSION.load()  # loads the library (no GPU context is created)
        except ExtensionUnavailable as exc:
            return str(exc)
        if module.PLATFORM != torch_platform:
            return (f"the extension was built for {module.PLATFORM} ({module.LIBRARY}) but this torch is a "
                    f"{torch_platform} build")
    elif _jit.jit_enabled():
        tc, _ = _ext.jit_toolchain()
        if tc is not None and tc.platform != torch_platform:  # cannot happen: the search follows torch
            return f"the JIT toolkit is {tc.platform} but this torch is a {torch_platform} build"
    if gpu_count() == 0:
        return "no GPU"
    return None


def format_version(number: int, platform: str) -> str | None:
    """``"major.minor.patch"`` of a library version number: cuBLASLt's ``major*10000 + minor*100 +
    patch`` (``platform="cuda"``; 120903 -> ``"12.9.3"``), hipBLASLt's ``major*100000 + minor*100 +
    patch`` (``"rocm"``; 100100 -> ``"1.1.0"``); ``None`` for a negative number (unknown)."""
    if number < 0:
        return None
    major, rest = divmod(int(number), 100000 if platform == "rocm" else 10000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def library_version(platform: str) -> str | None:
    """The version (``"major.minor.patch"``) of the BLASLt library the extension loads, when this torch
    and the extension are built for ``platform`` (``"cuda"``: cuBLASLt, ``"rocm"``: hipBLASLt); else, or
    when it cannot be told without compiling the extension or creating a GPU context, ``None``.

    Loads the extension when it is installed, already loaded, or built by the JIT into its cache (never
    builds it). cuBLASLt reports its version without a handle; hipBLASLt needs one: that of a device this
    process already used, else one created on the current device once torch has initialised the GPU."""
    if _ext.torch_platform() != platform:
        return None
    module = EXTENSION.loaded()
    if module is None:
        if not EXTENSION.installed():
            if not _jit.jit_enabled():
                return None
            tc, _ = _ext.jit_toolchain()
            if tc is None or _jit.cached_library(tc) is None:
                return None
        try:
            module = EXTENSION.load()
        except ExtensionUnavailable:
            return None
    if getattr(module, "PLATFORM", None) != platform:
        return None
    number = int(module.library_version()) if hasattr(module, "library_version") else -1
    if number < 0:
        if not torch.cuda.is_initialized():
            return None
        number = int(module.capabilities(torch.cuda.current_device()).get("library_version", -1))
    return format_version(number, platform)


def cublaslt_version() -> str | None:
    """The loaded cuBLASLt's version, or ``None`` (the tuning library ``"cublaslt"``)."""
    return library_version("cuda")


def hipblaslt_version() -> str | None:
    """The loaded hipBLASLt's version, or ``None`` (the tuning library ``"hipblaslt"``)."""
    return library_version("rocm")
