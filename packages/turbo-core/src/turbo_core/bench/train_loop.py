"""The training-step loop that both ``turbo bench train`` modes run and time (the demo decoder's
providers, :mod:`turbo_core.bench.suites.train`, and Hugging Face models', :mod:`turbo_core.bench.hf_train`).

A step is ``micro_batches`` forward + loss + backward passes, each loss divided by ``micro_batches``
when there are several (the gradient of the mean over the micro-batches, as Megatron-LM and Hugging
Face accumulate), then the optimizer step and ``zero_grad(set_to_none=True)``. Rows of more than one
micro-batch carry ``accumulation: "<N> micro-batches"``, a variant of their own on the performance
page (:data:`turbo_core.bench.compare.VARIANT_FIELDS`), and their case names end in ``x<N>``.

``--profile-top N`` adds one more step under ``torch.profiler`` after the timed ones
(:func:`profile_step`): where the step's time goes, kernel by kernel, recorded in the row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from turbo_core import timing

__all__ = ["accumulation_fields", "check_micro_batches", "check_profile_top", "loss_run_and_time", "print_profiles",
           "profile_step", "step_fn"]


def check_micro_batches(micro_batches: object) -> int:
    """``micro_batches`` when it is an int >= 1, else ``ValueError`` naming it."""
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1:
        raise ValueError(f"micro_batches: expected an int >= 1, got {micro_batches!r}")
    return micro_batches


def check_profile_top(profile_top: object) -> None:
    """``ValueError`` naming ``--profile-top`` unless it is None or a count >= 1."""
    if profile_top is not None and profile_top < 1:
        raise ValueError(f"--profile-top: expected a count >= 1, got {profile_top}")


def accumulation_fields(case: str, micro_batches: int) -> dict:
    """The row fields that say how many micro-batches a step took: ``case`` (with `` x<N>`` when
    more than one), ``micro_batches`` and, above one, ``accumulation``."""
    if micro_batches == 1:
        return {"case": case, "micro_batches": 1}
    return {"case": f"{case} x{micro_batches}", "accumulation": f"{micro_batches} micro-batches",
            "micro_batches": micro_batches}


def step_fn(loss_of: Callable[[Any], torch.Tensor], opt: torch.optim.Optimizer) -> Callable[[list], None]:
    """``step(micro)``: ``loss_of(batch).backward()`` for each batch of ``micro`` (each loss divided by
    ``len(micro)`` when there are several), then ``opt.step()`` and ``opt.zero_grad(set_to_none=True)``."""
    def step(micro: list) -> None:
        for batch in micro:
            loss = loss_of(batch)
            if len(micro) > 1:
                loss = loss / len(micro)
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def profile_step(step: Callable[[list], None], micro: list, *, device: str, top: int) -> dict:
    """One ``step(micro)`` under ``torch.profiler``: ``profile`` (the ``top`` entries of most time,
    each ``[name, ms in the step, calls]``, most first), ``profile_total_ms`` (the sum over every
    entry) and ``profile_clock``. On a GPU the entries are the kernels (and copies) by device time,
    summed per name: where the step's device time goes, launch gaps excluded. On the CPU they are
    the operators by own CPU time."""
    from torch.profiler import ProfilerActivity, profile

    gpu = device == "cuda"
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if gpu else [ProfilerActivity.CPU]
    if gpu:
        torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        step(micro)
        if gpu:
            torch.cuda.synchronize()
    entries = []
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", 0) if gpu else e.self_cpu_time_total
        if us > 0:
            entries.append([e.key[:160], us / 1e3, e.count])
    entries.sort(key=lambda e: -e[1])
    return {"profile": [[name, round(ms, 3), count] for name, ms, count in entries[:top]],
            "profile_total_ms": round(sum(e[1] for e in entries), 3),
            "profile_clock": "device time per kernel name" if gpu else "own CPU time per operator"}


def loss_run_and_time(loss_of: Callable[[Any], torch.Tensor], step: Callable[[list], None], batches: list, *,
                      micro_batches: int, tokens: int, timed: bool, warmup: int, iters: int, device: str,
                      profile_top: int | None = None) -> dict:
    """The loss run, then (``timed``) the timed steps, of one provider.

    The loss run: ``init_loss``, the held-out last batch's loss before the first step (with autograd
    on, as in the steps, so that a compiled model reuses its training graph); a step per
    ``micro_batches`` of the other batches; then ``loss``, the held-out batch's loss again. Timed
    steps: each over the first ``micro_batches`` batches, wall clock per step
    (:func:`turbo_core.timing.measure_batched`, ``clock="wall"``, CUDA-synchronized) after ``warmup``
    steps; ``tokens_per_s`` counts ``tokens`` per micro-batch; ``peak_bytes`` is
    ``torch.cuda.max_memory_allocated`` since this call began (None on the CPU); ``profile_top``:
    then one profiled step (:func:`profile_step`), after the peak is read."""
    gpu = device == "cuda"
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    init_loss = float(loss_of(batches[-1]).detach())
    run = batches[:-1]
    for first in range(0, len(run), micro_batches):
        step(run[first:first + micro_batches])
    out: dict = {"init_loss": init_loss, "loss": float(loss_of(batches[-1]).detach())}
    if timed:
        micro = batches[:micro_batches]
        t = timing.measure_batched(lambda: step(micro), device=device, warmup=warmup, iters=iters, calls=1,
                                   clock="wall")
        out.update(median_ms=t.median_ms, p10_ms=t.p10_ms, p90_ms=t.p90_ms,
                   tokens_per_s=tokens * micro_batches / (t.median_ms * 1e-3),
                   peak_bytes=torch.cuda.max_memory_allocated() if gpu else None)
        if profile_top:
            out.update(profile_step(step, micro, device=device, top=profile_top))
    return out


def print_profiles(rows: list[dict], console) -> None:
    """Per row with a ``profile`` (``--profile-top``): its entries, ms in the step and calls."""
    from rich.table import Table

    for r in rows:
        if not r.get("profile"):
            continue
        table = Table(title=f"{r['case']} {r['provider']}: one step's {r['profile_clock']} "
                            f"({r['profile_total_ms']:.1f} ms in all)")
        for col in ("name", "ms", "calls"):
            table.add_column(col, justify="left" if col == "name" else "right", overflow="fold")
        for name, ms, calls in r["profile"]:
            table.add_row(name, f"{ms:.2f}", str(calls))
        console.print(table)
