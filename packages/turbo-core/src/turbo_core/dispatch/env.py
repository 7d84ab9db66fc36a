"""Environment variables that select backends.

``TURBO_<SCOPE>_BACKEND`` where SCOPE is a family (``GEMM``, ``GROUPED_GEMM``, ``ATTN``,
``MOE_DISPATCH_COMBINE``) or any primitive (``RMSNORM_FWD``). Values, case-insensitive:

* ``TRITON`` — every precision;
* ``fp8:CK,fp4:HIPBLASLT,other:TRITON`` — per precision (``FP4``, ``FP8``, ``BF16``/``FP16``/``FP32``
  which all mean ``BF16_FP16_FP32``, ``OTHER`` for the rest);
* ``AUTOTUNE`` in any slot — time the capable backends and keep the fastest.

``TURBO_AUTO_TUNE=1`` turns auto-tune on for everything. The ``PRIMUS_TURBO_*`` names are accepted as
aliases (the ``TURBO_*`` name wins when both are set). A bad value raises ``ValueError`` naming the
variable and the valid names: the installed backends first, then ``AUTOTUNE``, then the known names
that are not installed, marked as such.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from turbo_core.backend import AUTOTUNE, BackendChoice, PrecisionType, normalize_backend_name, parse_precision

__all__ = ["ALL", "auto_tune_from_env", "backend_env_names", "parse_backend_value", "read_env", "valid_names_text"]

#: Key of a setting that applies to every precision not set on its own.
ALL = "ALL"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}

_cache: dict[tuple, Mapping] = {}
_cache_lock = threading.Lock()


def backend_env_names(scope: str) -> tuple[str, str]:
    """``("TURBO_<SCOPE>_BACKEND", "PRIMUS_TURBO_<SCOPE>_BACKEND")``."""
    s = scope.upper()
    return f"TURBO_{s}_BACKEND", f"PRIMUS_TURBO_{s}_BACKEND"


def read_env(name: str, alias: str | None = None) -> tuple[str | None, str | None]:
    """``(value, variable)`` of the first of ``name``/``alias`` that is set and not blank."""
    for var in (name, alias):
        if var is None:
            continue
        raw = os.environ.get(var)
        if raw is not None and raw.strip():
            return raw, var
    return None, None


def valid_names_text(valid: set[str], installed: Sequence[str] | None = None) -> str:
    """The names a backend variable may hold, for an error message. With ``installed`` (the installed
    backends, in the order to list them): those first, then ``AUTOTUNE``, then ``(not installed: ...)``
    for the other names of ``valid``; without it, every name of ``valid`` and ``AUTOTUNE``, sorted."""
    if installed is None:
        return ", ".join(sorted(valid | {AUTOTUNE}))
    here = [name for name in dict.fromkeys(installed) if name in valid]
    absent = sorted(valid - set(here) - {AUTOTUNE})
    text = ", ".join([*here, AUTOTUNE])
    return text + (f" (not installed: {', '.join(absent)})" if absent else "")


def parse_backend_value(raw: str, *, variable: str, valid: set[str],
                        installed: Sequence[str] | None = None) -> Mapping:
    """Parse a backend variable's value into a read-only ``{PrecisionType | ALL: BackendChoice}``
    (memoized per variable, value and set of valid names). ``installed`` only orders the names an
    error lists (:func:`valid_names_text`)."""
    key = (variable, raw, frozenset(valid))
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    table: dict = {}
    valid_list = valid_names_text(valid, installed)
    for entry in raw.split(","):
        entry = entry.strip()
        if not entry:
            continue
        if ":" in entry:
            prec_raw, name_raw = (part.strip() for part in entry.split(":", 1))
            if prec_raw.upper() == "OTHER":
                slot = ALL
            else:
                try:
                    slot = parse_precision(prec_raw)
                except ValueError:
                    raise ValueError(
                        f"{variable}={raw!r}: unknown precision {prec_raw!r}; "
                        "valid: FP4, FP8, BF16, FP16, FP32, OTHER"
                    ) from None
        else:
            slot, name_raw = ALL, entry
        if slot in table:
            label = slot.name if isinstance(slot, PrecisionType) else "OTHER"
            raise ValueError(f"{variable}={raw!r}: precision {label} is given twice")
        try:
            name = normalize_backend_name(name_raw, argument=variable)
        except ValueError:
            raise ValueError(f"{variable}={raw!r}: {name_raw!r} is not a backend; valid: {valid_list}") from None
        if name == AUTOTUNE:
            table[slot] = BackendChoice(auto_tune=True)
        elif name in valid:
            table[slot] = BackendChoice(name)
        else:
            raise ValueError(f"{variable}={raw!r}: unknown backend {name_raw!r}; valid: {valid_list}")
    if not table:
        raise ValueError(f"{variable}={raw!r}: no backend given; valid: {valid_list}")
    frozen = MappingProxyType(table)
    with _cache_lock:
        _cache[key] = frozen
    return frozen


def auto_tune_from_env() -> bool:
    raw, var = read_env("TURBO_AUTO_TUNE", "PRIMUS_TURBO_AUTO_TUNE")
    if raw is None:
        return False
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{var}={raw!r}: expected 1 or 0 (also true/false, yes/no, on/off)")


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()
