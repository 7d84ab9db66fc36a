"""The process's tuning database: the files backends ship, then the user's file, merged.

Where entries come from, in order (later wins on the same key):

1. **shipped**: every ``*.json`` (sorted by name) in a directory named ``tuning_db`` beside the
   module of each loaded plugin (``turbo_triton/plugin.py`` -> ``turbo_triton/tuning_db/sm90.json``;
   a wheel ships it as package data). A malformed shipped file is reported once and skipped.
2. **user**: the file named by ``TURBO_TUNING_DB`` (a path). A missing file is an empty database
   (``save()`` creates it); one that cannot be read (truncated, corrupted, malformed) is reported once,
   naming the variable and what is wrong, and ignored like a missing one (:func:`info` lists it
   under ``errors``): a bad database never fails a call.
3. **recorded** in this process with :func:`record`.

Choices and configs whose recorded library versions do not hold any more are dropped on load
(``TURBO_TUNING_VERSIONS``: ``turbo_core.tuning.versions``). ``TURBO_TUNING=0`` turns every
database off. The database loads on first use; a change of ``TURBO_TUNING_DB``, ``TURBO_TUNING`` or
``TURBO_TUNING_VERSIONS`` is noticed at the next backend selection that misses the selection cache
(the dispatcher keys that cache on these variables too), or after the plugins are discovered again;
every (re)load or ``record`` empties the selection cache, so no cached selection outlives the
database it came from. Entries recorded in this process live until the next load (``save()`` keeps
them).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from turbo_core.platform import Platform
from turbo_core.plugins.host import get_host
from turbo_core.tuning import versions as _versions
from turbo_core.tuning.db import Entry, TuningDB
from turbo_core.tuning.keys import _KEYS, Key

__all__ = ["ENV_DB", "ENV_SWITCH", "ConfigReader", "best", "disabled", "forcing", "info", "kernel_config", "lookup",
           "on_change", "overridden", "record", "reload", "reset", "save", "shipped_files"]

log = logging.getLogger("turbo")

ENV_DB = "TURBO_TUNING_DB"
ENV_SWITCH = "TURBO_TUNING"
DATA_DIR = "tuning_db"
_OFF = {"0", "off", "false", "no"}


@dataclass
class _State:
    db: TuningDB                  # what lookups read: shipped + user + recorded, version-checked
    user: TuningDB                # the user's file as read, plus records (what save() writes)
    user_path: str | None
    sources: list[str]
    env: tuple
    policy: str
    now: dict[str, str]
    registry: Any = None          # the plugin registry it was loaded with (another one: load again)
    stale: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    enabled: bool = True


class _Override(NamedTuple):
    off: bool
    forced: tuple[str, str, dict] | None


_state: _State | None = None
_lock = threading.RLock()
_override: contextvars.ContextVar[_Override | None] = contextvars.ContextVar("turbo_tuning_override", default=None)
_reported: set[str] = set()
_listeners: list[Callable[[], None]] = []


def _env_values() -> tuple:
    env = os.environ
    return env.get(ENV_DB), env.get(ENV_SWITCH), env.get(_versions.ENV_POLICY)


def on_change(callback: Callable[[], None]) -> None:
    """Call ``callback()`` whenever answers given before may be wrong now: the database that lookups
    read was (re)loaded, an entry was recorded, :func:`reset` ran, or a :func:`disabled` block began.
    The dispatcher empties its selection cache this way (this package never imports it)."""
    with _lock:
        if callback not in _listeners:
            _listeners.append(callback)


def _changed() -> None:
    for callback in list(_listeners):
        callback()


def shipped_files() -> list[Path]:
    """The ``tuning_db/*.json`` files beside the loaded plugin modules, in load order."""
    dirs: list[Path] = []
    for rec in get_host().records:
        module = sys.modules.get(rec.module) if rec.status == "loaded" else None
        file = getattr(module, "__file__", None)
        if not isinstance(file, str):
            continue
        d = Path(file).parent / DATA_DIR
        if d not in dirs and d.is_dir():
            dirs.append(d)
    return [f for d in dirs for f in sorted(d.glob("*.json"))]


def _registry() -> Any:
    return get_host().registry


def _load() -> _State:
    global _state
    with _lock:
        env = _env_values()
        registry = _registry()
        st = _state
        if st is not None and st.env == env and st.registry is registry:
            return st
        db_path, switch, _ = env
        policy = _versions.policy_from_env()
        enabled = (switch or "").strip().lower() not in _OFF
        layers: list[TuningDB] = []
        sources: list[str] = []
        errors: list[str] = []
        if enabled:
            for f in shipped_files():
                try:
                    layers.append(TuningDB.load(f))
                    sources.append(str(f))
                except (OSError, ValueError) as exc:
                    errors.append(str(exc))
                    if str(f) not in _reported:
                        _reported.add(str(f))
                        log.warning("turbo: skipping the shipped tuning database %s: %s", f, exc)
        user = TuningDB()
        user_path = db_path.strip() if db_path and db_path.strip() else None
        if user_path is not None and enabled:
            if os.path.exists(user_path):
                try:
                    user = TuningDB.load(user_path)
                    sources.append(user_path)
                except (OSError, ValueError) as exc:
                    errors.append(f"{ENV_DB}={user_path!r}: {exc}")
                    if user_path not in _reported:
                        _reported.add(user_path)
                        log.warning("turbo: ignoring the tuning database %s=%s: %s (selection and kernel configs "
                                    "go on without it)", ENV_DB, user_path, exc)
            else:
                log.info("turbo: %s=%s does not exist yet (an empty tuning database)", ENV_DB, user_path)
        libraries = {lib for layer in (*layers, user) for lib in layer.libraries()}
        packages = {r.info.package: r.info.version for r in registry.backends.values()}
        now = _versions.current(packages, tuple(sorted(libraries)))
        merged, stale = TuningDB(), []
        for layer in (*layers, user):
            subset, dropped = layer.compatible_subset(now, policy)
            merged.merge(subset)
            stale += dropped
        if stale:
            log.info("turbo: %d tuned choice(s) skipped: tuned with other library versions (%s=%s)",
                     len(stale), _versions.ENV_POLICY, policy)
        # Cached selections rest on the database only if the old or the new one has entries (an empty
        # database answers nothing, like none); before the first load none does (reset() clears).
        stale_cache = _state is not None and (len(_state.db) > 0 or len(merged) > 0)
        st = _State(merged, user, user_path, sources, env, policy, now, registry, stale, errors, enabled)
        _state = st
    if stale_cache:
        _changed()
    return st


def _current() -> _State:
    st = _state
    if st is None or st.env != _env_values() or st.registry is not _registry():
        st = _load()
    return st


# -- lookups ---------------------------------------------------------------------------------------

def best(primitive: str, key: Key) -> Entry | None:
    """The entry with the tuned backend choice of ``primitive`` at ``key``, or ``None``."""
    o = _override.get()
    if o is not None and o.off:
        return None
    return _current().db.best(primitive, key)


def kernel_config(backend: str, primitive: str, key: Key | tuple) -> dict | None:
    """The tuned kernel config of ``backend`` for ``primitive`` at the backend's config ``key`` (a
    :class:`Key`, or a plain tuple of its four fields: equal and cheaper to build; or a callable
    returning one, called only when some database holds kernel configs), or ``None`` (then
    the backend uses its heuristics). Costs a context-variable read and a dict get (the first call
    loads the database)."""
    o = _override.get()
    if o is not None:
        forced = o.forced
        if forced is not None and forced[0] == backend and forced[1] == primitive:
            return forced[2]
        if o.off:
            return None
    st = _state
    if st is None:
        st = _load()
    db = st.db
    if not db.has_configs:
        return None
    if callable(key):
        key = key()
    return db.kernel_config(backend, primitive, key)


class ConfigReader:
    """What a launcher makes of the config dicts :func:`kernel_config` returns: ``convert(config)``
    (raising ``ValueError`` for a config it cannot use), computed once per dict object; a config that
    does not convert is reported once (a warning: "ignoring a tuned <what> config<consequence>: why")
    and gives ``fallback``, so a bad database entry never fails a call."""

    def __init__(self, convert: Any, fallback: Any, what: str, consequence: str = "") -> None:
        self._convert, self._fallback, self._what, self._consequence = convert, fallback, what, consequence
        self._memo: dict[int, tuple[dict, Any]] = {}
        self._lock = threading.Lock()

    def __call__(self, config: dict) -> Any:
        hit = self._memo.get(id(config))
        if hit is not None and hit[0] is config:
            return hit[1]
        try:
            value = self._convert(config)
        except ValueError as exc:
            log.warning("turbo: ignoring a tuned %s config%s: %s", self._what, self._consequence, exc)
            value = self._fallback
        with self._lock:
            if len(self._memo) >= 1024:
                self._memo.clear()
            self._memo[id(config)] = (config, value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._memo.clear()


def lookup(primitive: str, args: Any, platform: Platform) -> tuple[str, str, frozenset[str]] | None:
    """For the dispatcher: ``(backend, source, compared)`` of the tuned choice for this call, or
    ``None``. ``compared``: the backends it was timed against (``times_us``; empty for a hand-written
    entry): the dispatcher applies a measured choice only when the backend its defaults would pick
    was among them, so a database tuned without some backend never overrides that backend."""
    keyfn = _KEYS.get(primitive)
    if keyfn is None:
        return None
    o = _override.get()
    if o is not None and o.off:
        return None
    db = _current().db
    if not len(db):
        return None
    entry = db.best(primitive, keyfn(args, platform))
    if entry is None or entry.backend is None:
        return None
    return (entry.backend, f"tuning database {entry.source or '(recorded in this process)'}: {entry.key.label()}",
            frozenset(entry.times_us))


def overridden() -> bool:
    """Whether :func:`disabled` or :func:`forcing` is active here (selections then are not cached)."""
    return _override.get() is not None


# -- tools -----------------------------------------------------------------------------------------

@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Inside the block (this thread / task), selections and kernel configs ignore every database:
    what the heuristics pick. Selections resolved inside are not cached; the selection cache is
    emptied on entry so that no database answer is served from it."""
    outer = _override.get()
    token = _override.set(_Override(True, outer.forced if outer else None))
    _changed()
    try:
        yield
    finally:
        _override.reset(token)


@contextlib.contextmanager
def forcing(backend: str, primitive: str, config: dict) -> Iterator[None]:
    """Inside the block, :func:`kernel_config` of ``(backend, primitive)`` returns ``config`` for
    every key (``turbo tune`` times candidate configs through the normal dispatch path this way)."""
    if not isinstance(config, dict):
        raise TypeError(f"config: expected a dict, got {type(config).__name__}")
    outer = _override.get()
    token = _override.set(_Override(bool(outer and outer.off), (backend.upper(), primitive, config)))
    try:
        yield
    finally:
        _override.reset(token)


def record(entry: Entry) -> Entry:
    """Add ``entry`` to this process's database (the user layer: :func:`save` writes it); it is
    used from the next selection on. Returns the stored (possibly merged) entry."""
    st = _current()
    with _lock:
        stored = st.user.add(entry)
        if st.enabled:
            st.db.add(entry)
    _changed()
    return stored


def save(path: str | os.PathLike | None = None, meta: dict | None = None) -> str:
    """Write the user layer (``TURBO_TUNING_DB``'s entries plus those recorded) to ``path``
    (default ``TURBO_TUNING_DB``); returns the path written."""
    st = _current()
    target = os.fspath(path) if path is not None else st.user_path
    if not target:
        raise ValueError(f"path: no file given and {ENV_DB} is not set")
    st.user.save(target, meta)
    return target


def reload() -> None:
    """Read every database again (after changing a file on disk)."""
    global _state
    with _lock:
        _state = None
    _load()


def reset() -> None:
    """Forget the loaded database (the next lookup loads it again) and the selections based on it."""
    global _state
    with _lock:
        _state = None
        _reported.clear()
    _changed()


def info() -> dict:
    """What is loaded: enabled, sources, entry count, the user file, the version policy, the
    library versions now, the stale choices skipped and the shipped files that failed to load."""
    st = _current()
    return {"enabled": st.enabled, "sources": list(st.sources), "entries": len(st.db), "user_file": st.user_path,
            "policy": st.policy, "versions": dict(st.now), "stale": list(st.stale), "errors": list(st.errors)}
