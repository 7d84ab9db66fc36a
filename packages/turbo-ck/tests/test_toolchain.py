"""Finding hipcc and CK's headers (``_toolchain``) on fake ROCm trees, and the per-arch compile commands."""

from __future__ import annotations

import pytest

from turbo_ck._toolchain import DEVICE_OPS, NO_TOOLKIT, compile_commands, find_toolchain, parse_archs


def fake_rocm(root, *, hipcc=True, headers=DEVICE_OPS):
    if hipcc:
        (root / "bin").mkdir(parents=True)
        (root / "bin" / "hipcc").write_text("#!/bin/sh\n")
    for h in headers:
        (root / "include" / h).parent.mkdir(parents=True, exist_ok=True)
        (root / "include" / h).write_text("")
    return root


def env(**kw):
    return {"TURBO_CK_SEARCH_SYSTEM": "0", "PATH": "", **kw}


def test_nothing_found_says_where_it_looked(tmp_path):
    tc, reason = find_toolchain(env(ROCM_PATH=str(tmp_path / "rocm")))
    assert tc is None
    assert reason == f"{NO_TOOLKIT} (looked in {tmp_path / 'rocm'}: no bin/hipcc)"


def test_hipcc_without_ck_headers(tmp_path):
    root = fake_rocm(tmp_path / "rocm", headers=DEVICE_OPS[:1])
    tc, reason = find_toolchain(env(ROCM_PATH=str(root)))
    assert tc is None and reason.startswith(NO_TOOLKIT) and "lacks ck/config.h" in reason


def test_found_and_commands(tmp_path):
    root = fake_rocm(tmp_path / "rocm")
    tc, reason = find_toolchain(env(ROCM_PATH=str(root)))
    assert reason == "" and tc.archs == ("gfx942", "gfx950") and tc.hipcc == str(root / "bin" / "hipcc")
    cmds = compile_commands(tc, tmp_path / "_C.abi3.so", tmp_path / "obj")
    assert len(cmds) == 4  # two arch objects, the binding, the link
    assert "--offload-arch=gfx942" in cmds[0] and "-DCK_USE_FNUZ_FP8" in cmds[0]
    assert "--offload-arch=gfx950" in cmds[1] and "-DCK_USE_OCP_FP8" in cmds[1]
    assert "-DTURBO_CK_GFX942" in cmds[2] and "-DTURBO_CK_GFX950" in cmds[2]
    assert cmds[3][-1] == str(tmp_path / "_C.abi3.so")


def test_archs_variable():
    assert parse_archs("gfx950") == ("gfx950",)
    with pytest.raises(ValueError, match="TURBO_CK_ARCHS"):
        parse_archs("gfx90a")
