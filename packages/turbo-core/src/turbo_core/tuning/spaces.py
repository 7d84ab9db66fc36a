"""Kernel-config search spaces that backends offer to ``turbo tune``.

A backend whose launcher consults :func:`turbo_core.tuning.kernel_config` registers, for each such
primitive, a :class:`Space` from the module that holds its configs, when that module loads (its
first use; the plugin module stays cheap)::

    turbo_core.tuning.register_space(Space(
        backend="TRITON", primitive="gemm",
        candidates=lambda args: [{"block_m": 128, ...}, ...],   # configs to try for this call
        key=lambda args: Key(...),                               # the config key the launcher looks up
        libraries=("triton",),                                   # versions recorded with the configs
        match="bucket"))                                         # or "exact": see below

``turbo tune`` runs a backend once before asking for its space, so the module is loaded by then.
A config dict is opaque to the core: the backend defines its fields and validates what it reads.
``match="exact"`` stores the space's winners for their own key only (``turbo_core.tuning.db``: a
config that means something else at other shapes of its bucket, such as a rank in a library's
heuristic list); by default a config also serves the other shapes of its shape bucket.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from turbo_core.tuning.keys import Key

__all__ = ["Space", "get_space", "register_space", "spaces"]


@dataclass(frozen=True)
class Space:
    backend: str
    primitive: str
    candidates: Callable[[Any], list[dict]]
    key: Callable[[Any], Key]
    libraries: tuple[str, ...] = ()
    match: str = "bucket"

    def __post_init__(self) -> None:
        if self.match not in ("bucket", "exact"):
            raise ValueError(f"match: expected 'bucket' or 'exact', got {self.match!r}")
        if not isinstance(self.backend, str) or not self.backend:
            raise ValueError(f"backend: expected a backend name, got {self.backend!r}")
        object.__setattr__(self, "backend", self.backend.upper())
        for name in ("candidates", "key"):
            if not callable(getattr(self, name)):
                raise TypeError(f"{name}: expected a callable, got {getattr(self, name)!r}")


_lock = threading.Lock()
_SPACES: dict[tuple[str, str], Space] = {}


def register_space(space: Space) -> None:
    """Offer ``space`` to ``turbo tune`` (a later registration for the same pair replaces it)."""
    if not isinstance(space, Space):
        raise TypeError(f"space: expected a turbo_core.tuning.Space, got {type(space).__name__}")
    with _lock:
        _SPACES[(space.backend, space.primitive)] = space


def get_space(backend: str, primitive: str) -> Space | None:
    return _SPACES.get((backend.upper(), primitive))


def spaces() -> list[Space]:
    with _lock:
        return list(_SPACES.values())
