"""The DEEP_EP plugin: discovered through its entry point, honest about availability, cheap to import."""

import pytest
import torch

import turbo_deepep
from turbo_core.testing import backend_row, imported_modules_after


@pytest.fixture(scope="module")
def row():
    return backend_row("DEEP_EP")


def test_listed_through_entry_point(row):
    assert row["package"] == "turbo-deepep"
    assert row["version"] == turbo_deepep.__version__
    assert row["plugin"] == "deep_ep"  # the installed entry point, not TURBO_PLUGINS


def test_registers_only_what_it_can_run(row):
    # No kernels yet: the listing must say so rather than advertise primitives.
    assert row["primitives"] == {}
    assert "not implemented yet" in row["notes"]


def test_discovery_imports_no_kernel_library():
    mods = imported_modules_after("from turbo_core.plugins import get_host; get_host()")
    assert "turbo_deepep" in mods
    assert not {"triton", "aiter", "deep_ep"} & mods


def test_available_with_torch_distributed(row):
    assert torch.distributed.is_available()
    assert row["available"] is True and row["reason"] is None
