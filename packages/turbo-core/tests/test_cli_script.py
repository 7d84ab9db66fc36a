"""The installed ``turbo`` console script, run as a user's shell runs it (a subprocess, its output piped):
bad settings stop every command with one line and exit status 2; ``turbo backends`` gives one line per
backend at 80 columns and a primitive x backend matrix; with no turbo backend able to run, ``accuracy``,
``bench`` and ``profile`` say why and exit 1, and no profiler trace mark reaches the output.

The child sees turbo-core's reference backend TORCH and the test backend SLOWPOKE (a plugin module
written here, registered for gemm, grouped_gemm and rmsnorm_fwd, that cannot run: its probe returns
``$SLOWPOKE_REASON``); the other installed backend packages are disabled, so every nox session sees the
same two backends.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from console_script import clean_env, other_plugins, turbo

from turbo_core.cli import primitive_docs
from turbo_core.cli.backend_table import family_group, groups
from turbo_core.dispatch.catalog import primitives

PLUGIN = '''
import os

from turbo_core.plugins import BackendInfo, Kernel, hookimpl


def probe():
    return os.environ["SLOWPOKE_REASON"]


@hookimpl
def turbo_backend_info():
    return BackendInfo(name="SLOWPOKE", package="turbo-slowpoke", version="2.0.1", probe=probe)


@hookimpl
def turbo_register_kernels(register):
    for primitive in ("gemm", "grouped_gemm", "rmsnorm_fwd"):
        register(Kernel(primitive, "SLOWPOKE", impl=lambda args: None))
'''
GUIDE = Path(__file__).resolve().parents[3] / "docs" / "plugin-guide.md"
NO_GPU = "no GPU (set TRITON_INTERPRET=1 to run the Triton kernels on the CPU interpreter)"
NO_TOOLKIT = "built without Slowpoke: no compiler was found when this wheel was built (install one, then rebuild)"


#: Every run of this module: name -> (argv, SLOWPOKE's reason, extra variables). They start together, in
#: parallel, the first time a test asks for one (each is mostly the start of a Python process with torch).
RUNS = {
    "demo, bad setting": (("demo",), NO_GPU, {"TURBO_GEMM_BACKEND": "NOPE"}),
    "accuracy, bad setting": (("accuracy", "--quick"), NO_GPU, {"TURBO_GEMM_BACKEND": "NOPE"}),
    "backends, bad settings": (("backends",), NO_GPU, {"TURBO_GEM_BACKEND": "TORCH", "TURBO_TUNE_ITERS": "0",
                                                       "TURBO_GEMM_FP8_BACKEND": "fp8:CK,other:TORCH"}),
    "backends": (("backends",), NO_TOOLKIT, {}),
    "matrix": (("backends", "--matrix", "--markdown"), NO_GPU, {}),
    "primitives": (("backends", "--primitives", "--markdown"), NO_GPU, {}),
    "accuracy": (("accuracy", "--quick", "--families", "gemm"), NO_GPU, {}),
    "bench": (("bench", "gemm", "--quick"), NO_GPU, {}),
    "profile": (("profile", "bench", "gemm", "--quick"), NO_GPU, {}),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> the finished ``subprocess.CompletedProcess`` of each of :data:`RUNS`."""
    folder = tmp_path_factory.mktemp("slowpoke")
    (folder / "slowpoke_plugin.py").write_text(PLUGIN)
    disabled = {"TURBO_DISABLE_PLUGINS": other_plugins()} if other_plugins() else {}

    def env(reason: str, variables: dict[str, str]) -> dict[str, str]:
        return clean_env(PYTHONPATH=str(folder), TURBO_PLUGINS="slowpoke_plugin", SLOWPOKE_REASON=reason,
                         **disabled, **variables)

    with ThreadPoolExecutor(max_workers=len(RUNS)) as pool:
        futures = {name: pool.submit(turbo, *argv, env=env(reason, variables))
                   for name, (argv, reason, variables) in RUNS.items()}
        return {name: future.result() for name, future in futures.items()}


@pytest.mark.parametrize("name", ["demo, bad setting", "accuracy, bad setting"])
def test_a_bad_setting_stops_the_command_with_one_line(runs, name):
    proc = runs[name]
    assert proc.returncode == 2
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    [line] = proc.stderr.splitlines()
    # the variable, the value, and the valid names: installed ones first, the others marked as not installed
    assert line.startswith(f"turbo {RUNS[name][0][0]}: TURBO_GEMM_BACKEND='NOPE': unknown backend 'NOPE'; "
                           "valid: TORCH, SLOWPOKE, AUTOTUNE (not installed: ")
    assert "CK" in line.split("(not installed: ")[1]


def test_each_bad_setting_gets_its_line(runs):
    proc = runs["backends, bad settings"]
    assert proc.returncode == 2 and proc.stdout == ""
    scope, backend, count = proc.stderr.splitlines()
    # the families that select several primitives (Primus-Turbo's four among them), then the pointer
    assert scope.startswith("turbo backends: TURBO_GEM_BACKEND: no family or primitive 'gem'; families: attn, "
                            "cross_entropy, gemm, ")
    assert "grouped_gemm, moe_dispatch_combine, " in scope and scope.endswith(", or a primitive (turbo backends --matrix)")
    assert backend == ("turbo backends: TURBO_GEMM_FP8_BACKEND='fp8:CK,other:TORCH': backend CK is not installed "
                       "(pip install turbo-ck); installed: TORCH, SLOWPOKE")
    assert count == "turbo backends: TURBO_TUNE_ITERS='0': expected an integer >= 1"


def _counts(names: set[str]) -> str:
    per = [sum(family_group(p.name) == g for p in primitives() if p.name in names) for g in groups()]
    return "/".join(str(n) if n else "-" for n in per)


def test_backends_one_line_each_at_80_columns_in_a_pipe(runs):
    proc = runs["backends"]
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert lines[0] == "primitives per family: gemm/grouped/attn/act/norm/moe/quant/loss (- = none)"
    assert lines[1].split() == ["backend", "package", "version", "primitives", "status"]
    torch_row, slow_row = lines[2].split(), lines[3].split()
    assert torch_row[:2] == ["TORCH", "turbo-core"]
    assert torch_row[3:] == [_counts({p.name for p in primitives()}), "ok"]
    # a backend that cannot run here still shows what it registers, and the first clause of its reason
    assert slow_row[:4] == ["SLOWPOKE", "turbo-slowpoke", "2.0.1", _counts({"gemm", "grouped_gemm", "rmsnorm_fwd"})]
    assert " ".join(slow_row[4:]) == "built without Slowpoke"
    assert lines[4:] == ["--wide: every primitive and the full reasons; --matrix: primitive x backend"]


def test_backends_matrix_markdown_covers_every_primitive(runs):
    proc = runs["matrix"]
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["| primitive | family | TORCH | SLOWPOKE |", "|---|---|:-:|:-:|"]
    body = {line.split(" | ")[0][3:-1]: line for line in lines[2:]}
    assert set(body) == {p.name for p in primitives()} and len(lines) == len(body) + 2
    assert body["gemm"] == "| `gemm` | `gemm` | x | x |"  # registered, though it cannot run here
    assert body["rmsnorm_bwd"] == "| `rmsnorm_bwd` | `rmsnorm` | x |  |"


def test_backends_primitives_markdown_is_the_plugin_guides_section(runs):
    proc = runs["primitives"]
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == primitive_docs.markdown() == primitive_docs.section_of(GUIDE.read_text())


@pytest.mark.parametrize("name", ["accuracy", "bench", "profile"])
def test_no_runnable_turbo_backend_says_why_and_exits_1(runs, name):
    proc, argv = runs[name], RUNS[name][0]
    assert proc.returncode == 1
    err = " ".join(proc.stderr.split())
    prefix = "turbo bench" if argv[0] == "profile" else f"turbo {argv[0]}"
    assert f"{prefix}: no turbo backend ran a case: these cannot run here: SLOWPOKE: {NO_GPU}" in err
    assert "Traceback" not in proc.stderr
    if argv[0] == "profile":
        assert "turbo profile: the target exited with 1" in proc.stderr
        # the table is there, and no line of kineto's (USDT: ... profiler_start / profiler_stop)
        assert "gemm[TORCH]" not in proc.stdout and "aten::" in proc.stdout
        assert "USDT" not in proc.stdout + proc.stderr and "profiler_st" not in proc.stdout + proc.stderr
