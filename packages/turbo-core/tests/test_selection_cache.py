"""The selection cache of ``dispatch.call``: repeated calls skip selection, and every input of a
selection (settings, pin, environment, signature, registry, availability, defaults) invalidates it.

Results are checked against float64 matmuls of the inputs; which backend ran is read from
``stats()`` and from each backend's own call counter.
"""

from __future__ import annotations

import logging
import sys
import threading
import types

import pytest
import torch

from turbo_core import BackendError, GlobalBackendManager, PrecisionType, use_backend
from turbo_core.dispatch import call, dispatcher, select, stats
from turbo_core.dispatch import defaults as _defaults
from turbo_core.dispatch.selection_cache import (
    CachedSelection,
    SelectionCache,
    call_signature,
    env_names,
)
from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_core.plugins import BackendInfo, Kernel, hookimpl
from turbo_core.plugins.host import get_host, reset_host

M = GlobalBackendManager
FAKES = ("fake_a", "fake_b", "fake_c")


def want(args: GemmArgs) -> torch.Tensor:
    return args.a.double() @ args.b.double()


def check_result(out: torch.Tensor, args: GemmArgs) -> None:
    tol = 1e-5 if args.a.dtype == torch.float32 else 1e-2  # fp32, or bf16/fp16 (the project's table)
    torch.testing.assert_close(out.double(), want(args), rtol=tol, atol=tol)


def ran(fakekit, *names: str) -> list[int]:
    return [fakekit.cfg(n)["calls"] for n in names]


# -- PICKY: a backend whose capability check reads every part of the signature --------------------

PICKY_STATE = {"checks": 0, "calls": 0}


def _picky_check(args: GemmArgs) -> str | None:
    PICKY_STATE["checks"] += 1
    a = args.a
    if a.device.type != "cpu":
        return f"PICKY runs on the CPU, not {a.device.type}"
    if a.dtype != torch.float32:
        return f"PICKY serves float32, not {a.dtype}"
    if a.data_ptr() % 16:
        return "PICKY needs a 16-byte aligned a"
    if a.stride(-1) != 1:
        return "PICKY needs a row-major a"
    if a.shape[0] > 64:
        return "PICKY serves M <= 64"
    return None


def _picky_impl(args: GemmArgs) -> torch.Tensor:
    PICKY_STATE["calls"] += 1
    return (args.a.double() @ args.b.double()).to(args.result_dtype)


def _picky_module() -> types.ModuleType:
    mod = types.ModuleType("picky_selection_plugin")

    @hookimpl
    def turbo_backend_info():
        return BackendInfo(name="PICKY", package="turbo-picky", version="0.0.1", platforms=("cpu",))

    @hookimpl
    def turbo_register_kernels(register):
        register(Kernel("gemm", "PICKY", _picky_impl, _picky_check, variants=("fp32",)))

    mod.turbo_backend_info = turbo_backend_info
    mod.turbo_register_kernels = turbo_register_kernels
    return mod


@pytest.fixture
def picky(monkeypatch, use_plugins):
    """PICKY loaded and first in the CPU defaults for gemm (TORCH second); its counters."""
    monkeypatch.setitem(sys.modules, "picky_selection_plugin", _picky_module())
    monkeypatch.setitem(_defaults.DEFAULTS["gemm"], "cpu", ("PICKY", "TORCH"))
    PICKY_STATE.update(checks=0, calls=0)
    use_plugins("picky_selection_plugin")
    return PICKY_STATE


@pytest.fixture
def fakes(use_plugins, fakekit):
    use_plugins(*FAKES)
    return fakekit


def gemm(m=8, n=6, k=4, dtype=torch.float32, seed=0) -> GemmArgs:
    gen = torch.Generator().manual_seed(seed * 1000 + m * 100 + n * 10 + k)
    return GemmArgs(torch.randn(m, k, generator=gen).to(dtype), torch.randn(k, n, generator=gen).to(dtype))


def info():
    return dispatcher.cache_info()


# -- hits ----------------------------------------------------------------------------------------

def test_repeated_calls_hit_and_skip_the_capability_check(picky):
    args = gemm()
    for _ in range(5):
        check_result(call("gemm", args), args)
    assert stats() == {("gemm", "PICKY", "default"): 5}
    got = info()
    assert (got.hits, got.misses, got.stores, got.size) == (4, 1, 1, 1)
    assert picky["checks"] == 1 and picky["calls"] == 5
    # new tensors of the same signature hit too (contents are not part of the key)
    other = gemm(seed=7)
    check_result(call("gemm", other), other)
    assert info().hits == 5 and picky["checks"] == 1


def test_cached_and_uncached_selection_agree(fakes):
    M.set_gemm_backend("FAKEB")
    args = gemm()
    first = dispatcher.cached_select("gemm", args)
    assert first == dispatcher.cached_select("gemm", args) == select("gemm", args)
    assert (first.backend, first.how) == ("FAKEB", "code")
    assert info().hits == 1


# -- every part of the signature re-selects ---------------------------------------------------------

def test_shape_dtype_strides_alignment_and_device_each_reselect(picky):
    cases = {
        "base": gemm(8, 6, 4),
        "shape": gemm(65, 6, 4),  # PICKY serves M <= 64
        "dtype": gemm(8, 6, 4, dtype=torch.bfloat16),
        "strides": GemmArgs(gemm(8, 6, 4).a.t().contiguous().t(), gemm(8, 6, 4).b),  # column-major a
        "alignment": GemmArgs(torch.randn(8 * 4 + 1)[1:].view(8, 4), gemm(8, 6, 4).b),  # a at +4 bytes
    }
    assert cases["alignment"].a.data_ptr() % 16 and cases["alignment"].a.is_contiguous()
    expected = {"base": "PICKY", "shape": "TORCH", "dtype": "TORCH", "strides": "TORCH", "alignment": "TORCH"}
    for _ in range(2):  # the second round is all hits: each answer was cached under its own key
        for name, args in cases.items():
            before = stats()
            check_result(call("gemm", args), args)
            after = stats()
            diff = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
            assert diff == {("gemm", expected[name], "default"): 1}, name
    assert info().misses == len(cases) and info().hits == len(cases)
    # meta tensors: another device type; PICKY declines, TORCH runs (shapes only)
    meta = GemmArgs(torch.empty(8, 4, device="meta"), torch.empty(4, 6, device="meta"))
    out = call("gemm", meta)
    assert out.device.type == "meta" and out.shape == (8, 6)
    assert stats() == {("gemm", "PICKY", "default"): 2, ("gemm", "TORCH", "default"): 2 * 4 + 1}
    assert call_signature(meta) != call_signature(cases["base"])


def test_signature_reads_metadata_only():
    a, b = torch.randn(4, 3), torch.randn(3, 5)
    sig = call_signature(GemmArgs(a, b, trans_a=False, out_dtype=torch.float64))
    assert sig == call_signature(GemmArgs(a * 2, b + 1, trans_a=False, out_dtype=torch.float64))
    assert sig != call_signature(GemmArgs(a, b, out_dtype=torch.float32))
    assert sig != call_signature(GemmArgs(a, b, trans_c=True))
    assert sig != call_signature(GemmArgs(a.t().contiguous().t(), b))  # same shape, other strides
    assert sig[0] == (torch.float32, torch.Size([4, 3]), (3, 1), torch.device("cpu"), a.data_ptr() % 16)


# -- settings, pin, environment --------------------------------------------------------------------

def test_set_backend_takes_effect_on_the_next_call(fakes):
    args = gemm()
    call("gemm", args)
    M.set_gemm_backend("FAKEB")
    check_result(call("gemm", args), args)
    M.set_backend("gemm", "FAKEC", precision="fp32")
    call("gemm", args)
    M.set_gemm_backend(None)
    call("gemm", args)
    M.set_auto_tune(False)  # a settings change too: re-selects (same answer)
    call("gemm", args)
    assert stats() == {("gemm", "TORCH", "default"): 3, ("gemm", "FAKEB", "code"): 1, ("gemm", "FAKEC", "code"): 1}
    assert ran(fakes, "FAKEA", "FAKEB", "FAKEC") == [0, 1, 1]
    assert info().misses == 5 and info().hits == 0


@pytest.mark.parametrize("variable", ["TURBO_GEMM_BACKEND", "PRIMUS_TURBO_GEMM_BACKEND"])
def test_env_change_between_calls_takes_effect(fakes, monkeypatch, variable):
    args = gemm()
    call("gemm", args)
    call("gemm", args)
    monkeypatch.setenv(variable, "FAKEA")
    check_result(call("gemm", args), args)
    monkeypatch.setenv(variable, "fp8:FAKEC,other:FAKEB")
    call("gemm", args)
    call("gemm", args)
    monkeypatch.delenv(variable)
    call("gemm", args)  # the first answer again (a hit: same key as the first two calls)
    assert stats() == {("gemm", "TORCH", "default"): 3, ("gemm", "FAKEA", "env"): 1, ("gemm", "FAKEB", "env"): 2}
    assert ran(fakes, "FAKEA", "FAKEB", "FAKEC") == [1, 2, 0]
    assert (info().hits, info().misses) == (3, 3)


def test_env_of_the_primitive_and_of_its_family(test_primitive, fakekit, use_plugins, monkeypatch):
    test_primitive("gemm_side_test", PrecisionType.BF16_FP16_FP32)
    fakekit.PRIMITIVES[:] = ["gemm", "gemm_side_test"]
    use_plugins(*FAKES)
    args = gemm()
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "FAKEA")
    assert dispatcher.cached_select("gemm_side_test", args).backend == "FAKEA"
    monkeypatch.setenv("PRIMUS_TURBO_GEMM_SIDE_TEST_BACKEND", "FAKEB")
    assert dispatcher.cached_select("gemm_side_test", args).backend == "FAKEB"
    monkeypatch.setenv("TURBO_GEMM_SIDE_TEST_BACKEND", "FAKEC")  # the TURBO_ name beats the alias
    assert dispatcher.cached_select("gemm_side_test", args).backend == "FAKEC"
    assert dispatcher.cached_select("gemm", args).backend == "FAKEA"  # gemm reads only the family's
    assert env_names("gemm_side_test", "gemm")[:4] == (
        "TURBO_GEMM_SIDE_TEST_BACKEND", "PRIMUS_TURBO_GEMM_SIDE_TEST_BACKEND",
        "TURBO_GEMM_BACKEND", "PRIMUS_TURBO_GEMM_BACKEND")
    assert {"TURBO_AUTO_TUNE", "PRIMUS_TURBO_AUTO_TUNE", "TRITON_INTERPRET"} <= set(env_names("gemm", "gemm"))


def test_bad_env_value_raises_every_call(fakes, monkeypatch):
    args = gemm()
    call("gemm", args)
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "NOPE")
    for _ in range(2):
        with pytest.raises(ValueError, match="TURBO_GEMM_BACKEND='NOPE': unknown backend"):
            call("gemm", args)
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "FAKEC")
    check_result(call("gemm", args), args)
    assert stats() == {("gemm", "TORCH", "default"): 1, ("gemm", "FAKEC", "env"): 1}


def test_use_backend_is_part_of_the_key(fakes):
    args = gemm()
    M.set_gemm_backend("FAKEC")
    call("gemm", args)
    with use_backend("FAKEA"):
        call("gemm", args)
        with use_backend("FAKEB"):
            check_result(call("gemm", args), args)
        call("gemm", args)
    with use_backend("FAKEB", primitives=["gemm_fp8"]):  # pins another primitive only
        call("gemm", args)
    call("gemm", args)
    assert stats() == {("gemm", "FAKEC", "code"): 3, ("gemm", "FAKEA", "use_backend"): 2,
                       ("gemm", "FAKEB", "use_backend"): 1}
    assert ran(fakes, "FAKEA", "FAKEB", "FAKEC") == [2, 1, 3]
    assert (info().hits, info().misses) == (3, 3)


def test_reset_clears_the_cache(fakes):
    args = gemm()
    M.set_gemm_backend("FAKEA")
    call("gemm", args)
    call("gemm", args)
    assert info().size == 1 and info().hits == 1
    M.reset()
    assert tuple(info())[:5] == (0, 0, 0, 0, 0)
    check_result(call("gemm", args), args)
    assert stats() == {("gemm", "TORCH", "default"): 1}
    assert info().misses == 1


def test_a_change_during_the_walk_is_not_stored_under_the_old_key(fakes, monkeypatch):
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "FAKEA")
    real = dispatcher.selection_key

    def racing(prim, args):  # another thread changes the variable right after the key is read
        key = real(prim, args)
        monkeypatch.setenv("TURBO_GEMM_BACKEND", "FAKEB")
        return key

    args = gemm()
    monkeypatch.setattr(dispatcher, "selection_key", racing)
    call("gemm", args)  # the walk sees FAKEB; its key says FAKEA: not stored
    monkeypatch.setattr(dispatcher, "selection_key", real)
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "FAKEA")
    check_result(call("gemm", args), args)
    assert stats() == {("gemm", "FAKEB", "env"): 1, ("gemm", "FAKEA", "env"): 1}
    assert info().stores == 1


# -- what is never cached ----------------------------------------------------------------------------

def test_errors_are_not_cached(fakes):
    fakes.cfg("FAKEB")["decline_odd"] = True
    M.set_gemm_backend("FAKEB")
    odd = gemm(9, 6, 4)
    for _ in range(2):
        with pytest.raises(BackendError, match="FAKEB declines odd dims"):
            call("gemm", odd)
    assert info().stores == 0 and fakes.cfg("FAKEB")["checks"] == 2
    even = gemm(8, 6, 4)
    check_result(call("gemm", even), even)
    assert stats() == {("gemm", "FAKEB", "code"): 1}


def test_validation_runs_on_every_call(picky):
    args = gemm()
    call("gemm", args)
    bad = GemmArgs(torch.randn(8, 5), torch.randn(4, 6))  # K mismatch
    with pytest.raises(ValueError, match="^b: inner dimension mismatch"):
        call("gemm", bad)
    with pytest.raises(TypeError, match="expected GemmArgs"):
        call("gemm", (args.a, args.b))
    assert picky["calls"] == 1 and stats() == {("gemm", "PICKY", "default"): 1}


def test_auto_tune_goes_through_the_tuner_every_call(fakes, monkeypatch):
    monkeypatch.setenv("TURBO_AUTO_TUNE", "1")
    args = gemm()
    hows = [dispatcher.cached_select("gemm", args).how for _ in range(3)]
    assert hows == ["autotune", "autotune-cache", "autotune-cache"]
    assert info().stores == 0
    winner = dispatcher.cached_select("gemm", args).backend
    check_result(call("gemm", args), args)
    assert stats() == {("gemm", winner, "autotune-cache"): 1}
    monkeypatch.delenv("TURBO_AUTO_TUNE")  # off again: now cached
    call("gemm", args)
    call("gemm", args)
    assert stats()[("gemm", "TORCH", "default")] == 2 and info().stores == 1


def test_fallback_warns_once_and_counts_every_call(fakes, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="turbo")
    monkeypatch.setenv("TURBO_DISABLE_PLUGINS", "torch")  # the CPU default is not installed
    args = gemm()
    for _ in range(4):
        check_result(call("gemm", args), args)
    call("gemm", gemm(6, 4, 2))  # another key, same fallback: still no second warning
    falls = [r for r in caplog.records if "falls back to FAKEA" in r.getMessage()]
    assert len(falls) == 1
    assert stats() == {("gemm", "FAKEA", "fallback"): 5}
    assert info().hits == 3
    dispatcher.clear_warnings()  # the warning is due again, and a hit must not skip it
    call("gemm", args)
    assert len([r for r in caplog.records if "falls back to FAKEA" in r.getMessage()]) == 2


# -- inputs checked on each hit: registry, availability, defaults table -----------------------------

def test_a_new_registry_empties_the_cache(fakes, monkeypatch):
    args = gemm()
    call("gemm", args)
    monkeypatch.setenv("TURBO_DISABLE_PLUGINS", "torch")
    reset_host()  # plugins load again, without TORCH: the cached TORCH answer must go
    check_result(call("gemm", args), args)
    assert stats() == {("gemm", "TORCH", "default"): 1, ("gemm", "FAKEA", "fallback"): 1}
    assert get_host().registry.backend("TORCH") is None


def test_backend_that_becomes_unavailable_is_not_used(fakes, monkeypatch):
    monkeypatch.setitem(_defaults.DEFAULTS["gemm"], "cpu", ("FAKEA", "TORCH"))
    args = gemm()
    call("gemm", args)
    call("gemm", args)
    fakes.cfg("FAKEA")["unavailable"] = "fake device unplugged"
    get_host().registry.backend("FAKEA").reprobe()
    check_result(call("gemm", args), args)
    M.set_gemm_backend("FAKEA")  # explicitly: an error with the reason, every time
    for _ in range(2):
        with pytest.raises(BackendError, match="fake device unplugged"):
            call("gemm", args)
    assert stats() == {("gemm", "FAKEA", "default"): 2, ("gemm", "TORCH", "default"): 1}


def test_defaults_table_change_reselects(fakes, monkeypatch):
    args = gemm()
    call("gemm", args)
    monkeypatch.setitem(_defaults.DEFAULTS["gemm"], "cpu", ("FAKEB", "TORCH"))
    call("gemm", args)
    call("gemm", args)
    assert stats() == {("gemm", "TORCH", "default"): 1, ("gemm", "FAKEB", "default"): 2}


# -- the cache itself ---------------------------------------------------------------------------------

def _entry(name: str) -> CachedSelection:
    return CachedSelection(None, name, None, None, None, None)


def test_cache_is_bounded_and_evicts_the_oldest():
    cache, registry = SelectionCache(capacity=2), object()
    assert cache.get(("a",), registry) is None
    for key in ("a", "b", "c"):
        assert cache.put((key,), _entry(key), registry, cache.epoch)
    assert len(cache) == 2 and cache.info().evictions == 1
    assert cache.get(("a",), registry) is None
    assert cache.get(("c",), registry).selection == "c"
    with pytest.raises(ValueError, match="capacity: expected >= 1"):
        SelectionCache(capacity=0)


def test_cache_refuses_stale_stores_and_switches_registry():
    cache, reg1, reg2 = SelectionCache(), object(), object()
    cache.get(("k",), reg1)
    epoch = cache.epoch
    cache.clear()  # a selection resolved before the clear must not land after it
    assert not cache.put(("k",), _entry("old"), reg1, epoch)
    assert cache.put(("k",), _entry("new"), reg1, cache.epoch)
    assert cache.get(("k",), reg2) is None  # another registry: emptied
    assert not cache.put(("k",), _entry("x"), reg1, cache.epoch)
    assert len(cache) == 0


# -- threads -------------------------------------------------------------------------------------------

def test_threads_share_the_cache_safely(fakes):
    shapes = [(8, 6, 4), (6, 4, 2), (10, 2, 8), (4, 4, 4)]
    cases = [gemm(*s) for s in shapes]
    errors: list[BaseException] = []
    stop = threading.Event()

    def caller(i):
        def run():
            for r in range(40):
                args = cases[(i + r) % len(cases)]
                check_result(call("gemm", args), args)
        return run

    def pinned(name):
        def run():
            for r in range(40):
                args = cases[r % len(cases)]
                with use_backend(name):
                    assert dispatcher.cached_select("gemm", args).backend == name
                    check_result(call("gemm", args), args)
        return run

    def setter():
        r = 0
        while not stop.is_set() and r < 400:
            M.set_gemm_backend(("FAKEA", None, "FAKEC")[r % 3])
            r += 1

    workers = [caller(i) for i in range(4)] + [pinned("FAKEA"), pinned("FAKEB"), pinned("TORCH")]
    barrier = threading.Barrier(len(workers) + 1)

    def guard(fn):
        def run():
            try:
                barrier.wait(timeout=30)
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported to the test
                errors.append(exc)
        return run

    threads = [threading.Thread(target=guard(f)) for f in workers]
    background = threading.Thread(target=guard(setter))
    for t in [*threads, background]:
        t.start()
    for t in threads:
        t.join(timeout=120)
    stop.set()
    background.join(timeout=60)
    assert not any(t.is_alive() for t in [*threads, background]), "a thread hung"
    assert errors == []
    assert sum(stats().values()) == 7 * 40
    # after the dust settles, the last setting wins on every key: no stale answer survived
    M.set_gemm_backend("FAKEB")
    for args in cases:
        assert dispatcher.cached_select("gemm", args) == select("gemm", args)
        assert select("gemm", args).backend == "FAKEB"


def test_recording_lists_each_primitive_call_with_its_kernel_and_arguments():
    from turbo_core.dispatch.dispatcher import recording
    from turbo_core.ops import gemm

    a, b = torch.randn(4, 8), torch.randn(6, 8, requires_grad=True)
    with recording() as calls:
        out = gemm(a, b, trans_b=True)
        out.sum().backward()
    assert [(prim, backend) for prim, backend, _, _ in calls] == [("gemm", "TORCH")] * 2  # forward and wgrad
    prim, _, kernel, args = calls[0]
    assert args.a is a and args.b is b and args.trans_b
    want = (a.double() @ b.detach().double().t()).float()
    torch.testing.assert_close(kernel.run(args), want, rtol=1e-6, atol=1e-6)  # replayable
    with recording() as again:
        gemm(a, b.detach(), trans_b=True)
    assert len(again) == 1 and len(calls) == 2  # a block records only its own calls
    with recording():
        with pytest.raises(RuntimeError, match="already recording"):
            with recording():
                pass


# -- the validator's verdict on a hit ----------------------------------------------------------------

def test_verdict_is_keyed_only_without_cpu_tensors():
    from turbo_core.dispatch.selection_cache import verdict_keyed
    from turbo_core.dispatch.specs.grouped_gemm import GroupedGemmArgs

    meta = torch.empty(4, 8, device="meta")
    assert verdict_keyed(GemmArgs(meta, meta.t()))
    assert not verdict_keyed(GemmArgs(torch.randn(4, 8), torch.randn(8, 4)))
    assert not verdict_keyed(GemmArgs(meta, torch.randn(8, 4)))  # one CPU tensor is enough
    lens = torch.tensor([2, 2])
    grouped = GroupedGemmArgs(torch.empty(4, 8, device="meta"), torch.empty(2, 8, 8, device="meta"), lens, None)
    assert not verdict_keyed(grouped)  # the CPU group lengths' values are read by the validator


def test_a_hit_skips_the_validator_only_when_its_verdict_is_keyed(picky, monkeypatch):
    from turbo_core.dispatch import selection_cache
    from turbo_core.dispatch.catalog import get_primitive

    prim = get_primitive("gemm")
    runs = []
    real = prim.validate
    object.__setattr__(prim, "validate", lambda args: (runs.append(1), real(args)))  # a frozen dataclass
    try:
        args = gemm()
        for _ in range(3):  # CPU tensors: validated on every call
            check_result(call("gemm", args), args)
        assert len(runs) == 3
        dispatcher.clear_selection_cache()
        runs.clear()
        monkeypatch.setattr(dispatcher, "verdict_keyed", lambda a: True)
        for _ in range(3):  # a keyed verdict: validated once, on the miss that stored it
            check_result(call("gemm", args), args)
        assert len(runs) == 1 and info().hits == 2
        bad = GemmArgs(args.a, torch.randn(5, 6))  # another signature misses, so it is validated and rejected
        with pytest.raises(ValueError, match="inner dimension"):
            call("gemm", bad)
        assert len(runs) == 2
        # an entry stored by cached_select (no validation) never vouches for a call
        dispatcher.clear_selection_cache()
        runs.clear()
        dispatcher.cached_select("gemm", args)
        call("gemm", args)
        assert len(runs) == 1 and selection_cache.verdict_keyed is not dispatcher.verdict_keyed
    finally:
        object.__setattr__(prim, "validate", real)
