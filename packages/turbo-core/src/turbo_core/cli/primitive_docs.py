"""The kernel contract of every primitive, as markdown, generated from the specs
(``turbo backends --primitives --markdown``; ``docs/plugin-guide.md`` holds its output between the
:data:`BEGIN` and :data:`END` lines, which ``python -m turbo_core.cli.primitive_docs docs/plugin-guide.md``
rewrites).

For each primitive: its one-line semantics, selection family and precision, the argument object that
``impl(args)`` and ``check(args)`` receive (its class, to import for type hints), that object's fields
with their types and defaults, the options a kernel must implement or decline, the fields it writes in
place, and the argument class's docstring (shapes, dtypes, numerics, result).
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import sys
import types
import typing
from pathlib import Path

from turbo_core.cli.backend_table import ordered_primitives
from turbo_core.dispatch.primitives import Primitive

__all__ = ["BEGIN", "END", "markdown", "options", "section_of", "write_section"]

#: The lines around the generated section of a markdown file.
BEGIN = "<!-- BEGIN GENERATED: turbo backends --primitives --markdown -->"
END = "<!-- END GENERATED -->"


def _default(field: dataclasses.Field) -> str | None:
    """The default as source text, ``None`` for a required field."""
    if isinstance(field.default, enum.Enum):
        return f"{type(field.default).__name__}.{field.default.name}"
    if field.default is not dataclasses.MISSING:
        return repr(field.default)
    if field.default_factory is not dataclasses.MISSING:
        return f"{field.default_factory.__name__}()"
    return None


def _type_text(tp) -> str:
    """A field's type as a reader writes it: ``torch.Tensor | None``, ``ScalingGranularity | str``."""
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        return " | ".join(_type_text(a) for a in typing.get_args(tp))
    if origin is not None:
        args = ", ".join("..." if a is Ellipsis else _type_text(a) for a in typing.get_args(tp))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if tp is type(None):
        return "None"
    if isinstance(tp, type):
        return f"torch.{tp.__name__}" if tp.__module__.split(".")[0] == "torch" else tp.__name__
    return str(tp)


def _field_types(cls: type) -> dict[str, str]:
    """Field name -> its type's text; the annotation as written where it cannot be resolved."""
    try:
        hints = typing.get_type_hints(cls)
    except (NameError, TypeError):
        hints = {}
    return {f.name: _type_text(hints[f.name]) if f.name in hints else str(f.type) for f in dataclasses.fields(cls)}


def options(prim: Primitive) -> list[str]:
    """The fields with a default: each non-default value is a feature that a kernel implements exactly or
    declines in ``check``."""
    return [f.name for f in dataclasses.fields(prim.args_type) if _default(f) is not None]


def _section(prim: Primitive) -> list[str]:
    cls = prim.args_type
    env = f"TURBO_{prim.family.upper()}_BACKEND"
    lines = [f"### `{prim.name}`", "", prim.doc.replace("*", "\\*"), "",
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
    ftypes = _field_types(cls)
    for f in dataclasses.fields(cls):
        default = _default(f)
        ftype = ftypes[f.name].replace("|", "\\|")  # a pipe inside a table cell, code span or not
        lines.append(f"| `{f.name}` | `{ftype}` | "
                     + ("required" if default is None else f"`{default}`") + " |")
    doc = inspect.getdoc(cls)
    if doc:
        lines += ["", "```text", doc, "```"]
    return [*lines, ""]


def markdown() -> str:
    """Every primitive's section, by family group (:func:`~turbo_core.cli.backend_table.ordered_primitives`),
    behind an index line."""
    prims = ordered_primitives()
    lines = ["Primitives: " + ", ".join(f"[`{p.name}`](#{p.name})" for p in prims) + ".", ""]
    for prim in prims:
        lines += _section(prim)
    return "\n".join(lines).rstrip() + "\n"


def section_of(text: str) -> str:
    """The generated section of a markdown file's ``text`` (between :data:`BEGIN` and :data:`END`);
    ``ValueError`` when the markers are missing."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"no generated section: expected the lines {BEGIN!r} and {END!r}")
    return text.split(BEGIN + "\n", 1)[1].split(END, 1)[0]


def write_section(path: str | Path) -> None:
    """Replace the generated section of the markdown file ``path`` with :func:`markdown`."""
    path = Path(path)
    text = path.read_text()
    section_of(text)
    head, rest = text.split(BEGIN + "\n", 1)
    path.write_text(head + BEGIN + "\n" + markdown() + END + rest.split(END, 1)[1])


if __name__ == "__main__":
    for name in sys.argv[1:]:
        write_section(name)
