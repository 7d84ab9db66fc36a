"""A suite's rows on the terminal (rich tables): per case, and the geometric-mean ratio to the
baseline per provider and pass (also the ``summary`` of ``turbo bench --out``)."""

from __future__ import annotations

from collections import defaultdict

from rich.markup import escape
from rich.table import Table

from turbo_core.bench.compare import geomean

#: Roles whose rows are the denominators of the ratios (not scored themselves).
_BASELINE_ROLES = ("baseline", "bf16")


def _is_baseline(r: dict) -> bool:
    return r["provider"] == "torch" or r.get("role") in _BASELINE_ROLES


def summary(rows: list[dict]) -> list[dict]:
    """Geomean ratio to the baseline per (suite, provider, pass), and per granularity and per
    ``timing`` (what ``median_ms`` is, when not the device time) when the rows have them. Rows
    carrying ``bf16_ratio`` also get ``geomean_bf16_ratio`` (every provider but the bf16 reference
    itself, FP8 baselines included)."""
    ratios: dict[tuple, list[float]] = defaultdict(list)
    bf16: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        if r.get("status") != "ok":
            continue
        key = (r["suite"], r["provider"], r["pass"], r.get("granularity"), r.get("timing"))
        if r.get("ratio") and not _is_baseline(r):
            ratios[key].append(r["ratio"])
        if r.get("bf16_ratio") and r.get("role") != "bf16":
            bf16[key].append(r["bf16_ratio"])
    out = []
    for key in sorted(set(ratios) | set(bf16), key=lambda k: tuple("" if v is None else str(v) for v in k)):
        s, p, ps, gran, clock = key
        entry = {"suite": s, "provider": p, "pass": ps}
        if gran is not None:
            entry["granularity"] = gran
        if clock is not None:
            entry["timing"] = clock
        entry["cases"] = max(len(ratios.get(key, ())), len(bf16.get(key, ())))
        entry["geomean_ratio"] = geomean(ratios.get(key, []))
        if key in bf16:
            entry["geomean_bf16_ratio"] = geomean(bf16[key])
        out.append(entry)
    return out


def _tflops_cell(r: dict, provider: str) -> str:
    ratio = f" ({r['ratio']:.2f}x)" if r.get("ratio") and not _is_baseline(r) else ""
    err = r.get("max_rel_err")
    return f"{r['tflops']:.4g}{ratio}" + (f" [{err:.1e}]" if err is not None else "")


def tflops_bf16_cell(r: dict, provider: str) -> str:
    """TFLOP/s, the ratio to the same-granularity baseline, ``{the ratio to bf16}``, [the error]."""
    bf16 = f" {{{r['bf16_ratio']:.2f}x}}" if r.get("bf16_ratio") and r.get("role") != "bf16" else ""
    return _tflops_cell(r, provider).replace(" [", f"{bf16} [", 1) if bf16 else _tflops_cell(r, provider)


#: What the figures of the default cells mean (printed under the per-case table).
LEGEND = ("cells: TFLOP/s; (1.23x): the baseline's time / this provider's (above 1x: faster);\n"
          "[1.0e-03]: max|out - ref| / max|ref| against float64 math")
#: The same for :func:`tflops_bf16_cell`.
LEGEND_BF16 = LEGEND.replace("faster);\n", "faster);\n{1.23x}: the bf16 provider's time / this one's; ")


def _fmt(value: float | None) -> str:
    return f"{value:.3f}" if value else "-"


def print_tables(rows: list[dict], console, *, title: str = "turbo bench: TFLOP/s (ratio to torch) [max rel err]",
                 cell=_tflops_cell, legend: str | None = None) -> None:
    """A per-case table (one column per provider, the bf16 and baseline references first;
    ``cell(row, provider)`` formats a measured row, other rows show their status, cut short) under
    ``title`` (printed as written: brackets are text, not markup), the legend of its figures (``legend``;
    :data:`LEGEND` / :data:`LEGEND_BF16` for the default cells), each distinct status of the rows that
    did not run in full (provider: reason, case count), and the geomean ratio per provider and pass."""
    if legend is None:
        legend = {_tflops_cell: LEGEND, tflops_bf16_cell: LEGEND_BF16}.get(cell)
    rank = {"bf16": 0, "baseline": 1}
    first = {}
    for r in rows:
        first.setdefault(r["provider"], 2 if r["provider"] != "torch" else 1)
        if r.get("role") in rank:
            first[r["provider"]] = rank[r["role"]]
    providers = sorted(first, key=lambda p: first[p])  # references first, then the order of appearance
    table = Table(title=escape(title))
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
    if legend:
        console.print(legend, markup=False, soft_wrap=True)
    not_run: dict[tuple[str, str], int] = defaultdict(int)
    for r in rows:
        if r["status"] != "ok":
            not_run[(r["provider"], r["status"])] += 1
    for (p, status), n in not_run.items():
        console.print(f"{p}: {status} ({n} case{'s' if n > 1 else ''})", soft_wrap=True)
    summ_rows = summary(rows)
    if not summ_rows:
        console.print("geomean ratio to the baseline: no provider was compared with it", markup=False)
        return
    with_gran = any("granularity" in s for s in summ_rows)
    with_clock = any("timing" in s for s in summ_rows)
    with_bf16 = any("geomean_bf16_ratio" in s for s in summ_rows)
    baselines = sorted({str(r["baseline"]) for r in rows if r.get("baseline")}) or ["torch"]
    summ = Table(title=f"geomean ratio to {', '.join(baselines)}"
                 + (" (FP8: the same granularity's baseline)" if with_bf16 else ""))
    cols = (["suite", "provider", "pass"] + (["granularity"] if with_gran else []) + (["timing"] if with_clock else [])
            + ["cases", "geomean ratio"])
    for col in cols + (["geomean vs bf16"] if with_bf16 else []):
        summ.add_column(col)
    for s in summ_rows:
        cells = [s["suite"], s["provider"], s["pass"]] + ([s.get("granularity") or "-"] if with_gran else [])
        cells += [s.get("timing") or "device"] if with_clock else []
        cells += [str(s["cases"]), _fmt(s["geomean_ratio"])]
        if with_bf16:
            cells.append(_fmt(s.get("geomean_bf16_ratio")))
        summ.add_row(*cells)
    console.print(summ)
