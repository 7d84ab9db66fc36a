"""Shared fixtures: a fake ``aiter`` (see fake_aiter.py) in place of the real import."""

from __future__ import annotations

import pytest
from fake_aiter import FakeAiter

from turbo_aiter import library


@pytest.fixture
def fake(monkeypatch):
    """A :class:`FakeAiter` returned by ``library.load()`` (gfx942 FP8 flavour; tests may change it)."""
    f = FakeAiter()
    monkeypatch.setattr(library, "load", lambda: f)
    return f
