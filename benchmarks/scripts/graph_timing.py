"""GPU time of a short call without its Python launch: ``calls`` calls captured in one CUDA graph,
the graph replayed ``reps`` times, CUDA-event time per call (shared by the kernel-level scripts)."""

from __future__ import annotations

import torch


def graph_us(fn, calls: int = 20, reps: int = 15) -> list[float]:
    """Sorted microseconds per call of ``fn`` over ``reps`` replays (one warm-up call on a side stream first)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return sorted(times)
