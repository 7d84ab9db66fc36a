"""Streams of the symmetric-memory pipelines: the caller's stream and side streams beside it.

A :class:`Lane` is a CUDA stream: the caller's current one, or a side stream kept per device and
role (``"copy"``: peer copies and barriers; ``"reduce"``: the sums of a reduce-scatter). On a CPU
every lane is the calling thread and every method is a no-op: work runs in program order, which
already orders it as the streams and events would.

Buffers that a side lane touches are allocated on the caller's stream *before* the side lane first
waits for it, so that the side lane's writes come after every earlier user of that memory; a
tensor made on the caller's stream and read on a side lane is handed to :meth:`Lane.keep`, so
that the caching allocator does not reuse it before the side lane is done.
"""

from __future__ import annotations

import contextlib

import torch

__all__ = ["Lane"]

_SIDE: dict[tuple[int, str], torch.cuda.Stream] = {}


class Lane:
    """One stream (``None`` on a CPU)."""

    __slots__ = ("stream",)

    def __init__(self, stream) -> None:
        self.stream = stream

    @classmethod
    def current(cls, device: torch.device) -> Lane:
        return cls(torch.cuda.current_stream(device) if device.type == "cuda" else None)

    @classmethod
    def side(cls, device: torch.device, role: str) -> Lane:
        """The side stream of ``role`` on ``device``, made once per process."""
        if device.type != "cuda":
            return cls(None)
        index = device.index if device.index is not None else torch.cuda.current_device()
        stream = _SIDE.get((index, role))
        if stream is None:
            stream = _SIDE[(index, role)] = torch.cuda.Stream(device=index)
        return cls(stream)

    def use(self):
        """Context in which kernels launch on this lane."""
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def after(self, other: Lane) -> None:
        """This lane's later work waits for everything queued on ``other`` so far."""
        if self.stream is not None and other.stream is not None and other.stream != self.stream:
            self.stream.wait_stream(other.stream)

    def mark(self):
        """An event after the work queued on this lane so far (``None`` on a CPU)."""
        return self.stream.record_event() if self.stream is not None else None

    def wait(self, event) -> None:
        """This lane's later work waits for ``event`` (from :meth:`mark` on any lane)."""
        if event is not None and self.stream is not None:
            self.stream.wait_event(event)

    def keep(self, tensor: torch.Tensor) -> None:
        """``tensor`` (made on another lane) stays allocated until this lane's queued work is done."""
        if self.stream is not None:
            tensor.record_stream(self.stream)
