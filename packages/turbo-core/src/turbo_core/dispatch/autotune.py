"""Auto-tune: time every capable backend on the first call of a key, keep the fastest.

* The key holds the primitive, the device (kind, arch, index, name), the candidate backends and
  everything a capability check can read of the call (:func:`args_key`).
* Winners live in a bounded LRU (``TURBO_TUNE_CACHE_SIZE``, default 1024); a hit is re-validated
  against the backend's availability and capability check before use.
* Never during CUDA-graph capture (a cached winner is still used then).
* Timing runs on scratch copies of the fields the primitive writes in place, so the caller's
  outputs are never written while timing.
* ``TURBO_TUNE_CACHE=<dir>`` persists winners as JSON, one file per device name and set of
  backend versions.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import threading
from collections.abc import Callable
from typing import Any

import torch

from turbo_core import timing
from turbo_core.dispatch.primitives import Primitive, args_key
from turbo_core.platform import Platform
from turbo_core.plugins.types import Kernel

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


class _DiskCache:
    """Winners persisted under ``TURBO_TUNE_CACHE``: ``{key repr: backend}`` per device + versions."""

    def __init__(self, directory: str, platform: Platform, versions: dict[str, str]) -> None:
        slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{platform.kind}-{platform.device_name}").strip("-")
        digest = hashlib.sha256(json.dumps(sorted(versions.items())).encode()).hexdigest()[:12]
        self.path = os.path.join(directory, f"tune-{slug}-{digest}.json")
        self._lock = threading.Lock()
        self._data: dict[str, str] = {}
        try:
            with open(self.path) as fh:
                loaded = json.load(fh)
            if isinstance(loaded, dict) and isinstance(loaded.get("winners"), dict):
                self._data = {str(k): str(v) for k, v in loaded["winners"].items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            log.warning("turbo: ignoring unreadable tune cache %s: %s", self.path, exc)
        self._versions = versions

    def get(self, key: tuple) -> str | None:
        with self._lock:
            return self._data.get(repr(key))

    def put(self, key: tuple, value: str) -> None:
        with self._lock:
            self._data[repr(key)] = value
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            tmp = f"{self.path}.{os.getpid()}.{threading.get_ident()}.tmp"
            with open(tmp, "w") as fh:
                json.dump({"versions": self._versions, "winners": self._data}, fh, indent=1, sort_keys=True)
            os.replace(tmp, self.path)


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
        with self._lock:
            self.cache.clear()
            self._disk.clear()
            self.timings.clear()

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
