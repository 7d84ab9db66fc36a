"""``turbo_triton.intmath`` gives Triton's integers for grids and tiles, and ``_runtime.interpreting``
follows ``TRITON_INTERPRET`` as it changes."""

from __future__ import annotations

import triton
from hypothesis import given, settings
from hypothesis import strategies as st

from turbo_triton import _runtime
from turbo_triton.intmath import cdiv, next_power_of_2


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(min_value=0, max_value=2**40), st.integers(min_value=1, max_value=2**20))
def test_cdiv_is_tritons(x, y):
    assert cdiv(x, y) == triton.cdiv(x, y)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(min_value=0, max_value=2**40))
def test_next_power_of_2_is_tritons(n):
    assert next_power_of_2(n) == triton.next_power_of_2(n)


def test_edges():
    assert [next_power_of_2(n) for n in (0, 1, 2, 3, 4, 5, 1023, 1024, 1025)] == [0, 1, 2, 4, 4, 8, 1024, 1024, 2048]
    assert [cdiv(n, 16) for n in (0, 1, 16, 17)] == [0, 1, 1, 2]


def test_interpreting_follows_the_environment(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert _runtime.interpreting()
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not _runtime.interpreting()
    monkeypatch.delenv("TRITON_INTERPRET")
    assert not _runtime.interpreting()
