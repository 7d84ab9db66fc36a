"""Benchmarks across processes: start ``world`` ranks, time a collective call on each, report the
slowest rank (the suites ``moe-dispatch``, ``async-tp`` and ``cp-attention``; ``turbo bench --world``).

``spawn(rank_rows, world, backend, args)`` starts the ranks (``torch.multiprocessing``, spawned:
NCCL with one GPU each, or gloo on the CPU), runs ``rank_rows(rank, world, group, dev, args)`` on
each and returns rank 0's rows. ``rank_rows`` must be a module-level function (it is pickled).
``time_calls`` times a call (or a batch of calls enqueued without waiting) after a barrier on every
iteration and reports the slowest rank; ``graphed`` turns a call into the replay of its CUDA graph.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from turbo_core import timing

__all__ = ["graphed", "spawn", "time_calls", "world_and_backend", "world_error"]


def time_calls(fn, dev: torch.device, warmup: int, iters: int, calls: int = 1) -> timing.Timing:
    """Milliseconds per call of ``fn`` on the slowest rank (the one with the largest median), over
    ``iters`` batches, each started after a barrier of all ranks; a batch is ``calls`` calls enqueued
    back to back (no wait between them, as in a training step whose host runs ahead of the GPU; 1: a
    single call on an idle GPU). Events around each batch on a GPU, the wall clock on the CPU
    (:func:`turbo_core.timing.measure_batched`). Every rank must call it at the same point."""
    mine = timing.measure_batched(fn, device=dev, warmup=warmup, iters=iters, calls=calls, clock="device",
                                  before=dist.barrier)
    t = torch.tensor([mine.median_ms, mine.p10_ms, mine.p90_ms], dtype=torch.float64, device=dev)
    gathered = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, t)
    med, p10, p90 = max(gathered, key=lambda g: float(g[0])).tolist()
    return timing.Timing(med, p10, p90, mine.samples)


def graphed(fn):
    """``fn`` captured in a CUDA graph (:func:`turbo_core.timing.graphed`): its replay, the GPU's own
    time for the same work without the host's launches; or a string saying why it could not be
    captured. Every rank must call it at the same point (the capture runs the collectives)."""
    try:
        return timing.graphed(fn)
    except Exception as exc:  # noqa: BLE001 - the row says why
        return f"not capturable: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"


def _worker(rank: int, world: int, store: str, backend: str, rank_rows, args: dict, out_path: str) -> None:
    dev = torch.device("cpu")
    if backend != "gloo":
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        rows = rank_rows(rank, world, dist.group.WORLD, dev, args)
        if rank == 0:
            with open(out_path, "w") as fh:
                json.dump(rows, fh)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # Leave without the interpreter's teardown, as a forked child does: a spawned rank that returns
    # goes through it, and there torch 2.13 (gloo) aborts now and then ("terminate called without an
    # active exception", SIGABRT after the rows are written; about 1 run in 25 on a 2-core CPU).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def world_error(device: str, world: int | None) -> str | None:
    """Why ``world`` ranks cannot run on ``device`` (None: they can, or ``world`` is None, the default):
    a count below 1, or on ``cuda`` more ranks than visible GPUs (one GPU a rank)."""
    if world is None:
        return None
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        return f"expected a count of ranks >= 1, got {world!r}"
    if device == "cuda" and world > torch.cuda.device_count():
        return f"{world} ranks need {world} GPUs (one a rank); {torch.cuda.device_count()} visible"
    return None


def world_and_backend(device: str, world: int | None) -> tuple[int, str]:
    """``(ranks, backend)``: NCCL over the visible GPUs (at most 8) on ``cuda``, two gloo ranks on the
    CPU; ``world`` (``turbo bench --world``) overrides the count.

    Raises:
        ValueError: a ``world`` that :func:`world_error` refuses, named ``world``.
    """
    why = world_error(device, world)
    if why is not None:
        raise ValueError(f"world: {why}")
    if device == "cuda":
        return world or min(torch.cuda.device_count(), 8), "nccl"
    return world or 2, "gloo"


def spawn(rank_rows, world: int, backend: str, args: dict, progress=None, label: str = "") -> list[dict]:
    """Rank 0's rows of ``rank_rows`` run on ``world`` spawned ranks over ``backend`` (one step of a
    rich ``progress`` bar named ``label`` over ... ranks, when given)."""
    task = progress.add_task(f"{label} over {world} {backend} ranks", total=1) if progress is not None else None
    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "rows.json")
        mp.start_processes(_worker, args=(world, os.path.join(tmp, "store"), backend, rank_rows, args, out_path),
                           nprocs=world, join=True, start_method="spawn")
        with open(out_path) as fh:
            rows = json.load(fh)
    if progress is not None:
        progress.advance(task)
    return rows
