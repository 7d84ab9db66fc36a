"""The compiled extension ``turbo_hipblaslt._C``: the one the wheel was built with, else (opt-in,
``TURBO_HIPBLASLT_JIT=1``) one built on first use by ``_jit``. Loaded once per process; a failure
is remembered (with its reason) rather than retried on every call."""

from __future__ import annotations

import functools
import importlib
import importlib.util
from types import ModuleType

from turbo_hipblaslt import _jit, _toolchain

__all__ = ["ExtensionUnavailable", "installed", "load", "missing_reason", "torch_platform"]

_module: ModuleType | None = None
_failure: str | None = None


class ExtensionUnavailable(RuntimeError):
    """The extension cannot be loaded here; the message says why."""


def installed() -> bool:
    """Whether the wheel ships a compiled ``turbo_hipblaslt._C`` (not imported here)."""
    return importlib.util.find_spec("turbo_hipblaslt._C") is not None


def torch_platform() -> str | None:
    """``"rocm"`` or ``"cuda"``: what this torch was built for (``None`` for a CPU-only torch)."""
    import torch

    if torch.version.hip:
        return "rocm"
    if torch.version.cuda:
        return "cuda"
    return None


@functools.lru_cache(maxsize=1)
def jit_toolchain() -> tuple[_toolchain.Toolchain | None, str]:
    """The toolkit a JIT build would use (for torch's platform), or ``(None, reason)``."""
    return _toolchain.find_toolchain(platform=torch_platform(), search_pip=True)


def missing_reason() -> str | None:
    """Cheap (imports no library, compiles nothing): why no extension can be loaded, else ``None``."""
    if _failure is not None:
        return _failure
    if _module is not None or installed():
        return None
    if _jit.jit_enabled():
        tc, reason = jit_toolchain()
        return None if tc is not None else f"{reason}; TURBO_HIPBLASLT_JIT=1 found nothing to build with"
    return (f"{_toolchain.NO_TOOLKIT} (the compiled extension turbo_hipblaslt._C is missing; once a toolkit is "
            "installed, set TURBO_HIPBLASLT_JIT=1 to build it on first use)")


def load() -> ModuleType:
    """The extension module (imported, or JIT-built and imported, on the first call)."""
    global _module, _failure
    if _module is not None:
        return _module
    if _failure is not None:
        raise ExtensionUnavailable(_failure)
    try:
        if installed():
            module = importlib.import_module("turbo_hipblaslt._C")
        elif _jit.jit_enabled():
            tc, reason = jit_toolchain()
            if tc is None:
                raise ExtensionUnavailable(reason)
            module = _jit.load(_jit.build(tc))
        else:
            raise ExtensionUnavailable(missing_reason())
    except ExtensionUnavailable as exc:
        _failure = str(exc)
        raise
    except Exception as exc:  # a broken build or a library the loader cannot find
        _failure = f"the compiled extension turbo_hipblaslt._C failed to load: {type(exc).__name__}: {exc}"
        raise ExtensionUnavailable(_failure) from exc
    _configure(module)
    _module = module
    return module


#: ``TURBO_HIPBLASLT_SPLITK``: which split-K reductions cuBLASLt may use. ``fp32`` (default): partial sums
#: kept in fp32 (every result rounded once, turbo's contract); ``any``: also those rounding partial sums
#: to the output dtype (what torch allows; sometimes faster).
SPLITK_MASKS = {"fp32": 2, "any": 7}


def _configure(module: ModuleType) -> None:
    import os

    raw = os.environ.get("TURBO_HIPBLASLT_SPLITK", "fp32").strip().lower() or "fp32"
    if raw not in SPLITK_MASKS:
        raise ExtensionUnavailable(f"TURBO_HIPBLASLT_SPLITK: expected one of {sorted(SPLITK_MASKS)}, got {raw!r}")
    if hasattr(module, "set_reduction_mask"):
        module.set_reduction_mask(SPLITK_MASKS[raw])


def forget_failure() -> None:
    """Allow :func:`load` to try again (after installing a toolkit, say); a loaded module stays."""
    global _failure
    _failure = None
    jit_toolchain.cache_clear()
