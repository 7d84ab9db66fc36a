"""Console table, markdown table and JSON of ``turbo accuracy`` rows."""

from __future__ import annotations

import json
import math

from rich.table import Table

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


def print_table(rows: list[dict], console) -> None:
    table = Table(title="turbo accuracy (against float64 math)")
    for col in _COLUMNS:
        table.add_column(col, justify="right" if col in ("SNR dB", "max abs", "max rel") else "left")
    for row in rows:
        style = "red" if row["passed"] is False else ("dim" if row["passed"] is None else None)
        table.add_row(*_cells(row), style=style)
    console.print(table)
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
