"""turbo-triton's availability probe: what it says on a machine without a GPU."""

from __future__ import annotations

import importlib.util

from turbo_triton import probe


def _find_spec_without(missing: str):
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == missing else real(name, *args, **kwargs)

    return find_spec


def test_the_interpreter_is_available_with_numpy(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert probe.probe() is None


def test_the_interpreter_without_numpy_says_so(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(importlib.util, "find_spec", _find_spec_without("numpy"))
    assert probe.probe() == "TRITON_INTERPRET=1 needs numpy, which is not installed (pip install numpy)"


def test_without_triton_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", _find_spec_without("triton"))
    assert probe.probe() == "triton is not installed (pip install triton)"


def test_without_a_gpu_or_the_interpreter_names_the_variable(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr("turbo_core.platform.gpu_count", lambda: 0)
    assert "set TRITON_INTERPRET=1" in probe.probe()
