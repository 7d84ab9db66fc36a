"""``turbo_core.timing``: the CPU clocks really measure (sleeps of known length), every call runs
on the input set it is due; the GPU clocks (gpu-marked) time the device, the host's pace or the
graph replay as documented."""

from __future__ import annotations

import time

import pytest
import torch

from turbo_core import timing

SLEEP_S = 0.002


def test_timing_of_takes_the_median_and_the_tenth_percentiles():
    t = timing.Timing.of([float(v) for v in range(11, 0, -1)])  # 1..11, unsorted
    assert (t.median_ms, t.p10_ms, t.p90_ms, t.samples) == (6.0, 2.0, 10.0, 11)
    assert timing.Timing.of([3.0]) == timing.Timing(3.0, 3.0, 3.0, 1)
    with pytest.raises(ValueError, match="at least one sample"):
        timing.Timing.of([])


def test_copies_needed_exceed_the_rotation_bytes():
    assert timing.copies_needed(timing.ROTATE_BYTES) == 1
    assert timing.copies_needed(timing.ROTATE_BYTES // 4) == 4
    assert timing.copies_needed(timing.ROTATE_BYTES // 4 - 1) == 5
    assert timing.copies_needed(1, max_sets=16) == 16
    assert timing.copies_needed(0) == 1


def test_measure_on_the_cpu_times_each_call_on_its_set_in_rotation():
    seen = []

    def fn(x, tag):
        seen.append(tag)
        time.sleep(SLEEP_S)

    sets = [(torch.zeros(1), "a"), (torch.zeros(1), "b"), (torch.zeros(1), "c")]
    t = timing.measure(fn, sets, warmup=2, iters=7)
    assert seen == ["a", "b"] + ["a", "b", "c", "a", "b", "c", "a"]
    assert t.samples == 7
    assert SLEEP_S * 1e3 <= t.p10_ms <= t.median_ms <= t.p90_ms < 50 * SLEEP_S * 1e3


def test_measure_needs_a_tensor_to_know_the_device():
    with pytest.raises(TypeError, match="no tensor among the inputs"):
        timing.measure(lambda x: x, [(1,)], warmup=0, iters=1)


def test_wall_clock_per_call_divides_each_batch_by_its_calls():
    calls, befores = [], []
    t = timing.measure_batched(lambda: (calls.append(1), time.sleep(SLEEP_S)), device="cpu", warmup=3, iters=4,
                               calls=5, before=lambda: befores.append(len(calls)))
    assert len(calls) == 3 + 4 * 5
    assert befores == [3, 8, 13, 18]  # before every batch, after the warm-up
    assert t.samples == 4
    assert SLEEP_S * 1e3 <= t.median_ms < 50 * SLEEP_S * 1e3  # per call, not per batch of 5


def test_interleaved_batches_alternate_in_a_rotating_order_and_time_each_call_apart():
    log = []

    def call(name, seconds):
        return lambda: (log.append(name), time.sleep(seconds))

    # 4x apart, so that a loaded machine's late wake-ups cannot reorder the medians
    t = timing.measure_interleaved({"fast": call("fast", SLEEP_S), "slow": call("slow", 16 * SLEEP_S),
                                    "mid": call("mid", 4 * SLEEP_S)}, device="cpu", warmup=1, iters=3, calls=2)
    assert log[:3] == ["fast", "slow", "mid"]  # the warm-up, one call each
    batches = [log[i] for i in range(3, len(log), 2)]
    assert log[3:] == [n for n in batches for _ in range(2)]  # whole batches of 2 calls
    assert batches == ["fast", "slow", "mid", "slow", "mid", "fast", "mid", "fast", "slow"]
    assert set(t) == {"fast", "slow", "mid"} and all(v.samples == 3 for v in t.values())
    assert SLEEP_S * 1e3 <= t["fast"].median_ms < t["mid"].median_ms < t["slow"].median_ms  # per call, per name
    with pytest.raises(ValueError, match="calls and iters"):
        timing.measure_interleaved({"a": lambda: None}, device="cpu", iters=0)


def test_the_device_clock_on_the_cpu_is_the_wall_clock():
    t = timing.measure_batched(lambda: time.sleep(SLEEP_S), device=torch.device("cpu"), warmup=0, iters=3,
                               clock="device")
    assert t.median_ms >= SLEEP_S * 1e3


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="clock"):
        timing.measure_batched(lambda: None, device="cpu", clock="host")
    with pytest.raises(ValueError, match="calls and iters"):
        timing.measure_batched(lambda: None, device="cpu", calls=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_graph_timing_needs_a_gpu():
    with pytest.raises(RuntimeError, match="CUDA graphs need a GPU"):
        timing.measure_graph(lambda: None)


# -- on a GPU ------------------------------------------------------------------------------------


def _slow_host_call(x):
    time.sleep(SLEEP_S)  # 2 ms of host work before a kernel of a few microseconds
    x.add_(1)


@pytest.mark.gpu
def test_holding_the_gpu_times_the_kernels_not_the_host():
    x = torch.zeros(1024, device="cuda")
    held = timing.measure(_slow_host_call, [(x,)], warmup=2, iters=10, hold=True)
    paced = timing.measure(_slow_host_call, [(x,)], warmup=2, iters=10, hold=False)
    # every call ran (warmup 2 + probe 3 + 10 timed, then 2 + 10): the timed work is real
    assert x[0].item() == 27
    assert paced.median_ms > 1.5  # the host's pace: each event pair spans the 2 ms sleep
    assert held.median_ms < 0.5  # the kernel alone, queued behind the hold


@pytest.mark.gpu
def test_wall_clock_includes_the_host_and_the_device_clock_of_a_graph_does_not():
    x = torch.zeros(1024, device="cuda")
    wall = timing.measure_batched(lambda: _slow_host_call(x), device="cuda", warmup=1, iters=3, calls=4)
    assert x[0].item() == 1 + 3 * 4
    assert wall.median_ms >= SLEEP_S * 1e3
    y = torch.zeros(1024, device="cuda")
    graph = timing.measure_graph(lambda: y.add_(1), calls=20, reps=5)
    # 2 warm-up calls before the capture, then the 20 captured calls replayed 1 (warm-up) + 5 times
    assert y[0].item() == 2 + 6 * 20
    assert 0 < graph.median_ms < 0.1 and graph.samples == 5
