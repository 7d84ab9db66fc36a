"""``BackendType``: Enum-style members (``.name``, ``.value``, lookup by value and by name) over an
open set of backend names, usable wherever turbo takes a backend name."""

from __future__ import annotations

import copy
import enum
import json
import pickle

import pytest

from turbo_core import BackendChoice, BackendType, GlobalBackendManager, PrecisionType, use_backend
from turbo_core.dispatch import select
from turbo_core.dispatch.specs.gemm import GemmArgs

WELL_KNOWN = ["TORCH", "TRITON", "HIPBLASLT", "CK", "AITER", "DEEP_EP", "TURBO", "FLYDSL", "HIPKITTENS"]


def test_members_are_the_names_as_strings_with_name_and_value():
    assert [m.value for m in BackendType] == WELL_KNOWN
    assert len(BackendType) == len(WELL_KNOWN) and list(BackendType.__members__) == WELL_KNOWN
    for name in WELL_KNOWN:
        member = getattr(BackendType, name)
        assert isinstance(member, BackendType) and isinstance(member, str)
        assert member == name and hash(member) == hash(name) and {name: 1}[member] == 1
        assert member.name == name and member.value == name
        assert type(member.value) is str and type(str(member)) is str and str(member) == name
        assert repr(member) == repr(name) and f"{member}" == name
        assert BackendType(name) is member and BackendType(name.lower()) is member
        assert BackendType(member.value) is member and BackendType(member) is member
        assert BackendType[name] is member and name in BackendType
    assert tuple(BackendType.WELL_KNOWN) == tuple(BackendType)


def test_names_stay_open_for_third_party_backends():
    myco = BackendType("myco")
    assert myco == "MYCO" and myco.value == "MYCO" and myco.name == "MYCO" and isinstance(myco, BackendType)
    assert BackendType("MYCO") is myco  # one object per name, as an Enum member
    assert "MYCO" not in BackendType and myco not in list(BackendType)  # iteration: the well-known names
    with pytest.raises(KeyError):
        BackendType["MYCO"]


def test_an_enum_member_maps_by_its_name():
    class Primus(enum.Enum):
        CK = enum.auto()
        TRITON = enum.auto()

    assert BackendType(Primus.TRITON) is BackendType.TRITON and BackendType(Primus.CK) is BackendType.CK


@pytest.mark.parametrize("bad", ["", "   ", "bad name", "a/b", 3, None, 2.5])
def test_bad_values_raise_value_error_naming_backend_type(bad):
    with pytest.raises(ValueError, match="^BackendType: "):
        BackendType(bad)


def test_pickle_copy_and_json_keep_the_member():
    for member in (BackendType.CK, BackendType("MYCO")):
        assert pickle.loads(pickle.dumps(member)) is member
        assert copy.copy(member) is member and copy.deepcopy(member) is member
    assert json.loads(json.dumps({BackendType.CK: [BackendType.TRITON]})) == {"CK": ["TRITON"]}


def test_backend_choice_holds_a_member_and_compares_with_plain_names():
    choice = BackendChoice("triton")
    assert choice.backend is BackendType.TRITON and choice.backend.value == "TRITON"
    assert choice == BackendChoice(BackendType.TRITON) == BackendChoice("TRITON")
    assert BackendChoice(auto_tune=True).backend is None
    with pytest.raises(ValueError, match="^backend: "):
        BackendChoice("no way")


def test_settings_take_members_and_getters_return_members():
    GlobalBackendManager.set_gemm_backend(BackendType.TORCH, precision=PrecisionType.FP8)
    got = GlobalBackendManager.get_gemm_backend(PrecisionType.FP8)
    assert got == BackendChoice(BackendType.TORCH) and got.backend.value == "TORCH"
    GlobalBackendManager.set_gemm_backend(BackendType("torch"))
    assert GlobalBackendManager.get_gemm_backend(PrecisionType.BF16_FP16_FP32).backend is BackendType.TORCH


def test_a_member_selects_the_same_backend_as_its_plain_name():
    import torch

    args = GemmArgs(torch.ones(2, 3), torch.ones(3, 4), False, False, torch.float32, False, None)
    with use_backend(BackendType.TORCH):
        assert select("gemm", args).backend == "TORCH"
    GlobalBackendManager.set_gemm_backend(BackendType.TORCH)
    selection = select("gemm", args)
    assert selection.backend == BackendType.TORCH and selection.how == "code"
