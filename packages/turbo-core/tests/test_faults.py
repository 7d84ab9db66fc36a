"""Faults: what a failure inside a backend, a bad cache file or a concurrent writer leaves behind.

* A kernel that raises surfaces as :class:`BackendError` naming the primitive and the backend, its
  exception chained; running out of memory is also a ``torch.OutOfMemoryError``; invalid arguments
  keep their ``TypeError``/``ValueError``. Nothing is left behind: the next call (same key, same
  backend) runs and is right, the selection cache and the auto-tune winners stay valid, and autograd
  neither keeps a half-made graph nor accumulates a gradient of a failed backward.
* A plugin whose kernel, capability check or probe raises is reported, and the other backends keep
  serving calls.
* A truncated or corrupted tuning database or auto-tune cache is reported once and ignored.
* Processes writing one ``TURBO_TUNE_CACHE`` at once leave a valid file holding every winner.

The backends are the fake ones (``fake_plugins``: float64 matmuls) and TORCH; results are checked
against float64 matmuls of the inputs.
"""

from __future__ import annotations

import importlib
import json
import logging
import multiprocessing
import time

import pytest
import torch

from turbo_core import BackendError, GlobalBackendManager, ops, use_backend
from turbo_core import tuning as T
from turbo_core.cli import main
from turbo_core.dispatch import autotune, call, dispatcher, select, stats
from turbo_core.dispatch.autotune import get_tuner
from turbo_core.dispatch.dispatcher import BackendOutOfMemoryError, KernelError
from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_core.platform import CPU
from turbo_core.tuning import Entry, Key, TuningDB


@pytest.fixture
def faulty(use_plugins, fakekit):
    """TORCH, FAKEA, FAKEB and FAULTY; the FAULTY module (its ``FAULTS`` and ``CALLS``)."""
    use_plugins("fake_a", "fake_b", "fake_faulty")
    return importlib.import_module("fake_faulty")


def want(args: GemmArgs) -> torch.Tensor:
    a = args.a.t() if args.trans_a else args.a
    b = args.b.t() if args.trans_b else args.b
    return a.double() @ b.double()


def check(out: torch.Tensor, args: GemmArgs) -> None:
    torch.testing.assert_close(out.double(), want(args), rtol=1e-5, atol=1e-5)


def raised(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


# -- a kernel that raises --------------------------------------------------------------------------

@pytest.mark.parametrize("chosen_by", ["use_backend", "code", "env"])
def test_a_raising_kernel_is_a_backend_error_naming_op_and_backend(faulty, make_args, monkeypatch, caplog, chosen_by):
    caplog.set_level(logging.WARNING, logger="turbo")
    faulty.FAULTS["run"] = RuntimeError("launch failed: invalid argument")
    args = make_args(8, 6, 4)
    if chosen_by == "code":
        GlobalBackendManager.set_gemm_backend("FAULTY")
    elif chosen_by == "env":
        monkeypatch.setenv("TURBO_GEMM_BACKEND", "FAULTY")

    def run():
        if chosen_by == "use_backend":
            with use_backend("FAULTY"):
                return call("gemm", args)
        return call("gemm", args)

    for _ in range(2):  # the second call is served from the selection cache: the same error
        with pytest.raises(BackendError) as info:
            run()
        err = info.value
        assert isinstance(err, KernelError) and isinstance(err, RuntimeError)
        assert not isinstance(err, BackendOutOfMemoryError)
        assert str(err) == "gemm: backend FAULTY raised RuntimeError while running the call: launch failed: invalid argument"
        assert err.__cause__ is faulty.FAULTS["run"]  # raise ... from exc
    assert len(raised(caplog, "turbo: gemm on FAULTY raised RuntimeError")) == 1  # reported once
    # nothing left behind: the same call on the same backend runs and is right
    faulty.FAULTS["run"] = None
    hits = dispatcher.cache_info().hits
    check(run(), args)
    assert dispatcher.cache_info().hits == hits + 1  # the cached selection was kept, and is valid
    assert faulty.CALLS["run"] == 3


@pytest.mark.parametrize("exc", [ValueError("bad tile"), TypeError("bad arg"), KeyError("x"), NotImplementedError(),
                                 AssertionError("kernel invariant"), ImportError("no module named 'ext'")],
                         ids=lambda e: type(e).__name__)
def test_every_exception_of_a_kernel_is_wrapped(faulty, make_args, exc):
    faulty.FAULTS["run"] = exc
    with use_backend("FAULTY"), pytest.raises(BackendError, match=f"gemm: backend FAULTY raised {type(exc).__name__}") as info:
        call("gemm", make_args())
    assert info.value.__cause__ is exc


def test_out_of_memory_is_also_a_torch_out_of_memory_error(faulty, make_args):
    faulty.FAULTS["run"] = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    with use_backend("FAULTY"), pytest.raises(torch.cuda.OutOfMemoryError) as info:  # what callers catch
        call("gemm", make_args())
    assert isinstance(info.value, BackendOutOfMemoryError) and isinstance(info.value, KernelError)
    assert "gemm: backend FAULTY raised OutOfMemoryError" in str(info.value)
    assert info.value.__cause__ is faulty.FAULTS["run"]


def test_a_raising_kernel_under_the_profiler_is_wrapped_too(faulty, make_args):
    faulty.FAULTS["run"] = RuntimeError("boom")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]), use_backend("FAULTY"):
        with pytest.raises(BackendError, match="gemm: backend FAULTY raised RuntimeError while running the call: boom"):
            call("gemm", make_args())


def test_invalid_arguments_are_not_wrapped(faulty, make_args):
    a, b = torch.randn(4, 3), torch.randn(5, 2)
    with use_backend("FAULTY"), pytest.raises(ValueError, match="b: inner dimension mismatch") as info:
        call("gemm", GemmArgs(a, b))
    assert not isinstance(info.value, BackendError)
    with use_backend("FAULTY"), pytest.raises(TypeError, match="a") as info:
        call("gemm", GemmArgs(a.to(torch.int32), b))
    assert not isinstance(info.value, BackendError)
    assert faulty.CALLS["run"] == 0  # rejected before any kernel ran


def test_an_inner_call_that_cannot_be_served_keeps_its_own_error(faulty, fakekit, make_args):
    """A composite kernel calling another primitive: the inner BackendError names the inner choice and
    passes through as it is (not wrapped in a second one)."""
    fakekit.cfg("FAKEA")["decline"] = "FAKEA is switched off"
    faulty.FAULTS["nested"] = "FAKEA"
    with use_backend("FAULTY"), pytest.raises(BackendError) as info:
        call("gemm", make_args())
    assert "backend FAKEA (chosen by use_backend('FAKEA')) cannot run this call: FAKEA is switched off" in str(info.value)
    assert info.value.__cause__ is None and not isinstance(info.value, KernelError)
    fakekit.cfg("FAKEA")["decline"] = None
    args = make_args()
    with use_backend("FAULTY"):
        check(call("gemm", args), args)


def test_a_failed_forward_or_backward_leaves_autograd_clean(faulty, make_args):
    args = make_args(6, 5, 4)
    a = args.a.clone().requires_grad_()
    b = args.b.clone().requires_grad_()
    dc = torch.randn(6, 5, dtype=torch.float64)
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    (a64 @ b64).backward(dc)

    faulty.FAULTS["run"] = RuntimeError("forward failed")
    with use_backend("FAULTY"), pytest.raises(BackendError, match="forward failed"):
        ops.gemm(a, b)
    assert a.grad is None and b.grad is None

    faulty.FAULTS["run"] = None
    with use_backend("FAULTY"):
        c = ops.gemm(a, b)
    faulty.FAULTS["run"] = RuntimeError("backward failed")
    with use_backend("FAULTY"), pytest.raises(BackendError, match="backward failed"):
        c.backward(dc.float())
    assert a.grad is None and b.grad is None  # no gradient of the failed backward was accumulated

    faulty.FAULTS["run"] = None
    with use_backend("FAULTY"):
        ops.gemm(a, b).backward(dc.float())  # a new graph: forward and backward both run
    torch.testing.assert_close(a.grad.double(), a64.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b.grad.double(), b64.grad, rtol=1e-5, atol=1e-5)


def test_an_auto_tune_winner_that_raises_keeps_the_tuner_valid(faulty, fakekit, make_args, monkeypatch):
    monkeypatch.setenv("TURBO_DISABLE_PLUGINS", "torch")
    GlobalBackendManager.set_gemm_backend(auto_tune=True)
    fakekit.cfg("FAKEA")["sleep"] = 0.003
    fakekit.cfg("FAKEB")["sleep"] = 0.003
    tuner = get_tuner()
    monkeypatch.setattr(tuner, "warmup", 0)
    monkeypatch.setattr(tuner, "iters", 1)
    args = make_args()
    check(call("gemm", args), args)
    assert [s[1] for s in stats()] == ["FAULTY"]  # the one without a sleep wins
    winners = dict(zip(tuner.cache.keys(), map(tuner.cache.get, tuner.cache.keys()), strict=True))
    faulty.FAULTS["run"] = RuntimeError("fails now")
    with pytest.raises(BackendError, match="gemm: backend FAULTY raised RuntimeError"):
        call("gemm", args)
    assert dict(zip(tuner.cache.keys(), map(tuner.cache.get, tuner.cache.keys()), strict=True)) == winners
    faulty.FAULTS["run"] = None
    check(call("gemm", args), args)
    assert select("gemm", args).how == "autotune-cache"


def test_turbo_accuracy_counts_a_raising_kernel_as_an_error_not_a_decline(use_plugins, fakekit, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "400")
    fakekit.cfg("FAKEA")["raise"] = "kernel exploded"
    use_plugins("fake_a")
    out = tmp_path / "acc.json"
    assert main(["accuracy", "--quick", "--families", "gemm", "--out", str(out)]) != 0
    rows = json.loads(out.read_text())["rows"]
    assert rows and all(r["backend"] == "FAKEA" and r["passed"] is False for r in rows)
    assert all(r["status"].startswith("error: gemm: backend FAKEA raised RuntimeError while running the call: "
                                      "kernel exploded") for r in rows)


# -- a plugin that raises while serving --------------------------------------------------------------

def test_other_backends_keep_working_beside_a_failing_plugin(faulty, fakekit, make_args):
    faulty.FAULTS["run"] = RuntimeError("device lost")
    args = make_args(8, 6, 4)
    for _ in range(3):
        with use_backend("FAULTY"), pytest.raises(BackendError, match="FAULTY raised RuntimeError"):
            call("gemm", args)
        for name in ("FAKEA", "FAKEB", "TORCH"):
            with use_backend(name):
                check(call("gemm", args), args)
        check(call("gemm", args), args)  # the default (TORCH)
    assert fakekit.cfg("FAKEA")["calls"] == 3 and fakekit.cfg("FAKEB")["calls"] == 3
    assert {k: v for k, v in stats().items() if k[1] == "FAULTY"} == {("gemm", "FAULTY", "use_backend"): 3}


def test_a_raising_capability_check_declines_and_others_serve(use_plugins, fakekit, make_args, monkeypatch):
    monkeypatch.setenv("TURBO_DISABLE_PLUGINS", "torch")  # no default backend: the fallback walk asks everyone
    use_plugins("fake_faulty", "fake_b")
    fakekit.cfg("FAKEB")["priority"] = -1  # asked after FAULTY
    faulty = importlib.import_module("fake_faulty")
    faulty.FAULTS["check"] = ZeroDivisionError("check broke")
    args = make_args()
    with use_backend("FAULTY"), pytest.raises(BackendError, match="capability check raised ZeroDivisionError: check broke"):
        call("gemm", args)
    sel = select("gemm", args)
    assert (sel.backend, sel.how) == ("FAKEB", "fallback")
    check(call("gemm", args), args)
    assert faulty.CALLS["run"] == 0


def test_a_raising_probe_makes_the_backend_unavailable_not_turbo(use_plugins, fakekit, make_args):
    use_plugins("fake_a", "fake_b")
    fakekit.cfg("FAKEA")["unavailable"] = None

    def broken_probe():
        raise OSError("driver missing")

    fakekit.probe_for = lambda name: broken_probe if name == "FAKEA" else (lambda: None)
    args = make_args()
    with use_backend("FAKEA"), pytest.raises(BackendError, match="availability probe failed: OSError: driver missing"):
        call("gemm", args)
    with use_backend("FAKEB"):
        check(call("gemm", args), args)


# -- bad tuning database and tune-cache files ---------------------------------------------------------

def _good_db_text(path) -> str:
    entry = Entry("gemm", Key("cpu", (8, 6, 4), ("fp32", "fp32"), "NN"), backend="FAKEB")
    TuningDB([entry]).save(path)
    return path.read_text()


def _damaged(text: str, wrong_types: str) -> list[tuple[str, str]]:
    """Truncations at a spread of points, and corruptions: what a crash mid-write or a bad disk leaves
    (``wrong_types``: valid JSON of the right shape with a value of the wrong type)."""
    cuts = sorted({int(len(text) * f) for f in (0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99)} | {len(text) - 2})
    out = [(f"truncated at {c}", text[:c]) for c in cuts]
    out += [("NUL bytes", "\0" * 64), ("binary", "\udcff\udcfe garbage"), ("a list", "[1, 2, 3]"),
            ("deep nesting", "[" * 100_000), ("wrong types", wrong_types),
            ("another format", json.dumps({"format": "other", "winners": {"k": 1}}))]
    return out


def test_a_damaged_tuning_database_is_reported_once_and_ignored(use_plugins, make_args, monkeypatch, tmp_path, caplog):
    use_plugins("fake_a", "fake_b")
    caplog.set_level(logging.WARNING, logger="turbo")
    args = make_args(8, 6, 4)
    text = _good_db_text(tmp_path / "good.json")
    monkeypatch.setenv("TURBO_TUNING_DB", str(tmp_path / "good.json"))
    assert select("gemm", args).how == "tuned"  # the intact file is used
    for i, (what, damaged) in enumerate(_damaged(text, text.replace('"entries": [', '"entries": [7, '))):
        path = tmp_path / f"db{i}.json"
        path.write_bytes(damaged.encode("utf-8", "surrogateescape"))
        monkeypatch.setenv("TURBO_TUNING_DB", str(path))
        for _ in range(2):
            T.reload()
            assert select("gemm", args).how == "default", what
            check(call("gemm", args), args)
        assert len(raised(caplog, f"TURBO_TUNING_DB={path}")) == 1, what
        assert any(str(path) in e for e in T.info()["errors"]), what


def _tuned(use_plugins, fakekit, monkeypatch):
    use_plugins("fake_a", "fake_b")
    monkeypatch.setenv("TURBO_DISABLE_PLUGINS", "torch")
    monkeypatch.setenv("TURBO_AUTO_TUNE", "1")
    fakekit.cfg("FAKEA")["sleep"] = 0.003
    monkeypatch.setattr(get_tuner(), "warmup", 0)
    monkeypatch.setattr(get_tuner(), "iters", 1)


def test_a_damaged_tune_cache_is_reported_once_and_rewritten(use_plugins, fakekit, make_args, monkeypatch, tmp_path,
                                                            caplog):
    _tuned(use_plugins, fakekit, monkeypatch)
    caplog.set_level(logging.WARNING, logger="turbo")
    monkeypatch.setenv("TURBO_TUNE_CACHE", str(tmp_path))
    args = make_args(8, 6, 4)
    assert select("gemm", args).how == "autotune"
    (path,) = tmp_path.glob("tune-*.json")
    text = path.read_text()
    assert select("gemm", args).how == "autotune-cache"
    for what, damaged in _damaged(text, json.dumps({"versions": {}, "winners": {"('gemm',)": ["FAKEB"]}})):
        path.write_bytes(damaged.encode("utf-8", "surrogateescape"))
        caplog.clear()
        for _ in range(2):  # two fresh tuners (two "processes" in one): reported once
            monkeypatch.setattr(autotune, "_tuner", None)
            _tuned(use_plugins, fakekit, monkeypatch)
            got = select("gemm", args)
            assert (got.backend, got.how) == ("FAKEB", "autotune"), what
            check(call("gemm", args), args)
            path.write_bytes(damaged.encode("utf-8", "surrogateescape"))
        assert len(raised(caplog, "ignoring unreadable tune cache")) == 1, what
        GlobalBackendManager.reset()  # forgets what was reported: the next damage is reported again
        _tuned(use_plugins, fakekit, monkeypatch)
    monkeypatch.setattr(autotune, "_tuner", None)
    _tuned(use_plugins, fakekit, monkeypatch)
    select("gemm", args)
    assert list(json.loads(path.read_text())["winners"].values()) == ["FAKEB"]  # rewritten whole


def test_an_unwritable_tune_cache_is_reported_and_the_winner_still_serves(use_plugins, fakekit, make_args,
                                                                         monkeypatch, tmp_path, caplog):
    _tuned(use_plugins, fakekit, monkeypatch)
    caplog.set_level(logging.WARNING, logger="turbo")
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the directory should be")
    monkeypatch.setenv("TURBO_TUNE_CACHE", str(blocker / "tune"))
    args = make_args()
    assert select("gemm", args).how == "autotune"
    assert select("gemm", args).how == "autotune-cache"
    check(call("gemm", args), args)
    assert raised(caplog, "cannot write the tune cache")


# -- processes writing one tune cache at once ---------------------------------------------------------

WRITERS = 3
KEYS_PER_WRITER = 25


def _write_winners(directory: str, writer: int, barrier, read_once) -> None:
    """One process: ``KEYS_PER_WRITER`` winners of its own, and one key every writer writes. Each
    winner goes through a cache of its own, as if a process of its own tuned it and exited: a winner
    lost by a racing write is lost for good (no later write of the same process brings it back).
    Halfway it waits for the test's reader to have read the file once, so that reads happen while
    writes go on however the processes are scheduled."""
    from turbo_core.dispatch.autotune import _DiskCache
    from turbo_core.platform import CPU as cpu

    versions = {"FAKEA": "0.0.1", "FAKEB": "0.0.1"}
    barrier.wait(timeout=120)
    for i in range(KEYS_PER_WRITER):
        if i == KEYS_PER_WRITER // 2:
            read_once.wait(timeout=120)
        _DiskCache(directory, cpu, versions).put(("gemm", "writer", writer, i), f"B{writer}")
        _DiskCache(directory, cpu, versions).put(("gemm", "shared"), f"B{writer}")


def test_processes_writing_one_tune_cache_leave_a_valid_file_with_every_winner(tmp_path):
    # fork where there is one: the writers touch no torch state, and start in milliseconds, not seconds
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    barrier, read_once = ctx.Barrier(WRITERS + 1), ctx.Event()
    procs = [ctx.Process(target=_write_winners, args=(str(tmp_path), w, barrier, read_once)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    barrier.wait(timeout=120)
    reads = 0
    while any(p.is_alive() for p in procs):  # a reader meanwhile: never a torn file
        for path in tmp_path.glob("tune-*.json"):
            with open(path) as fh:
                data = json.load(fh)
            assert set(data) == {"versions", "winners"}
            reads += 1
            read_once.set()
        time.sleep(0.001)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    (path,) = tmp_path.glob("tune-*.json")
    winners = json.loads(path.read_text())["winners"]
    want_keys = {repr(("gemm", "writer", w, i)) for w in range(WRITERS) for i in range(KEYS_PER_WRITER)}
    assert set(winners) == want_keys | {repr(("gemm", "shared"))}  # no writer's winners lost
    assert all(winners[repr(("gemm", "writer", w, i))] == f"B{w}" for w in range(WRITERS) for i in range(KEYS_PER_WRITER))
    assert winners[repr(("gemm", "shared"))] in {f"B{w}" for w in range(WRITERS)}
    assert not list(tmp_path.glob("*.tmp"))  # no temporary file left
    assert reads > 0
    # a fresh tuner of this process reads them all
    from turbo_core.dispatch.autotune import _DiskCache
    cache = _DiskCache(str(tmp_path), CPU, {"FAKEA": "0.0.1", "FAKEB": "0.0.1"})
    assert cache.get(("gemm", "writer", WRITERS - 1, KEYS_PER_WRITER - 1)) == f"B{WRITERS - 1}"
