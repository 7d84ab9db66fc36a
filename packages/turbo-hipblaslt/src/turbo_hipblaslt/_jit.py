"""Opt-in build of the extension on first use, for installs that gained a toolkit after the wheel
was built (``TURBO_HIPBLASLT_JIT=1``).

The library is built once per (sources, toolchain, machine) into
``$TURBO_HIPBLASLT_CACHE_DIR`` (default ``$XDG_CACHE_HOME/turbo-hipblaslt``, else
``~/.cache/turbo-hipblaslt``), in a folder named by a hash of all three: never inside
site-packages. Concurrent builders (several ranks of one job) serialise on a file lock in that
folder; the library is written under a temporary name and renamed, so a reader never sees half a
file. Nothing is downloaded. Standard library only (used before torch is needed).
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform as _platform
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from turbo_hipblaslt import _toolchain
from turbo_hipblaslt._toolchain import Toolchain

__all__ = ["BUILD_INFO", "LIBRARY", "build", "build_dir", "cache_root", "cached_library", "jit_enabled", "load"]

LIBRARY = "_C.abi3.so"
BUILD_INFO = "_build_info.json"
MODULE = "turbo_hipblaslt._C"


def jit_enabled(env: Mapping[str, str] | None = None) -> bool:
    return (os.environ if env is None else env).get("TURBO_HIPBLASLT_JIT", "").strip() == "1"


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("TURBO_HIPBLASLT_CACHE_DIR"):
        return Path(env["TURBO_HIPBLASLT_CACHE_DIR"])
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "turbo-hipblaslt"


def build_dir(tc: Toolchain, env: Mapping[str, str] | None = None) -> Path:
    """The cache folder of this toolchain's build: ``<cache_root>/<hash>``."""
    key = json.dumps([tc.describe(), sys.platform, _platform.machine(), _toolchain.LIMITED_API], sort_keys=True)
    return cache_root(env) / _toolchain.source_hash([key])[:20]


def cached_library(tc: Toolchain, env: Mapping[str, str] | None = None) -> Path | None:
    path = build_dir(tc, env) / LIBRARY
    return path if path.is_file() else None


def build_info(tc: Toolchain) -> dict:
    return {"toolchain": tc.describe(), "source_sha256": _toolchain.source_hash(), "abi": "abi3",
            "limited_api": list(_toolchain.LIMITED_API), "machine": _platform.machine()}


def build(tc: Toolchain, env: Mapping[str, str] | None = None) -> Path:
    """The built library of ``tc`` (compiled now unless cached), under an exclusive file lock."""
    import fcntl

    folder = build_dir(tc, env)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            target = folder / LIBRARY
            if target.is_file():
                return target
            tmp = folder / f"{LIBRARY}.tmp{os.getpid()}"
            try:
                _toolchain.compile_extension(tc, tmp)
                (folder / BUILD_INFO).write_text(json.dumps(build_info(tc), indent=1))
                os.replace(tmp, target)
            finally:
                if tmp.exists():
                    tmp.unlink()
            return target
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def load(path: Path) -> ModuleType:
    """Import the library at ``path`` as ``turbo_hipblaslt._C``."""
    spec = importlib.util.spec_from_file_location(MODULE, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as {MODULE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[MODULE] = module
    return module
