"""The compiled extension ``turbo_hipblaslt._C``, loaded by :class:`turbo_core.plugins.extension.Extension`:
the one the wheel was built with, else (opt-in, ``TURBO_HIPBLASLT_JIT=1``) one built on first use by
``_jit``. Loading applies ``TURBO_HIPBLASLT_SPLITK`` to the module."""

from __future__ import annotations

import functools
import os
from types import ModuleType

import torch

from turbo_core.plugins.extension import Extension, ExtensionUnavailable
from turbo_hipblaslt import _jit, _toolchain

__all__ = ["EXTENSION", "SPLITK_MASKS", "forget_failure", "jit_toolchain", "torch_platform"]

#: ``TURBO_HIPBLASLT_SPLITK``: which split-K reductions cuBLASLt may use. ``fp32`` (default): partial sums
#: kept in fp32 (every result rounded once, turbo's contract); ``any``: also those rounding partial sums
#: to the output dtype (what torch allows; sometimes faster).
SPLITK_MASKS = {"fp32": 2, "any": 7}


def torch_platform() -> str | None:
    """``"rocm"`` or ``"cuda"``: what this torch was built for (``None`` for a CPU-only torch)."""
    if torch.version.hip:
        return "rocm"
    if torch.version.cuda:
        return "cuda"
    return None


@functools.lru_cache(maxsize=1)
def jit_toolchain() -> tuple[_toolchain.Toolchain | None, str]:
    """The toolkit a JIT build would use (for torch's platform), or ``(None, reason)``."""
    return _toolchain.find_toolchain(platform=torch_platform(), search_pip=True)


def _absent() -> str | None:
    """Why no extension can be had without a wheel's: ``None`` when the JIT is on and has a toolkit."""
    if _jit.jit_enabled():
        tc, reason = jit_toolchain()
        return None if tc is not None else f"{reason}; TURBO_HIPBLASLT_JIT=1 found nothing to build with"
    return (f"{_toolchain.NO_TOOLKIT} (the compiled extension turbo_hipblaslt._C is missing; once a toolkit is "
            "installed, set TURBO_HIPBLASLT_JIT=1 to build it on first use)")


def _build() -> ModuleType:
    tc, reason = jit_toolchain()
    if tc is None:
        raise ExtensionUnavailable(reason)
    return _jit.load(_jit.build(tc))


def _configure(module: ModuleType) -> None:
    raw = os.environ.get("TURBO_HIPBLASLT_SPLITK", "fp32").strip().lower() or "fp32"
    if raw not in SPLITK_MASKS:
        raise ExtensionUnavailable(f"TURBO_HIPBLASLT_SPLITK: expected one of {sorted(SPLITK_MASKS)}, got {raw!r}")
    if hasattr(module, "set_reduction_mask"):
        module.set_reduction_mask(SPLITK_MASKS[raw])


EXTENSION = Extension("turbo_hipblaslt._C", absent=_absent, build=_build, configure=_configure)


def forget_failure() -> None:
    """Let :meth:`EXTENSION.load <turbo_core.plugins.extension.Extension.load>` try again (after installing
    a toolkit, say) and look for the toolkit anew; a loaded module stays."""
    EXTENSION.forget_failure()
    jit_toolchain.cache_clear()
