"""Every primitive, by name: the lookups that the dispatcher, the settings and the tools use.

Importing this module imports every spec module of ``turbo_core.dispatch.specs``; each defines its
primitives on import (:func:`~turbo_core.dispatch.primitives.define_primitive`), so a lookup here
sees all of them. It also gives the plugin host the names kernels may register for.
"""

from __future__ import annotations

from turbo_core.dispatch.primitives import _PRIMITIVES, Primitive
from turbo_core.dispatch.specs import (  # noqa: F401
    activation,
    activation_fp8,
    attention,
    gemm,
    gemm_fp8,
    grouped_gemm,
    grouped_gemm_fp8,
    loss,
    moe,
    normalization,
    normalization_fp8,
    quantization,
    sparse_mla,
)
from turbo_core.plugins.host import set_primitive_names

__all__ = ["families", "get_primitive", "primitive_names", "primitives"]


def get_primitive(name: str) -> Primitive:
    """The primitive named ``name``; ``ValueError`` listing the known names otherwise."""
    try:
        return _PRIMITIVES[name]
    except KeyError:
        raise ValueError(
            f"primitive: unknown primitive {name!r}; known: {', '.join(sorted(_PRIMITIVES))}"
        ) from None


def primitives() -> list[Primitive]:
    return list(_PRIMITIVES.values())


def primitive_names() -> list[str]:
    return list(_PRIMITIVES)


def families() -> dict[str, list[str]]:
    """Family name -> primitive names."""
    out: dict[str, list[str]] = {}
    for p in _PRIMITIVES.values():
        out.setdefault(p.family, []).append(p.name)
    return out


set_primitive_names(primitive_names)
