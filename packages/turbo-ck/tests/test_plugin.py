"""The CK plugin: discovered through its entry point, honest about availability, cheap to import, and
registering its kernels also where the wheel ships no compiled extension (they then decline every call
with the reason)."""

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
def test_pure_wheel_lists_its_kernels_and_says_why_it_cannot_run(row):
    assert set(row["primitives"]) == {"gemm_fp8", "grouped_gemm", "grouped_gemm_fp8"}
    assert row["primitives"]["grouped_gemm"]["variants"] == ["bf16", "fp16"]
    assert row["available"] is False
    assert row["reason"].startswith(NO_TOOLKIT + " when this wheel was built")
    assert row["notes"].startswith("gemm_fp8 (TENSORWISE/ROWWISE")


@no_extension
def test_pure_wheel_kernels_decline_with_the_reason():
    from turbo_core.plugins import get_host

    registry = get_host().registry
    reason = EXTENSION.missing_reason()
    for prim in ("gemm_fp8", "grouped_gemm", "grouped_gemm_fp8"):
        assert registry.kernel(prim, "CK").decline_reason(object()) == reason
    assert registry.backend("CK").unavailable_reason() == reason


@pytest.mark.skipif(bool(torch.version.hip) or EXTENSION.installed(), reason="ROCm torch or a compiled extension")
def test_unavailable_here(row):
    assert row["available"] is False
