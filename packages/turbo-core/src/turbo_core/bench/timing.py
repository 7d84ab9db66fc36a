"""The names ``turbo_core.tuning.campaign`` and ``turbo profile`` still import from here; the timing
itself is :mod:`turbo_core.timing`. ``QUEUE_AHEAD`` here is the ``hold`` this module's
:func:`measure` passes on."""

from __future__ import annotations

from turbo_core import timing as _timing
from turbo_core.timing import ROTATE_BYTES, Timing, copies_needed

__all__ = ["QUEUE_AHEAD", "ROTATE_BYTES", "Timing", "copies_needed", "measure"]

QUEUE_AHEAD = True


def measure(fn, input_sets, *, warmup: int = 10, iters: int = 50) -> Timing:
    """:func:`turbo_core.timing.measure` with ``hold=QUEUE_AHEAD``."""
    return _timing.measure(fn, input_sets, warmup=warmup, iters=iters, hold=QUEUE_AHEAD)
