"""Facts about where Triton kernels run: interpreter mode, GPU arch, multiprocessor count; the record
of a Gluon kernel that failed here.

Imported only by kernel modules (on first use), never by the plugin module.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Iterator

import torch

__all__ = ["arch_of", "device_facts", "device_reason", "gluon_failed", "gpu_tiles", "has_tensor_descriptors",
           "interpreter_tiles", "interpreting", "launch_fitted", "num_sms", "tma_arch"]


# ``interpreting()`` runs several times a launch. ``os.environ.get`` of an unset variable raises and
# catches a KeyError inside (about a microsecond); ``os.environ._data`` (encoded names -> encoded
# values, kept current by every assignment) answers with one dict lookup while ``os.environ`` is the
# mapping seen at import.
_ENVIRON = os.environ
_ENV_DATA = getattr(_ENVIRON, "_data", None)
_INTERPRET_KEY = _ENVIRON.encodekey("TRITON_INTERPRET") if hasattr(_ENVIRON, "encodekey") else None
_ONE = _ENVIRON.encodevalue("1") if hasattr(_ENVIRON, "encodevalue") else None


def interpreting() -> bool:
    """``TRITON_INTERPRET=1``: kernels run on the CPU interpreter, on CPU tensors."""
    if type(_ENV_DATA) is dict and _INTERPRET_KEY is not None and os.environ is _ENVIRON:
        return _ENV_DATA.get(_INTERPRET_KEY) == _ONE
    return os.environ.get("TRITON_INTERPRET") == "1"


_gpu_tiles = False


def interpreter_tiles() -> bool:
    """Whether the tile heuristics of the quantization, RMSNorm and GLU launchers pick the
    interpreter's tiles (larger ones: its cost is per program): under the interpreter, unless
    :func:`gpu_tiles` is active. The kernels' arithmetic flags follow :func:`interpreting` alone."""
    return not _gpu_tiles and interpreting()


@contextlib.contextmanager
def gpu_tiles() -> Iterator[None]:
    """Within the block (one thread at a time) those launchers pick the tiles they pick on a GPU,
    also under the interpreter: the CPU tests then run the GPU's tile shapes, masks and padding."""
    global _gpu_tiles
    before, _gpu_tiles = _gpu_tiles, True
    try:
        yield
    finally:
        _gpu_tiles = before


def device_reason(t: torch.Tensor) -> str | None:
    """Why a tensor's device cannot be served in this mode, or ``None``."""
    if interpreting():
        if t.device.type != "cpu":
            return "TRITON_INTERPRET=1 runs the Triton kernels on CPU tensors only"
        return None
    if t.device.type != "cuda":
        return "CPU tensors need TRITON_INTERPRET=1 (the Triton CPU interpreter)"
    return None


@functools.lru_cache(maxsize=16)
def num_sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


@functools.lru_cache(maxsize=16)
def arch_of(index: int) -> str:
    from turbo_core.platform import platform_of

    return platform_of(torch.device("cuda", index)).arch or "unknown"


def device_facts(t: torch.Tensor) -> tuple[str, int]:
    """``(arch, SM count)`` of ``t``'s GPU; the interpreter reports ``("interpreter", 4)`` (a few
    persistent programs)."""
    if interpreting():
        return "interpreter", 4
    index = t.device.index if t.device.index is not None else torch.cuda.current_device()
    return arch_of(index), num_sms(index)


def tma_arch(arch: str) -> bool:
    """Whether the TMA (tensor-descriptor) kernels can run on ``arch``: sm90+ with a Triton that has
    host-side tensor descriptors."""
    return arch.startswith("sm") and arch[2:].isdigit() and int(arch[2:]) >= 90 and has_tensor_descriptors()


@functools.lru_cache(maxsize=1)
def has_tensor_descriptors() -> bool:
    """Host-side TMA tensor descriptors (triton >= 3.4 on sm90+)."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:
        return False
    return True


_fitted: dict[tuple, object] = {}


def launch_fitted(launch, cfg, key: tuple, *rest, shrink) -> None:
    """``launch(cfg, *rest)``; if the compiled kernel needs more shared memory than the device has,
    shrink the config and retry: ``shrink(cfg)`` gives the next smaller config or ``None`` (the GEMM
    launchers pass ``turbo_triton.gemm.configs.shrink``: fewer stages, then narrower N tiles). The config that fitted
    is remembered per launcher, starting config and ``key`` (dtypes, layout flags: what changes the
    kernel's footprint), so the retries happen once."""
    from triton.runtime.errors import OutOfResources

    key = (launch.__name__, cfg, *key)
    cfg = _fitted.get(key, cfg)
    while True:
        try:
            launch(cfg, *rest)
            _fitted[key] = cfg
            return
        except OutOfResources:
            smaller = shrink(cfg)
            if smaller is None:
                raise
            cfg = smaller


def gluon_failed(broken: list[str], what: str, exc: Exception) -> bool:
    """Record a Gluon kernel's failure to compile or launch in ``broken`` (its launcher's list: the
    first error, after which the launcher keeps to its Triton kernels), warn once, and return ``False``."""
    broken.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300])
    logging.getLogger(__name__).warning("turbo-triton: %s failed (%s); using the Triton kernels from now on", what,
                                        broken[0])
    return False
