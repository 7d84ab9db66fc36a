"""Whether memory allocated now may outlive the call that allocates it: the rule behind every cache
in turbo that keeps a tensor from one call to the next.

**The rule.** No allocation outlives a call unless it is an output of the call, or an entry of a
documented cache made while :func:`may_cache` holds. Inside a CUDA-graph capture or a CUDA-graph
trees warm-up, a cache is read but never filled: a call that misses allocates what it needs for
itself, and that memory is freed when the call ends.

**Why.** While a CUDA graph is captured, the caching allocator serves the capturing stream from the
graph's private memory pool. CUDA-graph trees (``torch.compile`` modes ``"reduce-overhead"`` and
``"max-autotune"``) also route *every* allocation of the calling thread, on any stream, to a graph's
pool while they warm the graph up: its first calls run eagerly on the tree manager's own stream
(``torch._inductor.cudagraph_trees``: ``CUDAWarmupNode.run`` inside
``_use_cuda_memory_pool_manager``, which calls ``torch._C._cuda_beginAllocateCurrentThreadToPool``).
After the warm-up and after the recording the trees check that every live block of the pool is an
output of the graph, and refuse the call otherwise ("Detected 1 tensor(s) in the cudagraph pool not
tracked as outputs"). A tensor kept in a cache would be such a block; in a hand-captured graph it
would be memory the graph's replays may hand to other tensors. Allocating on another stream does not
escape the trees' routing, which is by thread.

Nothing here is read on a cache hit: a cache calls :func:`may_cache` only when it misses, so the
eager fast path pays nothing for the rule. Not seen: a pool the caller routes allocations to itself
(``torch.cuda.use_mem_pool``); a cache missed inside such a block is filled from that pool.
"""

from __future__ import annotations

import sys

import torch

__all__ = ["may_cache", "trees_warming_up"]

_TREES = "torch._inductor.cudagraph_trees"


def may_cache() -> bool:
    """``False`` while the current stream captures a CUDA graph (``torch.cuda.graph``,
    ``make_graphed_callables``, CUDA-graph trees' recording) or while CUDA-graph trees warm a graph up
    on this thread (:func:`trees_warming_up`); ``True`` otherwise, on the CPU too. About a
    microsecond: call it when a cache misses, never on a hit. Where CUDA was never initialised in
    this process (a CPU run, a CPU-only torch) nothing can capture: ``True`` at once."""
    if not torch.cuda.is_initialized():
        return True
    if torch.cuda.is_current_stream_capturing():
        return False
    return not trees_warming_up()


def trees_warming_up() -> bool:
    """Whether CUDA-graph trees are running a graph's warm-up on this thread now: the current stream of
    the current device is the stream of that device's tree manager (which runs nothing but warm-ups
    and recordings, with this thread's allocations routed to its pool).

    ``False`` without reading anything when the trees' module was never imported (no graph was
    compiled with CUDA graphs in this process) or CUDA was never initialised. Where the trees'
    internals are not what this function reads (another torch), it answers ``True``: a call then
    allocates per call, which is always correct, only not cached."""
    trees = sys.modules.get(_TREES)
    if trees is None or not torch.cuda.is_initialized():
        return False
    try:
        index = torch.cuda.current_device()
        manager = trees.get_manager(index, create_if_none_exists=False)
        return manager is not None and torch.cuda.current_stream(index) == manager.stream
    except Exception:  # noqa: BLE001 - the trees' internals changed: assume the pool is routed
        return True
