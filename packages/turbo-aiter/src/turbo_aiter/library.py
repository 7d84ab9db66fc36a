"""The amd-aiter library, imported on first use, and the device facts its kernels depend on.

Nothing here imports aiter at module import: importing aiter without a ROCm build of torch raises
(it reads the GPU arch at import). :func:`load` imports it once, on the first kernel call, and
caches the module or the reason it cannot be imported.

Written against the interface of amd-aiter 0.1.7.post2.dev18 (the wheel on PyPI); Primus-Turbo pins
0.1.14.post1 from git. The functions used, all exported at the top level of ``aiter``: ``mha_fwd``, ``mha_bwd``, ``mha_varlen_fwd``, ``mha_varlen_bwd`` (CK flash
attention), ``gemm_a8w8`` (CK, per-row x per-column scales), ``gemm_a8w8_blockscale`` (CK, 1x128
x 128x128 scales), ``gemm_a4w4`` (MXFP4, gfx950), ``rmsnorm2d_fwd`` (CK RMSNorm forward).
"""

from __future__ import annotations

import threading
from types import ModuleType

import torch

__all__ = ["AITER_VERSION_READ", "arch_of", "fp8_dtype", "gpu_reason", "load"]

#: The amd-aiter version whose sources these adapters were written against.
AITER_VERSION_READ = "0.1.7.post2.dev18"

#: The FP8 dtype aiter's GEMMs take on each arch (``aiter.dtypes.fp8``: FNUZ on gfx942, OCP on gfx950).
FP8_DTYPE_BY_ARCH = {"gfx942": torch.float8_e4m3fnuz, "gfx950": torch.float8_e4m3fn}
#: The archs these adapters target (aiter's kernels are built for these two).
ARCHS = ("gfx942", "gfx950")

_lock = threading.Lock()
_state: dict[str, object] = {}


def _import() -> ModuleType:
    if not torch.version.hip:
        raise RuntimeError("AITER: needs a ROCm build of torch (torch.version.hip is None); "
                           "aiter cannot be imported here")
    try:
        import aiter  # noqa: PLC0415 (imported on first use by design)
    except Exception as exc:  # ImportError, or aiter's own failure to read the device at import
        raise RuntimeError(f"AITER: importing aiter failed: {type(exc).__name__}: {exc} "
                           "(pip install turbo-aiter[rocm])") from exc
    return aiter


def load() -> ModuleType:
    """The ``aiter`` module, imported on the first call (thread-safe); raises ``RuntimeError``
    with the reason when there is no ROCm torch or aiter cannot be imported (the failure is
    cached: the import is not retried on every call)."""
    mod = _state.get("module")
    if mod is not None:
        return mod  # type: ignore[return-value]
    with _lock:
        if "error" in _state:
            raise RuntimeError(_state["error"])
        if "module" not in _state:
            try:
                _state["module"] = _import()
            except RuntimeError as exc:
                _state["error"] = str(exc)
                raise
    return _state["module"]  # type: ignore[return-value]


def reset() -> None:
    """Forget the cached import (tests)."""
    with _lock:
        _state.clear()


def arch_of(t: torch.Tensor) -> str | None:
    """The GPU arch of the device ``t`` lives on (``"gfx942"``...), ``None`` off a ROCm GPU.
    Reads cached device properties only: no new GPU context for a device not already in use."""
    from turbo_core.platform import platform_of

    plat = platform_of(t.device)
    return plat.arch if plat.kind == "rocm" else None


def gpu_reason(t: torch.Tensor, what: str) -> str | None:
    """Why ``what`` cannot run on ``t``'s device (not a ROCm GPU, or an arch aiter has no kernels
    for), or ``None``."""
    if t.device.type != "cuda" or not torch.version.hip:
        return f"AITER {what} runs on ROCm GPU tensors only (got {t.device.type})"
    arch = arch_of(t)
    if arch not in ARCHS:
        return f"AITER {what}: no aiter kernels for arch {arch} (gfx942 and gfx950 only)"
    return None


def fp8_dtype(arch: str | None) -> torch.dtype | None:
    """The FP8 dtype aiter's FP8 GEMMs take on ``arch`` (``None`` for other archs)."""
    return FP8_DTYPE_BY_ARCH.get(arch or "")
