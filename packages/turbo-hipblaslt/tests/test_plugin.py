"""The HIPBLASLT plugin: discovered through its entry point, honest about availability, cheap to
import, and registering its kernels also where there is no extension to load (they then decline every
call with the reason)."""

import subprocess
import sys

import pytest
from toolkit_fakes import fake_compiler, fake_cuda, hermetic_env

import turbo_hipblaslt
from turbo_core.testing import backend_row, imported_modules_after
from turbo_hipblaslt._ext import EXTENSION
from turbo_hipblaslt._toolchain import NO_TOOLKIT

KERNELS = {"gemm", "gemm_fp8", "grouped_gemm", "grouped_gemm_variable_k"}
no_extension = pytest.mark.skipif(EXTENSION.installed(), reason="this install has a compiled turbo_hipblaslt._C")


@pytest.fixture(scope="module")
def row():
    return backend_row("HIPBLASLT", env=hermetic_env())


def test_listed_through_entry_point(row):
    assert row["package"] == "turbo-hipblaslt"
    assert row["version"] == turbo_hipblaslt.__version__
    assert row["plugin"] == "hipblaslt"  # the installed entry point, not TURBO_PLUGINS
    assert row["platforms"] == ["cuda", "rocm"]


def test_discovery_imports_no_kernel_library():
    mods = imported_modules_after("from turbo_core.plugins import get_host; get_host()")
    assert "turbo_hipblaslt" in mods
    assert not {"triton", "aiter", "deep_ep"} & mods


def test_discovery_neither_loads_nor_builds_the_extension():
    code = "from turbo_core.plugins import get_host; get_host().registry.kernels_for('gemm')"
    script = f"{code}\nimport sys\nassert 'turbo_hipblaslt._C' not in sys.modules\n" \
             "assert 'turbo_hipblaslt.gemm' not in sys.modules"
    imported_modules_after(script)  # raises if the assertions fail in the child


@no_extension
def test_pure_wheel_lists_its_kernels_and_says_why_it_cannot_run(row):
    assert set(row["primitives"]) == KERNELS
    assert row["available"] is False
    assert row["reason"].startswith(NO_TOOLKIT + " (the compiled extension turbo_hipblaslt._C is missing")
    assert "TURBO_HIPBLASLT_JIT=1" in row["reason"]
    assert row["notes"].startswith("gemm (fp16/bf16/fp32")


@no_extension
def test_pure_wheel_kernels_decline_with_the_reason():
    code = ("from turbo_core.plugins import get_host\n"
            "from turbo_hipblaslt._ext import EXTENSION\n"
            "registry = get_host().registry\n"
            "reason = EXTENSION.missing_reason()\n"
            "assert reason and reason == registry.backend('HIPBLASLT').unavailable_reason()\n"
            f"for prim in {sorted(KERNELS)!r}:\n"
            "    assert registry.kernel(prim, 'HIPBLASLT').decline_reason(object()) == reason, prim\n")
    subprocess.run([sys.executable, "-c", code], check=True, env=hermetic_env(), timeout=120)


@no_extension
def test_jit_without_a_toolkit_says_so():
    row = backend_row("HIPBLASLT", env=hermetic_env(TURBO_HIPBLASLT_JIT="1"))
    assert set(row["primitives"]) == KERNELS and row["reason"].startswith(NO_TOOLKIT)
    assert "TURBO_HIPBLASLT_JIT=1 found nothing to build with" in row["reason"]


@no_extension
def test_jit_with_a_toolkit_registers_without_building(tmp_path):
    cxx = fake_compiler(tmp_path / "c++", tmp_path / "count")
    env = hermetic_env(TURBO_HIPBLASLT_JIT="1", CUDA_HOME=str(fake_cuda(tmp_path / "cuda")), CXX=str(cxx),
                       TURBO_HIPBLASLT_CACHE_DIR=str(tmp_path / "cache"))
    row = backend_row("HIPBLASLT", env=env)
    assert set(row["primitives"]) == KERNELS
    assert "fp16" in row["primitives"]["gemm"]["variants"]
    assert "TENSORWISE" in row["primitives"]["gemm_fp8"]["variants"]
    assert not (tmp_path / "count").exists() and not (tmp_path / "cache").exists()  # nothing compiled
    assert row["available"] is False  # the probe: CPU-only torch here (the build would happen on first use)
