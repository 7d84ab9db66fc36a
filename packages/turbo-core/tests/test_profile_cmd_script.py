"""``turbo profile -- python script.py`` through the installed console script: a script that calls no turbo
op gets PyTorch's own table, then a message naming every installed backend and whether it can run here,
and exit status 1 (its own status when it fails); a script whose turbo ops all ran on the reference
backend TORCH exits with its own status 0, with a note naming the backend that ran nothing and why.

The child sees turbo-core's TORCH and the test backend SLOWPOKE (a plugin module written here, registered
for gemm, whose probe says the Triton-on-a-CPU reason); the other installed backend packages are disabled,
so every nox session sees the same two backends.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from console_script import clean_env, other_plugins, turbo

PLUGIN = '''
from turbo_core.plugins import BackendInfo, Kernel, hookimpl


def probe():
    return "no GPU (set TRITON_INTERPRET=1 to run the Triton kernels on the CPU interpreter)"


@hookimpl
def turbo_backend_info():
    return BackendInfo(name="SLOWPOKE", package="turbo-slowpoke", version="2.0.1", probe=probe)


@hookimpl
def turbo_register_kernels(register):
    register(Kernel("gemm", "SLOWPOKE", impl=lambda args: None))
'''
REASON = "no GPU (set TRITON_INTERPRET=1 to run the Triton kernels on the CPU interpreter)"

#: A script that runs PyTorch only: matmuls checked against float64, then exits with argv[1].
PLAIN = '''
import sys
import torch

gen = torch.Generator().manual_seed(0)
a, b = torch.randn(6, 5, generator=gen), torch.randn(5, 4, generator=gen)
for _ in range(3):
    c = a @ b
assert ((c.double() - a.double() @ b.double()).abs().max() < 1e-5)
sys.exit(int(sys.argv[1]))
'''

#: A script that runs turbo's gemm argv[1] times (the CPU default: TORCH), checked against float64.
TURBO = '''
import sys
import torch
from turbo_core.ops import gemm

gen = torch.Generator().manual_seed(0)
a, b = torch.randn(6, 5, generator=gen), torch.randn(5, 4, generator=gen)
for _ in range(int(sys.argv[1])):
    c = gemm(a, b)
assert ((c.double() - a.double() @ b.double()).abs().max() < 1e-5)
'''

RUNS = {"plain": ("plain.py", "0"), "plain, failing": ("plain.py", "3"), "turbo": ("turbo_gemm.py", "4")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("profile_script")
    (folder / "slowpoke_plugin.py").write_text(PLUGIN)
    (folder / "plain.py").write_text(PLAIN)
    (folder / "turbo_gemm.py").write_text(TURBO)
    disabled = {"TURBO_DISABLE_PLUGINS": other_plugins()} if other_plugins() else {}
    env = clean_env(PYTHONPATH=str(folder), TURBO_PLUGINS="slowpoke_plugin", **disabled)
    with ThreadPoolExecutor(max_workers=len(RUNS)) as pool:
        futures = {name: pool.submit(turbo, "profile", "--top", "0", "--", "python", script, arg, env=env, cwd=folder)
                   for name, (script, arg) in RUNS.items()}
        return {name: future.result() for name, future in futures.items()}


def _table_row(stdout: str, name: str) -> list[str]:
    [row] = [line.split() for line in stdout.splitlines() if line.split()[:1] == [name]]
    return row


@pytest.mark.parametrize("name, status", [("plain", 1), ("plain, failing", 3)])
def test_no_turbo_op_says_why_with_every_backend_and_fails(runs, name, status):
    proc = runs[name]
    assert proc.returncode == status, proc.stderr
    assert "Traceback" not in proc.stderr
    # the table is there: PyTorch's matmuls (three, and the float64 check's), outside any turbo call
    assert _table_row(proc.stdout, "aten::mm")[1:3] == ["-", "4"]
    assert "turbo::" not in proc.stdout
    lines = [line for line in proc.stderr.splitlines() if "USDT" not in line]
    start = lines.index("turbo profile: installed backends:")
    assert lines[start - 1].startswith("turbo profile: the target ran no turbo op: none of its calls reached "
                                       "turbo's dispatcher (turbo_core.ops, turbo_core.modules")
    assert lines[start + 1:start + 3] == ["  TORCH (turbo-core 0.1.0): can run here",
                                          f"  SLOWPOKE (turbo-slowpoke 2.0.1): cannot run here: {REASON}"]
    assert ("turbo profile: the target exited with 3" in lines) == (status == 3)


def test_turbo_ops_on_torch_only_exit_0_with_a_note(runs):
    proc = runs["turbo"]
    assert proc.returncode == 0, proc.stderr
    assert _table_row(proc.stdout, "turbo::gemm[TORCH]")[1:3] == ["gemm[TORCH]", "4"]
    err = proc.stderr.splitlines()
    i = err.index("turbo profile: every turbo op ran on the reference backend TORCH; "
                  "these backends cannot run here:")
    assert err[i + 1] == f"  SLOWPOKE: {REASON}"
    assert "ran no turbo op" not in proc.stderr
