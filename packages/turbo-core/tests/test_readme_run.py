"""README.md run as a newcomer runs it on a CPU, after its install step (turbo-core, turbo-triton and
numpy installed, ``TRITON_INTERPRET=1`` exported): the Python quick start in a fresh interpreter, its
results checked against float64 math; every ``turbo ...`` line of its command blocks through the
installed console script, each with exit status 0 and a real result; the example third-party plugin
found and run.

``nox -s readme`` runs this module after running the README's ``pip install`` lines as written;
elsewhere it needs turbo-triton and triton installed and skips without them (``TURBO_README_TESTS=1``:
an error instead). Quick options: ``turbo accuracy --quick`` runs its gemm family only here (every
family takes about a minute under Triton's interpreter); every other command runs as the README shows
it. The commands run in parallel, each in its own process.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from console_script import clean_env, turbo
from readme_parts import README, ROOT, install_env, quick_start, turbo_commands

_TRITON = [ep for ep in importlib.metadata.entry_points(group="turbo.backends") if ep.value == "turbo_triton.plugin"]
if not _TRITON or importlib.util.find_spec("triton") is None:
    if os.environ.get("TURBO_README_TESTS") == "1":
        raise RuntimeError("TURBO_README_TESTS=1 but turbo-triton or triton is not installed here")
    pytest.skip("needs turbo-triton and triton installed, as the README's install step leaves them "
                "(nox -s readme runs this)", allow_module_level=True)

#: What the README's install step leaves set on a machine without a GPU (its ``export`` lines).
ENV = install_env(README.read_text())
#: Options added to a README command here, to keep this module's time down.
QUICK = {("accuracy", "--quick"): ("--families", "gemm")}
EXAMPLE_SRC = ROOT / "examples" / "turbo-flydsl-example" / "src"

#: Runs the quick start (file argv[1]) as the README shows it, then prints one JSON line: its results
#: against float64 math, and the dispatcher's accounting.
HARNESS = '''
import json, sys
import torch
from turbo_core.dispatch import stats

namespace = {"__name__": "__main__"}
exec(compile(open(sys.argv[1]).read(), "README.md quick start", "exec"), namespace)
a, w, y, layer, out = (namespace[k] for k in ("a", "w", "y", "layer", "out"))
a64, w64 = a.double(), w.detach().double()


def err(got, want):
    return ((got.detach().double() - want).abs() / (want.abs() + 1)).max().item()


print(json.dumps({
    "y_shape": list(y.shape), "y_err": err(y, a64 @ w64.T),
    # d(sum(a @ w.T))/dw: every row of w.grad is the column sums of a
    "grad_err": err(w.grad, a64.sum(0).expand_as(w64)),
    "out_shape": list(out.shape),
    "out_err": err(out, a64 @ layer.weight.detach().double().T + layer.bias.detach().double()),
    "stats": [[p, b, how, n] for (p, b, how), n in stats().items()],
}))
'''


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A folder holding the quick start as ``train.py`` (what ``turbo profile -- python train.py`` runs)."""
    folder = tmp_path_factory.mktemp("readme")
    (folder / "train.py").write_text(quick_start(README.read_text()))
    (folder / "harness.py").write_text(HARNESS)
    return folder


def _quick_start(folder) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(folder / "harness.py"), str(folder / "train.py")],
                          env=clean_env(**ENV), capture_output=True, text=True, timeout=300, cwd=folder)


def _plugin_env() -> dict[str, str]:
    """``pip install -e examples/turbo-flydsl-example`` without touching this environment: the same plugin
    module, found on PYTHONPATH and named in TURBO_PLUGINS."""
    return clean_env(**ENV, PYTHONPATH=str(EXAMPLE_SRC), TURBO_PLUGINS="turbo_flydsl_example.plugin")


@pytest.fixture(scope="module")
def runs(workdir):
    """README command (tuple) -> its finished process; also ``"quick start"`` and the plugin runs."""
    commands = [tuple(argv) for argv in turbo_commands(README.read_text())]
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {argv: pool.submit(turbo, *argv, *QUICK.get(argv, ()), env=clean_env(**ENV), cwd=workdir)
                   for argv in commands}
        futures["quick start"] = pool.submit(_quick_start, workdir)
        futures["plugin: backends"] = pool.submit(turbo, "backends", env=_plugin_env(), cwd=workdir)
        futures["plugin: accuracy"] = pool.submit(turbo, "accuracy", "--quick", "--families", "gemm", "--backends",
                                                  "FLYDSL", env=_plugin_env(), cwd=workdir)
        return {name: future.result() for name, future in futures.items()}


def _ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"exit status {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def test_the_quick_start_runs_its_gemms_on_triton_and_matches_float64(runs):
    stdout = _ok(runs["quick start"])
    shown, result = stdout.splitlines()[:-1], json.loads(stdout.splitlines()[-1])
    assert result["y_shape"] == [32, 48] == result["out_shape"]
    assert shown and shown[0].startswith("torch.Size([32, 48]) {('gemm', 'TRITON', 'code'): ")
    gate = 1e-4  # fp32 (turbo_core.testing.numerics)
    assert result["y_err"] < gate and result["grad_err"] < gate and result["out_err"] < gate, result
    # gemm's forward, its weight gradient, the Linear's forward: all on TRITON by the code setting
    assert result["stats"] == [["gemm", "TRITON", "code", 3]]


def _checks(stdout: str) -> dict:
    lines = stdout.splitlines()
    return {
        ("backends",): lambda: any(ln.split()[:1] == ["TRITON"] and ln.endswith(" ok") for ln in lines),
        ("backends", "--matrix"): lambda: "TRITON" in lines[0].split() and any(
            ln.split()[:3] == ["gemm", "gemm", "x"] and ln.split().count("x") >= 2 for ln in lines),
        ("doctor",): lambda: "no problems found" in stdout and "TRITON" in stdout,
        ("accuracy", "--quick"): lambda: any(ln.endswith(" passed, 0 failed, 0 declined") for ln in lines)
        and any(ln.startswith("TRITON ") and " pass " in ln for ln in lines),
        ("bench", "gemm", "--quick"): lambda: "turbo:TRITON" in stdout,
        ("profile", "--", "python", "train.py"): lambda: any(
            ln.split()[:3] == ["turbo::gemm[TRITON]", "gemm[TRITON]", "3"] for ln in lines),
    }


def test_every_turbo_command_of_the_readme_exits_0_with_a_result(runs):
    commands = [tuple(argv) for argv in turbo_commands(README.read_text())]
    assert ("accuracy", "--quick") in commands and ("profile", "--", "python", "train.py") in commands
    for argv in commands:
        stdout = _ok(runs[argv])
        checks = _checks(stdout)
        assert argv in checks, f"README command `turbo {' '.join(argv)}`: add its check to _checks"
        assert checks[argv](), f"turbo {' '.join(argv)}: unexpected output\n{stdout[-3000:]}"


def test_the_example_plugin_is_listed_and_runs_gemm(runs):
    listed = _ok(runs["plugin: backends"]).splitlines()
    assert any(ln.split()[:2] == ["FLYDSL", "turbo-flydsl-example"] and ln.endswith(" ok") for ln in listed)
    checked = _ok(runs["plugin: accuracy"]).splitlines()
    assert any(ln.startswith("FLYDSL ") and " pass " in ln for ln in checked)
    assert any(ln.endswith(" passed, 0 failed, 0 declined") for ln in checked)
