"""Plots for ``turbo bench report`` (matplotlib, optional: ``pip install 'turbo-core[report]'``).

Per suite, device and pass, one PNG: one panel per variant (granularity, mode, balance), grouped bars of
each provider's TFLOP/s, GB/s or tokens/s per case (references grey, turbo providers in colour), a dashed
line per peak the rows imply (``tflops / peak_fraction``: the datasheet dense peak; ``copy_gbps``:
the measured copy bandwidth), and above each turbo bar its ratio to the fastest reference (see
:func:`turbo_core.bench.compare.headline`). ``summary.png``: the geomean of each turbo provider
against its fastest reference per suite, pass and variant, as horizontal bars around 1
(green: parity or faster to two decimals, amber: within 10%, red: slower).

matplotlib is imported inside the functions, never at import time, and only through
``matplotlib.figure.Figure`` (no pyplot, no global backend switch).
"""

from __future__ import annotations

from pathlib import Path

from turbo_core.bench.compare import (
    FRACTIONS,
    METRICS,
    TURBO_PREFIX,
    Group,
    case_labels,
    comparisons,
    headline,
)

_REFERENCE_COLOURS = ("#7f7f7f", "#b0b0b0", "#4d4d4d", "#d0d0d0")
_TURBO_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf")


def unavailable_reason() -> str | None:
    """None when matplotlib can be imported, else why not and how to get it."""
    try:
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError as exc:
        return f"matplotlib is not installed ({exc}); install it with pip install 'turbo-core[report]'"
    return None


def _peaks(group: Group, metric: str, frac: str | None) -> list[tuple[float, str]]:
    """The peak lines of a panel: ``(value, label)``, one per distinct peak."""
    unit = METRICS[metric]
    out: dict[int, str] = {}
    for r in group.rows:
        if r["status"] != "ok":
            continue
        if frac == "copy_fraction" and r.get("copy_gbps"):
            out.setdefault(round(r["copy_gbps"]), f"copy {r['copy_gbps']:.0f} {unit}")
        elif frac and r.get(frac) and r.get(metric):
            peak = r[metric] / r[frac]
            out.setdefault(round(peak), f"peak {peak:.0f} {unit}")
    return [(float(v), label) for v, label in sorted(out.items())]


def _panel(ax, group: Group) -> None:
    metric, frac = group.field_of(METRICS), group.field_of(FRACTIONS)
    providers = group.providers
    labels = case_labels(group)
    cases = group.cases
    against = {c.provider: c.reference for c in headline(comparisons(group))}
    width = 0.8 / max(1, len(providers))
    ref_i = turbo_i = 0
    for j, p in enumerate(providers):
        if p.startswith(TURBO_PREFIX):
            colour, turbo_i = _TURBO_COLOURS[turbo_i % len(_TURBO_COLOURS)], turbo_i + 1
        else:
            colour, ref_i = _REFERENCE_COLOURS[ref_i % len(_REFERENCE_COLOURS)], ref_i + 1
        bars = []  # (x, height, case)
        for i, case in enumerate(cases):
            r = group.cell(case, p)
            if r and r["status"] == "ok" and metric and r.get(metric) is not None:
                bars.append((i + (j - (len(providers) - 1) / 2) * width, r[metric], case))
        # a provider without a measured case (e.g. one with no FP8 path) stays out of the legend:
        # an empty bar set would show there in matplotlib's default colour, not its own
        ax.bar([b[0] for b in bars], [b[1] for b in bars], width=width, color=colour,
               label=p if bars else "_nolegend_")
        if p in against:
            ratio = dict(group.ratios(p, against[p]))
            for x, h, case in bars:
                if case in ratio:
                    ax.text(x, h, f"{ratio[case]:.2f}", ha="center", va="bottom", fontsize=6, rotation=90)
    peaks = _peaks(group, metric, frac) if metric else []
    for k, (value, label) in enumerate(peaks):
        ax.axhline(value, linestyle=("--", ":", "-.")[k % 3], linewidth=0.9, color="#444444", label=label)
    top = max([r[metric] for r in group.rows if metric and r["status"] == "ok" and r.get(metric)] + [v for v, _ in peaks],
              default=0.0)
    if top > 0:
        ax.set_ylim(0, top * 1.15)  # room for the ratio labels above the tallest bar
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([labels[c] for c in cases], rotation=30, ha="right", fontsize=7)
    ax.set_xlim(-0.6, len(cases) - 0.4)
    ax.set_ylabel(METRICS.get(metric, "") if metric else "")
    refs = sorted(set(against.values()))
    note = f" (numbers: ratio to {', '.join(refs)})" if refs else ""
    ax.set_title(f"{group.suite} {group.title}{note}", fontsize=9)
    ax.grid(axis="y", linewidth=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def plot_pass(panels: list[Group], path: str | Path) -> None:
    """One PNG: each group (a variant of one pass) as a panel."""
    from matplotlib.figure import Figure

    widest = max(len(g.cases) * max(1, len(g.providers)) for g in panels)
    fig = Figure(figsize=(min(18.0, max(7.0, 0.28 * widest + 2.5)), 3.6 * len(panels)), constrained_layout=True)
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, g in zip(axes, panels, strict=True):
        _panel(ax, g)
    fig.savefig(path, dpi=100, metadata={"Software": None}, pil_kwargs={"optimize": True})


def _verdict_colour(v: float) -> str:
    """Green: at least parity to the shown precision (2 decimals); amber: within 10%; red: slower."""
    return "#2ca02c" if round(v, 2) >= 1.0 else "#ff9f1c" if v >= 0.9 else "#d62728"


def plot_summary(bars: list[tuple[str, float]], path: str | Path) -> None:
    """One PNG: each ``(label, geomean)`` as a horizontal bar, a line at 1 (parity)."""
    from matplotlib.figure import Figure

    labels = [label for label, _ in bars]
    values = [value for _, value in bars]
    fig = Figure(figsize=(9.0, 0.28 * len(bars) + 1.2), constrained_layout=True)
    ax = fig.subplots()
    ys = list(range(len(bars)))[::-1]
    ax.barh(ys, values, color=[_verdict_colour(v) for v in values])
    for y, v in zip(ys, values, strict=True):
        ax.text(v, y, f" {v:.2f}x", va="center", fontsize=7)
    ax.axvline(1.0, color="#444444", linewidth=0.8)
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xlim(0, max(values) * 1.15)
    ax.set_xlabel("geomean ratio (reference time / turbo time; above 1: turbo faster)", fontsize=8)
    ax.set_title("turbo against the fastest reference, per suite, pass and variant", fontsize=9)
    fig.savefig(path, dpi=100, metadata={"Software": None}, pil_kwargs={"optimize": True})
