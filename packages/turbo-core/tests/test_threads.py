"""The manager, dispatcher, tuner and plugin host used from many threads at once."""

from __future__ import annotations

import threading
import time

import torch

from turbo_core import BackendChoice, GlobalBackendManager, use_backend
from turbo_core.dispatch import call, select
from turbo_core.dispatch.autotune import get_tuner
from turbo_core.dispatch.manager import pinned_backend
from turbo_core.plugins import host as host_mod

N_THREADS = 12
ROUNDS = 60


def run_threads(targets) -> list[BaseException]:
    """Run the callables in threads released together; return what they raised."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(targets))

    def wrap(fn):
        def run():
            try:
                barrier.wait(timeout=30)
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported to the test
                errors.append(exc)
        return run

    threads = [threading.Thread(target=wrap(fn)) for fn in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    return errors


def test_concurrent_settings_selection_and_dispatch(use_plugins, make_args):
    use_plugins("fake_a", "fake_b")
    args = make_args(6, 4, 2)
    want = args.a.double() @ args.b.double()
    choices = [None, "FAKEA", "FAKEB", "TORCH"]

    def setter(i):
        def run():
            for r in range(ROUNDS):
                choice = choices[(i + r) % len(choices)]
                GlobalBackendManager.set_backend("gemm", choice, precision=("fp8", None)[r % 2])
                GlobalBackendManager.set_gemm_backend(choice)
        return run

    def getter():
        for _ in range(ROUNDS):
            got = GlobalBackendManager.get_gemm_backend()
            assert got is None or got in {BackendChoice(c) for c in choices if c}
            got = GlobalBackendManager.get_gemm_backend("fp8")
            assert got is None or got.backend in {"FAKEA", "FAKEB", "TORCH"}

    def selector():
        for _ in range(ROUNDS):
            sel = select("gemm", args)
            assert sel.backend in {"FAKEA", "FAKEB", "TORCH"}
            assert sel.how in {"code", "default"}
            out = call("gemm", args)
            torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)

    def pinned(name):
        def run():
            for _ in range(ROUNDS):
                with use_backend(name):
                    assert pinned_backend() == name
                    assert select("gemm", args).backend == name
                    torch.testing.assert_close(call("gemm", args).double(), want, rtol=1e-5, atol=1e-5)
                    with use_backend("TORCH"):
                        assert select("gemm", args).backend == "TORCH"
                    assert pinned_backend() == name
        return run

    targets = [setter(i) for i in range(3)] + [getter] * 3 + [selector] * 3
    targets += [pinned("FAKEA"), pinned("FAKEB"), pinned("TORCH")]
    errors = run_threads(targets)
    assert errors == []
    assert pinned_backend() is None


def test_use_backend_does_not_leak_into_other_threads(use_plugins, make_args):
    use_plugins("fake_a")
    entered, checked = threading.Event(), threading.Event()
    seen = {}

    def holder():
        with use_backend("FAKEA"):
            entered.set()
            assert checked.wait(timeout=30)
            seen["holder"] = select("gemm", make_args()).backend

    def other():
        assert entered.wait(timeout=30)
        seen["other_pin"] = pinned_backend()
        seen["other"] = select("gemm", make_args()).backend
        checked.set()

    errors = run_threads([holder, other])
    assert errors == []
    assert seen == {"holder": "FAKEA", "other_pin": None, "other": "TORCH"}
    # and the main thread's pin does not leak into a thread either
    with use_backend("FAKEA"):
        box = []
        t = threading.Thread(target=lambda: box.append((pinned_backend(), select("gemm", make_args()).backend)))
        t.start()
        t.join()
        assert box == [(None, "TORCH")]


def test_concurrent_first_get_host_loads_plugins_once(fake_entry_point, entry_points, use_plugins):
    slow = fake_entry_point("slow", "fake_a", on_load=lambda: time.sleep(0.05))
    broken = fake_entry_point("broken", "fake_import_error")
    entry_points(slow, broken)
    use_plugins("fake_b")
    hosts = []
    errors = run_threads([lambda: hosts.append(host_mod.get_host())] * 16)
    assert errors == []
    assert len(hosts) == 16 and all(h is hosts[0] for h in hosts)
    host = hosts[0]
    assert slow.loads == 1 and broken.loads == 1
    assert [r.name for r in host.records] == ["torch", "slow", "broken", "fake_b"]
    assert host.registry.backend_names() == ["TORCH", "FAKEA", "FAKEB"]
    assert len(host.failures()) == 1


def test_concurrent_autotune_of_one_key_times_once(use_plugins, fakekit, monkeypatch, make_args):
    use_plugins("fake_a", "fake_b")
    monkeypatch.setenv("TURBO_DISABLE_PLUGINS", "torch")
    monkeypatch.setenv("TURBO_AUTO_TUNE", "1")
    fakekit.cfg("FAKEA")["sleep"] = 0.002
    tuner = get_tuner()
    monkeypatch.setattr(tuner, "warmup", 1)
    monkeypatch.setattr(tuner, "iters", 2)
    results = []
    errors = run_threads([lambda: results.append(select("gemm", make_args()))] * N_THREADS)
    assert errors == []
    assert {(r.backend) for r in results} == {"FAKEB"}
    assert [r.how for r in results].count("autotune") == 1
    assert fakekit.cfg("FAKEA")["calls"] == 3 and fakekit.cfg("FAKEB")["calls"] == 3
    assert len(tuner.cache) == 1
