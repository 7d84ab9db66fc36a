"""The results dataset: ``turbo bench <suite> --record`` appends rows carrying the run's provenance
(commit of this checkout, date, device, driver, versions, command, run id); the provenance's
sources (git, nvidia-smi, the installed distributions) read as documented."""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import turbo_core
from turbo_core.bench import dataset
from turbo_core.cli import main

REPO = Path(__file__).resolve().parents[3]


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_record_appends_rows_with_the_run_provenance(tmp_path):
    data = tmp_path / "data"
    argv = ["bench", "norm", "--quick", "--tokens", "8", "16", "--providers", "torch", "--record", str(data)]
    assert main(argv) == 0
    assert main(["bench", "norm", "--quick", "--providers", "torch", "--record", str(data)]) == 0
    assert [p.name for p in data.iterdir()] == ["norm.jsonl"]
    lines = (data / "norm.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert rows == dataset.load(data)
    first, second = dataset.runs(rows)
    # --tokens 8 16: one invocation, one run id, the suite run once per value
    assert sorted({r["tokens"] for r in first.rows}) == [8, 16] and {r["tokens"] for r in second.rows} == {32}
    assert len(first.rows) == 2 * len(second.rows) and first.meta["run"] != second.meta["run"]
    assert all(set(dataset.RUN_FIELDS) <= set(r) and r["provider"] == "torch" and r["status"] == "ok" for r in rows)
    meta = first.meta
    from_checkout = Path(turbo_core.__file__).resolve().parent == (REPO / "packages/turbo-core/src/turbo_core").resolve()
    if shutil.which("git") and (REPO / ".git").exists() and from_checkout:
        assert meta["commit"] == _git("rev-parse", "HEAD")
        assert meta["dirty"] == bool(_git("status", "--porcelain", "--untracked-files=no"))
    else:  # an installed (not editable) turbo-core names its version, never a checkout it was not imported from
        assert meta["commit"] == f"turbo-core {turbo_core.__version__}" and meta["dirty"] is False
    date = datetime.datetime.fromisoformat(meta["date"])
    assert date.utcoffset() == datetime.timedelta(0)
    assert abs((datetime.datetime.now(datetime.timezone.utc) - date).total_seconds()) < 600
    assert meta["device"] == "cpu" and meta["driver"] is None
    assert meta["versions"]["torch"] == torch.__version__ and meta["versions"]["turbo-core"] == turbo_core.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", meta["versions"]["python"])
    assert meta["command"] == f"turbo bench norm --quick --record {data} --tokens 8 16 --providers torch"


def test_rows_go_to_the_file_of_their_suite(tmp_path):
    run = {"run": "r", "commit": "c", "dirty": False, "date": "2026-01-01T00:00:00+00:00", "device": "cpu",
           "driver": None, "versions": {}, "command": "x"}
    written = dataset.append([{"suite": "a", "v": 1}, {"suite": "b", "v": 2}, {"suite": "a", "v": 3}], run, tmp_path)
    assert sorted(p.name for p in written) == ["a.jsonl", "b.jsonl"]
    assert [r["v"] for r in dataset.load(tmp_path)] == [1, 3, 2]  # files by name, rows in file order
    assert all(r["run"] == "r" for r in dataset.load(tmp_path))


def test_the_commit_can_be_given_and_falls_back_to_the_installed_version(monkeypatch):
    monkeypatch.setenv("TURBO_BENCH_COMMIT", "abc123-dirty")
    assert dataset.checkout_revision() == ("abc123", True)
    monkeypatch.setenv("TURBO_BENCH_COMMIT", "abc123")
    assert dataset.checkout_revision() == ("abc123", False)
    monkeypatch.delenv("TURBO_BENCH_COMMIT")
    monkeypatch.setattr(dataset, "_git", lambda cwd, *args: None)  # not a checkout (or no git)
    assert dataset.checkout_revision() == (f"turbo-core {turbo_core.__version__}", False)
    # a checkout that is not where turbo_core was imported from does not count
    monkeypatch.setattr(dataset, "_git", lambda cwd, *args: "/somewhere/else" if "--show-toplevel" in args else "x")
    assert dataset.checkout_revision() == (f"turbo-core {turbo_core.__version__}", False)


def test_the_driver_is_read_from_nvidia_smi_and_is_none_on_the_cpu(tmp_path, monkeypatch):
    assert dataset.driver_version("cpu") is None
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho \"$@\" > " + str(tmp_path / "args") + "\necho 550.54.15\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(torch.version, "hip", None)
    assert dataset.driver_version("cuda") == "550.54.15"
    assert (tmp_path / "args").read_text().split() == ["--query-gpu=driver_version", "--format=csv,noheader"]


def test_versions_name_every_installed_turbo_package():
    v = dataset.versions()
    assert list(v)[:5] == ["torch", "cuda", "hip", "triton", "python"]
    assert v["turbo-core"] == turbo_core.__version__
    assert all(k in ("torch", "cuda", "hip", "triton", "python") or k.startswith("turbo-") for k in v)


@pytest.mark.parametrize("argv, command", [
    (["bench", "gemm", "--quick"], "turbo bench gemm --quick"),
    (["bench", "attention", "--passes", "fwd", "--warmup", "3", "--record"],
     "turbo bench attention --record benchmarks/data --warmup 3 --passes fwd"),
    (["bench", "gemm-fp8", "--format", "E5M2", "--granularities", "rowwise", "mx"],
     "turbo bench gemm-fp8 --granularities rowwise mx --format E5M2"),
])
def test_the_recorded_command_names_the_options_that_differ_from_their_defaults(argv, command):
    from turbo_core.cli import bench_cmd
    from turbo_core.cli.main import _parser

    assert " ".join(bench_cmd.command_line(_parser().parse_args(argv))) == command


@pytest.mark.parametrize("typed, suite", [("grouped-gemm", "grouped_gemm"), ("grouped_gemm", "grouped_gemm"),
                                           ("linear_fp8", "linear-fp8"), ("gemm_fp8", "gemm-fp8"),
                                           ("cross_entropy", "cross-entropy"), ("report", "report")])
def test_a_suite_name_takes_hyphens_and_underscores_alike(typed, suite):
    from turbo_core.cli import bench_cmd
    from turbo_core.cli.main import _parser

    args = _parser().parse_args(["bench", typed, "--quick"])
    assert args.suite == suite
    assert " ".join(bench_cmd.command_line(args)) == f"turbo bench {suite} --quick"


def test_an_unknown_suite_name_is_refused_with_the_choices(capsys):
    from turbo_core.cli.main import _parser

    with pytest.raises(SystemExit):
        _parser().parse_args(["bench", "grouped-gemms"])
    err = capsys.readouterr().err
    assert "invalid choice: 'grouped-gemms'" in err and "grouped_gemm" in err and "linear-fp8" in err


# -- the committed dataset and the page generated from it --------------------------------------------

DATA = REPO / "benchmarks" / "data"
PAGE = REPO / "docs" / "performance.md"
needs_checkout = pytest.mark.skipif(not DATA.is_dir() or not PAGE.is_file(),
                                    reason="runs in a checkout (benchmarks/data and docs/performance.md)")


@needs_checkout
def test_every_committed_row_carries_the_provenance():
    rows = dataset.load(DATA)  # raises on a row without the run fields
    assert rows
    for r in rows:
        assert re.fullmatch(r"[0-9a-f]{40}|turbo-core \S+", r["commit"]), r["commit"]
        assert r["dirty"] in (True, False, None)  # None: rows folded from files written before the dataset
        assert datetime.datetime.fromisoformat(r["date"]).utcoffset() == datetime.timedelta(0)
        assert isinstance(r["device"], str) and r["device"] and (r["driver"] is None or isinstance(r["driver"], str))
        assert isinstance(r["versions"], dict) and r["versions"].get("torch")
        assert isinstance(r["command"], str) and r["command"]
        assert {"suite", "case", "provider", "status"} <= set(r) and f"{r['suite']}.jsonl"
    for path in DATA.glob("*.jsonl"):
        assert {r["suite"] for r in dataset.load_file(path)} == {path.stem}


@needs_checkout
def test_the_committed_page_is_the_one_the_dataset_generates(tmp_path, monkeypatch):
    """docs/performance.md is never edited by hand: regenerated from benchmarks/data it is the same
    text (the plots themselves are not redrawn here)."""
    from turbo_core.bench import markdown, plots

    monkeypatch.setattr(plots, "unavailable_reason", lambda: None)
    monkeypatch.setattr(plots, "plot_pass", lambda groups, path: None)
    monkeypatch.setattr(plots, "plot_summary", lambda bars, path: None)
    monkeypatch.chdir(REPO)
    out = tmp_path / "docs" / "performance.md"
    markdown.write_performance("benchmarks/data", out)
    assert out.read_text() == PAGE.read_text(), (
        "docs/performance.md differs from what benchmarks/data generates: run `turbo bench report`")


def test_the_command_carries_the_turbo_variables_that_shape_the_run(monkeypatch):
    monkeypatch.setenv("TURBO_TRITON_ATTN_TILES", "fwd=128,64,8,3;dq=64,64,4,2")
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "TRITON")
    monkeypatch.setenv("TURBO_BENCH_COMMIT", "abc")  # names the commit, not a setting
    monkeypatch.setenv("OTHER_VARIABLE", "x")
    assert dataset.command(["turbo", "bench", "attention", "--passes", "fwd"]) == (
        "TURBO_GEMM_BACKEND=TRITON TURBO_TRITON_ATTN_TILES='fwd=128,64,8,3;dq=64,64,4,2' "
        "turbo bench attention --passes fwd")
