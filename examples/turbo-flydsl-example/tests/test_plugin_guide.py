"""docs/plugin-guide.md, followed as a third party would: the files it shows are this package's files,
whole, and its install command builds and installs this package (into a folder of its own, ``--target``,
beside the turbo-core of this environment), after which turbo finds the backend through the installed
entry point and ``turbo backends`` lists it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1]
GUIDE = EXAMPLE.parents[1] / "docs" / "plugin-guide.md"


def _blocks(marker: str) -> list[tuple[str, str]]:
    """``(argument, fenced block)`` for each ``<!-- marker: argument -->`` line of the guide."""
    pattern = rf"<!-- {marker}(?:: (\S+))? -->\n```[a-z]*\n(.*?)```\n"
    return re.findall(pattern, GUIDE.read_text(), flags=re.S)


def test_the_guides_files_are_this_packages_files():
    shown = _blocks("example")
    assert [path for path, _ in shown] == ["pyproject.toml", "src/turbo_flydsl_example/plugin.py",
                                           "src/turbo_flydsl_example/gemm.py"]
    for path, text in shown:
        assert text == (EXAMPLE / path).read_text(), f"docs/plugin-guide.md shows another {path}"


def test_install_as_the_guide_says_then_turbo_finds_the_backend(tmp_path):
    [(_, command)] = _blocks("install")
    words = command.split()
    assert words[:2] == ["pip", "install"] and words[2] == f"./{EXAMPLE.name}", command
    # the folder that holds the package, as a third party has it
    shutil.copytree(EXAMPLE, tmp_path / EXAMPLE.name, ignore=shutil.ignore_patterns("__pycache__", ".*", "tests"))
    target = tmp_path / "site"
    # the guide's command; --no-deps --target: into a folder of its own, beside this environment's turbo-core
    built = subprocess.run([sys.executable, "-m", *words, "--no-deps", "--target", str(target), "--quiet"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    env = {"PYTHONPATH": str(target), "PATH": str(Path(sys.executable).parent)}
    probe = ("import importlib.metadata as md, json, turbo_flydsl_example\n"
             "from turbo_core.cli.inventory import backend_rows\n"
             "[ep] = [e for e in md.entry_points(group='turbo.backends') if e.name == 'flydsl']\n"
             "print(json.dumps({'entry_point': ep.value, 'dist': str(ep.dist.locate_file('')),\n"
             "                  'module': turbo_flydsl_example.__file__,\n"
             "                  'row': next(r for r in backend_rows() if r['name'] == 'FLYDSL')}))\n")
    found = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=240)
    assert found.returncode == 0, found.stderr
    seen = json.loads(found.stdout.splitlines()[-1])
    assert seen["entry_point"] == "turbo_flydsl_example.plugin"
    assert Path(seen["dist"]).resolve() == target.resolve()  # the installed copy, not the source tree
    assert Path(seen["module"]).resolve().is_relative_to(target.resolve())
    row = seen["row"]
    assert (row["package"], row["plugin"], row["available"]) == ("turbo-flydsl-example", "flydsl", True)
    assert set(row["primitives"]) == {"gemm"}
    listed = subprocess.run([shutil.which("turbo", path=env["PATH"]), "backends"], env=env, capture_output=True,
                            text=True, timeout=240)
    assert listed.returncode == 0, listed.stderr
    [line] = [line for line in listed.stdout.splitlines() if line.startswith("FLYDSL ")]
    assert line.split()[1:3] == ["turbo-flydsl-example", "0.1.0"] and line.split()[-1] == "ok"
