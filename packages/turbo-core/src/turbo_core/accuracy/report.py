"""Console table, markdown table and JSON of ``turbo accuracy`` rows."""

from __future__ import annotations

import json
import math

__all__ = ["failures", "markdown", "print_table", "summary", "write_json"]

_COLUMNS = ("family", "primitive", "precision", "shape", "output", "backend", "SNR dB", "max abs", "max rel",
            "gate", "result")


def _num(v, fmt: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return format(v, fmt)


def _result(row: dict) -> str:
    if row["passed"] is None:
        return row["status"]
    if row["passed"]:
        return "pass"
    return "FAIL" if row["status"] == "ok" else f"FAIL ({row['status']})"


def _cells(row: dict) -> list[str]:
    snr = _num(row["snr_db"], ".1f")
    if row.get("snr_e2e_db") is not None:
        snr += f" ({_num(row['snr_e2e_db'], '.1f')} e2e)"
    return [row["family"], row["primitive"], row["precision"], row["shape"], row["output"], row["backend"], snr,
            _num(row["max_abs"], ".3g"), _num(row["max_rel"], ".3g"), row["gate"], _result(row)]


def failures(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["passed"] is False]


def summary(rows: list[dict]) -> dict:
    return {"rows": len(rows), "passed": sum(r["passed"] is True for r in rows),
            "failed": len(failures(rows)), "declined": sum(r["passed"] is None for r in rows)}


#: The columns of the console view, one line per row; the shape comes last (its length varies) and the
#: family, primitive, precision and gate head each group of rows.
_LINE_COLUMNS = ("backend", "output", "SNR dB", "max abs", "max rel", "result", "shape")
_NUMERIC = {"SNR dB", "max abs", "max rel"}


def _line_cells(row: dict) -> list[str]:
    cells = _cells(row)
    result = cells[10] if row["status"] == "ok" or row["passed"] is not None else "-"
    shape = row["shape"] if row["status"] == "ok" else f"{row['shape']}  ({row['status']})"
    return [row["backend"], row["output"], cells[6], cells[7], cells[8], result, shape]


def print_table(rows: list[dict], console) -> None:
    """The rows on the console, readable at 80 columns and in a pipe (nothing is cut): a heading line per
    family, primitive, precision and gate, then one line per row (backend, output, SNR dB, max abs,
    max rel, result, shape; a row that did not run says why after its shape), then the summary."""
    console.print("turbo accuracy against float64 math (result: each row against its group's gate)",
                  markup=False, soft_wrap=True)
    lines = [_line_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in [_LINE_COLUMNS, *lines]) for i in range(len(_LINE_COLUMNS) - 1)]

    def fmt(cells) -> str:
        head = [c.rjust(w) if col in _NUMERIC else c.ljust(w)
                for c, w, col in zip(cells, widths, _LINE_COLUMNS, strict=False)]
        return "  ".join([*head, cells[-1]]).rstrip()

    console.print(fmt(_LINE_COLUMNS), markup=False, soft_wrap=True, style="bold")
    groups: dict[tuple, list[tuple[dict, list[str]]]] = {}
    for row, cells in zip(rows, lines, strict=True):
        groups.setdefault((row["family"], row["primitive"], row["precision"], row["gate"]), []).append((row, cells))
    for (family, primitive, precision, gate), members in groups.items():
        names = " / ".join(dict.fromkeys((family, primitive)))
        console.print(f"{names} / {precision}: gate {gate}", markup=False, soft_wrap=True, style="cyan")
        for row, cells in members:
            style = "red" if row["passed"] is False else ("dim" if row["passed"] is None else None)
            console.print(fmt(cells), markup=False, soft_wrap=True, style=style)
    s = summary(rows)
    console.print(f"{s['rows']} rows: {s['passed']} passed, {s['failed']} failed, {s['declined']} declined")


def markdown(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in _cells(row)) + " |")
    s = summary(rows)
    lines += ["", f"{s['rows']} rows: {s['passed']} passed, {s['failed']} failed, {s['declined']} declined", ""]
    return "\n".join(lines)


def _finite(v):
    """Strict JSON: non-finite floats as the strings "inf", "-inf", "nan"."""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def write_json(path: str, rows: list[dict], environment: dict) -> None:
    data = {"environment": environment, "summary": summary(rows),
            "rows": [{k: _finite(v) for k, v in r.items()} for r in rows]}
    with open(path, "w") as fh:
        json.dump(data, fh, indent=1, allow_nan=False)
