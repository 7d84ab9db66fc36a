"""Plain-text and markdown views of the backends (``turbo backends`` without ``--json``/``--wide``, and
``--matrix``), from the rows of :func:`turbo_core.cli.inventory.backend_rows`.

The default view is one line per backend that fits the terminal (80 columns in a pipe): name, package,
version, the number of primitives it registers in each family group, and its status with a short reason.
Family groups are the spec modules of ``turbo_core.dispatch.specs`` (their FP8 siblings folded in), so a
new primitive lands in its group with no change here.
"""

from __future__ import annotations

import re

from turbo_core.dispatch.catalog import get_primitive, primitives

__all__ = ["compact_lines", "family_group", "groups", "matrix_lines", "ordered_primitives", "short_reason"]

#: The family groups in the order shown, with their column labels; a group not named here (a new spec
#: module) follows them under its module name.
_GROUPS = {"gemm": "gemm", "grouped_gemm": "grouped", "attention": "attn", "activation": "act",
           "normalization": "norm", "moe": "moe", "quantization": "quant"}
_ELLIPSIS = "\u2026"
#: Spec modules counted in another module's group (sparse MLA is attention).
_FOLDED = {"sparse_mla": "attention"}


def family_group(primitive: str) -> str:
    """The group of a primitive: its spec module's name without ``_fp8`` (``gemm_fp8`` -> ``gemm``),
    or the group :data:`_FOLDED` puts the module in."""
    module = get_primitive(primitive).args_type.__module__.rsplit(".", 1)[-1]
    return _FOLDED.get(module, re.sub(r"_fp8$", "", module))


def groups() -> list[str]:
    """Every family group: the known ones in their order, then any other in the catalog's order."""
    found = {family_group(p.name) for p in primitives()}
    return [g for g in _GROUPS if g in found] + [g for g in dict.fromkeys(family_group(p.name) for p in primitives())
                                                 if g not in _GROUPS]


def ordered_primitives() -> list:
    """Every primitive, by family group (:func:`groups`), then spec module, then definition order: the same
    order whichever module imported the specs first."""
    prims = primitives()
    order = {g: i for i, g in enumerate(groups())}
    index = {p.name: i for i, p in enumerate(prims)}
    return sorted(prims, key=lambda p: (order[family_group(p.name)], p.args_type.__module__, index[p.name]))


def _label(group: str) -> str:
    return _GROUPS.get(group, group)


def short_reason(reason: str, width: int) -> str:
    """``reason`` in at most ``width`` characters: the whole of it when it fits, else its first clause (up
    to ``; ``, ``: `` or `` (``), else the words of that clause that fit, then an ellipsis."""
    if len(reason) <= width:
        return reason
    clause = re.split(r"; |: | \(", reason, maxsplit=1)[0]
    if len(clause) <= width:
        return clause
    cut = clause[: max(0, width - len(_ELLIPSIS))]
    if " " in cut and clause[len(cut)] != " ":
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip() + _ELLIPSIS


def _counts(row: dict, names: list[str]) -> str:
    per = dict.fromkeys(names, 0)
    for prim in row["primitives"]:
        per[family_group(prim)] += 1
    return "/".join(str(per[g]) if per[g] else "-" for g in names)


def compact_lines(rows: list[dict], width: int) -> list[str]:
    """The default ``turbo backends`` view: a legend line, a header, one line per backend (each at most
    ``width`` characters; the status is what gets shortened), and a pointer to the full views."""
    names = groups()
    head = ("backend", "package", "version", "primitives")
    cells = [(r["name"], r["package"], r["version"], _counts(r, names)) for r in rows]
    widths = [max(len(c[i]) for c in [head, *cells]) for i in range(len(head))]
    fixed = sum(widths) + len(widths)
    room = max(width - fixed, 12)

    def line(values: tuple[str, ...], status: str) -> str:
        return " ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " " + status

    out = [f"primitives per family: {'/'.join(_label(g) for g in names)} (- = none)", line(head, "status")]
    shortened = False
    for row, values in zip(rows, cells, strict=True):
        status = "ok" if row["available"] else short_reason(row["reason"], room)
        shortened = shortened or (not row["available"] and status != row["reason"])
        out.append(line(values, status).rstrip())
    more = "--wide: every primitive" + (" and the full reasons" if shortened else "")
    out.append(f"{more}; --matrix: primitive x backend")
    return out


def _matrix(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    backends = [r["name"] for r in rows]
    served = {r["name"]: set(r["primitives"]) for r in rows}
    body = []
    for prim in ordered_primitives():
        body.append([prim.name, prim.family, *("x" if prim.name in served[b] else "" for b in backends)])
    return ["primitive", "family", *backends], body


def matrix_lines(rows: list[dict], *, markdown: bool) -> list[str]:
    """The primitive x backend support matrix: ``x`` where the backend registers a kernel for the
    primitive (whether or not it can run on this machine); markdown or aligned text."""
    head, body = _matrix(rows)
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + ":-:|" * (len(head) - 2)]
        out += ["| " + " | ".join([f"`{r[0]}`", f"`{r[1]}`", *r[2:]]) + " |" for r in body]
        return out
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    fmt = [lambda v, w=w: v.ljust(w) for w in widths[:2]] + [lambda v, w=w: v.center(w) for w in widths[2:]]
    return [" ".join(f(v) for f, v in zip(fmt, r, strict=True)).rstrip() for r in [head, *body]]
