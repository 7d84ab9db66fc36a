"""Backend names, precisions and the choice a user makes.

Backend names are open strings: a plugin may register any name (``"FLYDSL"``, ``"MYCO"``) without a
change here. :class:`BackendType` keeps the well-known names as constants, with the Enum-style
``.name``/``.value`` that code written for Primus-Turbo uses (``BackendType.CK.value``), and makes a
member of any other name on request.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

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


class _BackendTypeMeta(type):
    """Enum-like class behaviour of :class:`BackendType` over an open set of names."""

    _members: dict[str, BackendType]
    _interned: dict[str, BackendType]

    def __call__(cls, value: object) -> BackendType:
        """The member for a name (any valid backend name, not only the well-known ones), an
        enum member (by its ``name``) or a ``BackendType``; ``ValueError`` for anything else."""
        if type(value) is cls:
            return value
        name = normalize_backend_name(value, argument="BackendType")
        found = cls._members.get(name) or cls._interned.get(name)
        if found is None:
            found = cls._interned.setdefault(name, str.__new__(cls, name))
        return found

    def __getitem__(cls, name: str) -> BackendType:
        return cls._members[name]

    def __iter__(cls) -> Iterator[BackendType]:
        return iter(cls._members.values())

    def __len__(cls) -> int:
        return len(cls._members)

    def __contains__(cls, value: object) -> bool:
        return isinstance(value, str) and value in cls._members

    @property
    def __members__(cls) -> Mapping[str, BackendType]:
        return MappingProxyType(cls._members)


class BackendType(str, metaclass=_BackendTypeMeta):
    """Backend names: the well-known ones as class attributes, any other through ``BackendType(name)``.

    A member is a ``str`` (``BackendType.TRITON == "TRITON"``, same hash, usable wherever a
    backend name is) with Enum-style ``.name`` and ``.value`` (both the name string: turbo passes
    backend names, never positions, so Primus-Turbo's ``auto()`` integers have no counterpart).
    ``BackendType("triton")`` and ``BackendType(BackendType.TRITON.value)`` return the member;
    ``BackendType("MYCO")`` returns a member for a third-party backend's name (the same object on
    every call), so the set of names stays open. ``BackendType["CK"]``, iteration, ``len`` and
    ``__members__`` cover the well-known names only (``WELL_KNOWN``). ``str()`` and ``repr()``
    are those of the plain name.
    """

    __slots__ = ()

    TORCH: ClassVar[BackendType]  # the reference backend in turbo-core (plain PyTorch, runs anywhere)
    TRITON: ClassVar[BackendType]
    HIPBLASLT: ClassVar[BackendType]
    CK: ClassVar[BackendType]
    AITER: ClassVar[BackendType]
    DEEP_EP: ClassVar[BackendType]
    TURBO: ClassVar[BackendType]
    FLYDSL: ClassVar[BackendType]
    HIPKITTENS: ClassVar[BackendType]
    WELL_KNOWN: ClassVar[tuple[BackendType, ...]]

    @property
    def name(self) -> str:
        return str.__str__(self)

    @property
    def value(self) -> str:
        return str.__str__(self)

    def __str__(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return repr(str.__str__(self))

    def __reduce__(self) -> tuple:
        return BackendType, (str.__str__(self),)


_WELL_KNOWN_NAMES = ("TORCH", "TRITON", "HIPBLASLT", "CK", "AITER", "DEEP_EP", "TURBO", "FLYDSL", "HIPKITTENS")
BackendType._members = {n: str.__new__(BackendType, n) for n in _WELL_KNOWN_NAMES}
BackendType._interned = {}
for _name, _member in BackendType._members.items():
    setattr(BackendType, _name, _member)
BackendType.WELL_KNOWN = tuple(BackendType._members.values())
del _name, _member


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
    """What a setting asks for: a named backend, or auto-tune (``backend=None, auto_tune=True``).
    ``backend`` is held as a :class:`BackendType` (a ``str`` with ``.name``/``.value``)."""

    backend: BackendType | None = None
    auto_tune: bool = False

    def __post_init__(self) -> None:
        if self.backend is not None:
            object.__setattr__(self, "backend", BackendType(normalize_backend_name(self.backend)))
        if self.backend is not None and self.auto_tune:
            raise ValueError("BackendChoice: give a backend or auto_tune=True, not both")
