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


def test_registers_only_what_it_can_run(row):
    # No kernels yet: the listing must say so rather than advertise primitives.
    assert row["primitives"] == {}
    assert "not implemented yet" in row["notes"]


def test_discovery_imports_no_kernel_library():
    mods = imported_modules_after("from turbo_core.plugins import get_host; get_host()")
    assert "turbo_aiter" in mods
    assert not {"triton", "aiter", "deep_ep"} & mods


@pytest.mark.skipif(bool(torch.version.hip), reason="ROCm torch: the no-ROCm reason does not apply")
def test_unavailable_without_rocm(row):
    assert row["available"] is False
    assert row["reason"].startswith("needs ROCm (gfx942/gfx950); no ROCm found")


def test_amd_aiter_is_installed_but_never_imported():
    import importlib.util

    assert importlib.util.find_spec("aiter") is not None, "amd-aiter is a dependency of turbo-aiter"
    mods = imported_modules_after("import turbo_core.cli.inventory as i; i.backend_rows()")
    assert "aiter" not in mods  # even probing never imports it (it raises without ROCm)
