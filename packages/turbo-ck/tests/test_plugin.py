"""The CK plugin: discovered through its entry point, honest about availability, cheap to import, and
registering kernels only when the wheel ships the compiled extension."""

import pytest
import torch

import turbo_ck
from turbo_ck._ext import EXTENSION
from turbo_ck._toolchain import NO_TOOLKIT
from turbo_core.testing import backend_row, imported_modules_after

no_extension = pytest.mark.skipif(EXTENSION.installed(), reason="this install has a compiled turbo_ck._C")


@pytest.fixture(scope="module")
def row():
    return backend_row("CK")


def test_listed_through_entry_point(row):
    assert row["package"] == "turbo-ck"
    assert row["version"] == turbo_ck.__version__
    assert row["plugin"] == "ck"  # the installed entry point, not TURBO_PLUGINS
    assert row["platforms"] == ["rocm"] and row["archs"] == ["gfx942", "gfx950"]


def test_discovery_imports_no_kernel_library():
    mods = imported_modules_after("from turbo_core.plugins import get_host; get_host()")
    assert "turbo_ck" in mods
    assert not {"triton", "aiter", "deep_ep", "turbo_ck._C", "turbo_ck.gemm_fp8"} & mods


@no_extension
def test_pure_wheel_registers_nothing_and_says_why(row):
    assert row["primitives"] == {}
    assert row["available"] is False
    assert row["reason"].startswith(NO_TOOLKIT + " when this wheel was built")
    assert row["notes"].startswith("no kernels registered: " + NO_TOOLKIT)


@pytest.mark.skipif(bool(torch.version.hip) or EXTENSION.installed(), reason="ROCm torch or a compiled extension")
def test_unavailable_here(row):
    assert row["available"] is False
