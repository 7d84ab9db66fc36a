"""The generated blocks of the repository's ``README.md``: the primitive x backend support matrix and the
performance headline. Each sits between its ``BEGIN`` line (:data:`MATRIX_BEGIN`, :data:`HEADLINE_BEGIN`)
and the next :data:`END` line; ``python -m turbo_core.cli.readme_blocks README.md`` rewrites them, and a
test fails while the README's blocks differ from what this module generates.

* The matrix is ``turbo backends --matrix --markdown`` over every backend of the repository's own packages
  (``packages/*``), whatever is installed: a ``turbo backends --json`` subprocess loads each package's
  ``turbo.backends`` plugin modules from its ``src/`` through ``TURBO_PLUGINS`` (installed plugins from
  elsewhere disabled), and the columns go in a fixed order: most primitives registered first, then by name.
* The headline is one line per suite and device of ``docs/performance.md`` (``turbo bench report``, from
  ``benchmarks/data``): the turbo providers, how many comparisons the page's headline makes for them
  (one turbo provider against its fastest reference on one pass and variant of one run, a geomean over the
  cases both ran), and the median, lowest and highest of those geomeans; the suite links to its newest run
  on the page.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

__all__ = ["END", "HEADLINE_BEGIN", "MATRIX_BEGIN", "blocks", "headline", "repository_plugins", "section_of",
           "support_matrix", "write_blocks"]

_REGENERATE = "python -m turbo_core.cli.readme_blocks README.md"
MATRIX_BEGIN = f"<!-- BEGIN GENERATED: turbo backends --matrix --markdown ({_REGENERATE}) -->"
HEADLINE_BEGIN = f"<!-- BEGIN GENERATED: performance headline from benchmarks/data ({_REGENERATE}) -->"
END = "<!-- END GENERATED -->"
#: The page the headline links to, relative to the repository root.
PERFORMANCE_PAGE = "docs/performance.md"

_ENTRY_POINTS = re.compile(r'^\[project\.entry-points\."turbo\.backends"\]\s*$(.*?)(?=^\[|\Z)', re.M | re.S)
_ENTRY = re.compile(r'^\s*([A-Za-z0-9_.-]+)\s*=\s*"([A-Za-z0-9_.]+)"', re.M)


def repository_plugins(root: str | os.PathLike) -> list[tuple[Path, str, str]]:
    """``(src folder, entry-point name, plugin module)`` of every ``turbo.backends`` entry point that the
    ``pyproject.toml`` of a package under ``root/packages`` declares, by package folder name."""
    found = []
    for project in sorted(Path(root, "packages").glob("*/pyproject.toml")):
        table = _ENTRY_POINTS.search(project.read_text())
        if table:
            found += [(project.parent / "src", name, module) for name, module in _ENTRY.findall(table.group(1))]
    return found


def _backend_rows(root: str | os.PathLike) -> list[dict]:
    """``turbo backends --json`` in a subprocess that sees exactly the repository's backends."""
    plugins = repository_plugins(root)
    ours = {name.lower() for _, name, _ in plugins}
    others = sorted({ep.name for ep in importlib.metadata.entry_points(group="turbo.backends")
                     if ep.name.lower() not in ours})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TURBO_", "PRIMUS_TURBO_"))}
    paths = list(dict.fromkeys(str(src) for src, _, _ in plugins))
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["TURBO_PLUGINS"] = ",".join(module for _, _, module in plugins)
    if others:
        env["TURBO_DISABLE_PLUGINS"] = ",".join(others)
    proc = subprocess.run([sys.executable, "-m", "turbo_core.cli", "backends", "--json"], env=env,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"turbo backends --json failed with exit status {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def support_matrix(root: str | os.PathLike) -> str:
    """The markdown matrix of the repository's backends (see the module doc), one line per primitive."""
    from turbo_core.cli.backend_table import matrix_lines

    rows = sorted(_backend_rows(root), key=lambda r: (-len(r["primitives"]), r["name"]))
    return "\n".join(matrix_lines(rows, markdown=True)) + "\n"


def _ratio(value: float) -> str:
    return f"{value:.2f}x"


def headline(data_dir: str | os.PathLike, page: str = PERFORMANCE_PAGE) -> str:
    """The markdown headline table of the dataset in ``data_dir`` (see the module doc); links go to
    ``page``. ``ValueError`` when the dataset has no rows."""
    from turbo_core.bench import dataset
    from turbo_core.bench.compare import comparisons, groups
    from turbo_core.bench.compare import headline as best_references
    from turbo_core.bench.markdown import Section

    rows = dataset.load(data_dir)
    if not rows:
        raise ValueError(f"{data_dir}: no benchmark rows")
    chosen, _ = dataset.current(dataset.runs(rows))
    per: dict[tuple[str, str], dict] = {}  # (suite, device) -> anchor of the newest run, providers, geomeans
    for run in chosen:
        section = Section(run, groups(run.rows), 0)
        entry = per.setdefault((run.suite, run.device), {"anchor": section.anchor, "providers": [], "geomeans": []})
        for comp in best_references([c for g in section.groups for c in comparisons(g)]):
            if comp.geomean is None:
                continue
            entry["geomeans"].append(comp.geomean)
            if comp.provider not in entry["providers"]:
                entry["providers"].append(comp.provider)
    lines = ["| suite | device | turbo providers | comparisons | geomean vs the fastest reference: median (lowest, highest) |",
             "|---|---|---|---:|---|"]
    for (suite, device), entry in per.items():
        means = entry["geomeans"]
        if not means:
            continue
        spread = f"{_ratio(statistics.median(means))} ({_ratio(min(means))}, {_ratio(max(means))})"
        providers = ", ".join(f"`{p}`" for p in sorted(entry["providers"]))
        lines.append(f"| [`{suite}`]({page}#{entry['anchor']}) | {device} | {providers} | {len(means)} | {spread} |")
    return "\n".join(lines) + "\n"


def blocks(root: str | os.PathLike) -> dict[str, str]:
    """``BEGIN`` line -> the generated text of that block, for the repository at ``root``."""
    root = Path(root)
    return {MATRIX_BEGIN: support_matrix(root), HEADLINE_BEGIN: headline(root / "benchmarks" / "data")}


def section_of(text: str, begin: str) -> str:
    """The text between the line ``begin`` and the next :data:`END` line; ``ValueError`` naming the
    missing line."""
    if begin + "\n" not in text:
        raise ValueError(f"no generated block: expected the line {begin!r}")
    rest = text.split(begin + "\n", 1)[1]
    if END not in rest:
        raise ValueError(f"no {END!r} line after {begin!r}")
    return rest.split(END, 1)[0]


def write_blocks(readme: str | os.PathLike) -> None:
    """Rewrite every generated block of ``readme`` (the repository root is its folder)."""
    path = Path(readme)
    text = path.read_text()
    for begin, body in blocks(path.resolve().parent).items():
        section_of(text, begin)
        head, rest = text.split(begin + "\n", 1)
        text = head + begin + "\n" + body + END + rest.split(END, 1)[1]
    path.write_text(text)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        write_blocks(name)
