"""Toolkit discovery and the compile command (``_toolchain``), on fake toolkit trees."""

from __future__ import annotations

import re

import pytest
from toolkit_fakes import (
    CUDA_HEADER_12_0,
    fake_compiler,
    fake_cuda,
    fake_pip_cuda,
    fake_rocm,
    hermetic_env,
)

from turbo_hipblaslt import _toolchain
from turbo_hipblaslt._toolchain import NO_TOOLKIT, compile_command, find_toolchain, wheel_tag


@pytest.fixture
def cxx(tmp_path):
    return str(fake_compiler(tmp_path / "bin" / "c++", tmp_path / "cxx.count"))


def test_cuda_13_toolkit(tmp_path, cxx):
    root = fake_cuda(tmp_path / "cuda")
    tc, reason = find_toolchain(hermetic_env(CUDA_HOME=str(root), CXX=cxx))
    assert reason == "" and tc.platform == "cuda" and tc.compiler == cxx
    assert str(root / "include" / "cccl") in tc.include_dirs  # CUDA 13 keeps nv/target there
    assert tc.library == str(root / "lib64" / "libcublasLt.so.13")
    assert set(tc.defines) == {"TURBO_BLASLT_HAS_OCP_FP8", "TURBO_BLASLT_HAS_SCALE_MODE",
                               "TURBO_BLASLT_HAS_OUTER_VEC", "TURBO_BLASLT_HAS_BLOCK128"}


def test_old_cublaslt_header_gets_no_scale_mode_macros(tmp_path, cxx):
    root = fake_cuda(tmp_path / "cuda", header=CUDA_HEADER_12_0, cccl=False)
    tc, _ = find_toolchain(hermetic_env(CUDA_HOME=str(root), CXX=cxx))
    assert tc.defines == ("TURBO_BLASLT_HAS_OCP_FP8",)


@pytest.mark.parametrize("kw,needle", [(dict(nv_target=False), "not nv/target"), (dict(lib=""), "no libcublasLt.so")])
def test_incomplete_cuda_toolkit_is_explained(tmp_path, cxx, kw, needle):
    root = fake_cuda(tmp_path / "cuda", **kw)
    tc, reason = find_toolchain(hermetic_env(CUDA_HOME=str(root), CXX=cxx))
    assert tc is None and reason.startswith(NO_TOOLKIT) and needle in reason


def test_rocm_install(tmp_path):
    root = fake_rocm(tmp_path / "rocm")
    tc, _ = find_toolchain(hermetic_env(ROCM_PATH=str(root)))
    assert tc.platform == "rocm" and tc.compiler == str(root / "bin" / "hipcc")
    assert tc.library == str(root / "lib" / "libhipblaslt.so")
    assert {"TURBO_BLASLT_ROCM", "__HIP_PLATFORM_AMD__", "TURBO_BLASLT_HAS_SCALE_MODE", "TURBO_BLASLT_HAS_OUTER_VEC",
            "TURBO_BLASLT_HAS_OCP_FP8", "TURBO_BLASLT_HAS_FNUZ_FP8"} == set(tc.defines)


def test_rocm_7_hipblaslt_ext_classes(tmp_path):
    # hipBLASLt >= 1.0 (ROCm 7) made GemmInputs & co. classes with setters: the grouped path then uses them
    old = find_toolchain(hermetic_env(ROCM_PATH=str(fake_rocm(tmp_path / "old"))))[0]
    new = find_toolchain(hermetic_env(ROCM_PATH=str(fake_rocm(tmp_path / "new", ext_setters=True))))[0]
    assert "TURBO_BLASLT_EXT_SETTERS" not in old.defines and "TURBO_BLASLT_EXT_SETTERS" in new.defines


def test_rocm_without_ocp_fp8_or_scale_modes(tmp_path):
    root = fake_rocm(tmp_path / "rocm", scale_mode=False, ocp=False)
    tc, _ = find_toolchain(hermetic_env(ROCM_PATH=str(root)))
    assert "TURBO_BLASLT_HAS_OCP_FP8" not in tc.defines  # HIP_R_8F_E4M3_FNUZ alone must not count
    assert "TURBO_BLASLT_HAS_FNUZ_FP8" in tc.defines and "TURBO_BLASLT_HAS_SCALE_MODE" not in tc.defines


def test_rocm_first_unless_a_platform_is_asked_for(tmp_path, cxx):
    env = hermetic_env(ROCM_PATH=str(fake_rocm(tmp_path / "rocm")), CUDA_HOME=str(fake_cuda(tmp_path / "cuda")),
                       CXX=cxx)
    assert find_toolchain(env)[0].platform == "rocm"
    assert find_toolchain(env, platform="cuda")[0].platform == "cuda"
    assert find_toolchain({**env, "TURBO_HIPBLASLT_PLATFORM": "cuda"})[0].platform == "cuda"
    with pytest.raises(ValueError, match="platform"):
        find_toolchain(env, platform="metal")


def test_nothing_found_names_both_platforms(tmp_path):
    tc, reason = find_toolchain(hermetic_env(ROCM_PATH=str(tmp_path / "none"), CUDA_HOME=str(tmp_path / "none")))
    assert tc is None
    assert reason.startswith(NO_TOOLKIT + " (rocm: ") and "cuda: " in reason


def test_nvidia_pip_packages(tmp_path, cxx):
    site = fake_pip_cuda(tmp_path / "site")
    env = hermetic_env(CXX=cxx, TURBO_HIPBLASLT_SEARCH_SYSTEM="1", CUDA_HOME=str(tmp_path / "none"))
    tc, _ = find_toolchain(env, platform="cuda", search_pip=True, sys_path=[str(tmp_path / "empty"), str(site)])
    assert tc.platform == "cuda" and tc.library.endswith("nvidia/cublas/lib/libcublasLt.so.12")
    assert {p.split("/nvidia/")[1] for p in tc.include_dirs} == {"cublas/include", "cuda_runtime/include",
                                                                 "cuda_nvcc/include", "cuda_cccl/include"}


def test_compile_command(tmp_path, cxx):
    tc, _ = find_toolchain(hermetic_env(CUDA_HOME=str(fake_cuda(tmp_path / "cuda")), CXX=cxx))
    cmd = compile_command(tc, tmp_path / "_C.abi3.so", include="/py/include")
    assert cmd[0] == cxx
    assert "-DPy_LIMITED_API=0x030A0000" in cmd and "-I/py/include" in cmd and "-shared" in cmd
    assert "-DTURBO_BLASLT_HAS_OUTER_VEC" in cmd and f"-I{tmp_path / 'cuda' / 'include' / 'cccl'}" in cmd
    assert cmd[cmd.index("-o") + 1] == str(tmp_path / "_C.abi3.so")
    assert tc.library in cmd and f"-Wl,-rpath,{tmp_path / 'cuda' / 'lib64'}" in cmd
    assert str(_toolchain.csrc_dir() / "turbo_blaslt.cpp") in cmd


def test_wheel_tag_is_stable_abi():
    assert re.fullmatch(r"cp310-abi3-[a-z0-9_]+", wheel_tag())
