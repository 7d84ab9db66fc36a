"""The wheel build hook (``hatch_build.py``) through hatchling itself: a pure wheel without a
toolkit, a platform wheel (``cp310-abi3``) carrying ``_C.abi3.so`` with one (a fake toolkit whose
"compiler" writes the library), and ``TURBO_HIPBLASLT_BUILD=1`` failing with the reason."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from toolkit_fakes import fake_compiler, fake_cuda, hermetic_env, runs

from turbo_hipblaslt._toolchain import NO_TOOLKIT

pytest.importorskip("hatchling")
PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def build(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path / "dist")],
                          cwd=PACKAGE_ROOT, env=env, capture_output=True, text=True, check=False)


def the_wheel(tmp_path: Path) -> tuple[str, set[str], zipfile.ZipFile]:
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    zf = zipfile.ZipFile(wheel)
    return wheel.name, set(zf.namelist()), zf


def test_pure_wheel_without_a_toolkit(tmp_path):
    proc = build(tmp_path, hermetic_env())
    assert proc.returncode == 0, proc.stderr
    assert NO_TOOLKIT in proc.stdout + proc.stderr  # the hook says why the wheel is pure
    name, files, _ = the_wheel(tmp_path)
    assert name == "turbo_hipblaslt-0.1.0-py3-none-any.whl"
    assert "turbo_hipblaslt/csrc/turbo_blaslt.cpp" in files and "turbo_hipblaslt/csrc/blaslt_alias.h" in files
    assert not any("_C" in f and f.endswith(".so") for f in files)
    assert list((tmp_path / "dist").iterdir()) == [tmp_path / "dist" / name]  # nothing else left behind


def test_platform_wheel_with_a_toolkit(tmp_path):
    counter = tmp_path / "cxx.count"
    cxx = fake_compiler(tmp_path / "bin" / "c++", counter)
    env = hermetic_env(CUDA_HOME=str(fake_cuda(tmp_path / "cuda")), CXX=str(cxx))
    proc = build(tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    assert runs(counter) == 1
    name, files, zf = the_wheel(tmp_path)
    assert name.startswith("turbo_hipblaslt-0.1.0-cp310-abi3-")
    assert {"turbo_hipblaslt/_C.abi3.so", "turbo_hipblaslt/_build_info.json"} <= files
    assert zf.read("turbo_hipblaslt/_C.abi3.so") == b"ELF"
    info = json.loads(zf.read("turbo_hipblaslt/_build_info.json"))
    assert info["toolchain"]["platform"] == "cuda" and info["abi"] == "abi3"
    assert "Root-Is-Purelib: false" in zf.read("turbo_hipblaslt-0.1.0.dist-info/WHEEL").decode()


def test_build_1_without_a_toolkit_fails_with_the_reason(tmp_path):
    proc = build(tmp_path, hermetic_env(TURBO_HIPBLASLT_BUILD="1"))
    assert proc.returncode != 0
    assert "TURBO_HIPBLASLT_BUILD=1 but " + NO_TOOLKIT in proc.stderr


def test_build_0_is_pure_even_with_a_toolkit(tmp_path):
    cxx = fake_compiler(tmp_path / "bin" / "c++", tmp_path / "cxx.count")
    env = hermetic_env(CUDA_HOME=str(fake_cuda(tmp_path / "cuda")), CXX=str(cxx), TURBO_HIPBLASLT_BUILD="0")
    proc = build(tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    assert the_wheel(tmp_path)[0].endswith("py3-none-any.whl") and runs(tmp_path / "cxx.count") == 0
