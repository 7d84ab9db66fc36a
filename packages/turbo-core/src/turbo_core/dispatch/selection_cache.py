"""The selection cache behind ``dispatch.call``'s eager fast path.

``select()`` walks the whole selection order on every call: the ``use_backend`` pin, the code
settings, the environment variables (read and parsed), the platform, and for each candidate its
registry entry, availability and capability check. That is tens of microseconds a call. A repeated
call gets the same answer as long as nothing the answer depends on changed, so ``call()`` keeps the
answer here, under a key made of everything it depends on (:func:`selection_key`):

* the primitive's name;
* the call signature (:func:`call_signature`): for every field of the argument object, a tensor's
  dtype, shape, strides, device (type and index), base address modulo 16 and (for a subclass) type,
  or the value of any other field. That is everything a capability check may read (checks are pure
  on metadata: ``turbo_core.plugins.Kernel``); tensor contents are never part of it, and the key
  holds no reference to a tensor;
* the ``use_backend`` pin of this primitive in this thread / task;
* ``GlobalBackendManager.generation``, bumped by every code setting, ``set_auto_tune`` and ``reset``;
* the raw values of the environment variables that selection reads for this primitive
  (:func:`env_names`), so that changing one between two calls takes effect on the second.

Beside the entries the cache holds the plugin registry they were resolved against: another
registry (``reset_host()``) empties it. The dispatcher stores only deterministic answers
(use_backend, code, env, default, fallback), never an auto-tune pick or an error.

Two inputs are checked on each hit instead of keyed: the chosen backend's availability (probed
once per process, ``BackendRecord.unavailable_reason``; ``reprobe()`` may change it) and, for a
default or fallback answer, the primitive's entry in the defaults table
(``turbo_core.dispatch.defaults.DEFAULTS``, which tests patch). ``clear()``
(``GlobalBackendManager.reset()`` and ``dispatcher.clear_warnings()`` call it) forgets everything.
"""

from __future__ import annotations

import dataclasses
import enum
import operator
import os
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from turbo_core.dispatch.env import backend_env_names
from turbo_core.dispatch.manager import GlobalBackendManager, pinned_backend

__all__ = ["CacheInfo", "CachedSelection", "SelectionCache", "call_signature", "env_names", "env_values",
           "selection_key", "settings_unchanged", "verdict_keyed"]

#: Entries kept before the oldest stored one is evicted (a few hundred bytes each).
DEFAULT_CAPACITY = 4096

# Variables read on the way through select() for every primitive, beside its own
# TURBO_<PRIMITIVE>_BACKEND / TURBO_<FAMILY>_BACKEND (and their PRIMUS_TURBO_ aliases):
# the auto-tune switch, TRITON_INTERPRET, which the TRITON backend's capability checks read, and the
# tuning-database variables (turbo_core.tuning.active: a change reloads the database on the next miss).
_COMMON_ENV = ("TURBO_AUTO_TUNE", "PRIMUS_TURBO_AUTO_TUNE", "TRITON_INTERPRET", "TURBO_TUNING_DB", "TURBO_TUNING",
               "TURBO_TUNING_VERSIONS")

_env_names: dict[tuple[str, str], tuple[tuple[str, ...], tuple | None]] = {}

# os.environ keeps its variables in ``_data`` (encoded keys -> encoded values) and updates it on
# every assignment and deletion. Reading it directly costs a dict lookup; ``os.environ.get`` of an
# unset variable raises and catches a KeyError inside (microseconds). Only used while
# ``os.environ`` is the object seen at import; anything else goes through its ``get``.
_ENVIRON = os.environ
_ENV_DATA = getattr(_ENVIRON, "_data", None)
_ENV_ENCODE = getattr(_ENVIRON, "encodekey", None)
_DIRECT_ENV = isinstance(_ENV_DATA, dict) and callable(_ENV_ENCODE)


def env_names(primitive: str, family: str) -> tuple[str, ...]:
    """The environment variables whose values decide a selection of ``primitive``."""
    return _env_entry(primitive, family)[0]


def _env_entry(primitive: str, family: str) -> tuple[tuple[str, ...], tuple | None]:
    entry = _env_names.get((primitive, family))
    if entry is None:
        names = backend_env_names(primitive)
        if family != primitive:
            names += backend_env_names(family)
        names += _COMMON_ENV
        encoded = tuple(_ENV_ENCODE(n) for n in names) if _DIRECT_ENV else None
        entry = _env_names.setdefault((primitive, family), (names, encoded))
    return entry


def env_values(primitive: str, family: str) -> tuple:
    """The raw values (``None`` when unset) of :func:`env_names`, for comparison only."""
    names, encoded = _env_entry(primitive, family)
    env = os.environ
    if encoded is not None and env is _ENVIRON:
        return tuple(map(_ENV_DATA.get, encoded))
    return tuple(map(env.get, names))


# -- the call signature ----------------------------------------------------------------------------

_TENSOR = torch.Tensor
_getters: dict[type, Callable[[Any], tuple]] = {}

# How a field value of each type enters the signature (decided once per type, :func:`_kind_of`):
# itself (scalars, dtypes, enum members: hashable, compared by value), a tensor's metadata, a
# sequence's items, a dataclass's fields, or its repr.
_PLAIN, _TENSOR_KIND, _SEQUENCE, _DATACLASS, _REPR = range(5)
_kinds: dict[type, int] = {t: _PLAIN for t in (bool, int, float, str, type(None), torch.dtype)}


def _fields_getter(cls: type) -> Callable[[Any], tuple]:
    """``getter(args) -> tuple of field values`` for a dataclass type (built once per type)."""
    getter = _getters.get(cls)
    if getter is None:
        names = tuple(f.name for f in dataclasses.fields(cls))
        if len(names) == 1:
            single = operator.attrgetter(names[0])
            getter = lambda obj: (single(obj),)  # noqa: E731
        elif names:
            getter = operator.attrgetter(*names)
        else:
            getter = lambda obj: ()  # noqa: E731
        getter = _getters.setdefault(cls, getter)
    return getter


def _kind_of(t: type) -> int:
    if issubclass(t, torch.Tensor):
        return _TENSOR_KIND
    if issubclass(t, (tuple, list)):  # NamedTuples (ScalingRecipe, MoeDispatchHandle) included
        return _SEQUENCE
    if issubclass(t, (torch.dtype, enum.Enum)):
        return _PLAIN
    if dataclasses.is_dataclass(t):
        return _DATACLASS
    return _REPR


def _value(v: Any) -> Any:
    t = type(v)
    kind = _kinds.get(t)
    if kind is None:
        kind = _kinds.setdefault(t, _kind_of(t))
    if kind == _PLAIN:
        return v
    if kind == _TENSOR_KIND:
        return (t, v.dtype, v.shape, v.stride(), v.device, v.data_ptr() % 16)
    if kind == _SEQUENCE:
        return (t, *map(_value, v))
    if kind == _DATACLASS:
        return (t, *map(_value, _fields_getter(t)(v)))
    return (t, repr(v))  # anything else by its repr, as ``args_key`` does


def call_signature(args: Any) -> tuple:
    """For each field of a primitive's argument dataclass, in order: a tensor's ``(dtype, shape,
    strides, device, data_ptr() % 16)`` (with its type in front for a tensor subclass), a scalar's
    value, a sequence's items likewise, an enum or dtype itself, anything else by ``repr``. Reads
    metadata only (no host sync).

    Finer than :func:`turbo_core.dispatch.primitives.args_key` (the full address residue, the
    tensor type) and several times cheaper (no string conversions)."""
    out = []
    kinds = _kinds
    for v in _fields_getter(type(args))(args):
        t = type(v)
        if t is _TENSOR:  # the common cases, inline
            out.append((v.dtype, v.shape, v.stride(), v.device, v.data_ptr() % 16))
        elif kinds.get(t) == _PLAIN:
            out.append(v)
        else:
            out.append(_value(v))
    return tuple(out)


def selection_key(prim: Any, args: Any) -> tuple | None:
    """The cache key of a call of ``prim`` (a ``Primitive``), or ``None`` when the arguments'
    signature cannot be read (a tensor without storage, ...): such a call is not cached."""
    try:
        sig = call_signature(args)
    except Exception:
        return None
    name = prim.name
    return (name, pinned_backend(name), GlobalBackendManager.generation,
            env_values(name, prim.family), sig)


def settings_unchanged(key: tuple, prim: Any) -> bool:
    """Whether the pin, the settings generation and the environment are still those of ``key``
    (checked after a slow selection, before storing it: a change in between must not be cached
    under the old values)."""
    name = prim.name
    return key[1:4] == (pinned_backend(name), GlobalBackendManager.generation, env_values(name, prim.family))


# -- the cache ---------------------------------------------------------------------------------------

class CachedSelection(NamedTuple):
    """What a hit hands back: the primitive it was resolved for, the ``Selection``, the kernel to
    run, the backend's registry record (its availability is re-read on every hit), the call's
    platform, and for a default, fallback or tuned answer the defaults-table entry it was resolved with
    (the very tuple: a hit requires ``default_order`` to still return it), else ``None``.

    ``validated``: the primitive's validator passed for arguments of this key, and its verdict is a
    function of the key (:func:`verdict_keyed`), so ``call()`` need not run it again on a hit."""

    prim: Any
    selection: Any
    kernel: Any
    record: Any
    platform: Any
    defaults: tuple | None
    validated: bool = False


def verdict_keyed(args: Any) -> bool:
    """Whether a validator's verdict on ``args`` is a function of their :func:`call_signature`.

    Validators read metadata (dtypes, shapes, strides, devices, flags: all in the signature) and
    read tensor *values* only where that is free: CPU tensors (``validate.values_readable``; group
    lengths, cumulative sequence lengths, expert ids). So the verdict is keyed unless some tensor
    field lives on the CPU."""
    for v in _fields_getter(type(args))(args):
        if isinstance(v, _TENSOR) and v.device.type == "cpu":
            return False
        if isinstance(v, (tuple, list)) and any(isinstance(t, _TENSOR) and t.device.type == "cpu" for t in v):
            return False
    return True


class CacheInfo(NamedTuple):
    """Counters since the last ``clear()``: ``hits`` and ``misses`` of lookups, ``stores``,
    ``evictions``; ``size`` entries now of at most ``capacity``."""

    hits: int
    misses: int
    stores: int
    evictions: int
    size: int
    capacity: int


class SelectionCache:
    """A bounded, thread-safe map from :func:`selection_key` to :class:`CachedSelection`, tied to
    one plugin registry.

    Lookups take no lock (a dict read is atomic); stores, evictions and clears take one. Beyond
    ``capacity`` entries the oldest stored one is evicted (a hot entry evicted this way is stored
    again by its next call); entries never go stale because every input of a selection is in the key.
    The hit and miss counters are not locked: exact in one thread, approximate under contention.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity: expected >= 1, got {capacity}")
        self.capacity = capacity
        self._data: dict[tuple, CachedSelection] = {}
        self._lock = threading.Lock()
        self._registry: Any = None
        #: Bumped by ``clear()``: a selection resolved before a clear is not stored after it.
        self.epoch = 0
        self._hits = self._misses = self._stores = self._evictions = 0

    def get(self, key: tuple, registry: Any) -> CachedSelection | None:
        if registry is not self._registry:
            with self._lock:
                if registry is not self._registry:
                    self._forget()
                    self._registry = registry
        entry = self._data.get(key)
        if entry is None:
            self._misses += 1
        else:
            self._hits += 1
        return entry

    def put(self, key: tuple, entry: CachedSelection, registry: Any, epoch: int) -> bool:
        """Store unless the cache was cleared since ``epoch`` or belongs to another registry."""
        with self._lock:
            if epoch != self.epoch or registry is not self._registry:
                return False
            data = self._data
            data.pop(key, None)
            data[key] = entry
            self._stores += 1
            while len(data) > self.capacity:
                del data[next(iter(data))]
                self._evictions += 1
            return True

    def drop(self, key: tuple) -> None:
        with self._lock:
            self._data.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._forget()
            self._hits = self._misses = self._stores = self._evictions = 0

    def _forget(self) -> None:
        self._data = {}
        self.epoch += 1

    def info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self._hits, self._misses, self._stores, self._evictions, len(self._data),
                             self.capacity)

    def __len__(self) -> int:
        return len(self._data)
