"""Integer helpers for launch grids and tile sizes, in plain Python.

``triton.cdiv`` and ``triton.next_power_of_2`` are ``constexpr`` functions in recent Triton: called
from the host they go through the JIT function's call path, about a microsecond each, several times
per launch. These give the same integers for the non-negative ints a launcher passes.
"""

from __future__ import annotations

__all__ = ["cdiv", "next_power_of_2"]


def cdiv(x: int, y: int) -> int:
    """``ceil(x / y)`` for ints, ``y > 0``: ``triton.cdiv``'s ``(x + y - 1) // y``."""
    return (x + y - 1) // y


def next_power_of_2(n: int) -> int:
    """The smallest power of two ``>= n`` for ``n >= 1``, and 0 for ``n == 0`` (as ``triton.next_power_of_2``)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0
