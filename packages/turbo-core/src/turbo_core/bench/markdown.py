"""``turbo bench report``: the JSON rows of the benchmark suites as markdown (and, with matplotlib,
plots: :mod:`turbo_core.bench.plots`).

Input: result files of ``turbo bench <suite> --out FILE`` (``{"environment", "rows", "summary"}``)
or of the GPU scripts that keep the suite rows under ``"bench"``. A suite row has ``suite``,
``case``, ``provider`` and ``status`` (keys in :mod:`turbo_core.bench.runner`); a file without
one is listed as skipped, with the reason.

Per suite, one table per pass and variant (``granularity``, ``mode``, ``balance``, ``mask`` where
the rows carry them), one line per case: each provider's TFLOP/s (``tflops``) or GB/s (``gbps``), median
time, and fraction of peak (``peak_fraction``: of the datasheet dense peak of the provider's
precision; ``copy_fraction``: of the copy bandwidth measured in the same run), then the ratio of
each turbo provider to each reference on that case (a pair that never ran on a common case gets no
column).

References: the providers whose name does not start with ``turbo:`` (the bf16 reference of the
FP8 suites, the baselines, ``torch.compile``). Ratio: the reference's median time / the turbo
provider's, on the same case (above 1: turbo is faster); against the rows' ``baseline`` it equals
their ``ratio``. Geomean (:func:`turbo_core.bench.report.geomean`) over the cases where both ran.
The headline reference of a turbo provider is the one it has the lowest geomean against (the
fastest baseline), so that a slow eager baseline never flatters it.

A turbo row may name another turbo provider in ``compare_to`` (the attention suite's deterministic
backward names the default one): that pair gets its own ratio column and geomean line too, but
is never a headline (it compares turbo with itself).

A row's ``note`` (what a peer provider computes when that differs from the case, e.g. liger-kernel's
SwiGLU without probs) is listed under its table, once per provider and note.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from turbo_core.bench.report import geomean

TURBO_PREFIX = "turbo:"
#: Row fields that split a pass into separate tables (each its own baselines and providers).
VARIANT_FIELDS = ("granularity", "mode", "balance", "mask")
_REQUIRED = ("suite", "case", "provider", "status")
#: metric field -> unit; fraction field -> what it is a fraction of.
METRICS = {"tflops": "TFLOP/s", "gbps": "GB/s"}
FRACTIONS = {"peak_fraction": "of the datasheet dense peak", "copy_fraction": "of the measured copy bandwidth"}
_ROLE_RANK = {"bf16": 0, "baseline": 1}


@dataclass
class Source:
    """One result file: its environment (``environment`` or ``env``) and its suite rows, or why
    none were used (``skipped``)."""

    path: Path
    environment: dict
    rows: list[dict]
    skipped: str | None = None


def load(path: str | os.PathLike) -> Source:
    """Read one result file; never raises for a file that is not a suite result (it is skipped)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return Source(path, {}, [], f"not readable as JSON: {exc}")
    if not isinstance(data, dict):
        return Source(path, {}, [], "not a JSON object")
    env = data.get("environment") or data.get("env") or {}
    env = env if isinstance(env, dict) else {}
    for key in ("rows", "bench"):
        found = data.get(key)
        if isinstance(found, list):
            rows = [r for r in found if isinstance(r, dict) and all(k in r for k in _REQUIRED)]
            if rows:
                return Source(path, env, rows)
    return Source(path, env, [], "no suite rows (rows with suite, case, provider and status)")


@dataclass
class Group:
    """The rows of one suite, pass and variant: one table."""

    suite: str
    pass_: str
    variant: tuple[tuple[str, str], ...]
    rows: list[dict] = field(default_factory=list)

    @property
    def title(self) -> str:
        return " · ".join([self.pass_, *(v for _, v in self.variant)])

    @property
    def variant_title(self) -> str:
        return " · ".join(v for _, v in self.variant)

    @property
    def cases(self) -> list[str]:
        return list(dict.fromkeys(r["case"] for r in self.rows))

    def cell(self, case: str, provider: str) -> dict | None:
        """The last row of ``provider`` on ``case`` (None when it has none)."""
        found = None
        for r in self.rows:
            if r["case"] == case and r["provider"] == provider:
                found = r
        return found

    @property
    def providers(self) -> list[str]:
        """References first (the bf16 reference, the baselines, then the others), then turbo
        providers, each in order of appearance."""
        rank: dict[str, int] = {}
        for r in self.rows:
            p = r["provider"]
            if p.startswith(TURBO_PREFIX):
                rank.setdefault(p, 4)
            else:
                role = r.get("role")
                rank[p] = min(rank.get(p, 3), _ROLE_RANK.get(role, 2 if role or p != "torch" else 1))
        return sorted(rank, key=lambda p: rank[p])  # stable: order of appearance within a rank

    @property
    def references(self) -> list[str]:
        return [p for p in self.providers if not p.startswith(TURBO_PREFIX)]

    @property
    def turbo(self) -> list[str]:
        return [p for p in self.providers if p.startswith(TURBO_PREFIX)]

    @property
    def baseline(self) -> str | None:
        """The rows' ``baseline`` (the denominator of their ``ratio``), else the provider with role
        ``baseline``, else ``torch``."""
        named = next((r["baseline"] for r in self.rows if r.get("baseline")), None)
        if named:
            return named
        role = next((r["provider"] for r in self.rows if r.get("role") == "baseline"), None)
        return role or ("torch" if "torch" in self.providers else None)

    def field_of(self, names) -> str | None:
        """The first of ``names`` that an ``ok`` row of this group carries a value for."""
        ok = [r for r in self.rows if r["status"] == "ok"]
        return next((n for n in names if any(r.get(n) is not None for r in ok)), None)

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """``(turbo provider, reference)`` pairs compared: every turbo provider against every
        reference, then each turbo provider against the providers its rows name in ``compare_to``."""
        out = [(p, r) for p in self.turbo for r in self.references]
        for row in self.rows:
            other = row.get("compare_to")
            if other and row["provider"].startswith(TURBO_PREFIX) and other in self.providers:
                pair = (row["provider"], other)
                if pair not in out:
                    out.append(pair)
        return out

    def ratios(self, provider: str, reference: str) -> list[tuple[str, float]]:
        """``(case, reference median_ms / provider median_ms)`` on every case where both ran."""
        out = []
        for case in self.cases:
            p, r = self.cell(case, provider), self.cell(case, reference)
            if p and r and p["status"] == "ok" and r["status"] == "ok" and p.get("median_ms") and r.get("median_ms"):
                out.append((case, r["median_ms"] / p["median_ms"]))
        return out


def groups(rows: list[dict]) -> list[Group]:
    """The rows split by (suite, pass, variant), in order of first appearance."""
    found: dict[tuple, Group] = {}
    for r in rows:
        variant = tuple((f, str(r[f])) for f in VARIANT_FIELDS if r.get(f) is not None)
        key = (r["suite"], str(r.get("pass", "-")), variant)
        if key not in found:
            found[key] = Group(r["suite"], key[1], variant)
        found[key].rows.append(r)
    return list(found.values())


@dataclass
class Section:
    """One suite of one source file: one markdown page, one plot per pass."""

    suite: str
    source: Source
    slug: str
    groups: list[Group]

    @property
    def passes(self) -> list[str]:
        return list(dict.fromkeys(g.pass_ for g in self.groups))


def sections(sources: list[Source]) -> list[Section]:
    """One section per suite and source file; the file name (slug) is the suite, suffixed with the
    source's stem when several sources hold the same suite."""
    pairs = [(s, suite) for s in sources for suite in dict.fromkeys(r["suite"] for r in s.rows)]
    count: dict[str, int] = {}
    for _, suite in pairs:
        count[suite] = count.get(suite, 0) + 1
    out = []
    for src, suite in pairs:
        slug = suite if count[suite] == 1 else f"{suite}-{src.path.stem}"
        out.append(Section(suite, src, _safe(slug), groups([r for r in src.rows if r["suite"] == suite])))
    return out


@dataclass
class Comparison:
    """One turbo provider against one reference over one group's cases."""

    group: Group
    provider: str
    reference: str
    ratios: list[float]
    peak: float | None  # the median fraction of peak of the provider, when the rows carry one

    @property
    def geomean(self) -> float | None:
        return geomean(self.ratios)

    @property
    def internal(self) -> bool:
        """Whether the reference is itself a turbo provider (a ``compare_to`` pair)."""
        return self.reference.startswith(TURBO_PREFIX)


def comparisons(group: Group) -> list[Comparison]:
    """Every pair of :attr:`Group.pairs` (pairs without a common case left out)."""
    frac = group.field_of(FRACTIONS)
    out = []
    for p, ref in group.pairs:
        vals = [r[frac] for r in group.rows if r["provider"] == p and r["status"] == "ok" and frac and r.get(frac)]
        peak = statistics.median(vals) if vals else None
        ratios = [v for _, v in group.ratios(p, ref)]
        if ratios:
            out.append(Comparison(group, p, ref, ratios, peak))
    return out


def headline(comps: list[Comparison]) -> list[Comparison]:
    """Per group and turbo provider, the comparison with the lowest geomean (the fastest
    reference); comparisons of turbo with turbo (``compare_to``) never count."""
    best: dict[tuple[int, str], Comparison] = {}
    for c in comps:
        key = (id(c.group), c.provider)
        if c.internal:
            continue
        if c.geomean is not None and (key not in best or c.geomean < best[key].geomean):
            best[key] = c
    return list(best.values())


# ---- rendering ---------------------------------------------------------------------------------


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "x"


def plot_name(section: Section, pass_: str) -> str:
    """The PNG file of one suite and pass (``<slug>-<pass>.png``)."""
    return f"{section.slug}-{_safe(pass_)}.png"


def _esc(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _ratio(v: float | None) -> str:
    if v is None:
        return "-"
    return f"**{v:.2f}x**" if round(v, 2) >= 1.0 else f"{v:.2f}x"


def _frac(v: float | None) -> str:
    return f"{v:.0%}" if v is not None else "-"


def short_label(row: dict) -> str:
    """A case's name without its pass and variant (those are in the heading): model, layer or op,
    ``G<groups>``, and the shape (``MxNxK``, ``tokensxhidden``, or attention's ``b s h d``); the
    row's ``case`` when it has no such fields."""
    parts = [str(row[k]) for k in ("model", "layer", "op") if row.get(k)]
    groups = row.get("groups") or (len(row["group_lens"]) if isinstance(row.get("group_lens"), list) else None)
    if groups:
        parts.append(f"G{groups}")
    if all(row.get(k) for k in ("batch", "seq_q", "seq_kv", "h_q", "h_kv", "d_qk", "d_v")):
        parts.append(_attention_shape(row))
    elif all(row.get(k) for k in ("m", "n", "k")):
        parts.append(f"{row['m']}x{row['n']}x{row['k']}")
    elif row.get("tokens") and row.get("hidden"):
        parts.append(f"{row['tokens']}x{row['hidden']}")
    return " ".join(parts) if len(parts) > 1 else str(row["case"])


def _attention_shape(row: dict) -> str:
    """``b4 s4096 h32/8 d128`` (``s<q>/<kv>``, ``h<q>/<kv>``, ``d<qk>/<v>`` only where they differ),
    `` sink`` when the case has one."""
    def pair(tag, a, b):
        return f"{tag}{a}" if a == b else f"{tag}{a}/{b}"

    shape = " ".join([f"b{row['batch']}", pair("s", row["seq_q"], row["seq_kv"]), pair("h", row["h_q"], row["h_kv"]),
                      pair("d", row["d_qk"], row["d_v"])])
    return shape + (" sink" if row.get("sink") else "")


def case_labels(group: Group) -> dict[str, str]:
    """Short labels of the group's cases; the full ``case`` when two short labels would collide."""
    short = {c: short_label(next(r for r in group.rows if r["case"] == c)) for c in group.cases}
    if len(set(short.values())) < len(short):
        return {c: c for c in short}
    return short


def _provider_cell(row: dict | None, metric: str | None, frac: str | None) -> str:
    if row is None:
        return "-"
    if row["status"] != "ok":
        return _esc(row["status"][:40])
    parts = []
    if metric:
        parts.append(f"{row[metric]:.4g}" if row.get(metric) is not None else "-")
    parts.append(f"{row['median_ms']:.3g} ms" if row.get("median_ms") is not None else "-")
    if frac:
        parts.append(_frac(row.get(frac)))
    return " · ".join(parts)


def group_table(group: Group) -> list[str]:
    """The markdown lines of one group: the per-case table and the statuses of what did not run."""
    metric, frac = group.field_of(METRICS), group.field_of(FRACTIONS)
    providers = group.providers
    pairs = [(p, r) for p, r in group.pairs if group.ratios(p, r)]  # pairs that never both ran: no column
    labels = case_labels(group)
    head = ["case", *(f"`{p}`" for p in providers), *(f"`{p}` vs `{r}`" for p, r in pairs)]
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for case in group.cases:
        cells = [_esc(labels[case])] + [_provider_cell(group.cell(case, p), metric, frac) for p in providers]
        for p, r in pairs:
            got = dict(group.ratios(p, r)).get(case)
            cells.append(_ratio(got))
        lines.append("| " + " | ".join(cells) + " |")
    not_run: dict[tuple[str, str], int] = {}
    for r in group.rows:
        if r["status"] != "ok":
            not_run[(r["provider"], r["status"])] = not_run.get((r["provider"], r["status"]), 0) + 1
    notes = dict.fromkeys((r["provider"], r["note"]) for r in group.rows if r.get("note") and r["status"] == "ok")
    if not_run or notes:
        lines.append("")
        for (p, status), n in not_run.items():
            lines.append(f"- `{p}`: {_esc(status)} ({n} case{'s' if n > 1 else ''})")
        lines += [f"- `{p}`: {_esc(note)}" for p, note in notes]
    return lines


def legend(group: Group) -> str:
    metric, frac = group.field_of(METRICS), group.field_of(FRACTIONS)
    what = [METRICS[metric]] if metric else []
    what.append("median time")
    if frac:
        what.append(f"fraction {FRACTIONS[frac]}")
    return ("Cells: " + " · ".join(what) + ". Ratios: the reference's median time / the turbo provider's "
            "on the same case (bold: turbo at least as fast, to two decimals).")


def summary_table(comps: list[Comparison], *, with_suite: bool = True) -> list[str]:
    """The geomean table: one line per (group, turbo provider, reference)."""
    head = (["suite"] if with_suite else []) + ["pass", "provider", "vs", "cases", "geomean", "min", "max",
                                                "median fraction of peak"]
    text = len(head) - 5  # then cases, geomean, min, max, fraction: right-aligned
    lines = ["| " + " | ".join(head) + " |", "|---" * text + "|---:" * 5 + "|"]
    for c in comps:
        cells = ([c.group.suite] if with_suite else []) + [_esc(c.group.title), f"`{c.provider}`", f"`{c.reference}`",
                                                           str(len(c.ratios)), _ratio(c.geomean),
                                                           f"{min(c.ratios):.2f}x", f"{max(c.ratios):.2f}x",
                                                           _frac(c.peak)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _source_line(src: Source, out_dir: Path) -> str:
    env = src.environment
    rel = os.path.relpath(src.path.resolve(), out_dir.resolve())
    facts = [env.get("gpu") or env.get("device")]
    facts += [f"{k} {env[k]}" for k in ("torch", "triton", "cuda", "hip") if env.get(k)]
    line = f"[`{src.path.name}`]({rel.replace(os.sep, '/')})"
    facts = [f for f in facts if f]
    if facts:
        line += " — " + ", ".join(_esc(f) for f in facts)
    if env.get("argv"):
        line += f"; `{_esc(' '.join(map(str, env['argv'])))}`"
    return line


def suite_page(section: Section, out_dir: Path, images: dict[str, str]) -> str:
    """The markdown page of one suite: source, per pass the plot and one table per variant, and
    the suite's geomean table. ``images``: pass -> PNG file name (passes without a plot absent)."""
    lines = [f"# `{section.suite}`", "", "Source: " + _source_line(section.source, out_dir)]
    copy = next((r["copy_gbps"] for g in section.groups for r in g.rows if r.get("copy_gbps")), None)
    if copy:
        lines.append(f"Copy bandwidth measured in the same run: {copy:.0f} GB/s.")
    lines += ["", legend(section.groups[0]), ""]
    for pass_ in section.passes:
        lines += [f"## {pass_}", ""]
        if pass_ in images:
            lines += [f"![{section.suite} {pass_}]({images[pass_]})", ""]
        for g in (g for g in section.groups if g.pass_ == pass_):
            if g.variant:
                lines += [f"### {g.variant_title}", ""]
            lines += group_table(g) + [""]
    comps = [c for g in section.groups for c in comparisons(g)]
    if comps:
        lines += ["## Geomean", ""] + summary_table(comps, with_suite=False) + [""]
    return "\n".join(lines)


def index_page(sources: list[Source], secs: list[Section], out_dir: Path, *, summary_png: str | None,
               plot_note: str | None) -> str:
    """The report's front page: the sources, the headline (each turbo provider against its fastest
    reference), every comparison, and links to the suite pages."""
    comps = [c for s in secs for g in s.groups for c in comparisons(g)]
    lines = ["# Benchmark report", "", "Written by `turbo bench report` from the suites' JSON rows. "
             "Ratio: the reference's median time / the turbo provider's on the same case (above 1: turbo faster); "
             "geomean over the cases where both ran.", "", "## Sources", ""]
    skipped: dict[str, list[str]] = {}
    for src in sources:
        if src.rows:
            suites = ", ".join(f"[`{s.suite}`]({s.slug}.md)" for s in secs if s.source is src)
            lines.append(f"- {_source_line(src, out_dir)}: {suites} ({len(src.rows)} rows)")
        else:
            skipped.setdefault(src.skipped or "", []).append(f"`{src.path.name}`")
    for why, names in skipped.items():
        lines.append(f"- skipped, {_esc(why)}: {', '.join(names)}")
    lines += ["", "## Headline: each turbo provider against its fastest reference", ""]
    if summary_png:
        lines += [f"![geomean ratio to the fastest reference]({summary_png})", ""]
    if plot_note:
        lines += [f"Plots skipped: {plot_note}", ""]
    lines += summary_table(headline(comps)) + ["", "## Every comparison", ""] + summary_table(comps) + [""]
    return "\n".join(lines)


@dataclass
class Written:
    """What :func:`write_report` wrote; ``plots_skipped``: why there are no plots (None: plotted)."""

    files: list[Path]
    plots_skipped: str | None
    sections: list[Section]
    sources: list[Source]


def write_report(paths: list[str | os.PathLike], out_dir: str | os.PathLike, *, plots: bool = True) -> Written:
    """Markdown (``README.md``, one ``<suite>.md`` per suite) and, when ``plots`` and matplotlib
    is installed, one PNG per suite and pass plus ``summary.png``, under ``out_dir``.

    Raises:
        ValueError: no file among ``paths`` holds suite rows (the reasons per file in the message).
    """
    sources = [load(p) for p in paths]
    if not any(s.rows for s in sources):
        why = "; ".join(f"{s.path}: {s.skipped}" for s in sources) or "no files given"
        raise ValueError(f"paths: no suite rows to report ({why})")
    secs = sections(sources)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    images: dict[str, dict[str, str]] = {}
    summary_png = None
    note = "turned off (--no-plots)" if not plots else None
    if plots:
        from turbo_core.bench import plots as plotting

        note = plotting.unavailable_reason()
        if note is None:
            for s in secs:
                images[s.slug] = {}
                for pass_ in s.passes:
                    name = plot_name(s, pass_)
                    plotting.plot_pass(s, pass_, out / name)
                    images[s.slug][pass_] = name
                    files.append(out / name)
            heads = headline([c for s in secs for g in s.groups for c in comparisons(g)])
            if heads:
                plotting.plot_summary(heads, out / "summary.png")
                summary_png = "summary.png"
                files.append(out / summary_png)
    for s in secs:
        path = out / f"{s.slug}.md"
        path.write_text(suite_page(s, out, images.get(s.slug, {})))
        files.append(path)
    index = out / "README.md"
    index.write_text(index_page(sources, secs, out, summary_png=summary_png, plot_note=note))
    files.append(index)
    return Written(files, note, secs, sources)
