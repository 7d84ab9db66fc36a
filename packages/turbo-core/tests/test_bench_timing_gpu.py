"""GPU-marked: ``timing.measure`` times the device, not the host (``timing.QUEUE_AHEAD``)."""

from __future__ import annotations

import time

import pytest
import torch

from turbo_core.bench import timing

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here")]


def _slow_host_call(x):
    time.sleep(0.002)  # 2 ms of host work before a kernel of a few microseconds
    x.add_(1)


def test_queue_ahead_times_the_kernels_not_the_host(monkeypatch):
    x = torch.zeros(1024, device="cuda")
    monkeypatch.setattr(timing, "QUEUE_AHEAD", True)
    held = timing.measure(_slow_host_call, [(x,)], warmup=2, iters=10)
    monkeypatch.setattr(timing, "QUEUE_AHEAD", False)
    paced = timing.measure(_slow_host_call, [(x,)], warmup=2, iters=10)
    # every call ran (warmup 2 + probe 3 + 10 timed, then 2 + 10): the timed work is real
    assert x[0].item() == 27
    assert paced.median_ms > 1.5  # the host's pace: each event pair spans the 2 ms sleep
    assert held.median_ms < 0.5  # the kernel alone, queued behind the hold
