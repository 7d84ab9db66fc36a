"""turbo_core.plugins.extension: a backend's compiled module found without importing it, loaded once,
its failures remembered with their reason, a build on first use only through the backend's callable, and
a bad setting (``configure``) raised every time rather than remembered. The "compiled module" here is a
small Python module written into a temporary folder on ``sys.path``."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from turbo_core.plugins.extension import DTYPE_CODES, Extension, ExtensionUnavailable


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path; the modules written there are dropped from sys.modules afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        sys.modules.pop(name, None)


def test_shipped_module_is_found_without_import_then_loaded_once(site):
    (site / "fake_ext_ok.py").write_text("LOADS = []\nLOADS.append(1)\n")
    ext = Extension("fake_ext_ok", absent=lambda: pytest.fail("asked why it is absent"))
    assert ext.installed() and ext.missing_reason() is None
    assert "fake_ext_ok" not in sys.modules and ext.loaded() is None
    module = ext.load()
    assert ext.load() is module and ext.loaded() is module and module.LOADS == [1]


def test_absent_module_gives_the_backends_reason_and_remembers_it():
    ext = Extension("fake_ext_nowhere", absent=lambda: "built without a toolkit (looked in /opt/x)")
    assert not ext.installed()
    assert ext.missing_reason() == "built without a toolkit (looked in /opt/x)"
    with pytest.raises(ExtensionUnavailable, match=r"built without a toolkit \(looked in /opt/x\)"):
        ext.load()
    assert ext.missing_reason() == "built without a toolkit (looked in /opt/x)"


def test_broken_module_fails_once_with_its_error_and_is_not_retried(site):
    (site / "fake_ext_broken.py").write_text("raise OSError('libfoo.so: cannot open shared object file')\n")
    ext = Extension("fake_ext_broken", absent=lambda: None)
    want = "the compiled extension fake_ext_broken failed to load: OSError: libfoo.so: cannot open shared object"
    with pytest.raises(ExtensionUnavailable, match=want) as first:
        ext.load()
    assert isinstance(first.value.__cause__, OSError)
    (site / "fake_ext_broken.py").write_text("X = 1\n")  # fixed on disk: the failure still stands
    with pytest.raises(ExtensionUnavailable, match=want):
        ext.load()
    assert ext.missing_reason().startswith(want)
    ext.forget_failure()  # until forgotten
    sys.modules.pop("fake_ext_broken", None)
    assert ext.load().X == 1


def test_build_runs_only_when_nothing_is_shipped_and_absent_allows_it():
    built = types.ModuleType("fake_ext_jit")
    calls = []

    def build():
        calls.append(1)
        return built

    ext = Extension("fake_ext_jit", absent=lambda: None, build=build)
    assert ext.missing_reason() is None and calls == []  # reporting never builds
    assert ext.load() is built and ext.load() is built and calls == [1]

    refused = Extension("fake_ext_jit", absent=lambda: "no toolkit; JIT=1 found nothing", build=build)
    with pytest.raises(ExtensionUnavailable, match="no toolkit; JIT=1 found nothing"):
        refused.load()
    assert calls == [1]


def test_build_failure_is_remembered_with_the_compilers_message():
    def build():
        raise RuntimeError("compiling fake_ext_cc failed (c++ ...):\nerror: x")

    ext = Extension("fake_ext_cc", absent=lambda: None, build=build)
    with pytest.raises(ExtensionUnavailable, match="fake_ext_cc failed to load: RuntimeError: compiling"):
        ext.load()
    assert "error: x" in ext.missing_reason()


def test_bad_setting_raises_every_time_and_a_corrected_one_loads(site):
    (site / "fake_ext_cfg.py").write_text("MASK = []\n")
    setting = {"value": "fast"}

    def configure(module):
        if setting["value"] not in ("fp32", "any"):
            raise ExtensionUnavailable(f"SPLITK: expected fp32 or any, got {setting['value']!r}")
        module.MASK.append(setting["value"])

    ext = Extension("fake_ext_cfg", absent=lambda: None, configure=configure)
    for _ in range(2):
        with pytest.raises(ExtensionUnavailable, match="SPLITK: expected fp32 or any, got 'fast'"):
            ext.load()
        assert ext.loaded() is None and ext.missing_reason() is None
    setting["value"] = "any"
    assert ext.load().MASK == ["any"]


def test_dtype_codes_are_distinct_and_cover_the_gemm_dtypes():
    assert sorted(DTYPE_CODES.values()) == list(range(7))
    assert {torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2,
            torch.float8_e4m3fnuz, torch.float8_e5m2fnuz} == set(DTYPE_CODES)


def test_check_or_decline_keeps_the_check_or_declines_with_the_reason(site):
    (site / "fake_ext_here.py").write_text("")
    present = Extension("fake_ext_here", absent=lambda: pytest.fail("asked why it is absent"))
    assert present.check_or_decline("pkg.mod:can_handle") == "pkg.mod:can_handle"
    assert present.check_or_decline(None) is None
    absent = Extension("fake_ext_gone", absent=lambda: "built without a toolkit")
    for check in ("pkg.mod:can_handle", None):
        declined = absent.check_or_decline(check)
        assert declined(object()) == "built without a toolkit"
    assert "fake_ext_gone" not in sys.modules
