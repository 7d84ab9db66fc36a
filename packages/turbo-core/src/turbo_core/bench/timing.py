"""Timing: median and spread of per-call CUDA-event timings, inputs rotated beyond the L2 cache.

Each timed call uses the next of several copies of the inputs, so that a GEMM whose operands
fit in L2 is not timed hot. On the CPU (``--quick`` smoke runs) wall-clock time is used.

Device time, not host time (:data:`QUEUE_AHEAD`): before the timed calls are enqueued, the GPU is
held by a sleep kernel long enough for the host to enqueue all of them (1.5x their measured host
time), so each event pair times the kernels alone, as ``triton.testing.do_bench`` does with its
cache flush. Without it, an op whose kernels take less time than its Python launch path (a
memory-bound op at 50-100 us, an eager Triton launch at 20-60 us) is timed at the host's pace.
The host cost of a call is a separate figure (``benchmarks/scripts/dispatch_overhead.py``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

#: Bytes the rotated copies of a case's inputs must exceed (2x the H200's 60 MB L2).
ROTATE_BYTES = 128 * 2**20
#: Hold the GPU while the timed calls are enqueued (see the module doc); ``turbo profile`` turns it
#: off so that its traces hold only the profiled work.
QUEUE_AHEAD = True
#: Cycles a millisecond, for ``torch.cuda._sleep`` (an upper bound of today's GPU clocks: a slower
#: clock only lengthens the wait).
_CYCLES_PER_MS = 2_000_000
#: Longest hold, in milliseconds.
_MAX_HOLD_MS = 2000.0


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p10_ms: float
    p90_ms: float
    samples: int


def copies_needed(bytes_per_set: int, *, max_sets: int = 16) -> int:
    if bytes_per_set <= 0:
        return 1
    return max(1, min(max_sets, -(-ROTATE_BYTES // bytes_per_set)))


def _quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    idx = min(len(values) - 1, max(0, round(q * (len(values) - 1))))
    return values[idx]


def measure(fn: Callable, input_sets: Sequence, *, warmup: int = 10, iters: int = 50) -> Timing:
    """Time ``fn(*inputs)`` over ``input_sets`` in rotation."""
    first = next((t for t in input_sets[0] if isinstance(t, torch.Tensor)), None)
    if first is None:  # the device decides how to time: never guess (an unsynchronized GPU time is a launch time)
        raise TypeError("input_sets[0]: no tensor among the inputs, so the device to time on is unknown "
                        "(put a tensor of the inputs in each set, e.g. (anchor, args))")
    cuda = first.device.type == "cuda"
    n = len(input_sets)
    for i in range(warmup):
        fn(*input_sets[i % n])
    samples: list[float] = []
    if cuda:
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        if QUEUE_AHEAD:
            _hold(fn, input_sets, iters)
        for i, (start, end) in enumerate(events):
            start.record()
            fn(*input_sets[i % n])
            end.record()
        torch.cuda.synchronize()
        samples = [s.elapsed_time(e) for s, e in events]
    else:
        for i in range(iters):
            t0 = time.perf_counter()
            fn(*input_sets[i % n])
            samples.append((time.perf_counter() - t0) * 1e3)
    return Timing(statistics.median(samples), _quantile(samples, 0.1), _quantile(samples, 0.9), len(samples))


def _hold(fn: Callable, input_sets: Sequence, iters: int) -> None:
    """Enqueue a sleep kernel covering 1.5x the host time of ``iters`` calls (measured on a few
    calls that are synchronized after), so the timed calls queue up behind it."""
    probe = min(3, iters)
    t0 = time.perf_counter()
    for i in range(probe):
        fn(*input_sets[i % len(input_sets)])
    host_ms = (time.perf_counter() - t0) * 1e3 / probe
    torch.cuda.synchronize()
    hold_ms = min(_MAX_HOLD_MS, 1.5 * host_ms * iters + 0.2)
    torch.cuda._sleep(int(hold_ms * _CYCLES_PER_MS))
