"""Backend selection under concurrency: ``use_backend`` pins are per thread and per asyncio task, and
the settings, the selection cache and the auto-tuner stay right while a thread pool hammers calls and
another thread flips settings, clears caches and resets the manager.

Every call's result is checked against a float64 matmul of its inputs, and every call reports the
backend that ran it (``call_with_backend``): a pinned call must run on its pin, an unpinned one on a
backend the settings of that moment allow, and once the flipping stops every call must follow the
final setting (a stale selection-cache entry would show there). ``test_threads.py`` has the plain
thread tests of the same pieces (concurrent setters and pins, the first plugin load, one auto-tune).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import random
import threading

import pytest
import torch

from turbo_core import GlobalBackendManager, use_backend
from turbo_core import tuning as T
from turbo_core.dispatch import dispatcher
from turbo_core.dispatch.autotune import get_tuner
from turbo_core.dispatch.dispatcher import call_with_backend, clear_selection_cache
from turbo_core.dispatch.manager import pinned_backend
from turbo_core.dispatch.selection_cache import SelectionCache

BACKENDS = ("FAKEA", "FAKEB", "TORCH")
SHAPES = [(m, n, k) for m in (2, 3, 5) for n in (4, 7) for k in (1, 6)]  # 12 keys


@pytest.fixture
def fakes(use_plugins, fakekit):
    use_plugins("fake_a", "fake_b")
    return fakekit


def _args(make_args, i: int):
    m, n, k = SHAPES[i % len(SHAPES)]
    return make_args(m, n, k)


def _check(out: torch.Tensor, args) -> None:
    torch.testing.assert_close(out.double(), args.a.double() @ args.b.double(), rtol=1e-5, atol=1e-5)


def test_threads_with_different_pins_run_on_their_own_pin(fakes, make_args):
    """Twelve threads, four per backend, each pinned and calling at once, with nested pins of gemm and
    of another primitive: every call runs on the pin its thread has at that moment."""
    barrier = threading.Barrier(12)
    arg_sets = [_args(make_args, i) for i in range(len(SHAPES))]

    def worker(t: int) -> list[str]:
        name = BACKENDS[t % 3]
        other = BACKENDS[(t + 1) % 3]
        wrong = []
        barrier.wait(timeout=30)
        with use_backend(name):
            for r in range(40):
                args = arg_sets[(t + r) % len(arg_sets)]
                out, ran = call_with_backend("gemm", args)
                _check(out, args)
                if ran != name:
                    wrong.append(f"thread {t} pinned {name} ran {ran}")
                if r % 5 == 0:
                    with use_backend(other, primitives=("gemm",)):
                        if call_with_backend("gemm", args)[1] != other:
                            wrong.append(f"thread {t} inner pin {other} not followed")
                    # a block pinning another primitive replaces the whole pin: gemm takes its default
                    with use_backend(other, primitives=("gemm_fp8",)):
                        if call_with_backend("gemm", args)[1] != "TORCH":
                            wrong.append(f"thread {t}: gemm under a pin of gemm_fp8 did not take its default")
                    if call_with_backend("gemm", args)[1] != name:
                        wrong.append(f"thread {t} lost its pin after an inner block")
        return wrong

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        results = list(pool.map(worker, range(12)))
    assert [w for ws in results for w in ws] == []
    assert pinned_backend() is None


def test_asyncio_tasks_with_different_pins_are_isolated(fakes, make_args):
    """Tasks interleaving at every await keep their own pins; a task started inside a pinned block
    inherits the pin, and its own pins do not leak back into the parent."""
    args = make_args(3, 4, 5)
    seen: dict[str, list[str]] = {}

    async def pinned(name: str) -> None:
        with use_backend(name):
            for _ in range(10):
                await asyncio.sleep(0)
                out, ran = call_with_backend("gemm", args)
                _check(out, args)
                seen.setdefault(name, []).append(ran)

    async def child_pins_fakeb() -> str:
        inherited = pinned_backend()
        with use_backend("FAKEB"):
            await asyncio.sleep(0)
        return inherited

    async def main() -> tuple[str, str | None]:
        await asyncio.gather(*(pinned(n) for n in BACKENDS))
        with use_backend("FAKEA"):
            inherited = await asyncio.create_task(child_pins_fakeb())
            after = pinned_backend()
        return inherited, after

    inherited, after = asyncio.run(main())
    assert seen == {name: [name] * 10 for name in BACKENDS}
    assert (inherited, after) == ("FAKEA", "FAKEA")
    assert pinned_backend() is None


def test_settings_flipping_under_a_hammering_pool(fakes, make_args, monkeypatch):
    """A pool of 8 threads calls gemm on 12 shapes (some pinned) while one thread sets and clears the
    gemm backend per precision and for all, turns auto-tune on and off, clears the selection cache and
    resets the manager, in a small selection cache (evictions all the time). No call raises, every
    result is right, every pinned call runs on its pin, and when the flipping stops every call follows
    the final setting."""
    monkeypatch.setattr(dispatcher, "_cache", SelectionCache(capacity=5))
    tuner = get_tuner()
    monkeypatch.setattr(tuner, "warmup", 0)
    monkeypatch.setattr(tuner, "iters", 1)
    arg_sets = [_args(make_args, i) for i in range(len(SHAPES))]
    stop = threading.Event()
    flips = itertools.count()

    def flipper() -> None:
        rng = random.Random(0)
        while not stop.is_set():
            step = next(flips) % 7
            choice = rng.choice((None, *BACKENDS))
            if step == 0:
                GlobalBackendManager.set_gemm_backend(choice)
            elif step == 1:
                GlobalBackendManager.set_backend("gemm", choice, precision=rng.choice(("fp8", "bf16", None)))
            elif step == 2:
                GlobalBackendManager.set_auto_tune(rng.choice((True, False, None)))
            elif step == 3:
                clear_selection_cache()
            elif step == 4:
                T.reset()
            elif step == 5:
                GlobalBackendManager.reset()
            else:
                GlobalBackendManager.set_gemm_backend(auto_tune=rng.random() < 0.3)

    def caller(i: int) -> str | None:
        args = arg_sets[i % len(arg_sets)]
        pin = BACKENDS[i % 3] if i % 4 == 0 else None
        if pin is not None:
            with use_backend(pin):
                out, ran = call_with_backend("gemm", args)
        else:
            out, ran = call_with_backend("gemm", args)
        _check(out, args)
        if pin is not None and ran != pin:
            return f"call {i} pinned {pin} ran {ran}"
        if ran not in BACKENDS:
            return f"call {i} ran {ran}"
        return None

    flip_thread = threading.Thread(target=flipper)
    flip_thread.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            problems = [p for p in pool.map(caller, range(1200)) if p]
    finally:
        stop.set()
        flip_thread.join(timeout=60)
    assert not flip_thread.is_alive()
    assert problems == []
    assert next(flips) > 20  # the settings really changed while the pool ran

    # the flipping stopped: the last setting governs every call from now on, in every thread (a cache
    # large enough to keep every key: an entry that outlived its setting would be served)
    monkeypatch.setattr(dispatcher, "_cache", SelectionCache())
    GlobalBackendManager.set_auto_tune(False)
    for final in ("FAKEB", "FAKEA", None):
        GlobalBackendManager.set_gemm_backend(final)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            ran = set(pool.map(lambda i: call_with_backend("gemm", arg_sets[i % len(arg_sets)])[1], range(48)))
        assert ran == {final or "TORCH"}, (final, ran)


def test_concurrent_auto_tune_of_many_keys_times_each_key_once(fakes, make_args, monkeypatch):
    """Eight threads calling 12 keys with auto-tune on: each key is timed once, every later call of it is
    a hit, every result is right, and all calls of a key run on its one winner."""
    monkeypatch.setenv("TURBO_DISABLE_PLUGINS", "torch")
    monkeypatch.setenv("TURBO_AUTO_TUNE", "1")
    fakes.cfg("FAKEA")["sleep"] = 0.001
    tuner = get_tuner()
    monkeypatch.setattr(tuner, "warmup", 0)
    monkeypatch.setattr(tuner, "iters", 1)
    arg_sets = [_args(make_args, i) for i in range(len(SHAPES))]
    lock = threading.Lock()
    ran_by_key: dict[int, set[str]] = {}

    def caller(i: int) -> None:
        key = i % len(arg_sets)
        out, ran = call_with_backend("gemm", arg_sets[key])
        _check(out, arg_sets[key])
        with lock:
            ran_by_key.setdefault(key, set()).add(ran)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(caller, range(240)))
    assert len(tuner.cache) == len(SHAPES) and len(tuner.timings) == len(SHAPES)
    assert all(len(v) == 1 for v in ran_by_key.values()) and len(ran_by_key) == len(SHAPES)
    hows = {how for (_, _, how) in dispatcher.stats()}
    assert hows <= {"autotune", "autotune-cache"}
    assert sum(n for (_, _, how), n in dispatcher.stats().items() if how == "autotune") == len(SHAPES)
