"""The CK plugin: discovered through its entry point, honest about availability, cheap to import."""

import pytest
import torch

import turbo_ck
from turbo_core.testing import backend_row, imported_modules_after


@pytest.fixture(scope="module")
def row():
    return backend_row("CK")


def test_listed_through_entry_point(row):
    assert row["package"] == "turbo-ck"
    assert row["version"] == turbo_ck.__version__
    assert row["plugin"] == "ck"  # the installed entry point, not TURBO_PLUGINS


def test_registers_only_what_it_can_run(row):
    # No kernels yet: the listing must say so rather than advertise primitives.
    assert row["primitives"] == {}
    assert "not implemented yet" in row["notes"]


def test_discovery_imports_no_kernel_library():
    mods = imported_modules_after("from turbo_core.plugins import get_host; get_host()")
    assert "turbo_ck" in mods
    assert not {"triton", "aiter", "deep_ep"} & mods


@pytest.mark.skipif(bool(torch.version.hip), reason="ROCm torch: the no-ROCm reason does not apply")
def test_unavailable_without_rocm(row):
    assert row["available"] is False
    assert row["reason"].startswith("needs ROCm with Composable Kernel (gfx942/gfx950); no ROCm found")
    assert row["platforms"] == ["rocm"] and row["archs"] == ["gfx942", "gfx950"]
