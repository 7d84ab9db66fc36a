"""The ``turbo`` command: ``backends`` and ``doctor``, as tables and as JSON."""

from __future__ import annotations

import json

import pytest
from console_script import clean_env, turbo

import turbo_core
from turbo_core.cli import main


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # rich wraps table cells at the terminal width


def run_cli(capsys, *argv: str):
    rc = main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out


def test_backends_json_lists_torch(capsys):
    rc, out = run_cli(capsys, "backends", "--json")
    assert rc == 0
    rows = json.loads(out)
    assert isinstance(rows, list)
    torch_row = next(r for r in rows if r["name"] == "TORCH")
    assert {"name", "package", "version", "available", "reason", "primitives"} <= set(torch_row)
    assert torch_row["package"] == "turbo-core"
    assert torch_row["version"] == turbo_core.__version__
    assert torch_row["available"] is True and torch_row["reason"] is None
    assert torch_row["primitives"]["gemm"]["precision"] == "BF16_FP16_FP32"
    assert torch_row["primitives"]["gemm"]["variants"] == ["fp32", "fp16", "bf16"]
    assert torch_row["plugin"] == "torch"


def test_backends_json_shows_third_party_and_unavailability(capsys, use_plugins, fakekit):
    fakekit.cfg("FAKEB")["unavailable"] = "needs a fake accelerator; none found"
    use_plugins("fake_a", "fake_b")
    rows = {r["name"]: r for r in json.loads(run_cli(capsys, "backends", "--json")[1])}
    assert list(rows) == ["TORCH", "FAKEA", "FAKEB"]
    assert (rows["FAKEA"]["available"], rows["FAKEA"]["reason"]) == (True, None)
    assert (rows["FAKEB"]["available"], rows["FAKEB"]["reason"]) == (False, "needs a fake accelerator; none found")
    assert rows["FAKEA"]["package"] == "turbo-fakea" and rows["FAKEA"]["version"] == "0.0.1"
    assert rows["FAKEA"]["plugin"] == "fake_a"
    assert set(rows["FAKEB"]["primitives"]) == {"gemm"}


def test_backends_wide_table(capsys, use_plugins, fakekit):
    fakekit.cfg("FAKEB")["unavailable"] = "no fake device"
    use_plugins("fake_a", "fake_b", "no_such_turbo_plugin_xyz")
    rc, out = run_cli(capsys, "backends", "--wide")
    assert rc == 0
    assert "turbo backends" in out
    for text in ("TORCH", "turbo-core", turbo_core.__version__, "FAKEA", "turbo-fakea",
                 "available", "unavailable", "no fake device", "gemm (BF16_FP16_FP32"):
        assert text in out, text
    # the failed plugin is mentioned, with a pointer to doctor
    assert "plugin no_such_turbo_plugin_xyz (TURBO_PLUGINS) failed at import" in out
    assert "turbo doctor" in out


def test_backends_default_view_one_line_per_backend(capsys, use_plugins, fakekit, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    fakekit.cfg("FAKEB")["unavailable"] = "needs a fake accelerator; none was found on this machine"
    use_plugins("fake_a", "fake_b")
    rc, out = run_cli(capsys, "backends")
    assert rc == 0
    lines = out.splitlines()
    assert all(len(line) <= 60 for line in lines[1:-1])
    assert [line.split()[0] for line in lines[2:-1]] == ["TORCH", "FAKEA", "FAKEB"]
    assert lines[3].split()[1:] == ["turbo-fakea", "0.0.1", "1/-/-/-/-/-/-/-", "ok"]
    # the reason's first clause, the words that fit, then an ellipsis; --wide gives it whole
    assert lines[4].split()[4:] == ["needs", "a", "fake\u2026"]
    assert lines[-1] == "--wide: every primitive and the full reasons; --matrix: primitive x backend"


def test_backends_matrix_text_and_option_errors(capsys, use_plugins):
    use_plugins("fake_a")
    rc, out = run_cli(capsys, "backends", "--matrix")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split() == ["primitive", "family", "TORCH", "FAKEA"]
    assert lines[1].split() == ["gemm", "gemm", "x", "x"]
    assert all(line.split()[2:] == ["x"] for line in lines[2:])  # the other primitives: TORCH only
    for argv, message in ((["--markdown"], "--markdown goes with --matrix or --primitives"),
                          (["--primitives"], "--primitives is markdown only: add --markdown")):
        assert main(["backends", *argv]) == 2
        assert message in capsys.readouterr().err


def test_short_reason_keeps_what_fits():
    from turbo_core.cli.backend_table import short_reason

    reason = "no GPU (set TRITON_INTERPRET=1 to run the Triton kernels on the CPU interpreter)"
    assert short_reason(reason, 200) == reason
    assert short_reason(reason, 30) == "no GPU"
    assert short_reason("built without Composable Kernel: hipcc not found", 20) == "built without\u2026"
    assert short_reason("abcdefghijklmnopqrstuvwxyz", 10) == "abcdefghi\u2026"


def test_doctor_json(capsys):
    rc, out = run_cli(capsys, "doctor", "--json")
    assert rc == 0
    report = json.loads(out)
    assert {"turbo_core", "platform", "plugins", "backends", "environment", "notes", "problems"} <= set(report)
    assert report["turbo_core"] == turbo_core.__version__
    import torch

    assert report["platform"]["torch"] == torch.__version__
    assert "triton" in report["platform"]
    assert [p["name"] for p in report["plugins"]] == ["torch"]
    assert report["plugins"][0]["status"] == "loaded"
    torch_row = next(b for b in report["backends"] if b["name"] == "TORCH")
    assert torch_row == {"name": "TORCH", "package": "turbo-core", "version": turbo_core.__version__,
                         "available": True, "reason": None}
    assert report["environment"] == {}
    if not torch.cuda.is_available():
        assert report["platform"]["gpus"] == []
        assert any(p.startswith("no GPU") for p in report["notes"])  # a fact about this machine, not a problem
    assert report["problems"] == [] and report["settings_problems"] == []
    # only the reference plugin is loaded: it ships no tuning database
    assert report["tuning"] == {"enabled": True, "sources": [], "entries": 0, "stale": 0, "policy": "minor",
                                "user_file": None}


def test_doctor_reports_tuning_databases(capsys, monkeypatch, tmp_path):
    from turbo_core.tuning import active

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    monkeypatch.setenv("TURBO_TUNING_DB", str(bad))
    active.reset()
    try:
        rc, out = run_cli(capsys, "doctor", "--json")
        report = json.loads(out)
        assert rc == 1  # an unreadable tuning database is a problem
        assert any("TURBO_TUNING_DB" in p for p in report["problems"])
        good = tmp_path / "mine.json"
        monkeypatch.setenv("TURBO_TUNING_DB", str(good))
        active.reset()
        rc, out = run_cli(capsys, "doctor")
        assert rc == 0
        assert "tuning databases: none; 0 entries in use, 0 skipped as stale" in " ".join(out.split())
        report = json.loads(run_cli(capsys, "doctor", "--json")[1])
        assert report["tuning"]["user_file"] == str(good)
    finally:
        monkeypatch.delenv("TURBO_TUNING_DB")
        active.reset()


def test_doctor_json_reports_missing_plugin_and_bad_env(capsys, use_plugins, monkeypatch):
    use_plugins("no_such_turbo_plugin_xyz", "fake_a")
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "fp8:NOPE")
    monkeypatch.setenv("TURBO_AUTO_TUNE", "maybe")
    monkeypatch.setenv("PRIMUS_TURBO_ATTN_BACKEND", "autotune,other:TRITON")
    rc, out = run_cli(capsys, "doctor", "--json")
    assert rc == 2  # a bad setting
    report = json.loads(out)
    plugins = {p["name"]: p for p in report["plugins"]}
    bad = plugins["no_such_turbo_plugin_xyz"]
    assert (bad["status"], bad["stage"], bad["source"]) == ("failed", "import", "TURBO_PLUGINS")
    assert bad["error"] == "ModuleNotFoundError: No module named 'no_such_turbo_plugin_xyz'"
    assert plugins["fake_a"]["status"] == "loaded" and plugins["fake_a"]["backends"] == ["FAKEA"]
    problems = report["problems"]
    assert ("plugin no_such_turbo_plugin_xyz (TURBO_PLUGINS) failed at import: "
            "ModuleNotFoundError: No module named 'no_such_turbo_plugin_xyz'") in problems
    assert any(p.startswith("TURBO_GEMM_BACKEND='fp8:NOPE': unknown backend 'NOPE'") for p in problems)
    assert any(p.startswith("TURBO_AUTO_TUNE='maybe'") for p in problems)
    assert any(p.startswith("PRIMUS_TURBO_ATTN_BACKEND=") and "given twice" in p for p in problems)
    assert report["environment"]["TURBO_GEMM_BACKEND"] == "fp8:NOPE"
    assert report["environment"]["TURBO_PLUGINS"] == "no_such_turbo_plugin_xyz,fake_a"


def test_doctor_text(capsys, use_plugins):
    use_plugins("no_such_turbo_plugin_xyz", "fake_a")
    rc, out = run_cli(capsys, "doctor")
    assert rc == 1  # a plugin failed to load
    assert f"turbo-core {turbo_core.__version__}" in out
    assert "torch " in out
    import torch

    if not torch.cuda.is_available():
        assert "GPU: no GPU" in out
        assert "note: no GPU: only the CPU backends" in out
    assert "plugins" in out and "fake_a" in out and "FAKEA" in out
    assert "no_such_turbo_plugin_xyz" in out and "import: ModuleNotFoundError" in out
    assert "problems:" in out


def test_doctor_text_without_problems_says_so(capsys, monkeypatch):
    import turbo_core.cli.doctor_cmd as doctor

    monkeypatch.setattr(doctor, "describe_process", lambda: {
        "torch": "9.9", "cuda": "12.9", "hip": None, "triton": "3.9",
        "gpus": [{"index": 0, "name": "Fake H200", "kind": "cuda", "arch": "sm90"}]})
    rc, out = run_cli(capsys, "doctor")
    assert rc == 0
    assert "GPU 0: Fake H200 (cuda, sm90)" in out
    assert "no problems found" in out


@pytest.mark.parametrize("argv", [[], ["nope"], ["backends", "--yaml"], ["backends", "--wide", "--json"]])
def test_bad_command_line_exits_with_usage(capsys, argv):
    with pytest.raises(SystemExit) as err:
        main(argv)
    assert err.value.code == 2
    assert "usage: turbo" in capsys.readouterr().err


def test_doctor_with_a_missing_plugin_keeps_working_and_exits_1():
    # A fresh process: a missing TURBO_PLUGINS module breaks neither `import turbo_core`
    # nor the CLI; doctor reports it under plugins and problems, and exits 1 (a problem).
    proc = turbo("doctor", "--json", env=clean_env(TURBO_PLUGINS="no_such_turbo_plugin_xyz"))
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    bad = [p for p in report["plugins"] if p["name"] == "no_such_turbo_plugin_xyz"]
    assert len(bad) == 1 and (bad[0]["status"], bad[0]["stage"]) == ("failed", "import")
    assert any("no_such_turbo_plugin_xyz" in p and "failed at import" in p for p in report["problems"])
    names = [b["name"] for b in report["backends"]]
    assert "TORCH" in names
    assert next(b for b in report["backends"] if b["name"] == "TORCH")["available"] is True
    # reported once on stderr through the "turbo" logger, not as a traceback
    assert len([line for line in proc.stderr.splitlines() if "no_such_turbo_plugin_xyz" in line]) == 1
    assert "Traceback" not in proc.stderr
