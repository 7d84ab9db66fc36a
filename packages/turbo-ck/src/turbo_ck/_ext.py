"""The compiled extension ``turbo_ck._C`` (shipped by a wheel built where hipcc and CK were found).
Loaded once per process; a failure is remembered with its reason. There is no JIT build: compiling the
CK instances takes minutes per arch, so it happens at wheel build time only."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from turbo_ck._toolchain import NO_TOOLKIT

__all__ = ["ExtensionUnavailable", "installed", "load", "missing_reason"]

_module: ModuleType | None = None
_failure: str | None = None


class ExtensionUnavailable(RuntimeError):
    """The extension cannot be loaded here; the message says why."""


def installed() -> bool:
    """Whether this install ships a compiled ``turbo_ck._C`` (not imported here)."""
    return importlib.util.find_spec("turbo_ck._C") is not None


def missing_reason() -> str | None:
    """Cheap: why no extension can be loaded, else ``None``."""
    if _failure is not None:
        return _failure
    if _module is not None or installed():
        return None
    return (f"{NO_TOOLKIT} when this wheel was built (the compiled extension turbo_ck._C is missing; rebuild "
            "the wheel where ROCm's hipcc and Composable Kernel's headers are installed, TURBO_CK_BUILD=1 to insist)")


def load() -> ModuleType:
    global _module, _failure
    if _module is not None:
        return _module
    if _failure is not None:
        raise ExtensionUnavailable(_failure)
    if not installed():
        raise ExtensionUnavailable(missing_reason())
    try:
        _module = importlib.import_module("turbo_ck._C")
    except Exception as exc:  # a broken build, or a HIP runtime the loader cannot find
        _failure = f"the compiled extension turbo_ck._C failed to load: {type(exc).__name__}: {exc}"
        raise ExtensionUnavailable(_failure) from exc
    return _module
