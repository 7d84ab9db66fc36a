"""Auto-tune: time every capable backend on the first call of a key, keep the fastest.

* The key holds the primitive, the device (kind, arch, index, name), the candidate backends and
  everything a capability check can read of the call (:func:`args_key`).
* Winners live in a bounded LRU (``TURBO_TUNE_CACHE_SIZE``, default 1024); a hit is re-validated
  against the backend's availability and capability check before use.
* Never during CUDA-graph capture (a cached winner is still used then).
* Timing runs on scratch copies of the fields the primitive writes in place, so the caller's
  outputs are never written while timing.
* ``TURBO_TUNE_CACHE=<dir>`` persists winners as JSON, one file per device name and set of
  backend versions; processes sharing it lock, merge and replace the file atomically, and a file that
  cannot be read is reported once and tuned anew (:class:`_DiskCache`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from turbo_core import timing
from turbo_core.dispatch.primitives import Primitive, args_key
from turbo_core.platform import Platform
from turbo_core.plugins.types import Kernel

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None

__all__ = ["TuneCache", "Tuner", "get_tuner", "is_capturing"]

log = logging.getLogger("turbo")


def is_capturing(platform: Platform) -> bool:
    """Whether the current stream is capturing a CUDA graph (a function so tests can stub it)."""
    if platform.kind == "cpu":
        return False
    return bool(torch.cuda.is_current_stream_capturing())


class TuneCache:
    """A thread-safe LRU from tune key to backend name."""

    def __init__(self, capacity: int = 1024) -> None:
        if capacity < 1:
            raise ValueError(f"capacity: expected >= 1, got {capacity}")
        self.capacity = capacity
        self._data: collections.OrderedDict[tuple, str] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.evictions = 0

    def get(self, key: tuple) -> str | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: tuple, value: str) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.capacity:
                self._data.popitem(last=False)
                self.evictions += 1
                if self.evictions == 1:
                    log.warning("turbo: auto-tune cache exceeded %d entries (shapes keep changing); "
                                "evicting the least recently used", self.capacity)

    def drop(self, key: tuple) -> None:
        with self._lock:
            self._data.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.evictions = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def keys(self) -> list[tuple]:
        with self._lock:
            return list(self._data)


_reported: set[str] = set()
_reported_lock = threading.Lock()


def _report_once(path: str, why: str) -> None:
    """Warn that the tune cache at ``path`` cannot be read, once per path and process."""
    with _reported_lock:
        if path in _reported:
            return
        _reported.add(path)
    log.warning("turbo: ignoring unreadable tune cache %s (%s); tuning again and rewriting it", path, why)


def _read_winners(path: str) -> dict[str, str]:
    """The ``winners`` of the tune-cache file at ``path``: empty when there is none, and empty (reported
    once) when it cannot be read or is not a tune cache: truncated, corrupted, another format."""
    try:
        with open(path, encoding="utf-8") as fh:
            loaded = json.load(fh)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8, nesting too deep
        _report_once(path, f"{type(exc).__name__}: {exc}")
        return {}
    winners = loaded.get("winners") if isinstance(loaded, dict) else None
    if not isinstance(winners, dict) or not all(isinstance(v, str) for v in winners.values()):
        _report_once(path, 'expected {"versions": {...}, "winners": {key: backend name}}')
        return {}
    return {str(k): v for k, v in winners.items()}


@contextlib.contextmanager
def _file_lock(path: str) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (created if needed) between processes (``fcntl.flock``;
    where there is no ``fcntl`` no lock, and the atomic replace alone keeps the file whole)."""
    if fcntl is None:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


class _DiskCache:
    """Winners persisted under ``TURBO_TUNE_CACHE``: ``{key repr: backend}`` per device + versions.

    A file that cannot be read (truncated, corrupted, not a tune cache) is reported once and treated as
    empty: its keys are tuned again and the file rewritten. Writers in several threads and processes
    share the file: each write takes an exclusive lock on ``<file>.lock``, merges the winners on disk
    (another process's included) with its own, writes a temporary file and renames it over the
    cache (``os.replace``, atomic), so a reader sees the old file or the new one, never a torn one,
    and no writer's winners are lost."""

    def __init__(self, directory: str, platform: Platform, versions: dict[str, str]) -> None:
        slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{platform.kind}-{platform.device_name}").strip("-")
        digest = hashlib.sha256(json.dumps(sorted(versions.items())).encode()).hexdigest()[:12]
        self.path = os.path.join(directory, f"tune-{slug}-{digest}.json")
        self._lock = threading.Lock()
        self._data: dict[str, str] = _read_winners(self.path)
        self._versions = versions

    def get(self, key: tuple) -> str | None:
        with self._lock:
            return self._data.get(repr(key))

    def put(self, key: tuple, value: str) -> None:
        """Record a winner and write the file (a failure to write is reported, never raised: the
        winner still serves this process from memory)."""
        with self._lock:
            self._data[repr(key)] = value
            try:
                self._write()
            except OSError as exc:
                log.warning("turbo: cannot write the tune cache %s: %s", self.path, exc)

    def _write(self) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with _file_lock(f"{self.path}.lock"):
            merged = _read_winners(self.path)
            merged.update(self._data)
            self._data = merged
            fd, tmp = tempfile.mkstemp(prefix=os.path.basename(self.path) + ".", suffix=".tmp",
                                       dir=os.path.dirname(self.path) or ".")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump({"versions": self._versions, "winners": merged}, fh, indent=1, sort_keys=True)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise


def _scratch(prim: Primitive, args: Any) -> Any:
    changes = {}
    for name in prim.mutates:
        value = getattr(args, name)
        if isinstance(value, torch.Tensor):
            changes[name] = value.clone()
    return dataclasses.replace(args, **changes) if changes else args


def _time_kernel(kernel: Kernel, args: Any, platform: Platform, warmup: int, iters: int) -> float:
    """Seconds per call of ``kernel.run(args)``: one batch of ``iters`` calls after ``warmup``, a pair
    of events around it on a GPU (:func:`turbo_core.timing.measure_batched`)."""
    device = torch.device("cpu") if platform.kind == "cpu" else torch.device("cuda", platform.device_index)
    t = timing.measure_batched(lambda: kernel.run(args), device=device, warmup=warmup, iters=1, calls=iters,
                               clock="device")
    return t.median_ms / 1e3


class Tuner:
    def __init__(self) -> None:
        self.cache = TuneCache(int(os.environ.get("TURBO_TUNE_CACHE_SIZE", "1024")))
        self.warmup = int(os.environ.get("TURBO_TUNE_WARMUP", "2"))
        self.iters = int(os.environ.get("TURBO_TUNE_ITERS", "5"))
        self._disk: dict[tuple, _DiskCache] = {}
        self._lock = threading.RLock()
        self.timings: dict[tuple, dict[str, float]] = {}

    def clear(self) -> None:
        """Forget the winners, the timings, the files read and which unreadable files were reported."""
        with self._lock:
            self.cache.clear()
            self._disk.clear()
            self.timings.clear()
        with _reported_lock:
            _reported.clear()

    def key(self, prim: Primitive, platform: Platform, candidates: list[str], args: Any) -> tuple:
        return (prim.name, platform.key, platform.device_name, tuple(sorted(candidates)), args_key(args))

    def _disk_for(self, platform: Platform, versions: dict[str, str]) -> _DiskCache | None:
        directory = os.environ.get("TURBO_TUNE_CACHE")
        if not directory:
            return None
        dkey = (directory, platform.key, platform.device_name, tuple(sorted(versions.items())))
        with self._lock:
            if dkey not in self._disk:
                self._disk[dkey] = _DiskCache(directory, platform, versions)
            return self._disk[dkey]

    def select(self, prim: Primitive, args: Any, platform: Platform, kernels: dict[str, Kernel],
               decline: Callable[[str], str | None], versions: dict[str, str]) -> tuple[str, str] | None:
        """``(backend, how)`` with how ``autotune`` or ``autotune-cache``; ``None`` to go on to defaults."""
        key = self.key(prim, platform, list(kernels), args)
        disk = self._disk_for(platform, versions)
        for source, store in (("autotune-cache", self.cache), ("autotune-disk", disk)):
            if store is None:
                continue
            hit = store.get(key)
            if hit is not None and hit in kernels and decline(hit) is None:
                if store is not self.cache:
                    self.cache.put(key, hit)
                return hit, source
            if hit is not None and store is self.cache:
                self.cache.drop(key)  # no longer valid: tune again
        if is_capturing(platform):
            return None
        with self._lock:
            hit = self.cache.get(key)  # another thread may have tuned it meanwhile
            if hit is not None and decline(hit) is None:
                return hit, "autotune-cache"
            capable = [name for name, k in kernels.items() if k.autotune and decline(name) is None]
            if not capable:
                return None
            times: dict[str, float] = {}
            if len(capable) == 1:
                times[capable[0]] = 0.0
            else:
                for name in capable:
                    try:
                        times[name] = _time_kernel(kernels[name], _scratch(prim, args), platform,
                                                   self.warmup, self.iters)
                    except Exception as exc:  # a failing candidate loses; it does not break the call
                        log.warning("turbo: auto-tune of %s on %s failed: %s: %s",
                                    prim.name, name, type(exc).__name__, exc)
                        times[name] = math.inf
            winner = min(times, key=times.get)
            if math.isinf(times[winner]):
                return None
            self.timings[key] = times
            self.cache.put(key, winner)
            if disk is not None:
                disk.put(key, winner)
            log.info("turbo: auto-tune %s picked %s (%s)", prim.name, winner,
                     ", ".join(f"{n} {t * 1e6:.1f} us" for n, t in times.items()))
            return winner, "autotune"


_tuner: Tuner | None = None
_tuner_lock = threading.Lock()


def get_tuner() -> Tuner:
    global _tuner
    if _tuner is None:
        with _tuner_lock:
            if _tuner is None:
                _tuner = Tuner()
    return _tuner
