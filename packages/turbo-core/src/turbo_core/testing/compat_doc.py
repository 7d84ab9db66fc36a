"""The names ``docs/primus-compatibility.md`` promises, read from its tables, so that a test can import
every one of them: a row whose status starts with "available" or "differs" says the turbo names in it
exist.

Tables with a ``turbo`` column give those names dotted (``turbo_core.stream.TurboStream``); in a
section that says "Every op below is ``turbo_core.ops.<name>``", the plain names of the first column are
ops (a dotted one there is Primus-Turbo's path, unless it is turbo's own). Backticked text that is not a dotted Python name (calls, keywords, paths) is not a name.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

__all__ = ["promised_names", "resolve"]

_TICKED = re.compile(r"`([^`]+)`")
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_OPS_SECTION = "Every op below is `turbo_core.ops.<name>`"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def promised_names(doc: Path, root: str) -> list[str]:
    """Every dotted name under package ``root`` (``"turbo_core"``, ``"turbo_deepep"``) that a row
    marked available or differs promises."""
    names: list[str] = []
    ops_section = False
    header: list[str] | None = None
    for line in doc.read_text().splitlines():
        if line.startswith("#"):
            ops_section, header = False, None
            continue
        if _OPS_SECTION in line:
            ops_section = True
        if not line.startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = [c.lower() for c in cells]
            continue
        if set(line) <= set("|- "):
            continue
        status = cells[-1].lower()
        if not status.startswith(("available", "differs")):
            continue
        if "turbo" in header:
            ticked = _TICKED.findall(cells[header.index("turbo")])
        elif ops_section:
            ticked = [n if n.startswith("turbo_core.") else f"turbo_core.ops.{n}"
                      for n in _TICKED.findall(cells[0]) if n.startswith("turbo_core.") or n.isidentifier()]
        else:
            continue
        names += [t for t in ticked if _DOTTED.match(t) and (t == root or t.startswith(root + "."))]
    return list(dict.fromkeys(names))


def resolve(name: str) -> object:
    """The object a dotted name denotes: the longest importable module prefix, then attributes."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"no module in {name}")
