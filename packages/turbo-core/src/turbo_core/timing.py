"""Timing of calls on a GPU (CUDA or HIP events) or the CPU (``time.perf_counter``): the one
implementation that ``turbo bench``, auto-tune and ``turbo tune`` share.

Three figures, each a :class:`Timing` (median, p10, p90 in milliseconds per call):

* :func:`measure`: device time of each call, a pair of events around it, inputs rotated over
  several copies (:func:`copies_needed`) so that operands that fit in L2 are not timed hot. With
  ``hold`` (default :data:`QUEUE_AHEAD`) the GPU is first held by a sleep kernel long enough for
  the host to enqueue every timed call, so each event pair brackets the kernels alone (as
  ``triton.testing.do_bench`` does with its cache flush): without it, an op whose kernels take
  less time than its Python launch path is timed at the host's pace.
* :func:`measure_batched`: time per call of batches of ``calls`` calls enqueued back to back,
  after a synchronize (and an optional ``before()``, e.g. a barrier of all ranks) per batch. With
  ``clock="wall"`` the host's ``perf_counter`` spans the enqueueing and a final synchronize: the
  wall clock per eager call, host cost included, the figure a user's eager step pays. With
  ``clock="device"`` a pair of events spans the batch. :func:`measure_interleaved` times several
  calls so, their batches alternating (the side-by-side figure of ``turbo bench host``).
* :func:`measure_graph`: ``calls`` calls captured in one CUDA graph, the graph replayed: the GPU's
  time for the work without the host's launches.

On the CPU every figure is the wall clock (there is no queue to hold or capture).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

__all__ = ["QUEUE_AHEAD", "ROTATE_BYTES", "Timing", "copies_needed", "device_of", "graphed", "measure",
           "measure_batched", "measure_graph", "measure_interleaved", "synchronize"]

#: Bytes the rotated copies of a case's inputs must exceed (2x the H200's 60 MB L2).
ROTATE_BYTES = 128 * 2**20
#: Default of :func:`measure`'s ``hold`` (see the module doc); ``turbo profile`` turns it off so that
#: its traces hold only the profiled work.
QUEUE_AHEAD = True
#: Cycles a millisecond, for ``torch.cuda._sleep`` (an upper bound of today's GPU clocks: a slower
#: clock only lengthens the wait).
_CYCLES_PER_MS = 2_000_000
#: Longest hold, in milliseconds.
_MAX_HOLD_MS = 2000.0


@dataclass(frozen=True)
class Timing:
    """Milliseconds per call: the median and the 10th/90th percentiles of ``samples`` samples."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    samples: int

    @classmethod
    def of(cls, samples_ms: Sequence[float]) -> Timing:
        """The timing of a non-empty list of per-call milliseconds."""
        if not samples_ms:
            raise ValueError("samples_ms: expected at least one sample")
        ordered = sorted(samples_ms)
        return cls(statistics.median(ordered), _quantile(ordered, 0.1), _quantile(ordered, 0.9), len(ordered))


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def copies_needed(bytes_per_set: int, *, max_sets: int = 16) -> int:
    """How many copies of a set of ``bytes_per_set`` bytes together exceed :data:`ROTATE_BYTES`
    (at least 1, at most ``max_sets``)."""
    if bytes_per_set <= 0:
        return 1
    return max(1, min(max_sets, -(-ROTATE_BYTES // bytes_per_set)))


def _is_gpu(device: torch.device | str) -> bool:
    return torch.device(device).type == "cuda"  # HIP devices are "cuda" devices in torch


def synchronize(device: torch.device | str) -> None:
    """Wait for the GPU's queued work (nothing on the CPU)."""
    if _is_gpu(device):
        torch.cuda.synchronize(device)


def device_of(input_set: Sequence) -> torch.device:
    """The device of the first tensor of ``input_set``.

    Raises:
        TypeError: the set holds no tensor (the device to time on is unknown, and a GPU call timed
            without synchronizing is its launch time).
    """
    first = next((t for t in input_set if isinstance(t, torch.Tensor)), None)
    if first is None:
        raise TypeError("input_sets[0]: no tensor among the inputs, so the device to time on is unknown "
                        "(put a tensor of the inputs in each set, e.g. (anchor, args))")
    return first.device


def measure(fn: Callable, input_sets: Sequence[Sequence], *, warmup: int = 10, iters: int = 50,
            hold: bool | None = None) -> Timing:
    """Device time of ``fn(*inputs)``, ``inputs`` taken from ``input_sets`` in rotation; the device
    is that of the first tensor of ``input_sets[0]`` (:func:`device_of`). ``hold``: hold the GPU
    while the timed calls are enqueued (default :data:`QUEUE_AHEAD`; see the module doc)."""
    gpu = _is_gpu(device_of(input_sets[0]))
    n = len(input_sets)
    for i in range(warmup):
        fn(*input_sets[i % n])
    if not gpu:
        samples = []
        for i in range(iters):
            t0 = time.perf_counter()
            fn(*input_sets[i % n])
            samples.append((time.perf_counter() - t0) * 1e3)
        return Timing.of(samples)
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    if QUEUE_AHEAD if hold is None else hold:
        _hold(fn, input_sets, iters)
    for i, (start, end) in enumerate(events):
        start.record()
        fn(*input_sets[i % n])
        end.record()
    torch.cuda.synchronize()
    return Timing.of([s.elapsed_time(e) for s, e in events])


def _hold(fn: Callable, input_sets: Sequence, iters: int) -> None:
    """Enqueue a sleep kernel covering 1.5x the host time of ``iters`` calls (measured on a few
    calls that are synchronized after), so the timed calls queue up behind it."""
    probe = min(3, iters)
    t0 = time.perf_counter()
    for i in range(probe):
        fn(*input_sets[i % len(input_sets)])
    host_ms = (time.perf_counter() - t0) * 1e3 / max(1, probe)
    torch.cuda.synchronize()
    hold_ms = min(_MAX_HOLD_MS, 1.5 * host_ms * iters + 0.2)
    torch.cuda._sleep(int(hold_ms * _CYCLES_PER_MS))


def measure_batched(fn: Callable[[], object], *, device: torch.device | str, warmup: int = 10, iters: int = 20,
                    calls: int = 1, clock: str = "wall", before: Callable[[], object] | None = None) -> Timing:
    """Time per call of ``fn()`` over ``iters`` batches of ``calls`` calls enqueued back to back
    (no wait between them, as in a training step whose host runs ahead of the GPU).

    Each batch starts on an idle device (a synchronize, then ``before()`` when given). ``clock``:
    ``"wall"``, the host's clock from the first call's enqueueing to the synchronize after the
    last (host cost included: the time per eager call a user pays); ``"device"``, a pair of events
    around the batch on the current stream. On the CPU both are the wall clock.
    """
    _check_batches(clock, calls, iters)
    for _ in range(warmup):
        fn()
    return Timing.of([_batch(fn, device, calls, clock, before) for _ in range(iters)])


def measure_interleaved(fns: Mapping[str, Callable[[], object]], *, device: torch.device | str, warmup: int = 10,
                        iters: int = 20, calls: int = 1, clock: str = "wall") -> dict[str, Timing]:
    """:func:`measure_batched` of several calls side by side: ``{name: Timing}``.

    The batches alternate: each of the ``iters`` rounds times one batch of every call, in an order
    rotated by one each round, so that a slow spell of the host (another process, clock changes)
    falls on all of them alike and their ratios hold still while the absolute figures move."""
    _check_batches(clock, calls, iters)
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(iters):
        for j in range(len(names)):
            name = names[(i + j) % len(names)]
            samples[name].append(_batch(fns[name], device, calls, clock, None))
    return {name: Timing.of(samples[name]) for name in names}


def _check_batches(clock: str, calls: int, iters: int) -> None:
    if clock not in ("wall", "device"):
        raise ValueError(f"clock: expected 'wall' or 'device', got {clock!r}")
    if calls < 1 or iters < 1:
        raise ValueError(f"calls and iters: expected >= 1, got {calls} and {iters}")


def _batch(fn: Callable[[], object], device: torch.device | str, calls: int, clock: str,
           before: Callable[[], object] | None) -> float:
    """Milliseconds per call of one batch of ``calls`` calls, started on an idle device."""
    synchronize(device)
    if before is not None:
        before()
    if _is_gpu(device) and clock == "device":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / calls
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    synchronize(device)
    return (time.perf_counter() - t0) * 1e3 / calls


def graphed(fn: Callable[[], object], *, calls: int = 1) -> Callable[[], None]:
    """The replay of a CUDA graph holding ``calls`` calls of ``fn`` (captured after two warm-up
    calls on a side stream). Capture errors propagate (the op is not capturable)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph.replay


def measure_graph(fn: Callable[[], object], *, calls: int = 20, reps: int = 15) -> Timing:
    """Device time per call of ``fn()`` without its launch cost: ``calls`` calls captured in one
    CUDA graph (:func:`graphed`), the graph replayed ``reps`` times between a pair of events."""
    if not torch.cuda.is_available():
        raise RuntimeError("measure_graph: CUDA graphs need a GPU")
    t = measure_batched(graphed(fn, calls=calls), device="cuda", warmup=1, iters=reps, clock="device")
    return Timing(t.median_ms / calls, t.p10_ms / calls, t.p90_ms / calls, t.samples)
