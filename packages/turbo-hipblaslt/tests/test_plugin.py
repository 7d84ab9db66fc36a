"""The HIPBLASLT plugin: discovered through its entry point, honest about availability, cheap to import."""

import pytest

import turbo_hipblaslt
from turbo_core.testing import backend_row, imported_modules_after


@pytest.fixture(scope="module")
def row():
    return backend_row("HIPBLASLT")


def test_listed_through_entry_point(row):
    assert row["package"] == "turbo-hipblaslt"
    assert row["version"] == turbo_hipblaslt.__version__
    assert row["plugin"] == "hipblaslt"  # the installed entry point, not TURBO_PLUGINS


def test_registers_only_what_it_can_run(row):
    # No kernels yet: the listing must say so rather than advertise primitives.
    assert row["primitives"] == {}
    assert "not implemented yet" in row["notes"]


def test_discovery_imports_no_kernel_library():
    mods = imported_modules_after("from turbo_core.plugins import get_host; get_host()")
    assert "turbo_hipblaslt" in mods
    assert not {"triton", "aiter", "deep_ep"} & mods


def test_pure_wheel_reports_missing_extension(row):
    # This package has no compiled extension yet, on any machine.
    assert row["available"] is False
    assert row["reason"].startswith("built without a BLASLt toolkit; found neither ROCm hipBLASLt nor CUDA cuBLASLt")
