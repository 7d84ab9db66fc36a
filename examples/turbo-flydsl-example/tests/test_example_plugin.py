"""The example plugin end to end, in an environment where it was pip-installed next to turbo-core:
discovered through its entry point, listed, selectable by environment variable, dispatched."""

import os
import subprocess
import sys

import pytest
import torch

import turbo_core
from turbo_core import BackendError, GlobalBackendManager
from turbo_core.dispatch import call, select
from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_core.plugins.host import reset_host
from turbo_core.testing import backend_row


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for var in [v for v in os.environ if v.startswith(("TURBO_", "PRIMUS_TURBO_"))]:
        monkeypatch.delenv(var)
    reset_host()
    GlobalBackendManager.reset()
    yield
    reset_host()
    GlobalBackendManager.reset()


def test_listed_by_turbo_backends():
    row = backend_row("FLYDSL")
    assert row["package"] == "turbo-flydsl-example"
    assert row["plugin"] == "flydsl"
    assert row["available"] is True
    assert "gemm" in row["primitives"]


def test_selected_by_env_and_dispatched(monkeypatch):
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "flydsl")
    torch.manual_seed(0)
    a, b = torch.randn(37, 70), torch.randn(53, 70)
    args = GemmArgs(a, b, trans_b=True)
    sel = select("gemm", args)
    assert (sel.backend, sel.how) == ("FLYDSL", "env")
    got = call("gemm", args)
    want = (a.double() @ b.double().t()).float()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert turbo_core.dispatch.stats()[("gemm", "FLYDSL", "env")] == 1


def test_declines_with_its_reason_when_pinned(monkeypatch):
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "FLYDSL")
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with pytest.raises(BackendError, match="does not accumulate into out"):
        call("gemm", GemmArgs(a, b, out=torch.zeros(4, 3)))


def test_env_selection_in_a_fresh_process():
    code = (
        "import torch; from turbo_core.dispatch import select; "
        "from turbo_core.dispatch.specs.gemm import GemmArgs; "
        "print(select('gemm', GemmArgs(torch.ones(2, 2), torch.ones(2, 2))).backend)"
    )
    env = dict(os.environ, TURBO_GEMM_BACKEND="FLYDSL")
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "FLYDSL"
