"""The tuning database: tuned backend choices and kernel configs, as JSON and as in-memory dicts.

File format (``format: "turbo-tuning-db"``, ``format_version: 1``)::

    {"format": "turbo-tuning-db", "format_version": 1,
     "meta": {"device": "NVIDIA H200", "created": "...", "argv": [...]},          # free-form
     "entries": [
       {"primitive": "gemm",
        "key": {"arch": "sm90", "shape": [8192, 6144, 4096], "dtypes": ["bf16", "bf16"], "layout": "NT"},
        "match": "bucket",                  # or "exact": see below
        "backend": "TRITON",                # the tuned backend choice (null: configs only)
        "times_us": {"TRITON": 812.4, "HIPBLASLT": 851.0},   # median per backend, its best config
        "heuristic": "HIPBLASLT", "heuristic_time_us": 851.0, # what selection picks without the DB
        "versions": {"triton": "3.6.0", "turbo-triton": "0.1.0"},
        "configs": {"TRITON": {"key": {...the backend's config key...},
                               "config": {"block_m": 128, ...},         # opaque to the core
                               "time_us": 812.4, "default_time_us": 840.1,
                               "match": "bucket",       # or "exact": this config serves its key only
                               "versions": {"triton": "3.6.0", "turbo-triton": "0.1.0"}}}}]}

Lookups are dict gets: :meth:`TuningDB.best` by ``(primitive, key)``, :meth:`TuningDB.kernel_config`
by ``(backend, primitive, config key)``. Either first tries the exact key, then (unless the entry
says ``"match": "exact"``) the *shape bucket*: the same arch, dtypes and layout with every size
rounded up to a power of two, holding the entry of that bucket with the largest problem (the one
nearest the bucket's upper end). A kernel config serves its bucket only when both its entry and the
config say ``"bucket"``: a config that names something shape-specific (HIPBLASLT's rank in the
library's heuristic list, which ranks other algorithms at other shapes) says ``"exact"``. Answers are memoized per key, so a repeated miss costs one get too.

Adding an entry whose ``(primitive, key)`` is already present merges them: the newer backend choice
replaces the older one, and configs merge per backend (newer wins).
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from turbo_core.tuning.keys import Key, bucket
from turbo_core.tuning.versions import compatible

__all__ = ["FORMAT", "FORMAT_VERSION", "ConfigChoice", "Entry", "TuningDB"]

FORMAT = "turbo-tuning-db"
FORMAT_VERSION = 1
_MEMO_LIMIT = 4096
_MATCHES = ("bucket", "exact")


def _num(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what}: expected a finite time >= 0 in microseconds, got {value!r}")
    return float(value)


def _versions(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"{what}: expected {{library: version string}}, got {value!r}")
    return dict(value)


def _match(value: Any, what: str = "match") -> str:
    if value not in _MATCHES:
        raise ValueError(f"{what}: expected one of {', '.join(_MATCHES)}, got {value!r}")
    return value


@dataclass
class ConfigChoice:
    """A backend's tuned kernel config for one config key (``config`` is the backend's own dict)."""

    key: Key
    config: dict
    time_us: float | None = None
    default_time_us: float | None = None
    versions: dict[str, str] = field(default_factory=dict)
    match: str = "bucket"

    def __post_init__(self) -> None:
        _match(self.match)

    def to_json(self) -> dict:
        out: dict = {"key": self.key.to_json(), "config": self.config}
        if self.match != "bucket":
            out["match"] = self.match
        if self.time_us is not None:
            out["time_us"] = round(self.time_us, 3)
        if self.default_time_us is not None:
            out["default_time_us"] = round(self.default_time_us, 3)
        if self.versions:
            out["versions"] = dict(sorted(self.versions.items()))
        return out

    @classmethod
    def from_json(cls, obj: Any, what: str) -> ConfigChoice:
        if not isinstance(obj, dict):
            raise ValueError(f"{what}: expected an object with key and config, got {obj!r}")
        config = obj.get("config")
        if not isinstance(config, dict) or not all(isinstance(k, str) for k in config):
            raise ValueError(f"{what}.config: expected an object, got {config!r}")
        return cls(Key.from_json(obj.get("key"), what=f"{what}.key"), dict(config),
                   _num(obj.get("time_us"), f"{what}.time_us"),
                   _num(obj.get("default_time_us"), f"{what}.default_time_us"),
                   _versions(obj.get("versions"), f"{what}.versions"), _match(obj.get("match", "bucket"), f"{what}.match"))


@dataclass
class Entry:
    """One tuned key of one primitive: the backend choice (``backend``, may be ``None``), the
    timings behind it, and per backend a tuned kernel config. ``source`` (not saved) is the file
    it was read from."""

    primitive: str
    key: Key
    backend: str | None = None
    times_us: dict[str, float] = field(default_factory=dict)
    heuristic: str | None = None
    heuristic_time_us: float | None = None
    configs: dict[str, ConfigChoice] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    match: str = "bucket"
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.primitive, str) or not self.primitive:
            raise ValueError(f"primitive: expected a primitive name, got {self.primitive!r}")
        if not isinstance(self.key, Key):
            raise TypeError(f"key: expected a turbo_core.tuning.Key, got {type(self.key).__name__}")
        _match(self.match)
        if self.backend is not None and (not isinstance(self.backend, str) or not self.backend):
            raise ValueError(f"backend: expected a backend name or None, got {self.backend!r}")
        if self.backend is not None:
            self.backend = self.backend.upper()
        self.configs = {name.upper(): c for name, c in self.configs.items()}

    def to_json(self) -> dict:
        out: dict = {"primitive": self.primitive, "key": self.key.to_json(), "match": self.match,
                     "backend": self.backend}
        if self.times_us:
            out["times_us"] = {b: round(t, 3) for b, t in sorted(self.times_us.items())}
        if self.heuristic is not None:
            out["heuristic"] = self.heuristic
        if self.heuristic_time_us is not None:
            out["heuristic_time_us"] = round(self.heuristic_time_us, 3)
        if self.versions:
            out["versions"] = dict(sorted(self.versions.items()))
        if self.configs:
            out["configs"] = {b: c.to_json() for b, c in sorted(self.configs.items())}
        return out

    @classmethod
    def from_json(cls, obj: Any, what: str, source: str = "") -> Entry:
        if not isinstance(obj, dict):
            raise ValueError(f"{what}: expected an object, got {obj!r}")
        times = obj.get("times_us") or {}
        if not isinstance(times, dict):
            raise ValueError(f"{what}.times_us: expected {{backend: microseconds}}, got {times!r}")
        configs = obj.get("configs") or {}
        if not isinstance(configs, dict):
            raise ValueError(f"{what}.configs: expected {{backend: config}}, got {configs!r}")
        try:
            return cls(
                primitive=obj.get("primitive"),
                key=Key.from_json(obj.get("key"), what=f"{what}.key"),
                backend=obj.get("backend"),
                times_us={str(b).upper(): _num(t, f"{what}.times_us.{b}") for b, t in times.items()},
                heuristic=obj.get("heuristic"),
                heuristic_time_us=_num(obj.get("heuristic_time_us"), f"{what}.heuristic_time_us"),
                configs={str(b): ConfigChoice.from_json(c, f"{what}.configs.{b}") for b, c in configs.items()},
                versions=_versions(obj.get("versions"), f"{what}.versions"),
                match=obj.get("match", "bucket"),
                source=source,
            )
        except (TypeError, ValueError) as exc:
            msg = str(exc)
            raise ValueError(msg if msg.startswith(what) else f"{what}.{msg}") from None


def _size(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


class TuningDB:
    """Entries by ``(primitive, key)``, with the two lookup indexes (see the module docstring).

    Thread-safe: writers take a lock; readers do dict gets."""

    def __init__(self, entries: list[Entry] | tuple[Entry, ...] = ()) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, Key], Entry] = {}
        self._choice_bucket: dict[tuple, Entry] = {}
        self._configs: dict[tuple[str, str, Key], dict] = {}
        self._config_bucket: dict[tuple, tuple[Key, dict]] = {}
        self._choice_memo: dict[tuple, Entry | None] = {}
        self._config_memo: dict[tuple, dict | None] = {}
        for e in entries:
            self.add(e)

    # -- filling -----------------------------------------------------------------------------------
    def add(self, entry: Entry) -> Entry:
        """Add (or merge into the entry of the same primitive and key) and return the stored entry."""
        if not isinstance(entry, Entry):
            raise TypeError(f"entry: expected a turbo_core.tuning.Entry, got {type(entry).__name__}")
        with self._lock:
            ek = (entry.primitive, entry.key)
            old = self._entries.get(ek)
            if old is not None:
                merged = Entry(entry.primitive, entry.key, match=entry.match, source=entry.source or old.source,
                               configs={**old.configs, **entry.configs})
                src = entry if entry.backend is not None else old
                merged.backend, merged.times_us, merged.versions = src.backend, dict(src.times_us), dict(src.versions)
                merged.heuristic, merged.heuristic_time_us = src.heuristic, src.heuristic_time_us
                entry = merged
            self._entries[ek] = entry
            if entry.backend is not None and entry.match == "bucket":
                slot = (entry.primitive, entry.key.arch, bucket(entry.key.shape), entry.key.dtypes, entry.key.layout)
                occ = self._choice_bucket.get(slot)
                if occ is None or occ.key == entry.key or _size(entry.key.shape) >= _size(occ.key.shape):
                    self._choice_bucket[slot] = entry
            for backend, choice in entry.configs.items():
                ck = choice.key
                self._configs[(backend, entry.primitive, ck)] = choice.config
                if entry.match == "bucket" and choice.match == "bucket":
                    slot = (backend, entry.primitive, ck.arch, bucket(ck.shape), ck.dtypes, ck.layout)
                    occ = self._config_bucket.get(slot)
                    if occ is None or occ[0] == ck or _size(ck.shape) >= _size(occ[0].shape):
                        self._config_bucket[slot] = (ck, choice.config)
            self._choice_memo = {}
            self._config_memo = {}
            return entry

    def merge(self, other: TuningDB) -> None:
        """Add every entry of ``other`` (``other`` wins on the same keys)."""
        for e in other.entries():
            self.add(e)

    # -- lookups -----------------------------------------------------------------------------------
    def best(self, primitive: str, key: Key) -> Entry | None:
        """The entry holding the tuned backend choice for ``key`` (exact, else its shape bucket)."""
        mk = (primitive, key)
        memo = self._choice_memo
        try:
            return memo[mk]
        except KeyError:
            pass
        e = self._entries.get(mk)
        if e is None or e.backend is None:
            e = self._choice_bucket.get((primitive, key[0], bucket(key[1]), key[2], key[3]))
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[mk] = e
        return e

    def kernel_config(self, backend: str, primitive: str, key: Key) -> dict | None:
        """The tuned config of ``backend`` for ``primitive`` at the backend's config ``key``."""
        mk = (backend, primitive, key)
        memo = self._config_memo
        try:
            return memo[mk]
        except KeyError:
            pass
        cfg = self._configs.get(mk)
        if cfg is None:  # (a plain tuple of a Key's fields works as a key too: index, not attribute, access)
            hit = self._config_bucket.get((backend, primitive, key[0], bucket(key[1]), key[2], key[3]))
            cfg = hit[1] if hit is not None else None
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[mk] = cfg
        return cfg

    @property
    def has_configs(self) -> bool:
        return bool(self._configs)

    def entries(self) -> list[Entry]:
        with self._lock:
            return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    # -- versions ----------------------------------------------------------------------------------
    def libraries(self) -> tuple[str, ...]:
        names: set[str] = set()
        for e in self.entries():
            names.update(e.versions)
            for c in e.configs.values():
                names.update(c.versions)
        return tuple(sorted(names))

    def compatible_subset(self, now: dict[str, str], policy: str) -> tuple[TuningDB, list[str]]:
        """``(db, stale)``: the choices and configs whose recorded versions hold ``now``, and a
        line for each one dropped."""
        out, stale = TuningDB(), []
        for e in self.entries():
            keep = Entry(e.primitive, e.key, match=e.match, source=e.source)
            if e.backend is not None:
                if compatible(e.versions, now, policy):
                    keep.backend, keep.times_us, keep.versions = e.backend, dict(e.times_us), dict(e.versions)
                    keep.heuristic, keep.heuristic_time_us = e.heuristic, e.heuristic_time_us
                else:
                    stale.append(f"{e.primitive} {e.key.label()} backend {e.backend}: tuned with {_vs(e.versions)}")
            for b, c in e.configs.items():
                if compatible(c.versions, now, policy):
                    keep.configs[b] = c
                else:
                    stale.append(f"{e.primitive} {e.key.label()} {b} config: tuned with {_vs(c.versions)}")
            if keep.backend is not None or keep.configs:
                out.add(keep)
        return out, stale

    # -- JSON --------------------------------------------------------------------------------------
    def to_json(self, meta: dict | None = None) -> dict:
        entries = sorted(self.entries(), key=lambda e: (e.primitive, e.key.arch, e.key.layout, e.key.dtypes,
                                                        e.key.shape))
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "meta": meta or {},
                "entries": [e.to_json() for e in entries]}

    @classmethod
    def from_json(cls, obj: Any, source: str = "<memory>") -> TuningDB:
        """Parse a database object; ``ValueError`` naming ``source`` and the bad field."""
        if not isinstance(obj, dict) or obj.get("format") != FORMAT:
            raise ValueError(f"{source}: not a turbo tuning database (expected \"format\": \"{FORMAT}\")")
        if obj.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{source}: format_version {obj.get('format_version')!r} is not supported "
                             f"(this turbo reads {FORMAT_VERSION})")
        entries = obj.get("entries")
        if not isinstance(entries, list):
            raise ValueError(f"{source}: entries: expected a list")
        try:
            return cls([Entry.from_json(e, f"entries[{i}]", source) for i, e in enumerate(entries)])
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None

    @classmethod
    def load(cls, path: str | os.PathLike) -> TuningDB:
        """Read a database file (``ValueError`` naming the file when it is malformed)."""
        path = os.fspath(path)
        with open(path, encoding="utf-8") as fh:
            try:
                obj = json.load(fh)
            except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8, nesting too deep
                raise ValueError(f"{path}: not valid JSON: {exc}") from None
        return cls.from_json(obj, path)

    def save(self, path: str | os.PathLike, meta: dict | None = None) -> None:
        """Write the database (atomically: a temporary file, then a rename)."""
        path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        text = json.dumps(self.to_json(meta), indent=1)
        text = _LIST.sub(lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text)
        with open(tmp, "w") as fh:
            fh.write(text + "\n")
        os.replace(tmp, path)


# A list of numbers and space-free strings (shapes, dtypes): written on one line.
_ITEM = r'(?:"[^"\\\s]*"|-?\d[\d.eE+-]*|true|false|null)'
_LIST = re.compile(r"\[\s+(" + _ITEM + r"(?:,\s+" + _ITEM + r")*)\s+\]")


def _vs(versions: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) or "no versions"
