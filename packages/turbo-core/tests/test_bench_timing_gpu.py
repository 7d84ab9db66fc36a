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
    monkeypatch.setattr(timing, "QUEUE_AHEAD", True)
    no_warmup = timing.measure(_slow_host_call, [(x,)], warmup=0, iters=10)  # 3 calls measure the host time
    # every call ran: held 2 warm-up (which also measure the host time) + 10 timed; paced 2 + 10; no
    # warm-up 3 host-time calls + 10 timed. The timed work is real, and with a warm-up the hold adds no calls
    assert x[0].item() == 12 + 12 + 13
    assert paced.median_ms > 1.5  # the host's pace: each event pair spans the 2 ms sleep
    assert held.median_ms < 0.5  # the kernel alone, queued behind the hold
    assert no_warmup.median_ms < 0.5
