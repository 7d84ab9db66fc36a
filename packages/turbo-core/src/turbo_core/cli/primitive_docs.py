"""The kernel contract of every primitive, as markdown, generated from the specs
(``turbo backends --primitives --markdown``; ``docs/plugin-guide.md`` holds its output).

For each primitive: its one-line semantics, selection family and precision, the argument object that
``impl(args)`` and ``check(args)`` receive (its class, to import for type hints), that object's fields
with their types and defaults, the options a kernel must implement or decline, the fields it writes in
place, and the argument class's docstring (shapes, dtypes, numerics, result).
"""

from __future__ import annotations

import dataclasses
import inspect

from turbo_core.dispatch.catalog import primitives
from turbo_core.dispatch.primitives import Primitive

__all__ = ["markdown", "options"]


def _default(field: dataclasses.Field) -> str | None:
    """The default as source text, ``None`` for a required field."""
    if field.default is not dataclasses.MISSING:
        return repr(field.default)
    if field.default_factory is not dataclasses.MISSING:
        return f"{field.default_factory.__name__}()"
    return None


def options(prim: Primitive) -> list[str]:
    """The fields with a default: each non-default value is a feature that a kernel implements exactly or
    declines in ``check``."""
    return [f.name for f in dataclasses.fields(prim.args_type) if _default(f) is not None]


def _section(prim: Primitive) -> list[str]:
    cls = prim.args_type
    env = f"TURBO_{prim.family.upper()}_BACKEND"
    lines = [f"### `{prim.name}`", "", prim.doc, "",
             f"- family `{prim.family}` (`{env}`), precision `{prim.precision.value}`"
             + ("" if prim.tunable else ", not auto-tuned (a collective)"),
             f"- `args`: `{cls.__module__}.{cls.__qualname__}`"]
    opts = options(prim)
    if opts:
        lines.append("- options (implement or decline in `check`): " + ", ".join(f"`{o}`" for o in opts))
    if prim.mutates:
        lines.append("- writes in place: " + ", ".join(f"`{m}`" for m in prim.mutates)
                     + " (when given, the kernel writes into it and returns it)")
    lines += ["", "| field | type | default |", "|---|---|---|"]
    for f in dataclasses.fields(cls):
        default = _default(f)
        ftype = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        lines.append(f"| `{f.name}` | `{ftype.replace('|', '&#124;')}` | "
                     + ("required" if default is None else f"`{default}`") + " |")
    doc = inspect.getdoc(cls)
    if doc:
        lines += ["", "```text", doc, "```"]
    return [*lines, ""]


def markdown() -> str:
    """Every primitive's section, in the catalog's order, behind an index line."""
    prims = primitives()
    lines = ["Primitives: " + ", ".join(f"[`{p.name}`](#{p.name})" for p in prims) + ".", ""]
    for prim in prims:
        lines += _section(prim)
    return "\n".join(lines).rstrip() + "\n"
