"""The turbo settings of the environment, checked before a ``turbo`` command runs (``turbo doctor``
lists the same problems).

A problem is one line naming the variable, its value and what was expected:

* ``TURBO_<FAMILY|PRIMITIVE>_BACKEND`` (and the ``PRIMUS_TURBO_*`` aliases): an unknown family or
  primitive in the name, an unknown backend or precision in the value (the error lists the installed
  backends first), a backend that is known but not installed, auto-tune asked of a collective;
* ``TURBO_AUTO_TUNE``: not a yes/no value; ``TURBO_TUNING_VERSIONS``: not a policy name;
* ``TURBO_TUNE_CACHE_SIZE``, ``TURBO_TUNE_WARMUP``, ``TURBO_TUNE_ITERS``: not a count.
"""

from __future__ import annotations

import os
import re

from turbo_core.dispatch import env as _env
from turbo_core.dispatch.catalog import families, primitive_names
from turbo_core.dispatch.dispatcher import _INSTALL_HINT
from turbo_core.dispatch.manager import FAMILIES, GlobalBackendManager, _all_families, _known_backend_names
from turbo_core.plugins.host import get_host
from turbo_core.tuning.versions import policy_from_env

__all__ = ["COUNTS", "problems"]

#: Integer settings of auto-tune: variable -> the smallest value that makes sense.
COUNTS = {"TURBO_TUNE_CACHE_SIZE": 1, "TURBO_TUNE_WARMUP": 0, "TURBO_TUNE_ITERS": 1}

_BACKEND_VAR = re.compile(r"^(?:PRIMUS_)?TURBO_(?P<scope>.+)_BACKEND$")


def _backend_problems() -> list[str]:
    names = set(primitive_names())
    scopes = sorted(_all_families() | names)
    shared = sorted(set(FAMILIES) | {f for f, prims in families().items() if prims != [f]})
    out = []
    for var in sorted(os.environ):
        match = _BACKEND_VAR.match(var)
        if match and match.group("scope").lower() not in scopes and os.environ[var].strip():
            out.append(f"{var}: no family or primitive {match.group('scope').lower()!r}; families: "
                       f"{', '.join(shared)}, or a primitive (turbo backends --matrix)")
    installed = get_host().registry.backend_names()
    for scope in scopes:
        raw, var = _env.read_env(*_env.backend_env_names(scope))
        if raw is None:
            continue
        try:
            GlobalBackendManager._lookup_env([scope], None)
            table = _env.parse_backend_value(raw, variable=var, valid=_known_backend_names(), installed=installed)
        except ValueError as exc:
            out.append(str(exc))
            continue
        for choice in table.values():
            if choice.backend is not None and choice.backend not in installed:
                hint = f" (pip install {_INSTALL_HINT[choice.backend]})" if choice.backend in _INSTALL_HINT else ""
                out.append(f"{var}={raw!r}: backend {choice.backend} is not installed{hint}; installed: "
                           f"{', '.join(installed)}")
    return out


def _count_problems() -> list[str]:
    out = []
    for var, least in COUNTS.items():
        raw = os.environ.get(var)
        if raw is None or not raw.strip():
            continue
        try:
            ok = int(raw) >= least
        except ValueError:
            ok = False
        if not ok:
            out.append(f"{var}={raw!r}: expected an integer >= {least}")
    return out


def problems() -> list[str]:
    """One line per bad turbo setting of the environment (empty when all are good)."""
    out = _backend_problems()
    for check in (GlobalBackendManager.auto_tune_enabled, policy_from_env):
        try:
            check()
        except ValueError as exc:
            out.append(str(exc))
    return out + _count_problems()
