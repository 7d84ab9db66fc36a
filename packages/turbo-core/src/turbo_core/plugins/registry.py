"""The registry of backends and their kernels, filled by the plugin host."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from turbo_core.plugins.types import BackendInfo, Kernel, resolve_ref

__all__ = ["BackendRecord", "Registry"]


@dataclass
class BackendRecord:
    """A described backend, the plugin that described it, and its (lazily probed) availability."""

    info: BackendInfo
    plugin: str
    order: int
    _probed: bool = field(default=False, repr=False)
    _reason: str | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def name(self) -> str:
        return self.info.name

    def unavailable_reason(self) -> str | None:
        """``None`` when the backend can run in this process, else why not (probed once)."""
        if not self._probed:
            with self._lock:
                if not self._probed:
                    self._reason = self._run_probe()
                    self._probed = True
        return self._reason

    def _run_probe(self) -> str | None:
        if self.info.probe is None:
            return None
        try:
            probe = resolve_ref(self.info.probe, what=f"{self.name} probe")
            reason = probe()
        except Exception as exc:  # a broken probe makes the backend unavailable, not turbo
            return f"availability probe failed: {type(exc).__name__}: {exc}"
        if reason is not None and not isinstance(reason, str):
            return f"availability probe returned {reason!r} (expected None or a reason string)"
        return reason or None

    def reprobe(self) -> None:
        with self._lock:
            self._probed = False


class Registry:
    """Backends by name and kernels by (primitive, backend), in registration order."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.backends: dict[str, BackendRecord] = {}
        self.kernels: dict[str, dict[str, Kernel]] = {}
        self._kernel_order: dict[tuple[str, str], int] = {}

    # -- filling (the plugin host calls these; validation errors name the plugin) -------------
    def validate(self, plugin: str, infos: list[BackendInfo], kernels: list[Kernel],
                 known_primitives: set[str]) -> None:
        """Raise ``ValueError`` if the plugin's descriptions and kernels cannot all be added."""
        with self._lock:
            new_names = set()
            for info in infos:
                if not isinstance(info, BackendInfo):
                    raise TypeError(
                        f"turbo_backend_info must return BackendInfo objects, got {type(info).__name__}"
                    )
                owner = self.backends.get(info.name)
                if owner is not None or info.name in new_names:
                    by = owner.plugin if owner is not None else plugin
                    raise ValueError(f"backend {info.name!r} is already described by plugin {by!r}")
                new_names.add(info.name)
            seen = set()
            for k in kernels:
                if k.primitive not in known_primitives:
                    raise ValueError(
                        f"kernel for unknown primitive {k.primitive!r} (backend {k.backend}); "
                        f"known primitives: {', '.join(sorted(known_primitives))}"
                    )
                if k.backend not in self.backends and k.backend not in new_names:
                    raise ValueError(
                        f"kernel {k.primitive!r} names backend {k.backend!r}, which no plugin describes"
                    )
                key = (k.primitive, k.backend)
                if key in self._kernel_order or key in seen:
                    raise ValueError(f"a kernel for {k.primitive!r} on {k.backend} is already registered")
                seen.add(key)

    def commit(self, plugin: str, infos: list[BackendInfo], kernels: list[Kernel]) -> None:
        with self._lock:
            for info in infos:
                self.backends[info.name] = BackendRecord(info, plugin, order=len(self.backends))
            for k in kernels:
                self.kernels.setdefault(k.primitive, {})[k.backend] = k
                self._kernel_order[(k.primitive, k.backend)] = len(self._kernel_order)

    # -- queries ---------------------------------------------------------------------------------
    def kernels_for(self, primitive: str) -> list[Kernel]:
        """Kernels of a primitive in fallback order: higher priority first, then registration order."""
        with self._lock:
            ks = list(self.kernels.get(primitive, {}).values())
            return sorted(ks, key=lambda k: (-k.priority, self._kernel_order[(k.primitive, k.backend)]))

    def kernel(self, primitive: str, backend: str) -> Kernel | None:
        with self._lock:
            return self.kernels.get(primitive, {}).get(backend)

    def backend(self, name: str) -> BackendRecord | None:
        with self._lock:
            return self.backends.get(name)

    def backend_names(self) -> list[str]:
        with self._lock:
            return list(self.backends)

    def primitives_of(self, backend: str) -> dict[str, Kernel]:
        with self._lock:
            return {p: ks[backend] for p, ks in self.kernels.items() if backend in ks}
