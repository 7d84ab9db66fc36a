"""Choosing and running a backend for one primitive call.

Selection order (as Primus-Turbo's, made per key):

0. ``turbo_core.use_backend(name)`` context
1. code: ``GlobalBackendManager.set_*_backend`` / ``set_backend``
2. environment: ``TURBO_<FAMILY|PRIMITIVE>_BACKEND``
3. auto-tune: (a) its persistent form, the tuning database (``turbo tune``;
   ``turbo_core.tuning``), always consulted; a measured entry applies only if the backend step 4
   would pick was among the backends it was timed against; (b) timing on the first call of a key,
   when ``AUTOTUNE`` is chosen in 1/2 for this key or by the global switch
4. the primitive's default for this platform (``turbo_core.dispatch.defaults``)
5. fallback: the first capable registered backend, with a one-time warning

A backend chosen in 0-2 that cannot serve the call raises :class:`BackendError` with its reason.
A kernel that raises while running a call surfaces as a :class:`KernelError` (a :class:`BackendError`)
naming the primitive and the backend, its own exception chained (``raise ... from``) and reported once
in the log; running out of device memory gives :class:`BackendOutOfMemoryError`, also a
``torch.OutOfMemoryError``. A :class:`BackendError` a kernel raises itself (a primitive it calls that no
backend can serve) passes through as it is. Invalid
arguments are not wrapped: the validators' ``TypeError``/``ValueError`` come out as they are, before
any kernel runs. Nothing is kept of a failed call: the selection cache holds the (still valid) choice,
never the error, and the next call runs the kernel again.

``call()`` (the eager entry point) looks the answer up in a selection cache
(``turbo_core.dispatch.selection_cache``) keyed by the call signature, the pin, the settings
generation and the environment variables that matter: a repeated call skips the walk above. It
validates every call before any kernel runs, except where the cache holds the verdict: an entry that
``call()`` stored after validating arguments whose verdict is a function of the key
(``selection_cache.verdict_keyed``: no tensor on the CPU, where validators read values).
Auto-tune picks and errors are never cached (a tuning-database answer is: loading a database empties
the cache); ``select()`` itself always walks the whole order.
While a torch profiler is active, ``call()`` runs the kernel inside a ``turbo::<primitive>[<backend>]``
``record_function`` range (``turbo_core.profiling.labels``); otherwise it only reads one flag.
Inside :func:`recording` it also appends each call's ``(primitive, backend, kernel, args)`` to a
list, so that a tool can replay the layers below an op on their own (``turbo bench host``).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from turbo_core.dispatch import autotune
from turbo_core.dispatch.catalog import get_primitive
from turbo_core.dispatch.defaults import default_order
from turbo_core.dispatch.manager import GlobalBackendManager, pinned_backend
from turbo_core.dispatch.primitives import _PRIMITIVES, Primitive
from turbo_core.dispatch.selection_cache import (
    CachedSelection,
    CacheInfo,
    SelectionCache,
    selection_key,
    settings_unchanged,
    verdict_keyed,
)
from turbo_core.platform import Platform, platform_of
from turbo_core.plugins.host import get_host
from turbo_core.plugins.types import Kernel
from turbo_core.profiling import labels as _labels
from turbo_core.tuning import active as _tuning

__all__ = ["BackendError", "BackendOutOfMemoryError", "KernelError", "Selection", "cache_info", "cached_select", "call", "call_with_backend", "checked_select",
           "clear_selection_cache", "clear_warnings", "decline_reason", "recording", "select", "stats"]

log = logging.getLogger("turbo")

_INSTALL_HINT = {
    "TRITON": "turbo-triton", "HIPBLASLT": "turbo-hipblaslt", "CK": "turbo-ck",
    "AITER": "turbo-aiter", "DEEP_EP": "turbo-deepep", "DEEP_EP_BUFFER": "turbo-deepep",
}


class BackendError(RuntimeError):
    """No backend can run a call, or the chosen one cannot (the message names the primitive and says
    why: ``... cannot run this call: <reason>``, ``... no backend can run this call ...``), or its
    kernel raised while running it (:class:`KernelError`)."""


class KernelError(BackendError):
    """The chosen backend's kernel raised while running a call: the message names the primitive and the
    backend, the kernel's own exception is chained as ``__cause__``. Unlike a plain
    :class:`BackendError` (a call no backend would take), this is a failure of the backend: a test or a
    tool that skips declined calls must not skip it."""


class BackendOutOfMemoryError(KernelError, torch.OutOfMemoryError):
    """A kernel ran out of device memory: a :class:`KernelError` that is also a ``torch.OutOfMemoryError``,
    so code that catches the latter (to skip a batch, to shrink it) still does."""


def _kernel_error(primitive: str, backend: str, exc: Exception) -> KernelError:
    """The :class:`KernelError` of a kernel that raised ``exc`` while serving a call; reported once per
    primitive, backend and exception type in the log too."""
    kind = type(exc).__name__
    # the message as text: a log record holding ``exc`` would keep its traceback's frames (the call's
    # tensors) alive for as long as a handler keeps the record
    _warn_once(("raised", primitive, backend, kind), "turbo: %s on %s raised %s: %s", primitive, backend, kind,
               str(exc))
    cls = BackendOutOfMemoryError if isinstance(exc, torch.OutOfMemoryError) else KernelError
    return cls(f"{primitive}: backend {backend} raised {kind} while running the call: {exc}")


@dataclass(frozen=True)
class Selection:
    """Which backend a call goes to and why (``how``: use_backend, code, env, tuned, autotune,
    autotune-cache, autotune-disk, default, fallback)."""

    primitive: str
    backend: str
    how: str
    source: str


_warned: set[tuple] = set()
_warn_lock = threading.Lock()
_stats: collections.Counter = collections.Counter()
_stats_lock = threading.Lock()
_cache = SelectionCache()
_profiler_state = _labels.state
_recorded: list | None = None


def clear_warnings() -> None:
    """Forget the one-time warnings, the call statistics and the selection cache (whose hits
    would otherwise skip a fallback warning that is due again)."""
    with _warn_lock:
        _warned.clear()
    with _stats_lock:
        _stats.clear()
    _cache.clear()


def clear_selection_cache() -> None:
    """Forget every cached selection (``GlobalBackendManager.reset()`` does it too, and so does any
    change of the tuning database: ``turbo_core.tuning.on_change``)."""
    _cache.clear()


def _forget() -> None:
    autotune.get_tuner().clear()
    clear_warnings()


GlobalBackendManager.on_reset(_forget)
_tuning.on_change(clear_selection_cache)


def cache_info() -> CacheInfo:
    """Hits, misses, stores, evictions and size of ``call()``'s selection cache since it was cleared."""
    return _cache.info()


def _warn_once(key: tuple, msg: str, *args: Any) -> None:
    with _warn_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(msg, *args)


def stats() -> dict[tuple[str, str, str], int]:
    """``{(primitive, backend, how): calls}`` since the last ``GlobalBackendManager.reset()``."""
    with _stats_lock:
        return dict(_stats)


def decline_reason(prim: Primitive, backend: str, args: Any, platform: Platform) -> str | None:
    """``None`` when ``backend`` can run this call, else the reason it cannot."""
    registry = get_host().registry
    record = registry.backend(backend)
    if record is None:
        pkg = _INSTALL_HINT.get(backend)
        hint = f" (pip install {pkg})" if pkg else ""
        return f"backend {backend} is not installed{hint}"
    kernel = registry.kernel(prim.name, backend)
    if kernel is None:
        return f"{backend} has no kernel for {prim.name}"
    reason = record.unavailable_reason()
    if reason:
        return reason
    info = record.info
    if platform.kind not in info.platforms:
        return f"{backend} runs on {'/'.join(info.platforms)}; this call is on {platform.kind}"
    if platform.kind != "cpu" and info.archs is not None and platform.arch not in info.archs:
        return f"{backend} supports {', '.join(info.archs)}; this GPU is {platform.arch}"
    try:
        return kernel.decline_reason(args)
    except Exception as exc:
        return f"capability check raised {type(exc).__name__}: {exc}"


def _explicit(prim: Primitive, backend: str, how: str, source: str, args: Any, platform: Platform) -> Selection:
    reason = decline_reason(prim, backend, args, platform)
    if reason is not None:
        raise BackendError(f"{prim.name}: backend {backend} (chosen by {source}) cannot run this call: {reason}")
    return Selection(prim.name, backend, how, source)


def select(prim: Primitive | str, args: Any) -> Selection:
    """Pick the backend for a call (the arguments must already be valid), walking the whole
    selection order (no cache)."""
    if isinstance(prim, str):
        prim = get_primitive(prim)
    return _resolve(prim, args)[0]


def _resolve(prim: Primitive, args: Any) -> tuple[Selection, Platform, bool]:
    """``(selection, platform, cacheable)``: cacheable unless auto-tune was consulted (its pick
    depends on timings and on the tuner's cache; while capturing a CUDA graph it even declines)."""
    tensor = prim.first_tensor(args)
    platform = platform_of(tensor.device if tensor is not None else None)
    registry = get_host().registry

    pinned = pinned_backend(prim.name)
    if pinned is not None:
        chosen = _explicit(prim, pinned, "use_backend", f"use_backend({pinned!r})", args, platform)
        return chosen, platform, True

    found = GlobalBackendManager.lookup(prim.name, prim.family, prim.precision)
    choice = None
    if found is not None:
        choice, source, layer = found
        if choice.backend is not None:
            return _explicit(prim, choice.backend, layer, source, args, platform), platform, True

    cacheable = True
    if prim.tunable:
        cacheable = not _tuning.overridden()  # tuning.disabled()/forcing(): tools' answers, not cached
        tuned = _tuning.lookup(prim.name, args, platform)
        if tuned is not None and decline_reason(prim, tuned[0], args, platform) is None:
            backend, source, compared = tuned
            if not compared or _default_backend(prim, args, platform) in (*compared, None):
                return Selection(prim.name, backend, "tuned", source), platform, cacheable
    if prim.tunable and ((choice is not None and choice.auto_tune) or GlobalBackendManager.auto_tune_enabled()):
        cacheable = False
        kernels = {k.backend: k for k in registry.kernels_for(prim.name)}
        versions = {name: registry.backend(name).info.version for name in kernels}
        picked = autotune.get_tuner().select(
            prim, args, platform, kernels,
            lambda name: decline_reason(prim, name, args, platform), versions,
        )
        if picked is not None:
            return Selection(prim.name, picked[0], picked[1], "auto-tune"), platform, False

    declined: list[str] = []
    for name in default_order(prim.name, platform):
        reason = decline_reason(prim, name, args, platform)
        if reason is None:
            chosen = Selection(prim.name, name, "default", f"default for {platform.arch or platform.kind}")
            return chosen, platform, cacheable
        declined.append(f"{name}: {reason}")

    others: list[str] = []
    for kernel in registry.kernels_for(prim.name):
        reason = decline_reason(prim, kernel.backend, args, platform)
        if reason is None:
            why = "; ".join(declined) if declined else f"no default backend for {prim.name} on {platform.kind}"
            _warn_once((prim.name, platform.key, kernel.backend),
                       "turbo: %s on %s falls back to %s (%s)", prim.name,
                       platform.arch or platform.kind, kernel.backend, why)
            return Selection(prim.name, kernel.backend, "fallback", why), platform, cacheable
        others.append(f"{kernel.backend}: {reason}")
    reasons = declined + [o for o in others if o.split(":")[0] not in {d.split(":")[0] for d in declined}]
    detail = "; ".join(reasons) if reasons else "no installed backend registers it"
    raise BackendError(f"{prim.name}: no backend can run this call on {platform.arch or platform.kind} ({detail})")


def _default_backend(prim: Primitive, args: Any, platform: Platform) -> str | None:
    """The backend step 4 would pick for this call (``None``: none, step 5 would fall back)."""
    for name in default_order(prim.name, platform):
        if decline_reason(prim, name, args, platform) is None:
            return name
    return None


def _lookup(prim: Primitive, key: tuple | None, registry: Any) -> CachedSelection | None:
    """The cache's entry for ``key`` when it is there and still holds: resolved for this primitive,
    its backend still available and (for a default, fallback or tuned answer) the same defaults."""
    if key is None:
        return None
    hit = _cache.get(key, registry)
    if hit is None:
        return None
    if (hit.prim is prim and hit.record.unavailable_reason() is None
            and (hit.defaults is None or default_order(prim.name, hit.platform) is hit.defaults)):
        return hit
    _cache.drop(key)
    return None


def _select_for_call(prim: Primitive, args: Any, *, validate: bool = False) -> tuple[Selection, Kernel]:
    """The selection and kernel of a call: from the cache when an answer for this key is there and
    its backend is still available, else from :func:`_resolve` (stored when deterministic). With
    ``validate`` the primitive's validator runs first, unless the cache holds its verdict."""
    registry = get_host().registry
    key = selection_key(prim, args)
    hit = _lookup(prim, key, registry)
    if hit is None:
        if validate:
            prim.check_args(args)
        return _resolve_and_store(prim, args, key, registry, validated=validate)
    if validate and not hit.validated:
        prim.check_args(args)
    return hit.selection, hit.kernel


def _resolve_and_store(prim: Primitive, args: Any, key: tuple | None, registry: Any, *,
                       validated: bool) -> tuple[Selection, Kernel]:
    """:func:`_resolve`, its answer stored under ``key`` when deterministic (``validated``: the
    arguments passed the primitive's validator just now)."""
    epoch = _cache.epoch
    selection, platform, cacheable = _resolve(prim, args)
    kernel = registry.kernel(prim.name, selection.backend)
    if cacheable and key is not None and kernel is not None and settings_unchanged(key, prim):
        # a default, fallback or tuned answer also rests on the defaults table (re-read on each hit)
        defaults = default_order(prim.name, platform) if selection.how in ("default", "fallback", "tuned") else None
        record = registry.backend(selection.backend)
        entry = CachedSelection(prim, selection, kernel, record, platform, defaults,
                                validated and verdict_keyed(args))
        _cache.put(key, entry, registry, epoch)
    return selection, kernel


def cached_select(prim: Primitive | str, args: Any) -> Selection:
    """:func:`select` through ``call()``'s selection cache (the arguments must already be valid)."""
    if isinstance(prim, str):
        prim = get_primitive(prim)
    return _select_for_call(prim, args)[0]


@contextlib.contextmanager
def recording() -> Iterator[list[tuple[str, str, Kernel, Any]]]:
    """Within the block, every :func:`call` (in any thread) appends ``(primitive, backend, kernel,
    args)`` to the yielded list before it runs the kernel. Blocks do not nest."""
    global _recorded
    if _recorded is not None:
        raise RuntimeError("dispatch.recording(): already recording")
    calls: list[tuple[str, str, Kernel, Any]] = []
    _recorded = calls
    try:
        yield calls
    finally:
        _recorded = None


def checked_select(prim: Primitive | str, args: Any) -> tuple[Selection, Kernel]:
    """Validate and select as :func:`call` does, without running: ``(selection, kernel)``. The
    validator runs unless the selection cache holds a verdict for this key (see the module doc);
    invalid arguments raise before anything is selected."""
    if isinstance(prim, str):
        found = _PRIMITIVES.get(prim)  # the fast path; get_primitive explains a miss
        prim = found if found is not None else get_primitive(prim)
    return _select_for_call(prim, args, validate=True)


def call(primitive: str, args: Any) -> Any:
    """Validate, select (through the selection cache) and run: the one entry point ops use to
    reach a kernel. Validation runs on every call unless the cache holds its verdict (see the module
    doc); the accounting in :func:`stats` runs on every call."""
    return call_with_backend(primitive, args)[0]


def call_with_backend(primitive: str, args: Any) -> tuple[Any, str]:
    """:func:`call`, also returning the name of the backend that ran (an op whose backward must run
    on its forward's backend keeps it)."""
    selection, kernel = checked_select(primitive, args)
    name = selection.primitive
    with _stats_lock:
        _stats[(name, selection.backend, selection.how)] += 1
    log.debug("turbo: %s -> %s (%s: %s)", name, selection.backend, selection.how, selection.source)
    if _recorded is not None:
        _recorded.append((name, selection.backend, kernel, args))
    try:  # free on the success path (CPython 3.11+: zero-cost exception handling)
        if _profiler_state._is_profiler_enabled:  # a module attribute read while no profiler runs
            return _labels.run_labelled(name, selection.backend, kernel, args), selection.backend
        return kernel.run(args), selection.backend
    except BackendError:
        raise  # a primitive the kernel called itself could not be served: that error names it
    except Exception as exc:
        raise _kernel_error(name, selection.backend, exc) from exc
