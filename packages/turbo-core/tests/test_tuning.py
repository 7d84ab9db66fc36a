"""The tuning database (``turbo_core.tuning``) and ``turbo tune``.

File round trip and errors, key matching (exact, shape bucket, exact-only entries), merging and the
order of sources (shipped files, then the user's file), library versions, the place of a tuned
choice in the selection order (explicit choices beat it, it beats the defaults), the selection
cache around database changes, kernel-config lookups (and TRITON's GEMM config choice), and the CLI
on the CPU: a quick run writes a database that a second process's dispatch then uses.

Results of the calls made here are checked against float64 matmuls of the inputs.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import textwrap

import pytest
import torch

from turbo_core import GlobalBackendManager, timing, use_backend
from turbo_core import tuning as T
from turbo_core.bench import campaign
from turbo_core.cli import main
from turbo_core.dispatch import call, dispatcher, select, stats
from turbo_core.dispatch import defaults as _defaults
from turbo_core.dispatch import tuning_keys as K
from turbo_core.dispatch.specs.gemm import GemmArgs, gemm_dims
from turbo_core.platform import CPU
from turbo_core.tuning import ConfigChoice, Entry, Key, TuningDB, plausible
from turbo_core.tuning import versions as V

M = GlobalBackendManager


@pytest.fixture(autouse=True)
def _fresh_db():
    T.reset()
    yield
    T.reset()


@pytest.fixture
def fakes(use_plugins, fakekit):
    """TORCH (the CPU default) plus the fake gemm backends FAKEA and FAKEB (float64 math)."""
    use_plugins("fake_a", "fake_b")
    return fakekit


def cpu_key(shape=(8, 6, 4), dtypes=("fp32", "fp32"), layout="NN") -> Key:
    return Key("cpu", shape, dtypes, layout)


def choice(backend: str, key: Key | None = None, **kw) -> Entry:
    return Entry("gemm", key or cpu_key(), backend=backend, **kw)


def check(out: torch.Tensor, args: GemmArgs) -> None:
    a = args.a.t() if args.trans_a else args.a
    b = args.b.t() if args.trans_b else args.b
    torch.testing.assert_close(out.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)


# -- the file --------------------------------------------------------------------------------------

def full_entry() -> Entry:
    return Entry(
        "gemm", Key("sm90", (8192, 6144, 4096), ("bf16", "bf16"), "NT"), backend="TRITON",
        times_us={"TRITON": 812.25, "HIPBLASLT": 851.5}, heuristic="HIPBLASLT", heuristic_time_us=851.5,
        versions={"triton": "3.6.0", "turbo-triton": "0.1.0"},
        configs={"TRITON": ConfigChoice(Key("sm90", (8192, 6144, 4096), ("16bit", "16bit"), "b_col_major"),
                                        {"block_m": 128, "block_n": 256, "flatten": True}, 812.25, 840.5,
                                        {"triton": "3.6.0"})},
    )


def test_round_trip(tmp_path):
    db = TuningDB([full_entry(), choice("TORCH", match="exact")])
    path = tmp_path / "sub" / "db.json"
    db.save(path, {"device": "test"})
    raw = json.loads(path.read_text())
    assert (raw["format"], raw["format_version"], raw["meta"]) == ("turbo-tuning-db", 1, {"device": "test"})
    back = TuningDB.load(path)
    assert back.to_json() == db.to_json()
    e = back.best("gemm", Key("sm90", (8192, 6144, 4096), ("bf16", "bf16"), "NT"))
    assert (e.backend, e.heuristic, e.times_us, e.versions) == (
        "TRITON", "HIPBLASLT", {"TRITON": 812.25, "HIPBLASLT": 851.5}, {"triton": "3.6.0", "turbo-triton": "0.1.0"})
    assert e.source == str(path)
    cfg = back.kernel_config("TRITON", "gemm", Key("sm90", (8192, 6144, 4096), ("16bit", "16bit"), "b_col_major"))
    assert cfg == {"block_m": 128, "block_n": 256, "flatten": True}
    assert back.best("gemm", cpu_key()).match == "exact"


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda o: o.update(format="other"), "not a turbo tuning database"),
    (lambda o: o.update(format_version=2), "format_version 2 is not supported"),
    (lambda o: o["entries"][0]["key"].update(shape=[8, -1, 4]), r"entries\[0\]\.key\.shape"),
    (lambda o: o["entries"][0]["key"].pop("arch"), r"entries\[0\]\.key\.arch"),
    (lambda o: o["entries"][0].update(times_us={"TRITON": "fast"}), r"entries\[0\]\.times_us\.TRITON"),
    (lambda o: o["entries"][0].update(match="close"), r"entries\[0\]\.match"),
    (lambda o: o["entries"][0]["configs"]["TRITON"].update(config=[1]), r"entries\[0\]\.configs\.TRITON\.config"),
    (lambda o: o["entries"][0].update(primitive=""), r"entries\[0\]\.primitive"),
])
def test_malformed_file_names_the_field(tmp_path, mutate, message):
    obj = TuningDB([full_entry()]).to_json()
    mutate(obj)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(ValueError, match=message) as info:
        TuningDB.load(path)
    assert str(path) in str(info.value)


def test_not_json_names_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{")
    with pytest.raises(ValueError, match="broken.json: not valid JSON"):
        TuningDB.load(path)


# -- keys and matching -----------------------------------------------------------------------------

def test_gemm_key_reads_shape_dtypes_and_layout():
    a, b = torch.randn(4, 8), torch.randn(6, 4)  # op(a) = a.T [8, 4], op(b) = b.T [4, 6]
    assert T.key_for("gemm", GemmArgs(a, b, True, True), CPU) == Key("cpu", (8, 6, 4), ("fp32", "fp32"), "TT")
    key = T.key_for("gemm", GemmArgs(a.bfloat16(), b.bfloat16(), True, True, out_dtype=torch.float32, trans_c=True),
                    CPU)
    assert key == Key("cpu", (8, 6, 4), ("bf16", "fp32"), "TTC")
    acc = T.key_for("gemm", GemmArgs(a, b, True, True, out=torch.zeros(8, 6, dtype=torch.float16)), CPU)
    assert acc == Key("cpu", (8, 6, 4), ("fp32", "fp16"), "TT+acc")
    assert T.key_for("rmsnorm_fwd", object(), CPU) is None  # no key function: never in the database


@pytest.mark.parametrize("layout", ["NT/tensorwise", "NN/rowwise", "TN/blockwise-1d1d", "NT/blockwise-1d2d",
                                    "NN/blockwise-2d1d", "NTC/rowwise", "TN+acc/tensorwise", "NT/blockwise-1d2d-64"])
def test_gemm_fp8_keys_round_trip_through_their_arguments(layout):
    key = Key("cpu", (64, 192, 256), ("float8_e4m3fn", "float8_e5m2", "bf16"), layout)
    args = K.gemm_fp8_args_for(key, "cpu", torch.Generator().manual_seed(0))
    assert args.a.dtype == torch.float8_e4m3fn and args.b.dtype == torch.float8_e5m2
    assert T.key_for("gemm_fp8", args, CPU) == key
    # the operands are real quantizations: dequantized, they are near normal bf16 values
    assert 0.5 < float(args.a.float().abs().max() * args.a_scale_inv.float().max()) < 10


@pytest.mark.parametrize(("layout", "message"), [
    ("NT", "after '/'"), ("NT/mx", "after '/'"), ("NT/blockwise-3d1d", "after '/'"), ("XY/rowwise", "key.layout"),
    ("NT/blockwise-1d1d-x", "bad block size")])
def test_gemm_fp8_args_of_a_bad_key_name_the_layout(layout, message):
    key = Key("cpu", (8, 8, 8), ("float8_e4m3fn", "float8_e4m3fn", "bf16"), layout)
    with pytest.raises(ValueError, match=message):
        K.gemm_fp8_args_for(key, "cpu", torch.Generator())


def test_gemm_fp8_cases_quantize_each_pass_like_the_fp8_linear():
    from turbo_core.low_precision import Format

    cases = campaign.gemm_fp8_cases(arch="cpu", granularities=["blockwise", "rowwise"], fmt=Format.HYBRID,
                                    device="cpu", quick=True, models=["tiny"])
    layouts = {(c.label.split()[0].split("/")[-1], c.key.layout.split("/")[1], c.key.dtypes) for c in cases}
    e4, e5 = "float8_e4m3fn", "float8_e5m2"
    assert ("fwd", "blockwise-1d2d", (e4, e4, "bf16")) in layouts
    assert ("dgrad", "blockwise-1d2d", (e5, e4, "bf16")) in layouts  # gradient E5M2, weight tiles
    assert ("wgrad", "blockwise-1d1d", (e5, e4, "bf16")) in layouts  # gradient and input along K
    assert all(c.primitive == "gemm_fp8" and c.flops == 2 * math.prod(c.key.shape) for c in cases)
    bwd = campaign.gemm_fp8_cases(arch="cpu", granularities=["rowwise"], fmt=Format.E4M3, device="cpu", quick=True,
                                  passes=["dgrad", "wgrad"])
    assert bwd and {c.label.split()[0].split("/")[-1] for c in bwd} == {"dgrad", "wgrad"}
    default = campaign.gemm_fp8_cases(arch="cpu", granularities=None, fmt=Format.E4M3, device="cpu", quick=True)
    assert {c.key.layout.split("/")[1].split("-")[0] for c in default} == {"tensorwise", "rowwise", "blockwise"}
    with pytest.raises(ValueError, match="MX_BLOCKWISE is not tuned"):
        campaign.gemm_fp8_cases(arch="cpu", granularities=["mx"], fmt=Format.E4M3, device="cpu", quick=True)


def test_bucket_rounds_up_to_powers_of_two():
    assert T.bucket((8192, 6000, 1, 0, 3)) == (8192, 8192, 1, 0, 4)


def test_exact_then_bucket_then_nothing():
    big = choice("FAKEA", Key("sm90", (8192, 4096, 4096), ("bf16", "bf16"), "NT"))
    small = choice("FAKEB", Key("sm90", (5000, 4096, 4096), ("bf16", "bf16"), "NT"))  # same bucket, smaller
    exact_only = choice("FAKEC", Key("sm90", (100, 100, 100), ("bf16", "bf16"), "NT"), match="exact")
    db = TuningDB([small, big, exact_only])

    def who(shape, dtypes=("bf16", "bf16"), layout="NT", arch="sm90"):
        e = db.best("gemm", Key(arch, shape, dtypes, layout))
        return e.backend if e else None

    assert who((8192, 4096, 4096)) == "FAKEA"
    assert who((5000, 4096, 4096)) == "FAKEB"  # exact beats the bucket's largest
    assert who((6000, 4096, 4096)) == "FAKEA"  # bucket (8192, 4096, 4096): its largest problem
    assert who((6000, 4096, 4096)) == "FAKEA"  # memoized answer, same result
    assert who((3000, 4096, 4096)) is None      # bucket 4096: empty
    assert who((8192, 4096, 4096), dtypes=("fp16", "fp16")) is None
    assert who((8192, 4096, 4096), layout="NN") is None
    assert who((8192, 4096, 4096), arch="sm100") is None
    assert who((100, 100, 100)) == "FAKEC"
    assert who((120, 100, 100)) is None         # "exact" entries are never matched by bucket
    assert db.best("grouped_gemm", Key("sm90", (8192, 4096, 4096), ("bf16", "bf16"), "NT")) is None


def test_adding_the_same_key_merges_newer_wins():
    key = Key("sm90", (64, 64, 64), ("bf16", "bf16"), "NT")
    ck = Key("sm90", (64, 64, 64), ("16bit", "16bit"), "b_col_major")
    db = TuningDB([Entry("gemm", key, backend="FAKEA", configs={"TRITON": ConfigChoice(ck, {"v": 1}),
                                                                 "OTHER": ConfigChoice(ck, {"v": 2})})])
    db.add(Entry("gemm", key, backend="FAKEB", configs={"TRITON": ConfigChoice(ck, {"v": 3})}))
    assert db.best("gemm", key).backend == "FAKEB"
    assert db.kernel_config("TRITON", "gemm", ck) == {"v": 3}
    assert db.kernel_config("OTHER", "gemm", ck) == {"v": 2}
    db.add(Entry("gemm", key, configs={"OTHER": ConfigChoice(ck, {"v": 4})}))  # configs only: choice stays
    assert db.best("gemm", key).backend == "FAKEB" and db.kernel_config("OTHER", "gemm", ck) == {"v": 4}
    assert len(db) == 1


# -- versions --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("then", "now", "policy", "ok"), [
    ("3.6.0", "3.6.1", "minor", True),
    ("3.6.0", "3.7.0", "minor", False),
    ("2.11.0+cu130", "2.11.0", "exact", True),
    ("3.6.0", "3.6.1", "exact", False),
    ("1.0", "9.9", "any", True),
])
def test_version_policies(then, now, policy, ok):
    assert V.compatible({"triton": then}, {"triton": now}, policy) is ok
    assert V.compatible({"absent-lib": "1.0"}, {}, policy)  # not installed now: no evidence against


def test_registered_library_probes_report_versions(monkeypatch):
    monkeypatch.setattr(V, "_PROBES", {})
    V.register_library("fakeblas", lambda: "13.1.0")
    V.register_library("broken", lambda: 1 / 0)
    V.register_library("unknown", lambda: None)
    now = V.current({}, ("fakeblas", "broken", "unknown"))
    assert now["fakeblas"] == "13.1.0" and "broken" not in now and "unknown" not in now
    assert not V.compatible({"fakeblas": "12.9.0"}, now, "minor")
    assert V.compatible({"fakeblas": "13.1.2", "broken": "1.0"}, now, "minor")
    with pytest.raises(TypeError, match="probe"):
        V.register_library("x", "13.0")
    with pytest.raises(ValueError, match="name"):
        V.register_library("", lambda: "1")


def test_stale_choices_are_skipped_unless_policy_any(fakes, make_args, monkeypatch, tmp_path):
    path = tmp_path / "db.json"
    TuningDB([choice("FAKEB", versions={"turbo-fakeb": "7.0.0"})]).save(path)  # the fake is 0.0.1
    monkeypatch.setenv("TURBO_TUNING_DB", str(path))
    assert select("gemm", make_args()).how == "default"
    assert len(T.info()["stale"]) == 1 and "turbo-fakeb 7.0.0" in T.info()["stale"][0]
    monkeypatch.setenv("TURBO_TUNING_VERSIONS", "any")
    assert (select("gemm", make_args()).backend, select("gemm", make_args()).how) == ("FAKEB", "tuned")
    monkeypatch.setenv("TURBO_TUNING_VERSIONS", "newest")
    with pytest.raises(ValueError, match="TURBO_TUNING_VERSIONS='newest'"):
        select("gemm", make_args())


# -- the selection order ---------------------------------------------------------------------------

def test_database_beats_the_defaults(fakes, make_args):
    args = make_args()
    assert select("gemm", args).backend == "TORCH"  # the CPU default
    T.record(choice("FAKEB"))
    got = select("gemm", args)
    assert (got.backend, got.how) == ("FAKEB", "tuned")
    assert "cpu 8x6x4 fp32,fp32 NN" in got.source
    check(call("gemm", args), args)
    assert stats()[("gemm", "FAKEB", "tuned")] == 1


@pytest.mark.parametrize("layer", ["use_backend", "code", "env"])
def test_explicit_choices_beat_the_database(fakes, make_args, monkeypatch, layer):
    T.record(choice("FAKEB"))
    if layer == "code":
        M.set_gemm_backend("FAKEA")
    elif layer == "env":
        monkeypatch.setenv("TURBO_GEMM_BACKEND", "FAKEA")
    if layer == "use_backend":
        with use_backend("FAKEA"):
            got = select("gemm", make_args())
    else:
        got = select("gemm", make_args())
    assert (got.backend, got.how) == ("FAKEA", layer)


def test_a_measured_choice_applies_only_against_the_default_it_was_timed_with(fakes, make_args, monkeypatch):
    # tuned on a machine without TORCH: FAKEB beat FAKEA, but the default here (TORCH) was never timed
    T.record(choice("FAKEB", times_us={"FAKEB": 1.0, "FAKEA": 2.0}))
    assert select("gemm", make_args()).how == "default"
    T.record(choice("FAKEB", times_us={"FAKEB": 1.0, "TORCH": 2.0}))
    assert (select("gemm", make_args()).backend, select("gemm", make_args()).how) == ("FAKEB", "tuned")
    T.record(choice("FAKEB", times_us={"FAKEB": 1.0, "FAKEA": 2.0}))
    monkeypatch.setitem(_defaults.DEFAULTS, "gemm", {"cpu": ("FAKEA", "TORCH")})  # now FAKEA is the default
    assert (select("gemm", make_args()).backend, select("gemm", make_args()).how) == ("FAKEB", "tuned")


def test_database_answers_before_online_auto_tune(fakes, make_args, monkeypatch):
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "AUTOTUNE")
    T.record(choice("FAKEB"))
    got = select("gemm", make_args())
    assert (got.backend, got.how) == ("FAKEB", "tuned")
    assert fakes.cfg("FAKEA")["calls"] == fakes.cfg("FAKEB")["calls"] == 0  # nothing was timed


def test_a_tuned_backend_that_declines_is_passed_over(fakes, make_args):
    fakes.cfg("FAKEB")["decline_odd"] = True
    T.record(choice("FAKEB", cpu_key((7, 6, 4))))
    got = select("gemm", make_args(7, 6, 4))
    assert (got.backend, got.how) == ("TORCH", "default")


def test_switch_off_and_disabled_context(fakes, make_args, monkeypatch):
    T.record(choice("FAKEB"))
    with T.disabled():
        assert select("gemm", make_args()).how == "default"
    assert select("gemm", make_args()).how == "tuned"
    monkeypatch.setenv("TURBO_TUNING", "0")
    assert select("gemm", make_args()).how == "default"  # (the switch reloads: records are gone)
    assert T.info()["enabled"] is False


# -- the selection cache ---------------------------------------------------------------------------

def test_record_reload_and_env_change_invalidate_cached_selections(fakes, make_args, monkeypatch, tmp_path):
    args = make_args()
    check(call("gemm", args), args)
    check(call("gemm", args), args)
    assert dispatcher.cache_info().hits == 1
    T.record(choice("FAKEB"))  # empties the cache: the next call selects again
    check(call("gemm", args), args)
    assert stats()[("gemm", "FAKEB", "tuned")] == 1
    check(call("gemm", args), args)
    assert stats()[("gemm", "FAKEB", "tuned")] == 2 and dispatcher.cache_info().hits == 1  # cached again

    path = tmp_path / "user.json"
    TuningDB([choice("FAKEA")]).save(path)
    monkeypatch.setenv("TURBO_TUNING_DB", str(path))  # a new key: the next call misses and reloads
    check(call("gemm", args), args)
    assert stats()[("gemm", "FAKEA", "tuned")] == 1
    TuningDB([choice("TORCH")]).save(path)
    T.reload()
    check(call("gemm", args), args)
    assert stats()[("gemm", "TORCH", "tuned")] == 1
    T.reset()
    monkeypatch.delenv("TURBO_TUNING_DB")
    check(call("gemm", args), args)
    assert stats()[("gemm", "TORCH", "default")] == 3


def test_a_cached_tuned_selection_follows_the_defaults_table(fakes, make_args, monkeypatch):
    args = make_args()
    T.record(choice("FAKEB", times_us={"FAKEB": 1.0, "TORCH": 2.0}))
    check(call("gemm", args), args)
    check(call("gemm", args), args)
    assert stats() == {("gemm", "FAKEB", "tuned"): 2} and dispatcher.cache_info().hits == 1
    monkeypatch.setitem(_defaults.DEFAULTS, "gemm", {"cpu": ("FAKEA",)})  # FAKEA was never timed against
    check(call("gemm", args), args)
    assert stats()[("gemm", "FAKEA", "default")] == 1


def test_disabled_selections_are_not_cached(fakes, make_args):
    args = make_args()
    T.record(choice("FAKEB"))
    with T.disabled():
        check(call("gemm", args), args)
        check(call("gemm", args), args)
    check(call("gemm", args), args)
    assert stats() == {("gemm", "TORCH", "default"): 2, ("gemm", "FAKEB", "tuned"): 1}


# -- sources ---------------------------------------------------------------------------------------

PLUGIN = '''
from fake_a import turbo_backend_info, turbo_register_kernels  # FAKEA, with this module's tuning_db/
'''


@pytest.fixture
def shipping_plugin(tmp_path, monkeypatch, fakekit):
    """A plugin module (backend FAKEA) with a ``tuning_db`` directory beside it, loaded with TORCH."""
    (tmp_path / "tuneplug.py").write_text(PLUGIN)
    (tmp_path / "tuning_db").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TURBO_PLUGINS", "tuneplug,fake_b")
    yield tmp_path / "tuning_db"
    sys.modules.pop("tuneplug", None)


def test_shipped_files_are_found_and_user_entries_win(shipping_plugin, make_args, monkeypatch, tmp_path):
    TuningDB([choice("FAKEA"), choice("FAKEA", cpu_key((2, 6, 4)))]).save(shipping_plugin / "cpu.json")
    assert T.shipped_files() == [shipping_plugin / "cpu.json"]
    got = select("gemm", make_args())
    assert (got.backend, got.how) == ("FAKEA", "tuned") and "cpu.json" in got.source
    user = tmp_path / "mine.json"
    TuningDB([choice("FAKEB")]).save(user)
    monkeypatch.setenv("TURBO_TUNING_DB", str(user))
    assert select("gemm", make_args()).backend == "FAKEB"        # the user's entry wins
    assert select("gemm", make_args(2, 6, 4)).backend == "FAKEA"  # shipped entries still serve other keys
    assert T.info()["sources"] == [str(shipping_plugin / "cpu.json"), str(user)]


def test_a_broken_shipped_file_is_reported_and_skipped(shipping_plugin, make_args, caplog):
    caplog.set_level(logging.WARNING, logger="turbo")
    (shipping_plugin / "bad.json").write_text("[]")
    TuningDB([choice("FAKEA")]).save(shipping_plugin / "good.json")
    assert select("gemm", make_args()).backend == "FAKEA"
    assert "skipping the shipped tuning database" in caplog.text and "bad.json" in caplog.text
    assert len(T.info()["errors"]) == 1


def test_a_broken_user_file_is_reported_once_and_ignored(fakes, make_args, monkeypatch, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="turbo")
    path = tmp_path / "user.json"
    path.write_text('{"format": "turbo-tuning-db", "format_version": 1, "entries": {}}')
    monkeypatch.setenv("TURBO_TUNING_DB", str(path))
    args = make_args()
    assert select("gemm", args).how == "default"  # as without a database
    check(call("gemm", args), args)
    T.reload()
    assert select("gemm", args).how == "default"
    reports = [r.getMessage() for r in caplog.records if "ignoring the tuning database" in r.getMessage()]
    assert len(reports) == 1
    assert "TURBO_TUNING_DB=" in reports[0] and "entries: expected a list" in reports[0]
    assert [e for e in T.info()["errors"] if "TURBO_TUNING_DB=" in e and "user.json" in e]
    assert str(path) not in T.info()["sources"]


def test_save_writes_the_user_layer(fakes, make_args, monkeypatch, tmp_path):
    path = tmp_path / "new.json"  # does not exist yet: an empty database
    monkeypatch.setenv("TURBO_TUNING_DB", str(path))
    assert select("gemm", make_args()).how == "default"
    T.record(choice("FAKEB"))
    assert T.save() == str(path)
    assert [e.backend for e in TuningDB.load(path).entries()] == ["FAKEB"]
    with pytest.raises(ValueError, match="path: no file given"):
        monkeypatch.delenv("TURBO_TUNING_DB")
        T.save()


# -- kernel configs --------------------------------------------------------------------------------

def test_kernel_config_lookup_forcing_and_disabled(fakes):
    ck = Key("interpreter", (64, 64, 64), ("16bit", "16bit"), "b_col_major")
    assert T.kernel_config("TRITON", "gemm", ck) is None
    T.record(Entry("gemm", cpu_key((64, 64, 64), ("bf16", "bf16"), "NT"),
                   configs={"TRITON": ConfigChoice(ck, {"block_m": 64})}))
    assert T.kernel_config("TRITON", "gemm", ck) == {"block_m": 64}
    assert T.kernel_config("TRITON", "gemm", ck._replace(shape=(50, 64, 64))) == {"block_m": 64}  # bucket
    assert T.kernel_config("TRITON", "gemm", ck._replace(layout="b_row_major")) is None
    assert T.kernel_config("OTHER", "gemm", ck) is None
    with T.forcing("triton", "gemm", {"block_m": 16}):
        assert T.kernel_config("TRITON", "gemm", ck._replace(shape=(1, 1, 1))) == {"block_m": 16}
        assert T.kernel_config("TRITON", "grouped_gemm", ck) is None
    with T.disabled():
        assert T.kernel_config("TRITON", "gemm", ck) is None
        with T.forcing("TRITON", "gemm", {"block_m": 32}):
            assert T.kernel_config("TRITON", "gemm", ck) == {"block_m": 32}
    assert T.kernel_config("TRITON", "gemm", ck) == {"block_m": 64}


def test_an_exact_config_serves_its_own_key_only_and_round_trips(fakes, tmp_path):
    ck = Key("sm90", (6144, 8192, 4096), ("bf16", "bf16", "bf16"), "TN")
    exact = ConfigChoice(ck, {"algo": 3}, match="exact")
    T.record(Entry("gemm", Key("sm90", (8192, 6144, 4096), ("bf16", "bf16"), "NT"), configs={"HIPBLASLT": exact}))
    assert T.kernel_config("HIPBLASLT", "gemm", ck) == {"algo": 3}
    assert T.kernel_config("HIPBLASLT", "gemm", ck._replace(shape=(6000, 8192, 4096))) is None  # same bucket
    path = tmp_path / "exact.json"
    TuningDB([Entry("gemm", ck, configs={"HIPBLASLT": exact})]).save(path)
    assert json.loads(path.read_text())["entries"][0]["configs"]["HIPBLASLT"]["match"] == "exact"
    assert TuningDB.load(path).entries()[0].configs["HIPBLASLT"].match == "exact"
    with pytest.raises(ValueError, match="match: expected one of bucket, exact"):
        ConfigChoice(ck, {}, match="nearby")
    with pytest.raises(ValueError, match="match: expected 'bucket' or 'exact'"):
        T.Space("X", "gemm", candidates=lambda a: [], key=lambda a: ck, match="nearby")


def test_a_callable_key_is_built_only_when_a_database_has_configs(fakes):
    built = []

    def key():
        built.append(1)
        return Key("sm90", (1, 2, 3), ("bf16",), "NT")

    assert T.kernel_config("HIPBLASLT", "gemm", key) is None and built == []
    T.record(Entry("gemm", cpu_key(), configs={"HIPBLASLT": ConfigChoice(key(), {"algo": 1})}))
    built.clear()
    assert T.kernel_config("HIPBLASLT", "gemm", key) == {"algo": 1} and built == [1]


def test_config_reader_converts_once_per_dict_and_reports_a_bad_one_once(caplog):
    calls = []

    def convert(d):
        calls.append(d)
        if d["x"] < 0:
            raise ValueError(f"config.x: expected >= 0, got {d['x']}")
        return d["x"] * 2

    read = T.ConfigReader(convert, -1, "FAKE gemm", " (its heuristics run)")
    good, bad = {"x": 3}, {"x": -5}
    caplog.set_level(logging.WARNING, logger="turbo")
    assert [read(good), read(good), read(bad), read(bad)] == [6, 6, -1, -1]
    assert calls == [good, bad]
    warned = [r.getMessage() for r in caplog.records]
    assert warned == ["turbo: ignoring a tuned FAKE gemm config (its heuristics run): config.x: expected >= 0, got -5"]
    read.clear()
    assert read(good) == 6 and len(calls) == 3


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


needs_triton = pytest.mark.skipif(not (_has("triton") and _has("turbo_triton")),
                                  reason="needs triton and turbo-triton")


@pytest.fixture
def triton_configs(monkeypatch):
    """TRITON's GEMM config module (it imports neither triton nor a kernel)."""
    if not (_has("triton") and _has("turbo_triton")):
        pytest.skip("needs triton and turbo-triton")
    monkeypatch.setenv("TURBO_PLUGINS", "turbo_triton.plugin")
    return importlib.import_module("turbo_triton.gemm.configs")


def test_triton_gemm_config_comes_from_the_database(triton_configs, caplog):
    caplog.set_level(logging.WARNING, logger="turbo")
    cfg = triton_configs
    table = cfg._TABLE["interpreter"]
    # 48x40 in 32x32 tiles is 4 tiles, one per interpreter "SM": the table's large config
    assert cfg.pick("interpreter", 48, 40, 24, 4, 2, 2, False) == table["large"]  # no entry: the table's choice
    assert cfg.pick("interpreter", 16, 16, 24, 4, 2, 2, False) == table["small"]
    tuned = {"block_m": 32, "block_n": 64, "block_k": 32, "group_m": 2, "num_warps": 1, "num_stages": 1}
    key = cfg.tuning_key("interpreter", 48, 40, 24, 2, 2, False)
    assert key == Key("interpreter", (48, 40, 24), ("16bit", "16bit"), "b_col_major")
    T.record(Entry("gemm", cpu_key((48, 40, 24), ("bf16", "bf16"), "NT"), configs={"TRITON": ConfigChoice(key, tuned)}))
    assert cfg.pick("interpreter", 48, 40, 24, 4, 2, 2, False) == cfg.GemmConfig(32, 64, 32, 2, 1, 1)
    assert cfg.pick("interpreter", 40, 40, 24, 4, 2, 2, False) == cfg.GemmConfig(32, 64, 32, 2, 1, 1)  # bucket
    assert cfg.pick("interpreter", 48, 40, 24, 4, 4, 4, False) == table["large"]  # fp32: another key
    assert cfg.pick("interpreter", 48, 40, 24, 4, 2, 2, True) == table["large"]   # B row-major: another key
    assert cfg.pick("sm90", 48, 40, 24, 132, 2, 2, False) == cfg.heuristic("sm90", 48, 40, 24, 132, 2, 2, False)
    T.record(Entry("gemm", cpu_key((48, 40, 24), ("bf16", "bf16"), "NT"),
                   configs={"TRITON": ConfigChoice(key, {**tuned, "block_m": 48})}))
    assert cfg.pick("interpreter", 48, 40, 24, 4, 2, 2, False) == table["large"]  # a bad config: reported, ignored
    assert "config.block_m: expected a power of two >= 16, got 48" in caplog.text


def test_triton_offers_its_search_space(triton_configs):
    space = T.get_space("TRITON", "gemm")
    assert space is not None and space.libraries == ("triton",)
    args = GemmArgs(torch.randn(48, 24).bfloat16(), torch.randn(40, 24).bfloat16(), trans_b=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        assert space.key(args) == triton_configs.tuning_key("interpreter", 48, 40, 24, 2, 2, False)
        cands = space.candidates(args)
    heuristic = triton_configs.to_dict(triton_configs._TABLE["interpreter"]["large"])
    assert heuristic not in cands and len(cands) == len(triton_configs.CANDIDATES["interpreter"]) - 1
    assert all(triton_configs.from_dict(c) in triton_configs.CANDIDATES["interpreter"] for c in cands)


# -- the campaign's timing and its sanity guard ----------------------------------------------------
#
# A campaign that hands ``timing.measure`` bare GemmArgs gives it no tensor to choose its clock from, so
# it would time with the wall clock and no synchronize (the launch only: a GEMM far above the device's
# peak). The campaign passes the tensors, and the plausibility guard rejects such a time.


def _clock_tensor(input_set) -> torch.Tensor | None:
    """What ``turbo_core.timing.measure`` picks its clock from: the first tensor of the set
    (a CUDA tensor: CUDA events and a synchronize; else, or none: the wall clock, no synchronize)."""
    return next((t for t in input_set if isinstance(t, torch.Tensor)), None)


def _gemm_of(input_set) -> GemmArgs:
    return next(x for x in input_set if isinstance(x, GemmArgs))


def _cases(shapes, arch="cpu"):
    return campaign.gemm_cases(arch=arch, dtype=torch.float32, device="cpu", quick=True, shapes=shapes)


def test_the_timer_is_handed_the_device_tensor_and_the_gemm_of_each_set(fakes, monkeypatch):
    real, sets_seen, clocks = timing.measure, [], []

    def spy(fn, input_sets, **kw):
        for s in input_sets:
            args = _gemm_of(s)
            clock = _clock_tensor(s)
            clocks.append(None if clock is None else (clock.device, args.a.device))
            check(fn(*s), args)  # each timed call computes its own set's product
        sets_seen.append(len(input_sets))
        return real(fn, input_sets, **kw)

    monkeypatch.setattr(timing, "measure", spy)
    db, rows = campaign.tune(_cases(["8x6x4", "6x8x4:TN"]), backends=["TORCH", "FAKEA", "FAKEB"], device="cpu",
                             warmup=0, iters=2, confirm=0)
    # None: measure would have timed with the wall clock, unsynchronized
    assert clocks and all(c is not None and c[0] == c[1] for c in clocks), clocks
    assert [r.status for r in rows] == ["ok", "ok"] and len(db) == 2
    assert len(sets_seen) == 6  # 2 shapes x 3 backends
    checked = campaign.check(TuningDB([choice("FAKEA", cpu_key((8, 6, 4), layout="NT"))]), device="cpu",
                             warmup=0, iters=2)
    assert [r.status for r in checked] in (["ok"], ["regression"]) and len(sets_seen) == 8  # heuristic + stored


def test_measure_us_refuses_sets_it_cannot_time_on_the_device():
    a = torch.randn(4, 4)
    with pytest.raises(ValueError, match=r"sets\[0\]: the arguments hold no tensor"):
        campaign.measure_us(lambda x: x, [object()], device="cpu", warmup=0, iters=1)
    with pytest.raises(ValueError, match=r"sets\[0\]: the arguments hold tensors on cpu; timing on cuda"):
        campaign.measure_us(lambda x: x, [GemmArgs(a, a)] * 2, device="cuda", warmup=0, iters=1)


def test_a_kernel_of_known_cost_is_timed_at_least_at_that_cost(fakes):
    fakes.cfg("FAKEA")["sleep"], fakes.cfg("FAKEB")["sleep"] = 0.02, 0.005
    db, rows = campaign.tune(_cases(["8x6x4"]), backends=["FAKEA", "FAKEB"], device="cpu", warmup=0, iters=2)
    (row,) = rows
    assert row.status == "ok" and row.heuristic == "TORCH"  # the heuristics' choice is always timed too
    assert row.times_us["FAKEA"] >= 20_000 and 5_000 <= row.times_us["FAKEB"] < 20_000
    assert row.times_us["TORCH"] < 5_000
    assert row.backend == "TORCH" and db.best("gemm", row.key).times_us == row.times_us


@pytest.fixture
def device_model(fakes, monkeypatch):
    """``timing.measure`` replaced by a device of known speed: each set's GEMM really runs (and is
    checked against float64), and is "timed" at ``2*M*N*K / rate``; ``rates[backend]`` in TFLOP/s,
    times the ``"speed"`` of a config forced on that backend. Returns ``rates`` to fill in."""
    rates: dict[str, float] = {}

    def measure(fn, input_sets, *, warmup, iters):
        ms = []
        for s in input_sets:
            args = _gemm_of(s)
            before = {n: fakes.cfg(n)["calls"] for n in ("FAKEA", "FAKEB")}
            check(fn(*s), args)
            ran = next((n for n in before if fakes.cfg(n)["calls"] > before[n]), "TORCH")
            speed = (T.kernel_config(ran, "gemm", ("any",)) or {}).get("speed", 1.0)
            m, n, k = gemm_dims(args)
            ms.append(2 * m * n * k / (rates[ran] * speed * 1e12) * 1e3)
        return timing.Timing(statistics.median(ms), min(ms), max(ms), len(ms))

    monkeypatch.setattr(timing, "measure", measure)
    return rates


def _offer_configs(monkeypatch, *speeds):
    space = T.Space("FAKEA", "gemm", candidates=lambda args: [{"speed": s} for s in speeds],
                    key=lambda args: cpu_key((1, 1, 1), layout="cfg"))
    monkeypatch.setitem(importlib.import_module("turbo_core.tuning.spaces")._SPACES, ("FAKEA", "gemm"), space)


def test_reported_times_are_the_timers_and_grow_with_the_work(device_model):
    device_model.update(TORCH=1e-3, FAKEA=2e-3)
    db, rows = campaign.tune(_cases(["8x6x4", "16x12x8", "32x24x16"]), backends=["TORCH", "FAKEA"], device="cpu",
                             warmup=0, iters=1)
    for r, (m, n, k) in zip(rows, [(8, 6, 4), (16, 12, 8), (32, 24, 16)], strict=True):
        assert r.status == "ok" and r.flops == 2 * m * n * k
        assert r.times_us["TORCH"] == pytest.approx(2 * m * n * k / 1e-3 / 1e12 * 1e6)
        assert r.times_us["FAKEA"] == pytest.approx(r.times_us["TORCH"] / 2)
        assert r.tflops["FAKEA"] == pytest.approx(2e-3) and r.backend == "FAKEA" and r.speedup == pytest.approx(2)
    assert rows[0].times_us["FAKEA"] < rows[1].times_us["FAKEA"] < rows[2].times_us["FAKEA"]
    assert len(db) == 3


@pytest.mark.parametrize(("torch_tflops", "fakea_tflops", "valid"), [(300.0, 450.0, True), (300.0, 4000.0, False)])
def test_a_time_above_the_arch_peak_is_invalid_and_not_stored(device_model, torch_tflops, fakea_tflops, valid):
    device_model.update(TORCH=torch_tflops, FAKEA=fakea_tflops)
    db, (row,) = campaign.tune(_cases(["8x6x4"], arch="sm90"), backends=["TORCH", "FAKEA"], device="cpu",
                               warmup=0, iters=1)
    assert row.backend == "FAKEA" and row.fastest[0] == "FAKEA with its heuristics"
    if valid:
        assert row.status == "ok" and len(db) == 1
    else:
        assert row.status.startswith("invalid: FAKEA with its heuristics measured")
        assert "= 4,000 TFLOP/s, above the sm90 fp32 peak of 494 TFLOP/s" in row.status
        assert len(db) == 0


@pytest.mark.parametrize(("speeds", "valid"), [((1.5, 0.5), True), ((1.5, 3.0), False)])
def test_a_config_more_than_twice_the_best_baseline_is_invalid(device_model, monkeypatch, speeds, valid):
    device_model.update(TORCH=1e-3, FAKEA=2e-3)  # no peak for "cpu": the relative bound applies
    _offer_configs(monkeypatch, *speeds)
    db, (row,) = campaign.tune(_cases(["8x6x4"]), backends=["TORCH", "FAKEA"], device="cpu", warmup=0, iters=1)
    assert row.baseline_us == pytest.approx({"TORCH": 384 / 1e-3 / 1e6, "FAKEA": 384 / 2e-3 / 1e6})
    if valid:  # the 1.5x config is kept; 1.5 * 2e-3 TFLOP/s is within twice the best baseline (2e-3)
        assert row.status == "ok" and row.config_gain == {"FAKEA": pytest.approx(1.5)}
        assert db.kernel_config("FAKEA", "gemm", cpu_key((1, 1, 1), layout="cfg")) == {"speed": 1.5}
    else:
        assert row.status.startswith("invalid: FAKEA config {'speed': 3.0} measured")
        assert "more than 2x the best baseline of this run" in row.status and len(db) == 0


def test_a_win_that_does_not_hold_in_alternating_rounds_is_not_kept(device_model, monkeypatch):
    """A config that measured 1.5x once but 1.0x when re-timed against its heuristics (clock drift)
    is rejected; a steady 1.5x config is kept, with the confirmation rounds' times."""
    device_model.update(TORCH=1e-3, FAKEA=2e-3)
    seen = []
    real = T.kernel_config

    def drifting(backend, primitive, key):  # the forced config reads fast only the first time it is timed
        cfg = real(backend, primitive, key)
        if cfg and cfg.get("drift"):
            seen.append(1)
            return {"speed": 1.5 if len(seen) == 1 else 1.0}
        return cfg

    monkeypatch.setattr(T, "kernel_config", drifting)
    space = T.Space("FAKEA", "gemm", candidates=lambda args: [{"speed": 1.0, "drift": True}],
                    key=lambda args: cpu_key((1, 1, 1), layout="cfg"))
    monkeypatch.setitem(importlib.import_module("turbo_core.tuning.spaces")._SPACES, ("FAKEA", "gemm"), space)
    db, (row,) = campaign.tune(_cases(["8x6x4"]), backends=["TORCH", "FAKEA"], device="cpu", warmup=0, iters=1)
    assert not row.config_gain and "not confirmed" in row.rejected["FAKEA {'speed': 1.0, 'drift': True}"]
    assert len(seen) == 1 + 2  # the search's timing, then two confirmation rounds
    _offer_configs(monkeypatch, 1.5)
    db, (row,) = campaign.tune(_cases(["8x6x4"]), backends=["TORCH", "FAKEA"], device="cpu", warmup=0, iters=1)
    assert row.config_gain == {"FAKEA": pytest.approx(1.5)} and not row.rejected


def test_a_backend_win_is_confirmed_against_the_heuristic(device_model, monkeypatch):
    """FAKEA measured faster than the heuristic's TORCH in the search but not in the confirmation:
    the choice stays with the heuristic's backend."""
    calls = []
    real = campaign._time

    def timed(primitive, backend, sets, **kw):
        calls.append(backend)
        us, err = real(primitive, backend, sets, **kw)
        if backend == "FAKEA" and len(calls) > 2:  # after the search: as slow as TORCH
            us *= 4
        return us, err

    device_model.update(TORCH=1e-3, FAKEA=2e-3)
    monkeypatch.setattr(campaign, "_time", timed)
    db, (row,) = campaign.tune(_cases(["8x6x4"]), backends=["TORCH", "FAKEA"], device="cpu", warmup=0, iters=1,
                               configs=False)
    assert row.heuristic == "TORCH" and row.backend == "TORCH" and "not confirmed" in row.rejected["backend FAKEA"]
    assert calls == ["TORCH", "FAKEA", "FAKEA", "TORCH", "FAKEA", "TORCH"]


@pytest.mark.parametrize(("fakea_tflops", "speed", "cpu_peak", "status"), [
    (1.5e-3, None, None, "regression"),  # slower than the heuristics' TORCH (2e-3): plausible
    (3e-3, None, None, "ok"),
    (20e-3, None, None, "ok"),  # another backend with its own heuristics is a baseline, however fast
    (2e-3, 1.5, None, "ok"),    # a stored config 1.5x its backend's heuristics
    (2e-3, 3.0, None, "invalid: the stored backend FAKEA measured"),  # > 2x every baseline of the run
    (3e-3, None, 2e-3, "invalid: the stored backend FAKEA measured"),  # above a (test) peak for "cpu"
])
def test_check_marks_implausible_times_invalid(device_model, monkeypatch, fakea_tflops, speed, cpu_peak, status):
    device_model.update(TORCH=2e-3, FAKEA=fakea_tflops)
    if cpu_peak is not None:
        monkeypatch.setitem(plausible.PEAK_16BIT, "cpu", cpu_peak / plausible.PRECISION_SCALE["fp32"])
    configs = {} if speed is None else {"FAKEA": ConfigChoice(cpu_key((1, 1, 1), layout="cfg"), {"speed": speed})}
    (row,) = campaign.check(TuningDB([choice("FAKEA", cpu_key((8, 6, 4), layout="NT"), configs=configs)]),
                            device="cpu", warmup=0, iters=1)
    assert (row.heuristic, row.flops, row.config) == ("TORCH", 384, speed is not None)
    assert row.stored_us == pytest.approx(384 / (fakea_tflops * (speed or 1.0) * 1e12) * 1e6)
    assert row.status.startswith(status), row.status


def test_plausible_bounds_at_sm90_numbers():
    assert plausible.peak_tflops("sm90", "bf16") == 989.0
    assert plausible.peak_tflops("sm90", "fp32") == 494.5
    assert plausible.peak_tflops("sm90", "float8_e4m3fn") == 1978.0
    assert plausible.peak_tflops("cpu", "bf16") is None and plausible.peak_tflops("sm90", "int8") is None
    flops = 2 * 8192 * 6144 * 4096  # llama3.1-8b qkv fwd
    assert plausible.tflops(flops, 550.0) == pytest.approx(flops / 550e-6 / 1e12)
    kw = {"arch": "sm90", "dtype": "bf16", "what": "TRITON"}
    assert plausible.fault(flops, 550.0, best_baseline_tflops=None, **kw) is None  # ~750 TFLOP/s
    bad = plausible.fault(flops, 96.8, best_baseline_tflops=None, **kw)  # a launch-only (unsynchronized) time
    assert bad is not None and "4,259 TFLOP/s, above the sm90 bf16 peak of 989" in bad
    assert plausible.fault(flops, 550.0, best_baseline_tflops=300.0, **kw) is not None  # > 2 x 300
    assert plausible.fault(flops, 550.0, best_baseline_tflops=400.0, **kw) is None
    assert plausible.fault(0, 1e-9, best_baseline_tflops=1.0, **kw) is None  # unknown work: no bound


# -- the CLI ---------------------------------------------------------------------------------------

QUICK = ["--quick", "--warmup", "0", "--iters", "1", "--backends", "TORCH", "TRITON"]


def _run(code_or_argv, tmp_path, **env) -> subprocess.CompletedProcess:
    """A fresh process with the Triton interpreter on (it must be on before triton is imported)."""
    full = {**os.environ, "TRITON_INTERPRET": "1", "TURBO_PLUGINS": "turbo_triton.plugin", "COLUMNS": "300", **env}
    argv = [sys.executable, "-c", code_or_argv] if isinstance(code_or_argv, str) else [sys.executable, *code_or_argv]
    return subprocess.run(argv, env=full, capture_output=True, text=True, timeout=240, cwd=tmp_path)


# The second process: for each tuned shape, which backend dispatch selects, and what TRITON's GEMM
# runs with (the config pick returned), checked against float64 math.
PROBE = textwrap.dedent("""
    import json, sys, torch
    from turbo_core import use_backend
    from turbo_core.dispatch import call, select
    from turbo_core.dispatch.specs.gemm import GemmArgs
    from turbo_triton.gemm import configs
    from dataclasses import asdict
    picked = []
    real = configs.pick
    configs.pick = lambda *a: picked.append(real(*a)) or picked[-1]
    out = {}
    for ta, tb, (m, n, k) in [(False, True, (16, 48, 32)), (True, False, (48, 16, 32))]:
        a = torch.randn(*((k, m) if ta else (m, k))).bfloat16()
        b = torch.randn(*((n, k) if tb else (k, n))).bfloat16()
        args = GemmArgs(a, b, ta, tb)
        s = select("gemm", args)
        with use_backend("TRITON"):
            c = call("gemm", args)
        want = (a.double().t() if ta else a.double()) @ (b.double().t() if tb else b.double())
        err = ((c.double() - want).abs().max() / want.abs().max()).item()
        out[f"{m}x{n}x{k}"] = [s.backend, s.how, asdict(picked[-1]), err]
    json.dump(out, sys.stdout)
""")


@needs_triton
def test_cli_quick_run_writes_a_database_that_another_process_uses(tmp_path):
    out, report = tmp_path / "db.json", tmp_path / "report.json"
    res = _run(["-m", "turbo_core.cli", "tune", "gemm", *QUICK, "--shapes", "16x48x32", "48x16x32:TN",
                "--out", str(out), "--report", str(report)], tmp_path)
    assert res.returncode == 0, res.stderr
    assert "use it with TURBO_TUNING_DB=" in res.stderr
    rows = json.loads(report.read_text())
    assert [r["status"] for r in rows] == ["ok", "ok"] and all(r["heuristic"] == "TORCH" for r in rows)
    assert all(set(r["times_us"]) == {"TORCH", "TRITON"} and not r["rejected"] for r in rows)
    db = TuningDB.load(out)
    entries = {e.key: e for e in db.entries()}
    assert set(entries) == {Key("cpu", (16, 48, 32), ("bf16", "bf16"), "NT"),
                            Key("cpu", (48, 16, 32), ("bf16", "bf16"), "TN")}
    for e in entries.values():
        assert e.backend == min(e.times_us, key=e.times_us.get) and e.heuristic == "TORCH"
        assert {"torch", "triton", "turbo-triton", "turbo-core"} <= set(e.versions)
        for c in e.configs.values():  # a config is kept only if it beat the table by more than 1%
            assert c.time_us < c.default_time_us * 0.99 and c.key.arch == "interpreter"
    # a second process: dispatch serves the stored backends, TRITON's launcher the stored configs
    res = _run(PROBE, tmp_path, TURBO_TUNING_DB=str(out))
    assert res.returncode == 0, res.stderr
    seen = json.loads(res.stdout)
    for e in entries.values():
        backend, how, cfg, err = seen["x".join(map(str, e.key.shape))]
        assert (backend, how) == (e.backend, "tuned")
        assert err < 1e-2  # bf16 output rounding
        if "TRITON" in e.configs:
            assert cfg == {**cfg, **e.configs["TRITON"].config}


def test_cli_merges_into_an_existing_database(tmp_path, capsys):
    out = tmp_path / "db.json"
    TuningDB([choice("TORCH", Key("cpu", (4, 4, 4), ("fp32", "fp32"), "NT"))]).save(out)
    argv = ["tune", "gemm", "--quick", "--warmup", "0", "--iters", "1", "--dtype", "fp32", "--backends", "TORCH"]
    assert main([*argv, "--shapes", "8x8x8", "8x8x8:TN", "--out", str(out)]) == 0
    assert {e.key.shape + (e.key.layout,) for e in TuningDB.load(out).entries()} == {
        (4, 4, 4, "NT"), (8, 8, 8, "NT"), (8, 8, 8, "TN")}
    assert all(e.backend == "TORCH" for e in TuningDB.load(out).entries())
    assert "wrote 2 tuned shapes" in capsys.readouterr().err


def test_cli_tunes_fp8_gemms_and_dispatch_serves_them(tmp_path, capsys):
    out, report = tmp_path / "db8.json", tmp_path / "report8.json"
    argv = ["tune", "gemm-fp8", "--quick", "--warmup", "0", "--iters", "1", "--backends", "TORCH",
            "--granularity", "tensorwise", "blockwise", "--shapes", "16x32x128", "--out", str(out), "--report", str(report)]
    assert main(argv) == 0, capsys.readouterr().err
    rows = json.loads(report.read_text())
    assert [(r["status"], r["key"]["layout"]) for r in rows] == [("ok", "NT/tensorwise"), ("ok", "NT/blockwise-1d2d")]
    db = TuningDB.load(out)
    assert {e.primitive for e in db.entries()} == {"gemm_fp8"} and len(db) == 2
    # dispatch reads the entry of a call with that key
    T.record(Entry("gemm_fp8", Key("cpu", (16, 32, 128), ("float8_e4m3fn", "float8_e4m3fn", "bf16"), "NT/tensorwise"),
                   backend="TORCH"))
    args = K.gemm_fp8_args_for(Key("cpu", (16, 32, 128), ("float8_e4m3fn", "float8_e4m3fn", "bf16"), "NT/tensorwise"),
                               "cpu", torch.Generator())
    assert select("gemm_fp8", args).how == "tuned"
    assert main(["tune", "gemm", "--quick", "--granularity", "rowwise"]) == 2
    assert "--granularity: only for gemm-fp8" in capsys.readouterr().err


@needs_triton
def test_cli_check_reports_a_regression(tmp_path):
    path, report = tmp_path / "slow.json", tmp_path / "check.json"
    # TRITON in the CPU interpreter is far slower than TORCH: a stored TRITON choice regresses
    TuningDB([choice("TRITON", cpu_key((16, 16, 16), ("fp32", "fp32"), "NT")),
              choice("TORCH", cpu_key((8, 8, 8), ("fp32", "fp32"), "NT")),
              choice("TRITON", Key("sm90", (16, 16, 16), ("bf16", "bf16"), "NT"))]).save(path)
    res = _run(["-m", "turbo_core.cli", "tune", "--check", str(path), *QUICK[:5], "--report", str(report)], tmp_path)
    assert res.returncode == 1, res.stderr
    rows = {(r["entry"], r["stored"]): r for r in json.loads(report.read_text())}
    slow = rows[("gemm cpu 16x16x16 fp32,fp32 NT", "backend TRITON")]
    assert slow["status"] == "regression" and slow["heuristic"] == "TORCH" and slow["ratio"] < 0.5
    assert rows[("gemm cpu 8x8x8 fp32,fp32 NT", "backend TORCH")]["status"] == "same"
    assert rows[("gemm sm90 16x16x16 bf16,bf16 NT", "entry")]["status"].startswith("skipped: tuned for sm90")
    assert "1 regressed, wrong or invalid" in res.stderr


@pytest.mark.parametrize(("argv", "message"), [
    (["tune"], "give what to tune"),
    (["tune", "gemm", "--check", "x.json"], "do not also name a suite"),
    (["tune", "gemm", "--quick", "--shapes", "8x8"], "--shapes: expected MxNxK"),
    (["tune", "gemm", "--quick", "--shapes", "8x8x8:XY"], "layout must be NN, NT, TN or TT"),
    (["tune", "gemm", "--quick", "--iters", "0"], "--iters: expected a positive count"),
    (["tune", "gemm", "--quick", "--confirm", "-1"], "--confirm: expected a count >= 0"),
    (["tune", "gemm", "--quick", "--backends", "NOPE"], "--backends: NOPE not available"),
    (["tune", "--check", "/nonexistent/db.json"], "--check:"),
])
def test_cli_bad_options(argv, message, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    assert main(argv) == 2
    assert message in capsys.readouterr().err
