"""Discovery: load plugin modules one by one, so one broken plugin never breaks the others.

pluggy's ``load_setuptools_entrypoints`` stops at the first failure; this loop records each
failure (stage and reason), reports it once through the ``turbo`` logger and carries on.
Discovery imports only the small plugin modules: no kernel library, no compilation, no GPU.

A kernel may register only for a primitive that exists. The host learns the names from whoever
defines primitives (``turbo_core.dispatch.catalog`` calls :func:`set_primitive_names` on import),
so this package never imports the dispatch layer above it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pluggy

from turbo_core.plugins import hookspecs
from turbo_core.plugins.registry import Registry
from turbo_core.plugins.types import BackendInfo, Kernel, Registrar

__all__ = ["PluginHost", "PluginRecord", "get_host", "reset_host", "set_primitive_names"]

log = logging.getLogger("turbo")

ENV_PLUGINS = "TURBO_PLUGINS"
ENV_DISABLE = "TURBO_DISABLE_PLUGINS"


@dataclass
class PluginRecord:
    """What happened to one plugin: ``status`` is ``loaded``, ``failed`` or ``disabled``."""

    name: str
    module: str
    source: str  # "entry point (dist X)" or "TURBO_PLUGINS"
    status: str
    stage: str | None = None  # import | validate | describe | register (for failures)
    error: str | None = None
    backends: list[str] = field(default_factory=list)
    kernels: int = 0

    def as_dict(self) -> dict:
        return {
            "name": self.name, "module": self.module, "source": self.source, "status": self.status,
            "stage": self.stage, "error": self.error, "backends": self.backends, "kernels": self.kernels,
        }


_primitive_names: Callable[[], Iterable[str]] | None = None


def set_primitive_names(names: Callable[[], Iterable[str]]) -> None:
    """Where the host reads the primitive names kernels may register for (called at discovery)."""
    global _primitive_names
    _primitive_names = names


def _known_primitives() -> set[str]:
    if _primitive_names is None:
        raise RuntimeError("turbo: no primitive catalog: import turbo_core (it defines the primitives) first")
    return set(_primitive_names())


def _split_env(name: str) -> list[str]:
    raw = os.environ.get(name, "")
    return [part.strip() for part in raw.split(",") if part.strip()]


def _entry_points():
    """The installed ``turbo.backends`` entry points (a function so tests can substitute it)."""
    return list(importlib.metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP))


class PluginHost:
    """Owns the pluggy manager, the registry and the load records."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.registry = Registry()
        self.records: list[PluginRecord] = []
        self._loaded = False
        self._lock = threading.RLock()

    # -- loading ---------------------------------------------------------------------------------
    def ensure_loaded(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            try:
                self._load_all()
            finally:
                # Once, even if the loop itself broke: a retry would record every plugin twice.
                self._loaded = True

    def _load_all(self) -> None:
        known = _known_primitives()
        disabled = {d.lower() for d in _split_env(ENV_DISABLE)}
        for ep in _entry_points():
            dist = getattr(getattr(ep, "dist", None), "name", None)
            source = f"entry point {ep.name} = {ep.value}" + (f" ({dist})" if dist else "")
            if ep.name.lower() in disabled:
                self.records.append(PluginRecord(ep.name, ep.value, source, "disabled",
                                                 error=f"disabled by {ENV_DISABLE}"))
                continue
            try:
                module = ep.load()
            except Exception as exc:
                self._fail(PluginRecord(ep.name, ep.value, source, "failed"), "import", exc)
                continue
            self._adopt(module, ep.name, source, known, disabled)
        for module_name in _split_env(ENV_PLUGINS):
            try:
                module = importlib.import_module(module_name)
            except Exception as exc:
                self._fail(PluginRecord(module_name, module_name, ENV_PLUGINS, "failed"), "import", exc)
                continue
            self._adopt(module, module_name, ENV_PLUGINS, known, disabled)

    def _adopt(self, module, name: str, source: str, known: set[str], disabled: set[str]) -> None:
        record = PluginRecord(name, getattr(module, "__name__", name), source, "loaded")
        if self.pm.is_registered(module):
            return  # the same module named twice (entry point and TURBO_PLUGINS)
        if self.pm.get_plugin(name) is not None:
            name = f"{name}@{record.module}"
            record.name = name
        try:
            self.pm.register(module, name=name)
        except Exception as exc:
            self._fail(record, "validate", exc)
            return
        unknown = [hc.name for hc in (self.pm.get_hookcallers(module) or []) if not hc.has_spec()]
        if unknown:
            self.pm.unregister(module)
            hooks = ", ".join(sorted(n for n in dir(hookspecs) if n.startswith("turbo_")))
            self._fail(record, "validate", pluggy.PluginValidationError(
                module, f"unknown hook {', '.join(unknown)} (turbo's hooks: {hooks})"))
            return
        try:
            infos = self._describe(module)
        except Exception as exc:
            self.pm.unregister(module)
            self._fail(record, "describe", exc)
            return
        off = [i.name for i in infos if i.name.lower() in disabled]
        if off:
            self.pm.unregister(module)
            record.status, record.backends = "disabled", [i.name for i in infos]
            record.error = f"backend {', '.join(off)} disabled by {ENV_DISABLE}"
            self.records.append(record)
            return
        registrar = Registrar(name)
        try:
            for impl in self._impls("turbo_register_kernels", module):
                impl.function(**{arg: registrar for arg in impl.argnames})
            self.registry.validate(name, infos, registrar.kernels, known)
        except Exception as exc:
            self.pm.unregister(module)
            self._fail(record, "register", exc)
            return
        self.registry.commit(name, infos, registrar.kernels)
        record.backends = [i.name for i in infos]
        record.kernels = len(registrar.kernels)
        self.records.append(record)
        log.debug("turbo: loaded plugin %s (%s): backends %s, %d kernels",
                  name, source, record.backends, record.kernels)

    def _impls(self, hook_name: str, module):
        hook = getattr(self.pm.hook, hook_name)
        return [impl for impl in hook.get_hookimpls() if impl.plugin is module]

    def _describe(self, module) -> list[BackendInfo]:
        infos: list[BackendInfo] = []
        for impl in self._impls("turbo_backend_info", module):
            result = impl.function()
            if result is None:
                continue
            items = result if isinstance(result, (list, tuple)) else [result]
            for item in items:
                if not isinstance(item, BackendInfo):
                    raise TypeError(
                        f"turbo_backend_info returned {type(item).__name__}, expected BackendInfo"
                    )
                infos.append(item)
        return infos

    def _fail(self, record: PluginRecord, stage: str, exc: BaseException) -> None:
        record.status, record.stage = "failed", stage
        record.error = f"{type(exc).__name__}: {exc}"
        self.records.append(record)
        # Reported once: each failure is recorded once per host, and the host loads once.
        log.warning("turbo: plugin %r (%s) failed at %s and was skipped: %s",
                    record.name, record.source, stage, record.error)

    # -- queries ---------------------------------------------------------------------------------
    def failures(self) -> list[PluginRecord]:
        self.ensure_loaded()
        return [r for r in self.records if r.status == "failed"]

    def kernels(self) -> list[Kernel]:
        self.ensure_loaded()
        return [k for ks in self.registry.kernels.values() for k in ks.values()]


_host: PluginHost | None = None
_host_lock = threading.Lock()


def get_host() -> PluginHost:
    """The process-wide host, with plugins loaded on first call."""
    global _host
    host = _host
    if host is None:
        with _host_lock:
            if _host is None:
                _host = PluginHost()
            host = _host
    host.ensure_loaded()
    return host


def reset_host() -> None:
    """Forget every loaded plugin; the next :func:`get_host` discovers again (tests use this)."""
    global _host
    with _host_lock:
        _host = None
