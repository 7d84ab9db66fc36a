"""Benchmark rows compared: tables of one suite, pass and variant, and the ratios of each turbo
provider to each reference on the cases where both ran.

A suite row has ``suite``, ``case``, ``provider`` and ``status`` (keys in
:mod:`turbo_core.bench.runner`). Rows split into groups by (suite, pass, variant): the variant is
the row's ``granularity``, ``mode``, ``balance``, ``mask``, ``timing`` and ``accumulation`` (the
``train`` suite's micro-batches per optimizer step, when more than one) where it carries them; each
group is one table with its own baselines and providers. ``timing`` names what a row's
``median_ms`` is when it is not the device time of one call (``"wall clock"``: the wall clock per
eager call, the device time then in ``device_ms``), so the two are never in one ratio.

References: the providers whose name does not start with ``turbo:`` (the bf16 reference of the
FP8 suites, the baselines, ``torch.compile``). Ratio: the reference's median time / the turbo
provider's, on the same case (above 1: turbo is faster); against the rows' ``baseline`` it equals
their ``ratio``. Geomean over the cases where both ran. The headline reference of a turbo provider
is the one it has the lowest geomean against (the fastest reference), so that a slow eager
baseline never flatters it.

A turbo row may name another turbo provider in ``compare_to`` (the attention suite's deterministic
backward names the default one): that pair is compared too, but is never a headline (it compares
turbo with itself). A turbo row may instead list in ``vs`` the providers (references or turbo
providers) it is compared with, in place of every reference (the ``train`` suite compares each turbo
provider with ``torch.compile``, ``turbo:bf16`` and torchao's FP8 recipe of the same name only);
its headline is then the fastest reference of that list.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

__all__ = ["FRACTIONS", "METRICS", "TURBO_PREFIX", "VARIANT_FIELDS", "Comparison", "Group", "case_labels",
           "comparisons", "geomean", "groups", "headline", "short_label"]

TURBO_PREFIX = "turbo:"
#: Row fields that split a pass into separate tables (each its own baselines and providers).
VARIANT_FIELDS = ("granularity", "mode", "balance", "mask", "timing", "accumulation")
#: metric field -> unit; fraction field -> what it is a fraction of.
METRICS = {"tflops": "TFLOP/s", "gbps": "GB/s", "tokens_per_s": "tokens/s"}
FRACTIONS = {"peak_fraction": "of the datasheet dense peak", "copy_fraction": "of the measured copy bandwidth"}
_ROLE_RANK = {"bf16": 0, "baseline": 1}


def geomean(values: list[float]) -> float | None:
    """The geometric mean of the positive values (None when there are none)."""
    values = [v for v in values if v and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


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

    def _listed(self, provider: str) -> list[str] | None:
        """The providers ``provider``'s rows list in ``vs`` that this group has (None: no row lists any)."""
        lists = [r["vs"] for r in self.rows if r["provider"] == provider and isinstance(r.get("vs"), list)]
        if not lists:
            return None
        return [p for p in dict.fromkeys(v for vs in lists for v in vs) if p in self.providers and p != provider]

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """``(turbo provider, reference)`` pairs compared: every turbo provider against every
        reference (or against the providers its rows list in ``vs``), then each turbo provider
        against the providers its rows name in ``compare_to``."""
        out = []
        for p in self.turbo:
            listed = self._listed(p)
            out += [(p, r) for r in (self.references if listed is None else listed)]
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
