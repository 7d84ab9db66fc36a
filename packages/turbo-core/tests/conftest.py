"""Shared fixtures: isolation of every test and the fake plugins under ``fake_plugins/``.

Every test starts with no plugin loaded, no backend setting, empty tune caches, no one-time
warning emitted, no ``TURBO_*``/``PRIMUS_TURBO_*`` variable set, and fresh fake plugin modules.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

FAKE_DIR = (Path(__file__).parent / "fake_plugins").resolve()
if str(FAKE_DIR) not in sys.path:  # test-only: lets TURBO_PLUGINS name the fake plugin modules
    sys.path.insert(0, str(FAKE_DIR))

# (``turbo_core.dispatch.primitives`` the attribute is the function of that name: take the module)
_primitives = importlib.import_module("turbo_core.dispatch.primitives")
from turbo_core.dispatch.catalog import get_primitive  # noqa: E402
from turbo_core.dispatch.manager import GlobalBackendManager  # noqa: E402
from turbo_core.dispatch.primitives import Primitive  # noqa: E402
from turbo_core.dispatch.specs.gemm import GemmArgs  # noqa: E402
from turbo_core.plugins import host as _host  # noqa: E402

_REAL_ENTRY_POINTS = _host._entry_points


def core_entry_points() -> list:
    """turbo-core's own installed entry points (the reference backend TORCH), whatever else is
    installed in this environment: the tests see the same backends in every nox session."""
    return [ep for ep in _REAL_ENTRY_POINTS() if ep.value.startswith("turbo_core.")]


def _purge_fake_modules() -> None:
    fake_dir = str(FAKE_DIR)
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and os.path.dirname(file) == fake_dir:
            del sys.modules[name]


def _reset() -> None:
    _host.reset_host()
    GlobalBackendManager.reset()
    _purge_fake_modules()


@pytest.fixture(autouse=True)
def _isolate(monkeypatch):
    for var in list(os.environ):
        if var.startswith(("TURBO_", "PRIMUS_TURBO_")):
            monkeypatch.delenv(var)
    core = core_entry_points()
    monkeypatch.setattr(_host, "_entry_points", lambda: list(core))
    _reset()
    yield
    _reset()


@pytest.fixture
def fakekit():
    """The (fresh) shared state module of the fake backends FAKEA/FAKEB/FAKEC."""
    return importlib.import_module("fakekit")


@pytest.fixture
def use_plugins(monkeypatch):
    """``use_plugins("fake_a", "fake_b")`` sets TURBO_PLUGINS (plugins load on the next get_host())."""
    def _set(*modules: str) -> None:
        monkeypatch.setenv("TURBO_PLUGINS", ",".join(modules))
    return _set


@dataclass
class FakeDist:
    name: str


class FakeEntryPoint:
    """Quacks like ``importlib.metadata.EntryPoint`` as far as the plugin host cares."""

    def __init__(self, name: str, value: str, dist: str | None = "fake-dist", on_load=None):
        self.name, self.value = name, value
        self.dist = FakeDist(dist) if dist else None
        self.group = "turbo.backends"
        self.loads = 0
        self._on_load = on_load

    def load(self):
        self.loads += 1
        if self._on_load is not None:
            self._on_load()
        return importlib.import_module(self.value)


@pytest.fixture
def fake_entry_point():
    """The :class:`FakeEntryPoint` class."""
    return FakeEntryPoint


@pytest.fixture
def fake_dir() -> Path:
    """The directory holding the fake plugin modules."""
    return FAKE_DIR


@pytest.fixture
def entry_points(monkeypatch):
    """``entry_points(ep, ...)``: turbo-core's entry point (TORCH) followed by the given fakes."""
    def _set(*eps: FakeEntryPoint, keep_core: bool = True) -> None:
        real = core_entry_points() if keep_core else []
        monkeypatch.setattr(_host, "_entry_points", lambda: real + list(eps))
    return _set


@pytest.fixture
def test_primitive(monkeypatch):
    """Define a test-only gemm-shaped primitive (undone after the test): ``test_primitive(name,
    precision, family)``. Call it before plugins load, and add the name to ``fakekit.PRIMITIVES``
    to have the fake backends serve it."""
    gemm = get_primitive("gemm")

    def _define(name: str, precision, family: str = "gemm") -> Primitive:
        prim = Primitive(name=name, args_type=GemmArgs, precision=precision, family=family,
                         validate=gemm.validate, mutates=("out",))
        monkeypatch.setitem(_primitives._PRIMITIVES, name, prim)
        return prim
    return _define


def gemm_args(m: int = 8, n: int = 6, k: int = 4, dtype=torch.float32, **kw) -> GemmArgs:
    """GemmArgs for ``op(a) @ op(b)`` with result ``[m, n]`` honouring trans_a/trans_b."""
    gen = torch.Generator().manual_seed(m * 10007 + n * 101 + k)
    a_shape = (k, m) if kw.get("trans_a") else (m, k)
    b_shape = (n, k) if kw.get("trans_b") else (k, n)
    a = torch.randn(a_shape, generator=gen).to(dtype)
    b = torch.randn(b_shape, generator=gen).to(dtype)
    return GemmArgs(a, b, **kw)


@pytest.fixture
def make_args():
    """The :func:`gemm_args` factory."""
    return gemm_args
