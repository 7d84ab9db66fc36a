"""``turbo profile``: the hot-kernel table of a bench suite and of a user script, attributed to the
``turbo::<primitive>[<backend>]`` ranges that ``dispatch.call()`` opens only while a profiler runs;
the Chrome trace, the JSON rows and the ``--tool`` pass-through (and its "missing" message).

CPU only here: with no device kernel recorded the table is over CPU ops and ranges. Call counts are
checked against the dispatcher's own accounting (``dispatch.stats()``) or against the number of calls
the test script makes, never against the table code.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap

import pytest
import torch

import turbo_core.profiling.labels as labels
from turbo_core import ops
from turbo_core.cli import main
from turbo_core.dispatch import dispatcher
from turbo_core.profiling.labels import label, parse_label


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # rich (the bench tables) wraps cells at the terminal width


def _rows(path) -> list[dict]:
    with open(path) as fh:
        return json.load(fh)["rows"]


def _row(rows, name, op=None):
    found = [r for r in rows if r["name"] == name and (op is None or r["op"] == op)]
    assert len(found) == 1, (name, op, [(r["name"], r["op"]) for r in rows][:40])
    return found[0]


def test_label_round_trip():
    assert label("gemm", "TRITON") == "turbo::gemm[TRITON]"
    assert parse_label("turbo::grouped_gemm_fp8[TORCH]") == ("grouped_gemm_fp8", "TORCH")
    for name in ("aten::mm", "turbo::gemm", "turbo::[TORCH]", "turbo::gemm[]", "gemm[TORCH]"):
        assert parse_label(name) is None


def test_bench_suite_table_trace_and_json(tmp_path, capsys):
    trace, out = tmp_path / "trace.json", tmp_path / "rows.json"
    dispatcher.clear_warnings()  # zeroes dispatch.stats()
    rc = main(["profile", "--top", "0", "--trace", str(trace), "--out", str(out),
               "bench", "gemm", "--quick", "--include-reference"])
    text = capsys.readouterr().out
    assert rc == 0
    torch_calls = sum(n for (prim, backend, _how), n in dispatcher.stats().items()
                      if prim == "gemm" and backend == "TORCH")
    assert torch_calls > 0

    rows = _rows(out)
    assert {r["kind"] for r in rows} == {"cpu"}
    rng = _row(rows, "turbo::gemm[TORCH]")
    assert (rng["op"], rng["backend"]) == ("gemm", "TORCH")
    assert rng["calls"] == torch_calls  # one range per dispatched call, no more, no less
    assert rng["total_us"] > 0 and rng["mean_us"] == pytest.approx(rng["total_us"] / rng["calls"])
    mm = _row(rows, "aten::mm", op="gemm")
    assert mm["backend"] is not None and mm["calls"] > 0
    assert sum(r["share"] for r in rows) == pytest.approx(1.0, rel=1e-6)
    assert [r["self_us"] for r in rows] == sorted((r["self_us"] for r in rows), reverse=True)

    line = next(ln for ln in text.splitlines() if ln.startswith("turbo::gemm[TORCH]"))
    assert line.split()[1] == "gemm[TORCH]" and int(line.split()[2]) == torch_calls

    with open(trace) as fh:
        events = json.load(fh)["traceEvents"]
    assert sum(1 for e in events if e.get("name") == "turbo::gemm[TORCH]") == torch_calls


SCRIPT = """
import sys
import torch
import turbo_core
from turbo_core import ops

n = int(sys.argv[1])
with open(sys.argv[2], "w") as fh:
    fh.write(repr(sys.argv))
gen = torch.Generator().manual_seed(0)
a = torch.randn(5, 7, generator=gen)
b = torch.randn(7, 3, generator=gen)
with turbo_core.use_backend("TORCH"):
    for _ in range(n):
        c = ops.gemm(a, b)
err = (c.double() - a.double() @ b.double()).abs().max().item()
if err > 1e-4:
    sys.exit(f"gemm wrong by {err}")
sys.exit(int(sys.argv[3]))
"""


def _script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(SCRIPT))
    return path


def test_user_script_in_process_is_attributed(tmp_path, capsys):
    script, argv_file, out = _script(tmp_path), tmp_path / "argv.txt", tmp_path / "rows.json"
    argv_before = sys.argv[:]
    rc = main(["profile", "--out", str(out), "--", "python", str(script), "4", str(argv_file), "0"])
    text = capsys.readouterr().out
    assert rc == 0
    assert sys.argv == argv_before
    assert argv_file.read_text() == repr([str(script), "4", str(argv_file), "0"])
    rows = _rows(out)
    assert _row(rows, "turbo::gemm[TORCH]")["calls"] == 4
    mm = _row(rows, "aten::mm", op="gemm")
    assert (mm["backend"], mm["calls"]) == ("TORCH", 4)
    assert "turbo::gemm[TORCH]" in text


def test_user_script_exit_code_is_returned(tmp_path, capsys):
    script = _script(tmp_path)
    rc = main(["profile", "--", sys.executable, str(script), "1", str(tmp_path / "a.txt"), "3"])
    assert rc == 3
    assert "exited with 3" in capsys.readouterr().err


def test_no_label_while_profiler_off(monkeypatch):
    def boom(*_a, **_k):
        raise AssertionError("labelled path taken with no profiler running")

    monkeypatch.setattr(labels, "run_labelled", boom)
    monkeypatch.setattr(torch.profiler, "record_function", boom)
    monkeypatch.setattr(torch.autograd.profiler, "record_function", boom)
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(6, 4, generator=gen), torch.randn(4, 5, generator=gen)
    c = ops.gemm(a, b)
    assert torch.allclose(c.double(), a.double() @ b.double(), atol=1e-5)
    assert not labels.profiler_active()


def test_label_taken_while_profiler_on(monkeypatch):
    seen = []
    real = labels.run_labelled

    def spy(primitive, backend, kernel, args):
        seen.append((primitive, backend))
        return real(primitive, backend, kernel, args)

    monkeypatch.setattr(labels, "run_labelled", spy)
    a, b = torch.ones(3, 2), torch.ones(2, 4)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert labels.profiler_active()
        c = ops.gemm(a, b)
    assert seen and seen[0][0] == "gemm"
    assert torch.equal(c, torch.full((3, 4), 2.0))
    assert not labels.profiler_active()


def test_tool_missing_names_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no nsys / ncu / rocprof
    rc = main(["profile", "--tool", "nsys", "--", "python", "train.py"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "--tool nsys: `nsys` is not on PATH" in err
    assert "Nsight Systems" in err and "none of nsys, ncu, rocprof is on PATH" in err


def test_tool_present_reruns_under_it(tmp_path, monkeypatch):
    record = tmp_path / "args.txt"
    fake = tmp_path / "nsys"
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {record}\nexit 7\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ.get("PATH", ""))
    rc = main(["profile", "--tool", "nsys", "--tool-args", "profile -o my run", "bench", "gemm", "--quick"])
    assert rc == 7
    assert record.read_text().splitlines() == [
        "profile", "-o", "my", "run", sys.executable, "-m", "turbo_core.cli", "profile", "--emit-nvtx",
        "bench", "gemm", "--quick"]


@pytest.mark.parametrize("argv, needle", [
    (["profile"], "give a target"),
    (["profile", "--", "ls", "-l"], "command: 'ls' is not a Python interpreter"),
    (["profile", "--", "python", "missing_script.py"], "'missing_script.py' does not exist"),
    (["profile", "--top", "-1", "--", "python", "x.py"], "--top must be >= 0"),
])
def test_bad_targets_are_named(argv, needle, capsys):
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


def _event(name, eid, *, device="CPU", start=0.0, end=1.0, parent=None, link=0):
    from types import SimpleNamespace

    return SimpleNamespace(name=name, id=eid, device_type=SimpleNamespace(name=device), is_async=False,
                           time_range=SimpleNamespace(start=start, end=end), cpu_parent=parent,
                           linked_correlation_id=link, cpu_time_total=end - start, self_cpu_time_total=end - start)


def test_device_kernels_are_attributed_through_op_links_and_launch_calls():
    """A kernel linked to the op that launched it, a Triton kernel launched through the driver API
    outside any op (found through its launch call's correlation id), and a kernel with neither."""
    from turbo_core.profiling.table import hot_rows

    turbo = _event("turbo::gemm[TRITON]", 7, start=0, end=100)
    aten = _event("aten::mm", 8, start=10, end=20, parent=turbo)
    launch = _event("cuLaunchKernelEx", 501, start=30, end=31, parent=turbo)
    other_op = _event("aten::add", 502, start=200, end=210)  # an op whose id equals a kernel's: no launch call
    events = [turbo, aten, launch, other_op,
              _event("nvjet_gemm", 401, device="CUDA", start=0, end=40, link=8),           # linked to aten::mm
              _event("triton_gemm_kernel", 501, device="CUDA", start=50, end=110),         # via cuLaunchKernelEx
              _event("triton_gemm_kernel", 501, device="CUDA", start=120, end=180),
              _event("mystery", 502, device="CUDA", start=300, end=305),                    # neither
              _event("turbo::gemm[TRITON]", 7, device="CUDA", start=0, end=180)]            # the range's GPU copy
    rows = {(r.name, r.op, r.backend): r for r in hot_rows(events)}
    assert all(r.kind == "device" for r in rows.values())
    assert rows[("triton_gemm_kernel", "gemm", "TRITON")].calls == 2
    assert rows[("triton_gemm_kernel", "gemm", "TRITON")].total_us == 120
    assert rows[("nvjet_gemm", "gemm", "TRITON")].total_us == 40
    assert rows[("mystery", None, None)].calls == 1
    assert not any(name.startswith("turbo::") for name, _, _ in rows)
    assert abs(sum(r.share for r in rows.values()) - 1) < 1e-12


def test_kineto_trace_marks_are_kept_off_stderr_and_other_lines_pass(capfd):
    import os

    from turbo_core.profiling.session import profile_call, without_kineto_trace_marks

    with without_kineto_trace_marks():
        os.write(2, b"USDT:2026-01-01 00:00:00 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"kineto: a warning the user should see\n")
    assert capfd.readouterr().err == "kineto: a warning the user should see\n"
    prof, code = profile_call(lambda: 7)
    err = capfd.readouterr().err
    assert code == 7 and "USDT" not in err and "profiler_st" not in err
    assert prof.events() is not None
