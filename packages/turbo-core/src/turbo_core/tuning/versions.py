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
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re

import torch

__all__ = ["POLICIES", "compatible", "current", "policy_from_env"]

POLICIES = ("minor", "exact", "any")
ENV_POLICY = "TURBO_TUNING_VERSIONS"
_LIBRARIES = ("torch", "triton")


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
