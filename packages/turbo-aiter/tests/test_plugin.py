"""The AITER plugin: discovered through its entry point, honest about availability, cheap to import."""

import pytest
import torch

import turbo_aiter
from turbo_core.testing import backend_row, imported_modules_after


@pytest.fixture(scope="module")
def row():
    return backend_row("AITER")


def test_listed_through_entry_point(row):
    assert row["package"] == "turbo-aiter"
    assert row["version"] == turbo_aiter.__version__
    assert row["plugin"] == "aiter"  # the installed entry point, not TURBO_PLUGINS


def test_registers_the_aiter_adapters(row):
    assert set(row["primitives"]) == {"attention_fwd", "attention_bwd", "gemm_fp8", "gemm_fp4", "rmsnorm_fwd"}
    assert "never compiled or run on AMD hardware" in row["notes"]


def test_discovery_imports_no_kernel_library():
    mods = imported_modules_after("from turbo_core.plugins import get_host; get_host()")
    assert "turbo_aiter" in mods
    assert not {"triton", "aiter", "deep_ep"} & mods


@pytest.mark.skipif(bool(torch.version.hip), reason="ROCm torch: the no-ROCm reason does not apply")
def test_unavailable_without_rocm(row):
    assert row["available"] is False
    assert row["reason"].startswith("needs ROCm (gfx942/gfx950); no ROCm found")


def test_probing_never_imports_aiter():
    # amd-aiter is the optional extra turbo-aiter[rocm]; installed or not, probing only looks for it.
    mods = imported_modules_after("import turbo_core.cli.inventory as i; i.backend_rows()")
    assert "aiter" not in mods  # (importing it without ROCm raises)


def test_probe_reasons(monkeypatch):
    import importlib.util

    from turbo_aiter import probe

    monkeypatch.setattr(torch.version, "hip", None)
    assert probe.probe().startswith("needs ROCm (gfx942/gfx950); no ROCm found (this torch is a ")
    monkeypatch.setattr(torch.version, "hip", "7.0")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert probe.probe() == "aiter is not importable: amd-aiter is not installed (pip install turbo-aiter[rocm])"
