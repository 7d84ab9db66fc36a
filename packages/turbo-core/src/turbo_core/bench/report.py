"""Tables from benchmark rows: per case, and the geometric-mean ratio per provider and pass."""

from __future__ import annotations

import math
from collections import defaultdict


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summary(rows: list[dict]) -> list[dict]:
    """Geomean ratio to the baseline per (suite, provider, pass)."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        if r.get("status") == "ok" and r.get("ratio") and r["provider"] != "torch":
            groups[(r["suite"], r["provider"], r["pass"])].append(r["ratio"])
    return [{"suite": s, "provider": p, "pass": ps, "cases": len(v), "geomean_ratio": geomean(v)}
            for (s, p, ps), v in sorted(groups.items())]


def _tflops_cell(r: dict, provider: str) -> str:
    ratio = f" ({r['ratio']:.2f}x)" if r.get("ratio") and provider != "torch" else ""
    err = r.get("max_rel_err")
    return f"{r['tflops']:.4g}{ratio}" + (f" [{err:.1e}]" if err is not None else "")


def print_tables(rows: list[dict], console, *, title: str = "turbo bench: TFLOP/s (ratio to torch) [max rel err]",
                 cell=_tflops_cell) -> None:
    """A per-case table (one column per provider; ``cell(row, provider)`` formats a measured row)
    and the geomean ratio per provider and pass."""
    from rich.table import Table

    providers = list(dict.fromkeys(r["provider"] for r in rows))
    table = Table(title=title)
    table.add_column("case", overflow="fold")
    for p in providers:
        table.add_column(p, justify="right")
    by_case: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        by_case[r["case"]][r["provider"]] = r
    for case, cells in by_case.items():
        out = []
        for p in providers:
            r = cells.get(p)
            if r is None:
                out.append("-")
            elif r["status"] != "ok":
                out.append(r["status"][:40])
            else:
                out.append(cell(r, p))
        table.add_row(case, *out)
    console.print(table)
    summ = Table(title="geomean ratio to torch")
    for col in ("suite", "provider", "pass", "cases", "geomean ratio"):
        summ.add_column(col)
    for s in summary(rows):
        g = s["geomean_ratio"]
        summ.add_row(s["suite"], s["provider"], s["pass"], str(s["cases"]), f"{g:.3f}" if g else "-")
    console.print(summ)
