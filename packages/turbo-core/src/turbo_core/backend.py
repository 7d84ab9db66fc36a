"""Backend names, precisions and the choice a user makes.

Backend names are open strings: a plugin may register any name (``"FLYDSL"``, ``"MYCO"``) without a
change here. :class:`BackendType` only keeps the well-known names as constants so that code written
for Primus-Turbo (``BackendType.CK``) keeps working.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "AUTOTUNE",
    "BackendChoice",
    "BackendType",
    "PrecisionType",
    "normalize_backend_name",
    "parse_precision",
]

#: The token that stands for "time every capable backend and keep the fastest" in any backend slot.
AUTOTUNE = "AUTOTUNE"


class BackendType:
    """Well-known backend names (plain strings; the set of names is open)."""

    TORCH = "TORCH"  # the reference backend in turbo-core (plain PyTorch, runs anywhere)
    TRITON = "TRITON"
    HIPBLASLT = "HIPBLASLT"
    CK = "CK"
    AITER = "AITER"
    DEEP_EP = "DEEP_EP"
    TURBO = "TURBO"
    FLYDSL = "FLYDSL"
    HIPKITTENS = "HIPKITTENS"

    WELL_KNOWN: tuple[str, ...] = (
        TORCH, TRITON, HIPBLASLT, CK, AITER, DEEP_EP, TURBO, FLYDSL, HIPKITTENS,
    )


class PrecisionType(enum.Enum):
    """The precision classes that backend settings are keyed by (as in Primus-Turbo)."""

    FP4 = "FP4"
    FP8 = "FP8"
    BF16_FP16_FP32 = "BF16_FP16_FP32"


_PRECISION_ALIASES = {
    "FP4": PrecisionType.FP4,
    "FP8": PrecisionType.FP8,
    "BF16": PrecisionType.BF16_FP16_FP32,
    "FP16": PrecisionType.BF16_FP16_FP32,
    "FP32": PrecisionType.BF16_FP16_FP32,
    "BF16_FP16_FP32": PrecisionType.BF16_FP16_FP32,
}


def parse_precision(value: PrecisionType | str) -> PrecisionType:
    """``PrecisionType`` from an enum member or a name (``"fp8"``, ``"bf16"``, ...)."""
    if isinstance(value, PrecisionType):
        return value
    if isinstance(value, str):
        found = _PRECISION_ALIASES.get(value.strip().upper())
        if found is not None:
            return found
    raise ValueError(
        f"precision: expected a PrecisionType or one of {sorted(_PRECISION_ALIASES)}, got {value!r}"
    )


def normalize_backend_name(value: object, *, argument: str = "backend") -> str:
    """Canonical (upper-case) backend name from a string or an enum-like object with ``.name``."""
    if isinstance(value, enum.Enum):
        value = value.name
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{argument}: expected a backend name (a non-empty string), got {value!r}")
    name = value.strip().upper()
    if not all(ch.isalnum() or ch in "_-." for ch in name):
        raise ValueError(f"{argument}: {value!r} is not a valid backend name (letters, digits, _ - .)")
    return name


@dataclass(frozen=True)
class BackendChoice:
    """What a setting asks for: a named backend, or auto-tune (``backend=None, auto_tune=True``)."""

    backend: str | None = None
    auto_tune: bool = False

    def __post_init__(self) -> None:
        if self.backend is not None:
            object.__setattr__(self, "backend", normalize_backend_name(self.backend))
        if self.backend is not None and self.auto_tune:
            raise ValueError("BackendChoice: give a backend or auto_tune=True, not both")
