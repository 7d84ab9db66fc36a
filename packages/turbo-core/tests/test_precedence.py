"""The selection table: use_backend > code > env > auto-tune > default > fallback, per key."""

from __future__ import annotations

import logging

import pytest
import torch

from turbo_core import BackendChoice, BackendError, GlobalBackendManager, PrecisionType, use_backend
from turbo_core.dispatch import Selection, call, select, stats
from turbo_core.dispatch import defaults as _defaults
from turbo_core.dispatch.manager import pinned_backend

P = PrecisionType
M = GlobalBackendManager
FAKES = ("fake_a", "fake_b", "fake_c")


@pytest.fixture
def fakes(use_plugins, fakekit):
    """FAKEA, FAKEB, FAKEC for gemm (after TORCH, the reference backend and CPU default)."""
    use_plugins(*FAKES)
    return fakekit


@pytest.fixture
def gemm_prims(test_primitive, fakekit, use_plugins):
    """Two test primitives of the gemm family, served by FAKEA/B/C but not by TORCH:
    ``gemm_fp8_test`` (precision FP8) and ``gemm_side_test`` (BF16_FP16_FP32)."""
    test_primitive("gemm_fp8_test", P.FP8)
    test_primitive("gemm_side_test", P.BF16_FP16_FP32)
    fakekit.PRIMITIVES[:] = ["gemm", "gemm_fp8_test", "gemm_side_test"]
    use_plugins(*FAKES)
    return fakekit


def sel(make_args, prim="gemm", **kw) -> Selection:
    return select(prim, make_args(**kw))


# -- the table -----------------------------------------------------------------------------------

LAYERS = ("use_backend", "code", "env", "autotune")


@pytest.mark.parametrize("present", [
    ("use_backend", "code", "env", "autotune"),
    ("use_backend", "env"),
    ("use_backend",),
    ("code", "env", "autotune"),
    ("code", "autotune"),
    ("code",),
    ("env", "autotune"),
    ("env",),
    ("autotune",),
    (),
], ids=lambda p: "+".join(p) or "nothing")
def test_precedence_table(fakes, monkeypatch, make_args, present):
    if "code" in present:
        M.set_gemm_backend("fakeb")
    if "env" in present:
        monkeypatch.setenv("TURBO_GEMM_BACKEND", "FAKEC")
    if "autotune" in present:
        monkeypatch.setenv("TURBO_AUTO_TUNE", "1")
    expected = {
        "use_backend": ("FAKEA", "use_backend", "use_backend('FAKEA')"),
        "code": ("FAKEB", "code", "code setting for gemm (all precisions)"),
        "env": ("FAKEC", "env", "TURBO_GEMM_BACKEND=FAKEC"),
    }
    first = next((layer for layer in LAYERS if layer in present), None)
    if "use_backend" in present:
        with use_backend("FakeA"):
            got = sel(make_args)
    else:
        got = sel(make_args)
    if first in expected:
        backend, how, source = expected[first]
        assert got == Selection("gemm", backend, how, source)
    elif first == "autotune":
        assert (got.how, got.source) == ("autotune", "auto-tune")
        assert got.backend in {"TORCH", "FAKEA", "FAKEB", "FAKEC"}
    else:
        assert got == Selection("gemm", "TORCH", "default", "default for cpu")


def test_default_then_fallback_with_one_warning(fakes, monkeypatch, make_args, caplog):
    caplog.set_level(logging.WARNING, logger="turbo")
    monkeypatch.setenv("TURBO_DISABLE_PLUGINS", "torch")  # the CPU default is not installed
    for _ in range(3):
        got = sel(make_args)
        assert (got.backend, got.how) == ("FAKEA", "fallback")
        assert "TORCH: backend TORCH is not installed" in got.source
    falls = [r for r in caplog.records if "falls back" in r.getMessage()]
    assert len(falls) == 1
    assert falls[0].name == "turbo" and falls[0].levelno == logging.WARNING
    assert "gemm on cpu falls back to FAKEA" in falls[0].getMessage()
    # the fallback order skips decliners (registration order: FAKEA, FAKEB, FAKEC)
    fakes.cfg("FAKEA")["decline_odd"] = True
    got = sel(make_args, m=7)
    assert (got.backend, got.how) == ("FAKEB", "fallback")
    assert len([r for r in caplog.records if "falls back" in r.getMessage()]) == 2
    # after reset() the one-time warning is emitted again
    M.reset()
    sel(make_args)
    assert len([r for r in caplog.records if "falls back to FAKEA" in r.getMessage()]) == 2


def test_default_list_order_and_declines(fakes, monkeypatch, make_args):
    monkeypatch.setitem(_defaults.DEFAULTS["gemm"], "cpu", ("FAKEB", "TORCH"))
    assert (sel(make_args).backend, sel(make_args).how) == ("FAKEB", "default")
    fakes.cfg("FAKEB")["decline_odd"] = True
    got = sel(make_args, k=5)
    assert (got.backend, got.how) == ("TORCH", "default")
    assert sel(make_args, k=4).backend == "FAKEB"


def test_fallback_by_priority(use_plugins, fakekit, monkeypatch, make_args):
    fakekit.cfg("FAKEC")["priority"] = 10
    use_plugins(*FAKES)
    monkeypatch.setenv("TURBO_DISABLE_PLUGINS", "torch")
    assert (sel(make_args).backend, sel(make_args).how) == ("FAKEC", "fallback")


def test_nobody_capable_lists_every_reason(fakes, monkeypatch, make_args):
    monkeypatch.setenv("TURBO_DISABLE_PLUGINS", "torch")
    for name in ("FAKEA", "FAKEB", "FAKEC"):
        fakes.cfg(name)["decline_odd"] = True
    with pytest.raises(BackendError) as err:
        sel(make_args, m=3)
    msg = str(err.value)
    assert msg.startswith("gemm: no backend can run this call on cpu")
    assert "TORCH: backend TORCH is not installed" in msg
    for name in ("FAKEA", "FAKEB", "FAKEC"):
        assert f"{name} declines odd dims (M=3, N=6, K=4)" in msg


def test_unavailable_backend_is_skipped_by_default_and_fallback(fakes, monkeypatch, make_args):
    monkeypatch.setenv("TURBO_DISABLE_PLUGINS", "torch")
    fakes.cfg("FAKEA")["unavailable"] = "needs a fake accelerator"
    got = sel(make_args)
    assert (got.backend, got.how) == ("FAKEB", "fallback")
    M.set_gemm_backend("FAKEA")
    with pytest.raises(BackendError, match="cannot run this call: needs a fake accelerator"):
        sel(make_args)


# -- explicit choices: errors with the reason, never a silent swap -------------------------------

@pytest.mark.parametrize("layer", ["use_backend", "code", "env"])
def test_explicit_backend_that_declines_raises_with_its_reason(fakes, monkeypatch, make_args, layer):
    fakes.cfg("FAKEB")["decline_odd"] = True
    args = make_args(m=9)
    if layer == "code":
        M.set_gemm_backend("FAKEB")
    elif layer == "env":
        monkeypatch.setenv("TURBO_GEMM_BACKEND", "fakeb")
    with pytest.raises(BackendError) as err:
        if layer == "use_backend":
            with use_backend("FAKEB"):
                call("gemm", args)
        else:
            call("gemm", args)
    msg = str(err.value)
    assert msg.startswith("gemm: backend FAKEB (chosen by ")
    assert msg.endswith("cannot run this call: FAKEB declines odd dims (M=9, N=6, K=4)")
    # nothing ran anywhere: no fallback to another backend
    assert [fakes.cfg(n)["calls"] for n in ("FAKEA", "FAKEB", "FAKEC")] == [0, 0, 0]
    assert stats() == {}


@pytest.mark.parametrize("layer", ["use_backend", "code", "env"])
def test_explicit_backend_not_installed(make_args, monkeypatch, layer):
    if layer == "code":
        M.set_gemm_backend("CK")
    elif layer == "env":
        monkeypatch.setenv("TURBO_GEMM_BACKEND", "CK")
    with pytest.raises(BackendError) as err:
        if layer == "use_backend":
            with use_backend("CK"):
                sel(make_args)
        else:
            sel(make_args)
    assert "backend CK is not installed (pip install turbo-ck)" in str(err.value)


def test_explicit_backend_without_a_kernel_for_the_primitive(gemm_prims, make_args):
    # TORCH exists but serves no gemm_side_test
    with use_backend("TORCH"):
        with pytest.raises(BackendError, match="TORCH has no kernel for gemm_side_test"):
            sel(make_args, prim="gemm_side_test")


def test_explicit_choice_runs_that_backend(fakes, make_args):
    M.set_gemm_backend("FAKEC")
    args = make_args(5, 7, 3)
    got = call("gemm", args)
    torch.testing.assert_close(got, args.a @ args.b, rtol=1e-5, atol=1e-5)
    assert [fakes.cfg(n)["calls"] for n in ("FAKEA", "FAKEB", "FAKEC")] == [0, 0, 1]
    assert stats() == {("gemm", "FAKEC", "code"): 1}


@pytest.mark.parametrize("bad", ["NOPE", "fake_z"])
def test_unknown_backend_in_set_backend(fakes, bad):
    with pytest.raises(ValueError) as err:
        M.set_backend("gemm", bad)
    msg = str(err.value)
    assert msg.startswith(f"backend: unknown backend {bad!r}; known: ")
    assert "FAKEA" in msg and "TORCH" in msg and "TRITON" in msg
    assert M.get_gemm_backend() is None


@pytest.mark.parametrize("bad", ["FAKE A", "", 3])
def test_malformed_backend_name_in_set_backend(fakes, bad):
    with pytest.raises(ValueError, match="^backend: "):
        M.set_backend("gemm", bad)
    assert M.get_gemm_backend() is None


def test_unknown_primitive_in_set_backend(fakes):
    with pytest.raises(ValueError, match="unknown primitive or family 'gemmm'"):
        M.set_backend("gemmm", "FAKEA")
    with pytest.raises(ValueError, match="unknown backend 'NOPE'"):
        with use_backend("NOPE"):
            pass


def test_well_known_name_can_be_set_even_if_not_installed(make_args):
    M.set_gemm_backend("HIPBLASLT")
    assert M.get_gemm_backend() == BackendChoice("HIPBLASLT")
    with pytest.raises(BackendError, match="not installed"):
        sel(make_args)


# -- code settings: precision merge, replacement, clearing, reset --------------------------------

def test_code_setting_for_fp8_does_not_hide_env_for_other_precisions(gemm_prims, monkeypatch, make_args):
    M.set_gemm_backend("FAKEA", precision=P.FP8)
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "FAKEB")
    got = sel(make_args)
    assert (got.backend, got.how, got.source) == ("FAKEB", "env", "TURBO_GEMM_BACKEND=FAKEB")
    got = sel(make_args, prim="gemm_fp8_test")
    assert (got.backend, got.how, got.source) == ("FAKEA", "code", "code setting for gemm (FP8)")


def test_env_per_precision_form_reaches_each_primitive(gemm_prims, monkeypatch, make_args):
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "fp8:FAKEA,other:FAKEC")
    assert sel(make_args).backend == "FAKEC"
    assert sel(make_args, prim="gemm_fp8_test").backend == "FAKEA"
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "bf16:FAKEB")
    assert sel(make_args).backend == "FAKEB"
    fallback = sel(make_args, prim="gemm_fp8_test")  # no slot for FP8: on to default/fallback
    assert (fallback.backend, fallback.how) == ("FAKEA", "fallback")


def test_precision_none_replaces_per_precision_settings(gemm_prims, make_args):
    M.set_gemm_backend("FAKEA", precision="bf16")
    M.set_gemm_backend("FAKEA", precision="fp8")
    assert sel(make_args).backend == "FAKEA"
    M.set_gemm_backend("FAKEB")  # every precision: replaces both per-precision settings
    assert sel(make_args).backend == "FAKEB"
    assert sel(make_args, prim="gemm_fp8_test").backend == "FAKEB"
    assert M.get_gemm_backend("fp8") == BackendChoice("FAKEB")
    M.set_gemm_backend("FAKEC", precision=P.FP8)  # a per-precision setting on top
    assert sel(make_args).backend == "FAKEB"
    assert sel(make_args, prim="gemm_fp8_test").backend == "FAKEC"
    M.set_gemm_backend(None, precision="fp8")  # clears only FP8
    assert sel(make_args, prim="gemm_fp8_test").backend == "FAKEB"
    M.set_gemm_backend(None)  # clears everything for the family
    assert M.get_gemm_backend() is None and M.get_gemm_backend("fp8") is None
    assert sel(make_args).how == "default"


def test_setting_per_primitive_vs_family(gemm_prims, monkeypatch, make_args):
    M.set_backend("gemm", "FAKEA")  # the family (gemm is also a primitive of it)
    M.set_backend("gemm_side_test", "FAKEB")  # one primitive
    assert sel(make_args).backend == "FAKEA"
    assert sel(make_args, prim="gemm_fp8_test").backend == "FAKEA"
    got = sel(make_args, prim="gemm_side_test")
    assert (got.backend, got.source) == ("FAKEB", "code setting for gemm_side_test (all precisions)")
    # the primitive's own setting for all precisions beats the family's per-precision one
    M.set_backend("gemm", "FAKEC", precision="bf16")
    assert sel(make_args, prim="gemm_side_test").backend == "FAKEB"
    assert sel(make_args).backend == "FAKEC"
    M.set_backend("gemm_side_test", None)
    assert sel(make_args, prim="gemm_side_test").backend == "FAKEC"
    assert M.get_backend("gemm_side_test") is None


def test_env_per_primitive_vs_family_and_code_over_env(gemm_prims, monkeypatch, make_args):
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "FAKEA")
    monkeypatch.setenv("TURBO_GEMM_SIDE_TEST_BACKEND", "FAKEB")
    assert sel(make_args).backend == "FAKEA"
    got = sel(make_args, prim="gemm_side_test")
    assert (got.backend, got.how, got.source) == ("FAKEB", "env", "TURBO_GEMM_SIDE_TEST_BACKEND=FAKEB")
    M.set_backend("gemm", "FAKEC")  # code for the family beats env for the primitive
    assert sel(make_args, prim="gemm_side_test").backend == "FAKEC"


def test_code_autotune_and_env_autotune(fakes, monkeypatch, make_args):
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "FAKEC")
    M.set_gemm_backend(auto_tune=True)  # code auto-tune beats the env backend
    assert sel(make_args).how == "autotune"
    M.set_gemm_backend(None)
    assert sel(make_args).backend == "FAKEC"
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "autotune")
    assert sel(make_args).how in ("autotune", "autotune-cache")
    # the global switch is step 3: an env backend (step 2) beats it
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "FAKEC")
    M.set_auto_tune(True)
    assert sel(make_args).backend == "FAKEC"
    monkeypatch.delenv("TURBO_GEMM_BACKEND")
    assert sel(make_args).how in ("autotune", "autotune-cache")
    M.set_auto_tune(False)
    assert sel(make_args).how == "default"


def test_set_backend_accepts_the_autotune_token(fakes, make_args):
    M.set_backend("gemm", "AutoTune")
    assert M.get_gemm_backend() == BackendChoice(auto_tune=True)
    assert sel(make_args).how == "autotune"


def test_reset_forgets_everything(fakes, monkeypatch, make_args, caplog):
    M.set_gemm_backend("FAKEA")
    M.set_gemm_backend("FAKEB", precision="fp8")
    M.set_auto_tune(True)
    call("gemm", make_args())
    assert stats() == {("gemm", "FAKEA", "code"): 1}
    M.reset()
    assert M.get_gemm_backend() is None and M.get_gemm_backend("fp8") is None
    assert M.auto_tune_enabled() is False
    assert stats() == {}
    assert sel(make_args) == Selection("gemm", "TORCH", "default", "default for cpu")


# -- use_backend ---------------------------------------------------------------------------------

def test_use_backend_nests_and_restores(fakes, make_args):
    M.set_gemm_backend("FAKEC")
    assert pinned_backend() is None
    with use_backend("fakea") as name:
        assert name == "FAKEA"
        assert sel(make_args).backend == "FAKEA"
        with use_backend("FAKEB"):
            assert pinned_backend() == "FAKEB"
            assert sel(make_args) == Selection("gemm", "FAKEB", "use_backend", "use_backend('FAKEB')")
        assert sel(make_args).backend == "FAKEA"
        with pytest.raises(RuntimeError, match="inner failure"):
            with use_backend("TORCH"):
                raise RuntimeError("inner failure")
        assert pinned_backend() == "FAKEA"  # restored after an exception, too
    assert pinned_backend() is None
    assert sel(make_args) == Selection("gemm", "FAKEC", "code", "code setting for gemm (all precisions)")


def test_use_backend_overrides_code_and_env_for_every_primitive(gemm_prims, monkeypatch, make_args):
    M.set_backend("gemm_side_test", "FAKEA")
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "FAKEA")
    with use_backend("FAKEB"):
        for prim in ("gemm", "gemm_fp8_test", "gemm_side_test"):
            assert sel(make_args, prim=prim).backend == "FAKEB"


def test_use_backend_never_falls_back(fakes, make_args):
    fakes.cfg("FAKEA")["unavailable"] = "fake device missing"
    with use_backend("FAKEA"):
        with pytest.raises(BackendError, match="use_backend\\('FAKEA'\\)\\) cannot run this call: fake device missing"):
            call("gemm", make_args())
    assert stats() == {}
