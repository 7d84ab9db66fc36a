"""Shared fixtures: a CPU model of PyTorch's cuDNN attention operators (fake_cudnn.py) in place of
the real ones."""

from __future__ import annotations

import pytest
from fake_cudnn import FakeCudnn

from turbo_cudnn import attention


@pytest.fixture
def fake(monkeypatch):
    f = FakeCudnn()
    monkeypatch.setattr(attention, "forward_op", lambda: f.forward)
    monkeypatch.setattr(attention, "backward_op", lambda: f.backward)
    return f
