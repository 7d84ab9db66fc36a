"""Library versions a tuned choice was measured with, and whether they still hold.

An entry records the versions of what its timings depended on: the package of every backend it
compared (``turbo-triton``...), the kernel libraries those backends declare through their tuning
space (``triton``), and ``torch`` when the reference backend TORCH took part. On load it applies
only if every recorded library that is installed now matches under the policy
``TURBO_TUNING_VERSIONS``:

* ``minor`` (default): same major.minor (``triton 3.6.0`` and ``3.6.1`` match; ``3.7`` does not);
* ``exact``: the same version string (local tags such as ``+cu130`` ignored);
* ``any``: versions are not checked.

A recorded library that is not installed now is no evidence against the entry (a backend that is
missing declines the call anyway).

A library that is not a Python distribution (cuBLASLt, hipBLASLt: the version of the shared library a
backend's extension loaded) is named by a probe its backend registers with :func:`register_library`,
from its plugin module (so the probe exists whenever the backend's plugin loaded); the probe runs only
when a database or a campaign names that library, and returns ``None`` when it cannot tell.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
from collections.abc import Callable

import torch

__all__ = ["POLICIES", "compatible", "current", "policy_from_env", "register_library"]

POLICIES = ("minor", "exact", "any")
ENV_POLICY = "TURBO_TUNING_VERSIONS"
_LIBRARIES = ("torch", "triton")
_PROBES: dict[str, Callable[[], str | None]] = {}


def register_library(name: str, probe: Callable[[], str | None]) -> None:
    """Name a library whose version ``probe()`` reports (``None``: unknown now); a tuning space may then
    list ``name`` in its ``libraries``. A later registration of the same name replaces the probe."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name: expected a library name, got {name!r}")
    if not callable(probe):
        raise TypeError(f"probe: expected a callable returning a version string or None, got {probe!r}")
    _PROBES[name] = probe


def policy_from_env() -> str:
    raw = os.environ.get(ENV_POLICY, "").strip().lower()
    if not raw:
        return "minor"
    if raw not in POLICIES:
        raise ValueError(f"{ENV_POLICY}={raw!r}: expected one of {', '.join(POLICIES)}")
    return raw


def _dist_version(name: str) -> str | None:
    if name == "torch":
        return torch.__version__.split("+")[0]
    probe = _PROBES.get(name)
    if probe is not None:
        try:
            v = probe()
        except Exception:  # a probe that fails knows nothing: no evidence either way
            return None
        return str(v) if v else None
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def current(packages: dict[str, str] | None = None, extra: tuple[str, ...] = ()) -> dict[str, str]:
    """``{library: version}`` now: torch, triton (when installed; never imported), the installed
    distributions named in ``extra``, and ``packages`` (the backend packages' versions as their
    plugins describe them, which win)."""
    out = {}
    for lib in dict.fromkeys((*_LIBRARIES, *extra)):
        v = _dist_version(lib)
        if v is not None:
            out[lib] = v
    out.update(packages or {})
    return out


def _release(version: str) -> tuple[str, ...]:
    return tuple(re.findall(r"\d+", version.split("+")[0]))


def compatible(recorded: dict[str, str], now: dict[str, str], policy: str) -> bool:
    """Whether ``recorded`` versions still hold against ``now`` under ``policy``."""
    if policy == "any":
        return True
    for lib, then in recorded.items():
        cur = now.get(lib)
        if cur is None:
            continue
        if policy == "exact":
            if then.split("+")[0] != cur.split("+")[0]:
                return False
        elif _release(then)[:2] != _release(cur)[:2]:
            return False
    return True
