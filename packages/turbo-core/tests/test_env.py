"""Environment variables that select backends: parsing, aliases, and the manager's env layer."""

from __future__ import annotations

import pytest

from turbo_core import AUTOTUNE, BackendChoice, GlobalBackendManager, PrecisionType
from turbo_core.dispatch.env import (
    ALL,
    auto_tune_from_env,
    backend_env_names,
    parse_backend_value,
    valid_names_text,
)

VALID = {"TRITON", "CK", "TORCH"}
P = PrecisionType


def parse(raw: str, valid=VALID) -> dict:
    return parse_backend_value(raw, variable="TURBO_GEMM_BACKEND", valid=set(valid))


# -- parse_backend_value -------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "want"), [
    ("TRITON", {ALL: BackendChoice("TRITON")}),
    ("triton", {ALL: BackendChoice("TRITON")}),
    ("  Triton  ", {ALL: BackendChoice("TRITON")}),
    ("fp8:CK,other:TRITON", {P.FP8: BackendChoice("CK"), ALL: BackendChoice("TRITON")}),
    (" Fp8 : ck , OTHER : triton ", {P.FP8: BackendChoice("CK"), ALL: BackendChoice("TRITON")}),
    ("other:TRITON,fp8:CK", {P.FP8: BackendChoice("CK"), ALL: BackendChoice("TRITON")}),
    ("fp4:TORCH,fp8:CK,bf16:TRITON", {P.FP4: BackendChoice("TORCH"), P.FP8: BackendChoice("CK"),
                                      P.BF16_FP16_FP32: BackendChoice("TRITON")}),
    ("fp8:CK", {P.FP8: BackendChoice("CK")}),
    ("fp8:CK,", {P.FP8: BackendChoice("CK")}),  # empty entries are ignored
])
def test_parse_forms(raw, want):
    assert parse(raw) == want


@pytest.mark.parametrize("raw", ["autotune", "AUTOTUNE", "AutoTune", "other:autotune"])
def test_parse_autotune_alone(raw):
    assert parse(raw) == {ALL: BackendChoice(auto_tune=True)}


@pytest.mark.parametrize(("raw", "want"), [
    ("fp8:autotune,other:TRITON", {P.FP8: BackendChoice(auto_tune=True), ALL: BackendChoice("TRITON")}),
    ("fp8:CK,other:AUTOTUNE", {P.FP8: BackendChoice("CK"), ALL: BackendChoice(auto_tune=True)}),
    ("fp4:autotune", {P.FP4: BackendChoice(auto_tune=True)}),
    ("bf16:AutoTune,fp8:CK", {P.BF16_FP16_FP32: BackendChoice(auto_tune=True), P.FP8: BackendChoice("CK")}),
])
def test_parse_autotune_in_any_slot(raw, want):
    assert parse(raw) == want
    assert AUTOTUNE == "AUTOTUNE"


@pytest.mark.parametrize("prec", ["BF16", "FP16", "FP32", "bf16", "fp16", "fp32", "BF16_FP16_FP32"])
def test_16_and_32_bit_names_all_mean_bf16_fp16_fp32(prec):
    assert parse(f"{prec}:CK") == {P.BF16_FP16_FP32: BackendChoice("CK")}


@pytest.mark.parametrize("raw", ["fp12:CK", "int8:CK,other:TRITON", "float8:CK"])
def test_bad_precision(raw):
    bad = raw.split(":")[0]
    with pytest.raises(ValueError) as err:
        parse(raw)
    msg = str(err.value)
    assert msg.startswith(f"TURBO_GEMM_BACKEND={raw!r}")
    assert f"unknown precision {bad!r}" in msg
    for valid in ("FP4", "FP8", "BF16", "FP16", "FP32", "OTHER"):
        assert valid in msg


@pytest.mark.parametrize(("raw", "bad"), [
    ("NOPE", "NOPE"),
    ("fp8:CK,other:nope", "nope"),
    ("fp8:nope", "nope"),
    ("TRI TON", "TRI TON"),
    ("fp8:", ""),
    ("fp8:CK:TRITON", "CK:TRITON"),
])
def test_bad_backend_name_names_the_variable_and_lists_valid_names(raw, bad):
    with pytest.raises(ValueError) as err:
        parse(raw)
    msg = str(err.value)
    assert msg.startswith(f"TURBO_GEMM_BACKEND={raw!r}")
    assert repr(bad) in msg
    assert msg.endswith("valid: AUTOTUNE, CK, TORCH, TRITON")


def test_valid_names_come_from_the_caller():
    # an open name (a third-party backend) is valid once it is in the valid set
    assert parse("FLYDSL", valid=VALID | {"FLYDSL"}) == {ALL: BackendChoice("FLYDSL")}
    with pytest.raises(ValueError, match="unknown backend 'FLYDSL'"):
        parse("FLYDSL")


@pytest.mark.parametrize(("raw", "label"), [
    ("fp8:CK,fp8:TRITON", "FP8"),
    ("FP8:CK,fp8:CK", "FP8"),
    ("bf16:CK,fp32:TRITON", "BF16_FP16_FP32"),
    ("fp16:CK,bf16:CK", "BF16_FP16_FP32"),
    ("CK,other:TRITON", "OTHER"),
    ("TRITON,CK", "OTHER"),
    ("fp4:autotune,fp4:CK", "FP4"),
])
def test_duplicate_precision(raw, label):
    with pytest.raises(ValueError, match=f"precision {label} is given twice") as err:
        parse(raw)
    assert str(err.value).startswith(f"TURBO_GEMM_BACKEND={raw!r}")


@pytest.mark.parametrize("raw", ["", " ", ",", " , ,"])
def test_nothing_given_is_an_error_when_parsed(raw):
    with pytest.raises(ValueError, match="no backend given"):
        parse(raw)


def test_env_names():
    assert backend_env_names("gemm") == ("TURBO_GEMM_BACKEND", "PRIMUS_TURBO_GEMM_BACKEND")
    assert backend_env_names("moe_dispatch_combine") == (
        "TURBO_MOE_DISPATCH_COMBINE_BACKEND", "PRIMUS_TURBO_MOE_DISPATCH_COMBINE_BACKEND")


# -- the manager's env layer ---------------------------------------------------------------------

FAMILY_GETTERS = {
    "GEMM": GlobalBackendManager.get_gemm_backend,
    "GROUPED_GEMM": GlobalBackendManager.get_grouped_gemm_backend,
    "ATTN": GlobalBackendManager.get_attn_backend,
    "MOE_DISPATCH_COMBINE": GlobalBackendManager.get_moe_dispatch_combine_backend,
}


@pytest.mark.parametrize("family", list(FAMILY_GETTERS))
def test_every_family_reads_its_variable(monkeypatch, family):
    get = FAMILY_GETTERS[family]
    assert get() is None
    monkeypatch.setenv(f"TURBO_{family}_BACKEND", "fp8:CK,other:triton")
    assert get() == BackendChoice("TRITON")
    assert get(P.FP8) == BackendChoice("CK")
    assert get("fp8") == BackendChoice("CK")
    assert get("bf16") == BackendChoice("TRITON")
    assert get(P.FP4) == BackendChoice("TRITON")


@pytest.mark.parametrize("family", list(FAMILY_GETTERS))
def test_primus_alias(monkeypatch, family):
    get = FAMILY_GETTERS[family]
    monkeypatch.setenv(f"PRIMUS_TURBO_{family}_BACKEND", "CK")
    assert get() == BackendChoice("CK")
    monkeypatch.setenv(f"TURBO_{family}_BACKEND", "TRITON")
    assert get() == BackendChoice("TRITON")  # the TURBO_ name wins


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_value_means_unset(monkeypatch, value):
    monkeypatch.setenv("TURBO_GEMM_BACKEND", value)
    assert GlobalBackendManager.get_gemm_backend() is None
    assert GlobalBackendManager.get_gemm_backend(P.FP8) is None
    # ... so the alias behind it applies
    monkeypatch.setenv("PRIMUS_TURBO_GEMM_BACKEND", "CK")
    assert GlobalBackendManager.get_gemm_backend() == BackendChoice("CK")


def test_slot_not_given_falls_through(monkeypatch):
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "fp8:CK")
    assert GlobalBackendManager.get_gemm_backend(P.FP8) == BackendChoice("CK")
    assert GlobalBackendManager.get_gemm_backend(P.BF16_FP16_FP32) is None
    assert GlobalBackendManager.get_gemm_backend() is None


def test_env_changes_are_seen(monkeypatch):
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "CK")
    assert GlobalBackendManager.get_gemm_backend() == BackendChoice("CK")
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "TRITON")
    assert GlobalBackendManager.get_gemm_backend() == BackendChoice("TRITON")
    monkeypatch.delenv("TURBO_GEMM_BACKEND")
    assert GlobalBackendManager.get_gemm_backend() is None


def test_env_autotune_choice(monkeypatch):
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "fp8:CK,other:autotune")
    assert GlobalBackendManager.get_gemm_backend("bf16") == BackendChoice(auto_tune=True)
    assert GlobalBackendManager.get_gemm_backend("fp8") == BackendChoice("CK")


@pytest.mark.parametrize("var", ["TURBO_GEMM_BACKEND", "PRIMUS_TURBO_GEMM_BACKEND"])
def test_bad_value_in_manager_names_the_variable_and_the_installed_names(monkeypatch, use_plugins, var):
    use_plugins("fake_a")
    monkeypatch.setenv(var, "fp8:CK,other:NOPE")
    with pytest.raises(ValueError) as err:
        GlobalBackendManager.get_gemm_backend()
    msg = str(err.value)
    assert msg.startswith(f"{var}='fp8:CK,other:NOPE': unknown backend 'NOPE'")
    # valid names: the installed ones first (even third-party), AUTOTUNE, then the other well-known names
    # marked as not installed
    valid = msg.split("; valid: ", 1)[1]
    assert valid.startswith("TORCH, FAKEA, AUTOTUNE (not installed: ")
    assert valid.endswith(")")
    absent = valid.split("(not installed: ", 1)[1][:-1].split(", ")
    assert absent == sorted(absent) and {"CK", "HIPBLASLT", "FLYDSL"} <= set(absent)
    assert "TORCH" not in absent and "FAKEA" not in absent


def test_valid_names_text_lists_installed_names_first():
    valid = {"TORCH", "TRITON", "CK", "FAKEA"}
    assert valid_names_text(valid) == "AUTOTUNE, CK, FAKEA, TORCH, TRITON"
    assert valid_names_text(valid, ["TORCH", "FAKEA"]) == "TORCH, FAKEA, AUTOTUNE (not installed: CK, TRITON)"
    assert valid_names_text(valid, ["TORCH", "FAKEA", "TRITON", "CK"]) == "TORCH, FAKEA, TRITON, CK, AUTOTUNE"


def test_third_party_name_is_valid_in_env_once_installed(monkeypatch, use_plugins):
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "fakea")
    with pytest.raises(ValueError, match="unknown backend 'fakea'"):
        GlobalBackendManager.get_gemm_backend()
    GlobalBackendManager.reset()
    from turbo_core.plugins.host import reset_host

    reset_host()
    use_plugins("fake_a")
    assert GlobalBackendManager.get_gemm_backend() == BackendChoice("FAKEA")


def test_per_primitive_variable(monkeypatch):
    # TURBO_<PRIMITIVE>_BACKEND is read for a primitive scope too ("gemm" is both here)
    monkeypatch.setenv("TURBO_GEMM_BACKEND", "TORCH")
    assert GlobalBackendManager.get_backend("gemm") == BackendChoice("TORCH")
    assert GlobalBackendManager.get_backend("GEMM", "fp16") == BackendChoice("TORCH")


# -- TURBO_AUTO_TUNE -----------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "want"), [
    ("1", True), ("true", True), ("TRUE", True), ("yes", True), ("on", True), (" 1 ", True),
    ("0", False), ("false", False), ("No", False), ("off", False), ("", False), ("  ", False),
])
def test_auto_tune_values(monkeypatch, value, want):
    monkeypatch.setenv("TURBO_AUTO_TUNE", value)
    assert auto_tune_from_env() is want
    assert GlobalBackendManager.auto_tune_enabled() is want


def test_auto_tune_unset_is_off():
    assert auto_tune_from_env() is False
    assert GlobalBackendManager.auto_tune_enabled() is False


@pytest.mark.parametrize("var", ["TURBO_AUTO_TUNE", "PRIMUS_TURBO_AUTO_TUNE"])
@pytest.mark.parametrize("value", ["2", "maybe", "enable", "-1"])
def test_bad_auto_tune_value_names_the_variable(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError) as err:
        GlobalBackendManager.auto_tune_enabled()
    assert str(err.value).startswith(f"{var}={value!r}: expected 1 or 0")


def test_auto_tune_alias_and_precedence(monkeypatch):
    monkeypatch.setenv("PRIMUS_TURBO_AUTO_TUNE", "1")
    assert GlobalBackendManager.auto_tune_enabled() is True
    monkeypatch.setenv("TURBO_AUTO_TUNE", "0")
    assert GlobalBackendManager.auto_tune_enabled() is False  # TURBO_ wins over the alias
    GlobalBackendManager.set_auto_tune(True)  # code wins over the environment
    assert GlobalBackendManager.auto_tune_enabled() is True
    GlobalBackendManager.set_auto_tune(None)  # defers to the environment again
    assert GlobalBackendManager.auto_tune_enabled() is False
    monkeypatch.setenv("TURBO_AUTO_TUNE", "1")
    GlobalBackendManager.set_auto_tune(False)
    assert GlobalBackendManager.auto_tune_enabled() is False
    with pytest.raises(TypeError, match="enabled: expected a bool or None"):
        GlobalBackendManager.set_auto_tune("yes")


# -- MoE dispatch/combine is a collective: never auto-tuned --------------------------------------

@pytest.mark.parametrize("var", ["TURBO_MOE_DISPATCH_COMBINE_BACKEND", "PRIMUS_TURBO_MOE_DISPATCH_COMBINE_BACKEND"])
@pytest.mark.parametrize("value", ["autotune", "AUTOTUNE", "other:autotune"])
def test_moe_autotune_env_rejected(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError) as err:
        GlobalBackendManager.get_moe_dispatch_combine_backend()
    msg = str(err.value)
    assert msg.startswith(f"{var}={value!r}")
    assert "cannot be auto-tuned" in msg


def test_moe_autotune_in_a_precision_slot_is_rejected_too(monkeypatch):
    # The value is invalid for this variable whatever precision is asked about (like an unknown
    # backend name in a slot that is not consulted), so it must not pass unnoticed.
    monkeypatch.setenv("TURBO_MOE_DISPATCH_COMBINE_BACKEND", "fp8:autotune,other:DEEP_EP")
    with pytest.raises(ValueError, match="cannot be auto-tuned"):
        GlobalBackendManager.get_moe_dispatch_combine_backend(P.FP8)
    with pytest.raises(ValueError, match="TURBO_MOE_DISPATCH_COMBINE_BACKEND.*cannot be auto-tuned"):
        GlobalBackendManager.get_moe_dispatch_combine_backend()


def test_moe_named_backend_in_env_is_fine(monkeypatch):
    monkeypatch.setenv("TURBO_MOE_DISPATCH_COMBINE_BACKEND", "deep_ep")
    assert GlobalBackendManager.get_moe_dispatch_combine_backend() == BackendChoice("DEEP_EP")


@pytest.mark.parametrize("call", [
    lambda: GlobalBackendManager.set_moe_dispatch_combine_backend(auto_tune=True),
    lambda: GlobalBackendManager.set_moe_dispatch_combine_backend("autotune"),
    lambda: GlobalBackendManager.set_moe_dispatch_combine_backend(auto_tune=True, precision="fp8"),
    lambda: GlobalBackendManager.set_backend("moe_dispatch_combine", AUTOTUNE),
])
def test_moe_autotune_in_code_rejected(call):
    with pytest.raises(ValueError, match="moe_dispatch_combine cannot be auto-tuned"):
        call()
    assert GlobalBackendManager.get_moe_dispatch_combine_backend() is None
