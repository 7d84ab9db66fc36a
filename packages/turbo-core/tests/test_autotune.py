"""Auto-tune: the bounded LRU, timing and caching winners, key contents, re-validation,
graph-capture skip, scratch outputs, disk persistence, failing candidates."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from turbo_core import GlobalBackendManager
from turbo_core.dispatch import args_key, autotune, call, get_primitive, select
from turbo_core.dispatch.autotune import TuneCache, Tuner, get_tuner
from turbo_core.dispatch.specs.gemm import GemmArgs
from turbo_core.platform import CPU

# -- TuneCache -------------------------------------------------------------------------------------

def test_lru_bound_and_eviction_order(caplog):
    caplog.set_level(logging.WARNING, logger="turbo")
    cache = TuneCache(3)
    for i in range(3):
        cache.put(("k", i), f"B{i}")
    assert cache.keys() == [("k", 0), ("k", 1), ("k", 2)]
    assert cache.get(("k", 0)) == "B0"  # a hit makes k0 the most recently used
    assert cache.keys() == [("k", 1), ("k", 2), ("k", 0)]
    cache.put(("k", 3), "B3")  # evicts the least recently used: k1
    assert len(cache) == 3 and cache.evictions == 1
    assert cache.get(("k", 1)) is None
    assert cache.keys() == [("k", 2), ("k", 0), ("k", 3)]
    cache.put(("k", 2), "B2x")  # an update refreshes, evicts nothing
    assert cache.keys() == [("k", 0), ("k", 3), ("k", 2)] and cache.get(("k", 2)) == "B2x"
    assert cache.evictions == 1
    cache.put(("k", 4), "B4")
    cache.put(("k", 5), "B5")
    assert cache.keys() == [("k", 2), ("k", 4), ("k", 5)] and cache.evictions == 3
    # the "shapes keep changing" warning is given once, not per eviction
    assert len([r for r in caplog.records if "auto-tune cache exceeded 3 entries" in r.getMessage()]) == 1
    cache.drop(("k", 4))
    assert cache.keys() == [("k", 2), ("k", 5)]
    cache.clear()
    assert len(cache) == 0 and cache.evictions == 0


@pytest.mark.parametrize("capacity", [0, -1])
def test_lru_capacity_must_be_positive(capacity):
    with pytest.raises(ValueError, match="capacity: expected >= 1"):
        TuneCache(capacity)


def test_capacity_from_env(monkeypatch):
    monkeypatch.setenv("TURBO_TUNE_CACHE_SIZE", "2")
    assert Tuner().cache.capacity == 2


# -- tuning through select -------------------------------------------------------------------------

@pytest.fixture
def tuned(use_plugins, fakekit, monkeypatch):
    """FAKEA (slow) and FAKEB (fast) are the only gemm backends; auto-tune on for everything."""
    use_plugins("fake_a", "fake_b")
    monkeypatch.setenv("TURBO_DISABLE_PLUGINS", "torch")
    monkeypatch.setenv("TURBO_AUTO_TUNE", "1")
    fakekit.cfg("FAKEA")["sleep"] = 0.004
    tuner = get_tuner()
    monkeypatch.setattr(tuner, "warmup", 1)
    monkeypatch.setattr(tuner, "iters", 2)
    return fakekit


def calls(fakekit, *names):
    return [fakekit.cfg(n)["calls"] for n in names]


def test_faster_backend_is_chosen_and_cached(tuned, make_args):
    args = make_args(8, 6, 4)
    got = select("gemm", args)
    assert (got.backend, got.how, got.source) == ("FAKEB", "autotune", "auto-tune")
    per_candidate = get_tuner().warmup + get_tuner().iters
    assert calls(tuned, "FAKEA", "FAKEB") == [per_candidate, per_candidate]
    timings = list(get_tuner().timings.values())
    assert len(timings) == 1 and timings[0]["FAKEA"] > timings[0]["FAKEB"]
    assert len(get_tuner().cache) == 1
    # the same key again: served from the cache, nothing is timed
    again = select("gemm", make_args(8, 6, 4))
    assert (again.backend, again.how) == ("FAKEB", "autotune-cache")
    assert calls(tuned, "FAKEA", "FAKEB") == [per_candidate, per_candidate]
    # and a real call runs the winner once
    out = call("gemm", args)
    torch.testing.assert_close(out, args.a @ args.b, rtol=1e-5, atol=1e-5)
    assert calls(tuned, "FAKEA", "FAKEB") == [per_candidate, per_candidate + 1]


def test_single_capable_backend_wins_without_timing(tuned, make_args):
    tuned.cfg("FAKEB")["decline"] = "FAKEB is off today"
    got = select("gemm", make_args())
    assert (got.backend, got.how) == ("FAKEA", "autotune")
    assert calls(tuned, "FAKEA", "FAKEB") == [0, 0]


def test_kernels_opted_out_of_autotune_are_not_timed(use_plugins, fakekit, monkeypatch, make_args):
    fakekit.cfg("FAKEB")["autotune"] = False
    use_plugins("fake_a", "fake_b")
    monkeypatch.setenv("TURBO_DISABLE_PLUGINS", "torch")
    monkeypatch.setenv("TURBO_AUTO_TUNE", "1")
    got = select("gemm", make_args())
    assert (got.backend, got.how) == ("FAKEA", "autotune")
    assert calls(fakekit, "FAKEA", "FAKEB") == [0, 0]


def test_key_holds_shape_dtype_strides_and_flags():
    prim = get_primitive("gemm")
    tuner = Tuner()
    cands = ["FAKEB", "FAKEA"]
    a, b = torch.randn(8, 4), torch.randn(4, 6)

    def key(args, candidates=cands):
        return tuner.key(prim, CPU, candidates, args)

    base = key(GemmArgs(a, b))
    assert base == key(GemmArgs(torch.randn(8, 4), torch.randn(4, 6)))  # contents are not in it
    assert base == key(GemmArgs(a, b), ["FAKEA", "FAKEB"])  # candidate order is not in it
    variants = {
        "shape": GemmArgs(torch.randn(8, 5), torch.randn(5, 6)),
        "dtype": GemmArgs(a.half(), b.half()),
        "strides": GemmArgs(torch.randn(4, 8).t(), b),
        "trans_a": GemmArgs(torch.randn(4, 8), b, trans_a=True),
        "trans_b": GemmArgs(a, torch.randn(6, 4), trans_b=True),
        "trans_c": GemmArgs(a, b, trans_c=True),
        "out_dtype": GemmArgs(a, b, out_dtype=torch.bfloat16),
        "out": GemmArgs(a, b, out=torch.zeros(8, 6)),
        "candidates": None,
    }
    keys = {name: key(args) for name, args in variants.items() if args is not None}
    keys["candidates"] = key(GemmArgs(a, b), ["FAKEA"])
    assert len(set(keys.values()) | {base}) == len(keys) + 1  # all distinct
    # what is in it, field by field
    ak = dict(args_key(GemmArgs(a, b, trans_b=False, out_dtype=torch.float16)))
    assert ak["a"][:4] == ("tensor", (8, 4), "torch.float32", (4, 1))
    assert ak["a"][4] == "cpu"
    assert ak["b"][1] == (4, 6)
    assert (ak["trans_a"], ak["trans_b"], ak["trans_c"]) == (False, False, False)
    assert ak["out_dtype"] == "torch.float16" and ak["out"] is None
    assert base[0] == "gemm" and base[3] == ("FAKEA", "FAKEB")


def test_different_flags_or_dtypes_are_tuned_separately(tuned, make_args):
    select("gemm", make_args())
    select("gemm", make_args(trans_b=True))
    select("gemm", make_args(trans_c=True))
    select("gemm", make_args(dtype=torch.bfloat16))
    select("gemm", make_args())  # a hit
    assert len(get_tuner().cache) == 4
    assert len(get_tuner().timings) == 4
    hows = [select("gemm", make_args(trans_b=True)).how, select("gemm", make_args(dtype=torch.bfloat16)).how]
    assert hows == ["autotune-cache", "autotune-cache"]


def test_hit_is_revalidated_and_retuned(tuned, make_args):
    assert select("gemm", make_args()).backend == "FAKEB"
    tuned.cfg("FAKEB")["decline"] = "FAKEB lost its license"
    got = select("gemm", make_args())  # no error: the stale winner is dropped, tuned again
    assert (got.backend, got.how) == ("FAKEA", "autotune")
    assert select("gemm", make_args()).how == "autotune-cache"
    tuned.cfg("FAKEB")["decline"] = None
    got = select("gemm", make_args())  # FAKEA is still valid: kept
    assert (got.backend, got.how) == ("FAKEA", "autotune-cache")


def test_hit_is_revalidated_against_availability(use_plugins, fakekit, monkeypatch, make_args):
    use_plugins("fake_a", "fake_b")
    monkeypatch.setenv("TURBO_DISABLE_PLUGINS", "torch")
    monkeypatch.setenv("TURBO_AUTO_TUNE", "1")
    args = make_args()
    prim = get_primitive("gemm")
    from turbo_core.plugins.host import get_host

    kernels = {k.backend: k for k in get_host().registry.kernels_for("gemm")}
    key = get_tuner().key(prim, CPU, list(kernels), args)
    get_tuner().cache.put(key, "FAKEB")
    assert select("gemm", args).how == "autotune-cache"
    fakekit.cfg("FAKEB")["unavailable"] = "gone"
    get_host().registry.backend("FAKEB").reprobe()
    got = select("gemm", args)
    assert (got.backend, got.how) == ("FAKEA", "autotune")


def test_no_tuning_during_graph_capture(use_plugins, fakekit, monkeypatch, make_args):
    use_plugins("fake_a", "fake_b")  # TORCH stays: it is the CPU default
    monkeypatch.setenv("TURBO_AUTO_TUNE", "1")
    seen = []
    monkeypatch.setattr(autotune, "is_capturing", lambda platform: seen.append(platform) or True)
    got = select("gemm", make_args())
    assert (got.backend, got.how) == ("TORCH", "default")
    assert seen == [CPU]
    assert calls(fakekit, "FAKEA", "FAKEB") == [0, 0]
    assert len(get_tuner().cache) == 0 and get_tuner().timings == {}
    # tuned outside capture ...
    monkeypatch.setattr(autotune, "is_capturing", lambda platform: False)
    tuned = select("gemm", make_args())
    assert tuned.how == "autotune"
    # ... the cached winner is used during capture
    monkeypatch.setattr(autotune, "is_capturing", lambda platform: True)
    before = calls(fakekit, "FAKEA", "FAKEB")
    got = select("gemm", make_args())
    assert (got.backend, got.how) == (tuned.backend, "autotune-cache")
    assert calls(fakekit, "FAKEA", "FAKEB") == before


def test_timing_never_writes_into_the_callers_out(tuned, make_args):
    args = make_args(6, 5, 3)
    out = torch.zeros(6, 5)
    res = call("gemm", GemmArgs(args.a, args.b, out=out))
    assert res is out
    torch.testing.assert_close(out, args.a @ args.b, rtol=1e-5, atol=1e-5)  # exactly one accumulation
    per_candidate = get_tuner().warmup + get_tuner().iters
    assert sum(calls(tuned, "FAKEA", "FAKEB")) == 2 * per_candidate + 1
    # trans_c: out is [N, M]
    out_t = torch.ones(5, 6)
    call("gemm", GemmArgs(args.a, args.b, trans_c=True, out=out_t))
    torch.testing.assert_close(out_t, 1 + (args.a @ args.b).t(), rtol=1e-5, atol=1e-5)


def test_candidate_that_raises_loses(tuned, make_args, caplog):
    caplog.set_level(logging.WARNING, logger="turbo")
    tuned.cfg("FAKEA")["sleep"] = 0.0
    tuned.cfg("FAKEB")["raise"] = "kernel exploded"
    got = select("gemm", make_args())
    assert (got.backend, got.how) == ("FAKEA", "autotune")
    assert list(get_tuner().timings.values())[0]["FAKEB"] == float("inf")
    msgs = [r.getMessage() for r in caplog.records]
    assert "turbo: auto-tune of gemm on FAKEB failed: RuntimeError: kernel exploded" in msgs


def test_all_candidates_raising_goes_on_to_default_and_fallback(tuned, make_args):
    tuned.cfg("FAKEA")["raise"] = "a broke"
    tuned.cfg("FAKEB")["raise"] = "b broke"
    got = select("gemm", make_args())
    assert (got.backend, got.how) == ("FAKEA", "fallback")
    assert len(get_tuner().cache) == 0


def test_winner_persists_to_disk(tuned, make_args, monkeypatch, tmp_path):
    cache_dir = tmp_path / "tune"
    monkeypatch.setenv("TURBO_TUNE_CACHE", str(cache_dir))
    assert select("gemm", make_args()).how == "autotune"
    files = list(cache_dir.glob("tune-cpu-cpu-*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    assert data["versions"] == {"FAKEA": "0.0.1", "FAKEB": "0.0.1"}
    assert list(data["winners"].values()) == ["FAKEB"]
    # a fresh tuner (a new process) reads the winner back without timing
    monkeypatch.setattr(autotune, "_tuner", None)
    before = calls(tuned, "FAKEA", "FAKEB")
    got = select("gemm", make_args())
    assert (got.backend, got.how) == ("FAKEB", "autotune-disk")
    assert calls(tuned, "FAKEA", "FAKEB") == before
    assert select("gemm", make_args()).how == "autotune-cache"  # now in memory too


def test_disk_winner_is_revalidated(tuned, make_args, monkeypatch, tmp_path):
    monkeypatch.setenv("TURBO_TUNE_CACHE", str(tmp_path))
    assert select("gemm", make_args()).backend == "FAKEB"
    monkeypatch.setattr(autotune, "_tuner", None)
    tuned.cfg("FAKEB")["decline"] = "no longer"
    got = select("gemm", make_args())
    assert (got.backend, got.how) == ("FAKEA", "autotune")


def test_unreadable_disk_cache_is_ignored(tuned, make_args, monkeypatch, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="turbo")
    monkeypatch.setenv("TURBO_TUNE_CACHE", str(tmp_path))
    select("gemm", make_args())
    (path,) = tmp_path.glob("tune-*.json")
    path.write_text("{not json")
    monkeypatch.setattr(autotune, "_tuner", None)
    got = select("gemm", make_args())
    assert (got.backend, got.how) == ("FAKEB", "autotune")
    assert any("ignoring unreadable tune cache" in r.getMessage() for r in caplog.records)
    assert list(json.loads(path.read_text())["winners"].values()) == ["FAKEB"]  # rewritten


def test_lru_bound_applies_to_tuning(tuned, make_args, monkeypatch):
    monkeypatch.setattr(get_tuner(), "cache", TuneCache(2))
    for k in (2, 4, 6):
        select("gemm", make_args(k=k))
    assert len(get_tuner().cache) == 2 and get_tuner().cache.evictions == 1
    # the oldest (k=2) was evicted: it is tuned again
    assert select("gemm", make_args(k=2)).how == "autotune"
    assert select("gemm", make_args(k=6)).how == "autotune-cache"


def test_reset_clears_the_tune_cache(tuned, make_args):
    select("gemm", make_args())
    assert len(get_tuner().cache) == 1
    GlobalBackendManager.reset()
    assert len(get_tuner().cache) == 0 and get_tuner().timings == {}
