"""Typed objects that plugins hand to the core."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from turbo_core.backend import normalize_backend_name

__all__ = ["BackendInfo", "Kernel", "Registrar", "resolve_ref"]

_PLATFORMS = ("cpu", "cuda", "rocm")


def resolve_ref(ref: Callable | str, *, what: str) -> Callable:
    """A callable from a callable or a lazy ``"package.module:attribute"`` reference."""
    if callable(ref):
        return ref
    if not isinstance(ref, str) or ref.count(":") != 1:
        raise TypeError(f"{what}: expected a callable or a 'module:attribute' string, got {ref!r}")
    module_name, attr = ref.split(":")
    module = importlib.import_module(module_name)
    try:
        target = getattr(module, attr)
    except AttributeError:
        raise ImportError(f"{what}: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(target):
        raise TypeError(f"{what}: {ref!r} is not callable")
    return target


def _check_ref(value: object, what: str) -> None:
    if value is None or callable(value):
        return
    if isinstance(value, str) and value.count(":") == 1 and all(value.split(":")):
        return
    raise TypeError(f"{what}: expected a callable or a 'module:attribute' string, got {value!r}")


@dataclass(frozen=True)
class BackendInfo:
    """A backend as its plugin describes it.

    Attributes:
        name: the backend name users select (upper-cased), e.g. ``"TRITON"``.
        package: the distribution that provides it, e.g. ``"turbo-triton"``.
        version: that distribution's version.
        platforms: where it can run at all: any of ``"cpu"``, ``"cuda"``, ``"rocm"``.
        archs: GPU architectures it supports (``"sm90"``, ``"gfx942"``, ...), or ``None`` for any.
            Not applied to CPU calls.
        probe: a cheap availability check, called lazily (never at discovery) and cached: returns
            ``None`` when usable, else the reason (``"needs ROCm"``, ``"no GPU"``, ...). A callable
            or a ``"module:function"`` string.
        description: one line for ``turbo backends``.
        notes: anything users should know (e.g. which primitives are not implemented yet).
    """

    name: str
    package: str
    version: str
    platforms: tuple[str, ...] = _PLATFORMS
    archs: tuple[str, ...] | None = None
    probe: Callable[[], str | None] | str | None = None
    description: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", normalize_backend_name(self.name, argument="BackendInfo.name"))
        for attr in ("package", "version"):
            if not isinstance(getattr(self, attr), str) or not getattr(self, attr):
                raise TypeError(f"BackendInfo.{attr}: expected a non-empty string")
        platforms = tuple(self.platforms)
        bad = [p for p in platforms if p not in _PLATFORMS]
        if bad or not platforms:
            raise ValueError(f"BackendInfo.platforms: expected a subset of {_PLATFORMS}, got {platforms}")
        object.__setattr__(self, "platforms", platforms)
        if self.archs is not None:
            object.__setattr__(self, "archs", tuple(str(a).lower() for a in self.archs))
        _check_ref(self.probe, "BackendInfo.probe")


@dataclass(frozen=True)
class Kernel:
    """One backend's implementation of one primitive.

    Attributes:
        primitive: the primitive's name (see ``turbo_core.dispatch.primitives()``).
        backend: the backend name; must be described by a plugin.
        impl: ``impl(args) -> result`` where ``args`` is the primitive's typed argument object.
            A callable or a lazy ``"module:function"`` string (imported on first call).
        check: ``check(args) -> str | None``: ``None`` when the kernel can run these arguments,
            otherwise the reason it declines. Must be pure on metadata (shapes, dtypes, flags):
            no host sync, no GPU work. ``None`` means "handles everything the spec allows".
        variants: what it serves, for listings (dtypes such as ``"bf16"``, granularities, ...).
        autotune: take part in auto-tune timing (``False`` keeps it selectable explicitly).
        priority: order among backends in the fallback step (higher first).
        deterministic: whether repeated calls give bit-identical results.
    """

    primitive: str
    backend: str
    impl: Callable[[Any], Any] | str
    check: Callable[[Any], str | None] | str | None = None
    variants: tuple[str, ...] = ()
    autotune: bool = True
    priority: int = 0
    deterministic: bool = True
    _resolved: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.primitive, str) or not self.primitive:
            raise TypeError(f"Kernel.primitive: expected a primitive name, got {self.primitive!r}")
        object.__setattr__(self, "backend", normalize_backend_name(self.backend, argument="Kernel.backend"))
        if self.impl is None:
            raise TypeError("Kernel.impl: required")
        _check_ref(self.impl, "Kernel.impl")
        _check_ref(self.check, "Kernel.check")
        object.__setattr__(self, "variants", tuple(str(v) for v in self.variants))

    def _get(self, attr: str) -> Callable | None:
        ref = getattr(self, attr)
        if ref is None or callable(ref):
            return ref
        fn = self._resolved.get(attr)
        if fn is None:
            with self._lock:
                fn = self._resolved.get(attr)
                if fn is None:
                    fn = resolve_ref(ref, what=f"{self.backend} {self.primitive} {attr}")
                    self._resolved[attr] = fn
        return fn

    def run(self, args: Any) -> Any:
        return self._get("impl")(args)

    def decline_reason(self, args: Any) -> str | None:
        check = self._get("check")
        return None if check is None else check(args)


class Registrar:
    """The ``register`` callback handed to ``turbo_register_kernels``: ``register(Kernel(...))``."""

    def __init__(self, plugin_name: str) -> None:
        self.plugin_name = plugin_name
        self.kernels: list[Kernel] = []

    def __call__(self, kernel: Kernel) -> Kernel:
        if not isinstance(kernel, Kernel):
            raise TypeError(
                f"register(): expected a turbo_core.plugins.Kernel, got {type(kernel).__name__}"
            )
        self.kernels.append(kernel)
        return kernel
