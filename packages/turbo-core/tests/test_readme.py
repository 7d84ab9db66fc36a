"""README.md checked without running its commands (``test_readme_run`` runs them): its generated support
matrix and performance headline are what :mod:`turbo_core.cli.readme_blocks` generates now; the headline's
numbers on a dataset small enough to compute by hand; its two commands are the ones ``.ci/run`` and the
noxfile run; every ``turbo ...`` it names parses with the ``turbo`` command's own parser; every relative
link of the README and of the docs pages it links resolves, anchors included."""

from __future__ import annotations

import json
import math
import re
import shlex

import pytest
from readme_parts import README, ROOT, inline_turbo_commands, install_env, install_lines, shell_lines, turbo_commands

from turbo_core.cli import readme_blocks
from turbo_core.cli.main import _parser

REGENERATE = "README.md is out of date: run python -m turbo_core.cli.readme_blocks README.md"


@pytest.fixture(scope="module")
def text() -> str:
    return README.read_text()


def test_the_support_matrix_is_current(text):
    block = readme_blocks.section_of(text, readme_blocks.MATRIX_BEGIN)
    assert block == readme_blocks.support_matrix(ROOT), REGENERATE


def test_the_performance_headline_is_current(text):
    block = readme_blocks.section_of(text, readme_blocks.HEADLINE_BEGIN)
    assert block == readme_blocks.headline(ROOT / "benchmarks" / "data"), REGENERATE


def test_the_matrix_has_every_primitive_and_every_backend_of_the_repositorys_packages(text):
    from turbo_core.dispatch.catalog import primitives

    lines = readme_blocks.section_of(text, readme_blocks.MATRIX_BEGIN).splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head[:2] == ["primitive", "family"]
    assert {"TORCH", "TRITON", "HIPBLASLT", "CK", "AITER", "DEEP_EP", "DEEP_EP_BUFFER"} <= set(head[2:])
    assert head[2] == "TORCH"  # the reference backend registers every primitive: the most, first
    body = {line.split(" | ")[0][3:-1]: [c.strip() for c in line.strip("|").split("|")] for line in lines[2:]}
    assert set(body) == {p.name for p in primitives()}
    assert all(row[2] == "x" for row in body.values())
    triton = head.index("TRITON")
    assert body["gemm"][triton] == "x" and body["moe_dispatch"][triton] == ""
    assert body["moe_dispatch"][head.index("DEEP_EP")] == "x"


def test_repository_plugins_are_each_packages_entry_points():
    found = {(src.parent.name, name, module) for src, name, module in readme_blocks.repository_plugins(ROOT)}
    assert found == {("turbo-core", "torch", "turbo_core.reference.plugin"),
                     ("turbo-triton", "triton", "turbo_triton.plugin"),
                     ("turbo-hipblaslt", "hipblaslt", "turbo_hipblaslt.plugin"),
                     ("turbo-ck", "ck", "turbo_ck.plugin"),
                     ("turbo-aiter", "aiter", "turbo_aiter.plugin"),
                     ("turbo-deepep", "deep_ep", "turbo_deepep.plugin"),
                     ("turbo-cudnn", "cudnn", "turbo_cudnn.plugin")}


def _row(run: str, date: str, case: str, provider: str, ms: float, **extra) -> dict:
    return {"suite": "gemm", "case": case, "pass": "fwd", "provider": provider, "status": "ok", "median_ms": ms,
            "run": run, "commit": "c0ffee", "dirty": False, "date": date, "device": "GPU X", "driver": None,
            "versions": {}, "command": "turbo bench gemm", **extra}


def test_the_headline_numbers_by_hand(tmp_path):
    """Run r1: turbo:A at 1 and 2 ms beside torch at 2 and 2 ms (ratios 2 and 1) and a slower eager
    reference at 4 and 4 ms; the fastest reference is torch: geomean sqrt(2). Run r2, later, another case:
    turbo:B at 4 ms beside torch at 1 ms: 0.25. Median of the two geomeans, lowest, highest."""
    day1, day2 = "2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00"
    rows = [_row("r1", day1, "c1", "torch", 2.0), _row("r1", day1, "c1", "eager", 4.0),
            _row("r1", day1, "c1", "turbo:A", 1.0),
            _row("r1", day1, "c2", "torch", 2.0), _row("r1", day1, "c2", "eager", 4.0),
            _row("r1", day1, "c2", "turbo:A", 2.0),
            _row("r2", day2, "c3", "torch", 1.0), _row("r2", day2, "c3", "turbo:B", 4.0),
            _row("r3", day1, "c1", "cpu-torch", 1.0, device="cpu", suite="norm"),
            _row("r3", day1, "c1", "turbo:A", 3.0, device="cpu", suite="norm")]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = readme_blocks.headline(tmp_path, page="perf.md").splitlines()
    assert len(lines) == 4
    gemm_mean = (math.sqrt(2) + 0.25) / 2
    assert lines[2] == (f"| [`gemm`](perf.md#gemm-gpu-x-r2) | GPU X | `turbo:A`, `turbo:B` | 2 | "
                        f"{gemm_mean:.2f}x (0.25x, 1.41x) |")
    assert lines[3] == "| [`norm`](perf.md#norm-cpu-r3) | cpu | `turbo:A` | 1 | 0.33x (0.33x, 0.33x) |"
    with pytest.raises(ValueError, match="no benchmark rows"):
        readme_blocks.headline(tmp_path / "empty")


def test_write_blocks_replaces_only_the_generated_parts(tmp_path, monkeypatch):
    monkeypatch.setattr(readme_blocks, "blocks", lambda root: {readme_blocks.MATRIX_BEGIN: "M\n",
                                                               readme_blocks.HEADLINE_BEGIN: "H\n"})
    page = tmp_path / "README.md"
    end = readme_blocks.END
    page.write_text(f"top\n{readme_blocks.MATRIX_BEGIN}\nold\n{end}\nmiddle\n{readme_blocks.HEADLINE_BEGIN}\n{end}\nend\n")
    readme_blocks.write_blocks(page)
    assert page.read_text() == (f"top\n{readme_blocks.MATRIX_BEGIN}\nM\n{end}\nmiddle\n"
                                f"{readme_blocks.HEADLINE_BEGIN}\nH\n{end}\nend\n")
    page.write_text("no markers\n")
    with pytest.raises(ValueError, match="no generated block"):
        readme_blocks.write_blocks(page)


def test_the_two_commands_are_what_ci_and_the_noxfile_run(text):
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    lines = shell_lines(text)
    assert f"{ci} -s main" in lines  # the main job
    assert ci in lines  # the tests: the line .ci/run runs
    assert ci == "python3 -m pip install --quiet nox && python3 -m nox"
    noxfile = (ROOT / "noxfile.py").read_text()
    assert re.search(r"^def main\(session", noxfile, re.M) and re.search(r"^def readme\(session", noxfile, re.M)
    sessions = re.search(r"^nox\.options\.sessions = \[(.*?)\]$", noxfile, re.M | re.S).group(1)
    assert '"readme"' in sessions and '"core"' in sessions  # the README's commands run in the test command


def test_the_install_section_installs_the_core_and_triton_from_the_clone(text):
    """nox -s readme runs the section's ``pip install`` lines as written (into a venv with torch alone) and
    test_readme_run the quick start and commands with its ``export`` lines set."""
    lines = install_lines(text)
    assert lines[0] == "python3 -m venv .venv && . .venv/bin/activate"
    assert "pip install -e packages/turbo-core -e packages/turbo-triton" in lines
    for line in lines:
        words = shlex.split(line)
        if words[:3] == ["pip", "install", "-e"]:
            assert all(w == "-e" or (ROOT / w / "pyproject.toml").is_file() for w in words[2:]), line
    # Triton's interpreter imports numpy, which neither torch nor triton installs
    assert "pip install numpy" in lines and install_env(text) == {"TRITON_INTERPRET": "1"}


def test_every_turbo_command_parses(text):
    """The command blocks' lines and the inline ``turbo ...`` spans, through the ``turbo`` parser (which exits
    2 on an unknown command or option)."""
    commands = turbo_commands(text) + inline_turbo_commands(text)
    assert ["accuracy", "--quick"] in commands and ["backends"] in commands
    for argv in commands:
        _parser().parse_args(argv)


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _links(page) -> list[tuple[str, str]]:
    """``(path, anchor)`` of every relative link of ``page`` (absolute URLs left out)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)  # code is not links
    found = []
    for target in _LINK.findall(re.sub(r"`[^`\n]*`", "", text)):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        found.append((path, anchor))
    return found


def _anchors(page) -> set[str]:
    text = page.read_text()
    ids = set(re.findall(r'<a id="([^"]+)"></a>', text))
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        ids.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return ids


def test_every_relative_link_resolves(text):
    pages = [README] + sorted({(README.parent / p).resolve() for p, _ in _links(README)
                               if p.endswith(".md") and p.startswith("docs/")})
    assert ROOT / "docs" / "measuring.md" in pages and ROOT / "docs" / "performance.md" in pages
    for page in pages:
        if page.name == "performance.md":
            continue  # generated; its links are the report's own
        for path, anchor in _links(page):
            target = (page.parent / path).resolve() if path else page
            assert target.exists(), f"{page.relative_to(ROOT)}: link to {path} that does not exist"
            if anchor and target.suffix == ".md":
                assert anchor in _anchors(target), f"{page.relative_to(ROOT)}: no anchor #{anchor} in {path}"
