"""DeepEP's event objects (``deep_ep.utils``): ``EventHandle`` and ``EventOverlap``.

turbo's :class:`~turbo_deepep.deep_ep.Buffer` runs every exchange on the caller's current stream, so
its results are ready, in stream order, when a call returns. The events keep DeepEP's protocol for
code written against it (``previous_event=``, ``async_finish=True`` then
``event.current_stream_wait()``):

- on a GPU (CUDA or ROCm, once torch has initialised it), an ``EventHandle`` records a
  ``torch.cuda.Event`` on the current stream when made, and ``current_stream_wait()`` makes the
  current stream wait for it (a device-side wait, no host sync);
- on the CPU (or before CUDA is initialised) it holds no event and ``current_stream_wait()`` does
  nothing: CPU work is done when the call returns.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["EventHandle", "EventOverlap"]


def _cuda_ready() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


class EventHandle:
    """An event recorded on the current stream when made (see the module docstring).

    ``event`` is the ``torch.cuda.Event`` or ``None`` (CPU: nothing to wait for)."""

    def __init__(self) -> None:
        self.event: torch.cuda.Event | None = None
        if _cuda_ready():
            self.event = torch.cuda.Event()
            self.event.record()

    def current_stream_wait(self) -> None:
        """Make the current stream wait for this event (nothing to do on the CPU)."""
        if self.event is not None:
            torch.cuda.current_stream().wait_event(self.event)


class EventOverlap:
    """DeepEP's wrapper of an :class:`EventHandle`.

    Args:
        event: the :class:`EventHandle` (``None``: an empty wrapper, which cannot be waited for).
        extra_tensors: tensors kept alive with the event (DeepEP's stand-in for ``record_stream``).

    ``with event_overlap: ...`` runs the block, then makes the current stream wait for the event.
    """

    def __init__(self, event: EventHandle | None = None, extra_tensors: tuple[torch.Tensor, ...] | None = None) -> None:
        if event is not None and not isinstance(event, EventHandle):
            raise TypeError(f"event: expected None or an EventHandle, got {type(event).__name__}")
        self.event = event
        self.extra_tensors = extra_tensors

    def current_stream_wait(self) -> None:
        """Make the current stream wait for the event (a no-op on the CPU)."""
        if self.event is None:
            raise RuntimeError("EventOverlap.current_stream_wait: this EventOverlap holds no event")
        self.event.current_stream_wait()

    def __enter__(self) -> EventOverlap:
        return self

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        if self.event is not None:
            self.event.current_stream_wait()
