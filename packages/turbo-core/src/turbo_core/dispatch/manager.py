"""``GlobalBackendManager``: code-level backend settings (step 1) and the env layer (step 2).

Settings are keyed by *scope* (a family such as ``gemm``, or one primitive such as ``gemm_fp8``)
and precision, and they merge per key: setting FP8 in code leaves the environment in charge of the
other precisions. For a call of primitive P (family F) at precision Q the lookup order is::

    use_backend(...) context
    code:  (P, Q) (P, all) (F, Q) (F, all)
    env:   TURBO_P_BACKEND[Q or other], TURBO_F_BACKEND[Q or other]

All state is guarded by one lock; ``use_backend`` is a context variable (per thread / task).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterable, Iterator

from turbo_core import tuning
from turbo_core.backend import (
    AUTOTUNE,
    BackendChoice,
    BackendType,
    PrecisionType,
    normalize_backend_name,
    parse_precision,
)
from turbo_core.dispatch import env as _env
from turbo_core.dispatch.catalog import families, get_primitive, primitive_names
from turbo_core.dispatch.env import ALL
from turbo_core.plugins.host import get_host

__all__ = ["FAMILIES", "GlobalBackendManager", "pinned_backend", "use_backend"]

#: Families with their own setter and environment variable (Primus-Turbo's names).
FAMILIES = ("gemm", "grouped_gemm", "attn", "sparse_attn", "moe_dispatch_combine")
_UNTUNABLE_FAMILIES = {"moe_dispatch_combine"}

_pinned: contextvars.ContextVar[tuple[str, frozenset | None] | None] = contextvars.ContextVar(
    "turbo_use_backend", default=None)


def _known_backend_names() -> set[str]:
    return set(BackendType.WELL_KNOWN) | set(get_host().registry.backend_names())


def _check_scope(scope: str) -> str:
    if not isinstance(scope, str):
        raise TypeError(f"primitive: expected a primitive or family name, got {scope!r}")
    s = scope.strip().lower()
    names = primitive_names()
    fams = _all_families()
    if s not in fams and s not in names:
        raise ValueError(
            f"primitive: unknown primitive or family {scope!r}; families: {', '.join(sorted(fams))}; "
            f"primitives: {', '.join(sorted(names))}"
        )
    return s


def _all_families() -> set[str]:
    """Primus-Turbo's four families plus every family a primitive spec names (``rmsnorm``, ...)."""
    return set(FAMILIES) | set(families())


def _untunable(scope: str) -> bool:
    """A primitive that is not tunable, or a family with any such primitive."""
    if scope in _UNTUNABLE_FAMILIES:
        return True
    members = families().get(scope)
    if members is not None:
        return any(not get_primitive(p).tunable for p in members)
    if scope in primitive_names():
        return not get_primitive(scope).tunable
    return False


class GlobalBackendManager:
    """Process-wide backend settings (class-level, like Primus-Turbo's; never instantiated)."""

    _lock = threading.RLock()
    _settings: dict[tuple[str, object], BackendChoice] = {}
    _auto_tune: bool | None = None
    #: Bumped (under the lock, after the change) by every ``set_*``, ``set_auto_tune`` and
    #: ``reset``: the dispatcher's selection cache keys on it, so a cached choice never outlives
    #: the setting it came from.
    generation: int = 0
    _reset_hooks: list[Callable[[], None]] = []

    # -- generic API -----------------------------------------------------------------------------
    @classmethod
    def set_backend(cls, primitive: str, backend: str | None = None,
                    precision: PrecisionType | str | None = None, auto_tune: bool = False) -> None:
        """Choose the backend of a primitive or family.

        ``backend=None, auto_tune=False`` clears the setting. ``precision=None`` applies to every
        precision (replacing per-precision settings of that scope).
        """
        scope = _check_scope(primitive)
        if backend is not None and normalize_backend_name(backend) == AUTOTUNE:
            backend, auto_tune = None, True
        if backend is not None and auto_tune:
            raise ValueError("auto_tune: give a backend or auto_tune=True, not both")
        if auto_tune and _untunable(scope):
            raise ValueError(
                f"auto_tune: {scope} cannot be auto-tuned (a collective: every rank must use the same backend)"
            )
        choice = None
        if backend is not None:
            name = normalize_backend_name(backend)
            known = _known_backend_names()
            if name not in known:
                raise ValueError(f"backend: unknown backend {backend!r}; known: {', '.join(sorted(known))}")
            choice = BackendChoice(name)
        elif auto_tune:
            choice = BackendChoice(auto_tune=True)
        with cls._lock:
            if precision is None:
                for key in [k for k in cls._settings if k[0] == scope]:
                    del cls._settings[key]
                if choice is not None:
                    cls._settings[(scope, ALL)] = choice
            else:
                key = (scope, parse_precision(precision))
                if choice is None:
                    cls._settings.pop(key, None)
                else:
                    cls._settings[key] = choice
            cls.generation += 1

    @classmethod
    def get_backend(cls, primitive: str, precision: PrecisionType | str | None = None) -> BackendChoice | None:
        """The effective choice (code, else environment) for a scope at a precision."""
        scope = _check_scope(primitive)
        prec = parse_precision(precision) if precision is not None else None
        found = cls._lookup_code([scope], prec)
        if found is None:
            found = cls._lookup_env([scope], prec)
        return found[0] if found else None

    # -- Primus-Turbo's per-family API -----------------------------------------------------------
    @classmethod
    def set_gemm_backend(cls, backend=None, precision=None, auto_tune=False) -> None:
        cls.set_backend("gemm", backend, precision, auto_tune)

    @classmethod
    def get_gemm_backend(cls, precision=None) -> BackendChoice | None:
        return cls.get_backend("gemm", precision)

    @classmethod
    def set_grouped_gemm_backend(cls, backend=None, precision=None, auto_tune=False) -> None:
        cls.set_backend("grouped_gemm", backend, precision, auto_tune)

    @classmethod
    def get_grouped_gemm_backend(cls, precision=None) -> BackendChoice | None:
        return cls.get_backend("grouped_gemm", precision)

    @classmethod
    def set_attn_backend(cls, backend=None, precision=None, auto_tune=False) -> None:
        cls.set_backend("attn", backend, precision, auto_tune)

    @classmethod
    def get_attn_backend(cls, precision=None) -> BackendChoice | None:
        return cls.get_backend("attn", precision)

    @classmethod
    def set_sparse_attn_backend(cls, backend=None, precision=None, auto_tune=False) -> None:
        """The backend of sparse MLA attention (``sparse_mla_fwd`` and ``sparse_mla_bwd``)."""
        cls.set_backend("sparse_attn", backend, precision, auto_tune)

    @classmethod
    def get_sparse_attn_backend(cls, precision=None) -> BackendChoice | None:
        return cls.get_backend("sparse_attn", precision)

    @classmethod
    def set_moe_dispatch_combine_backend(cls, backend=None, precision=None, auto_tune=False) -> None:
        cls.set_backend("moe_dispatch_combine", backend, precision, auto_tune)

    @classmethod
    def get_moe_dispatch_combine_backend(cls, precision=None) -> BackendChoice | None:
        return cls.get_backend("moe_dispatch_combine", precision)

    @classmethod
    def set_auto_tune(cls, enabled: bool | None) -> None:
        """Turn auto-tune on/off for every primitive; ``None`` defers to ``TURBO_AUTO_TUNE``."""
        if enabled is not None and not isinstance(enabled, bool):
            raise TypeError(f"enabled: expected a bool or None, got {enabled!r}")
        with cls._lock:
            cls._auto_tune = enabled
            cls.generation += 1

    @classmethod
    def auto_tune_enabled(cls) -> bool:
        with cls._lock:
            code = cls._auto_tune
        return code if code is not None else _env.auto_tune_from_env()

    @classmethod
    def reset(cls) -> None:
        """Forget every code setting, the env-parse cache, the loaded tuning database (recorded
        entries included), and what the :meth:`on_reset` callbacks forget: the dispatcher's
        auto-tune winners, selection cache, statistics and one-time warnings."""
        with cls._lock:
            cls._settings.clear()
            cls._auto_tune = None
            cls.generation += 1
            hooks = list(cls._reset_hooks)
        _env.clear_cache()
        tuning.reset()
        for hook in hooks:
            hook()

    @classmethod
    def clear_env_cache(cls) -> None:
        """Forget the parsed values of the backend environment variables and every selection
        cached from them (the generation is bumped); code settings stay. Selection reads the
        variables on every call, so a changed variable takes effect on the next call without
        this; it exists for code written against Primus-Turbo, whose getters read a variable once
        (``_clear_env_cache`` is its name there). :meth:`reset` does this too."""
        _env.clear_cache()
        with cls._lock:
            cls.generation += 1

    _clear_env_cache = clear_env_cache

    @classmethod
    def on_reset(cls, callback: Callable[[], None]) -> None:
        """Call ``callback()`` at every :meth:`reset` (the dispatcher, which imports this module,
        registers the forgetting of its own state this way)."""
        with cls._lock:
            if callback not in cls._reset_hooks:
                cls._reset_hooks.append(callback)

    # -- lookups used by the dispatcher ----------------------------------------------------------
    @classmethod
    def _lookup_code(cls, scopes: list[str], precision: PrecisionType | None):
        with cls._lock:
            for scope in scopes:
                for slot in ((precision, ALL) if precision is not None else (ALL,)):
                    choice = cls._settings.get((scope, slot))
                    if choice is not None:
                        label = "all precisions" if slot is ALL else slot.name
                        return choice, f"code setting for {scope} ({label})"
        return None

    @classmethod
    def _lookup_env(cls, scopes: list[str], precision: PrecisionType | None):
        valid = None
        for scope in scopes:
            raw, var = _env.read_env(*_env.backend_env_names(scope))
            if raw is None:
                continue
            if valid is None:
                valid = _known_backend_names()
            table = _env.parse_backend_value(raw, variable=var, valid=valid,
                                             installed=get_host().registry.backend_names())
            if _untunable(scope) and any(c.auto_tune for c in table.values()):
                raise ValueError(f"{var}={raw!r}: {scope} cannot be auto-tuned "
                                 "(a collective: every rank must use the same backend)")
            for slot in ((precision, ALL) if precision is not None else (ALL,)):
                choice = table.get(slot)
                if choice is not None:
                    return choice, f"{var}={raw}"
        return None

    @classmethod
    def lookup(cls, primitive: str, family: str, precision: PrecisionType):
        """``(choice, source, layer)`` from code then env, or ``None``."""
        scopes = [primitive] if primitive == family else [primitive, family]
        found = cls._lookup_code(scopes, precision)
        if found:
            return found[0], found[1], "code"
        found = cls._lookup_env(scopes, precision)
        if found:
            return found[0], found[1], "env"
        return None


@contextlib.contextmanager
def use_backend(name: str, primitives: Iterable[str] | None = None) -> Iterator[str]:
    """Pin the primitives called inside the block to one backend: every primitive, or only those
    named in ``primitives`` (the others keep the usual selection; conformance runs use this so a
    GEMM backend is tested with whatever quantizer the platform selects).

    A call the backend cannot serve raises with the backend's reason (never a silent swap).
    Nested blocks override outer ones; the pin is per thread / asyncio task. A backward pass that
    autograd runs on its CUDA/ROCm device threads does not see the pin: wrap ``.backward()`` in
    ``torch.autograd.set_multithreading_enabled(False)`` to keep it (turbo's own ops that need it,
    attention, pin their backward themselves).
    """
    backend = normalize_backend_name(name)
    known = _known_backend_names()
    if backend not in known:
        raise ValueError(f"name: unknown backend {name!r}; known: {', '.join(sorted(known))}")
    only = None
    if primitives is not None:
        only = frozenset(get_primitive(p).name for p in primitives)
    token = _pinned.set((backend, only))
    try:
        yield backend
    finally:
        _pinned.reset(token)


def pinned_backend(primitive: str | None = None) -> str | None:
    """The backend ``use_backend`` pins ``primitive`` to (any pin when ``primitive`` is None)."""
    pin = _pinned.get()
    if pin is None:
        return None
    backend, only = pin
    if only is not None and primitive is not None and primitive not in only:
        return None
    return backend
