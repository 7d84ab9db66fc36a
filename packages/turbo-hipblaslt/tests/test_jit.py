"""The opt-in JIT build (``_jit``): where it caches, that it compiles once (also under concurrent
builders, serialised by the file lock), that a failed compile leaves nothing half-written, and, where
a real toolkit is present, the whole chain (compile, import, a call answered by the library)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from toolkit_fakes import fake_compiler, fake_cuda, hermetic_env, runs

from turbo_core.plugins.extension import ExtensionUnavailable
from turbo_hipblaslt import _jit, _toolchain
from turbo_hipblaslt._toolchain import find_toolchain


def toolchain(tmp_path: Path, **compiler_kw):
    cxx = fake_compiler(tmp_path / "bin" / "c++", tmp_path / "cxx.count", **compiler_kw)
    tc, reason = find_toolchain(hermetic_env(CUDA_HOME=str(fake_cuda(tmp_path / "cuda")), CXX=str(cxx)))
    assert tc is not None, reason
    return tc


def test_cache_root_and_switch(tmp_path):
    assert _jit.cache_root({"TURBO_HIPBLASLT_CACHE_DIR": str(tmp_path)}) == tmp_path
    assert _jit.cache_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "turbo-hipblaslt"
    assert _jit.cache_root({}) == Path.home() / ".cache" / "turbo-hipblaslt"
    assert _jit.jit_enabled({"TURBO_HIPBLASLT_JIT": "1"}) and not _jit.jit_enabled({"TURBO_HIPBLASLT_JIT": "0"})
    assert not _jit.jit_enabled({})


def test_build_dir_depends_on_the_toolchain(tmp_path):
    env = {"TURBO_HIPBLASLT_CACHE_DIR": str(tmp_path / "cache")}
    tc = toolchain(tmp_path)
    other = _toolchain.Toolchain(**{**tc.describe(), "defines": ("TURBO_BLASLT_HAS_OCP_FP8",)})
    assert _jit.build_dir(tc, env).parent == tmp_path / "cache"
    assert _jit.build_dir(tc, env) == _jit.build_dir(tc, env) != _jit.build_dir(other, env)


def test_build_compiles_once_and_records_the_toolchain(tmp_path):
    env = {"TURBO_HIPBLASLT_CACHE_DIR": str(tmp_path / "cache")}
    tc = toolchain(tmp_path)
    assert _jit.cached_library(tc, env) is None
    path = _jit.build(tc, env)
    assert path.read_bytes() == b"ELF" and _jit.cached_library(tc, env) == path
    assert _jit.build(tc, env) == path and runs(tmp_path / "cxx.count") == 1
    info = json.loads((path.parent / _jit.BUILD_INFO).read_text())
    assert info["toolchain"] == json.loads(json.dumps(tc.describe())) and info["abi"] == "abi3"


def test_concurrent_builders_compile_once(tmp_path):
    cache = tmp_path / "cache"
    tc = toolchain(tmp_path, sleep=0.5)
    script = textwrap.dedent(f"""
        from turbo_hipblaslt import _jit, _toolchain
        tc = _toolchain.Toolchain(**{tc.describe()!r})
        print(_jit.build(tc, {{"TURBO_HIPBLASLT_CACHE_DIR": {str(cache)!r}}}))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outs = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(outs) == 1 and runs(tmp_path / "cxx.count") == 1


def test_failed_compile_raises_with_the_compiler_output_and_leaves_nothing(tmp_path):
    env = {"TURBO_HIPBLASLT_CACHE_DIR": str(tmp_path / "cache")}
    tc = toolchain(tmp_path, fail=True)
    with pytest.raises(RuntimeError, match="no such thing"):
        _jit.build(tc, env)
    assert [p.name for p in _jit.build_dir(tc, env).iterdir()] == ["build.lock"]


def test_real_toolkit_end_to_end(tmp_path):
    """Compile the real source with a real toolkit (skipped without one), import it in a fresh
    process and make calls the library answers: an empty call returns, a bad dtype code is rejected
    with the library's status name (before any launch; a GPU-less machine fails at the handle)."""
    tc, reason = find_toolchain(search_pip=True)
    if tc is None:
        pytest.skip(reason)
    script = textwrap.dedent("""
        import json, sys
        from turbo_hipblaslt import _jit, _toolchain
        tc = _toolchain.Toolchain(**json.loads(sys.argv[1]))
        m = _jit.load(_jit.build(tc, {"TURBO_HIPBLASLT_CACHE_DIR": sys.argv[2]}))
        empty = (0, 0, 8, 8, 0, 0, 0, 2, 8, 0, 2, 8, 0, 2, 8, 1.0, 0.0, 0, 0, 0, -1, 0, -1, 0, -1, 0, 0, 0)
        assert m.matmul(*empty) is None
        bad = (0, 8, 8, 8, 0, 0, 256, 99, 8, 256, 2, 8, 256, 2, 8, 1.0, 0.0, 0, 0, 0, -1, 0, -1, 0, -1, 0, 0, 0)
        try:
            reason = m.check(*bad)
            print(json.dumps({"check": reason, "platform": m.PLATFORM}))
        except m.BlasLtError as exc:
            print(json.dumps({"status": exc.status, "stage": exc.stage, "platform": m.PLATFORM}))
    """)
    out = subprocess.run([sys.executable, "-c", script, json.dumps(tc.describe()), str(tmp_path / "cache")],
                         capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["platform"] == tc.platform
    if "check" in got:  # a GPU: the handle exists, the dtype code is refused
        assert got["check"].startswith("setup: ") and "NOT_SUPPORTED" in got["check"]
    else:  # no GPU: the handle cannot be created
        assert got["stage"] == "handle" and got["status"].endswith("STATUS_NOT_INITIALIZED")


@pytest.mark.parametrize("value,mask", [(None, 2), ("fp32", 2), ("any", 7), ("ANY", 7)])
def test_splitk_setting_reaches_the_extension(monkeypatch, value, mask):
    from turbo_hipblaslt import _ext

    if value is None:
        monkeypatch.delenv("TURBO_HIPBLASLT_SPLITK", raising=False)
    else:
        monkeypatch.setenv("TURBO_HIPBLASLT_SPLITK", value)
    got = []
    _ext._configure(type("M", (), {"set_reduction_mask": staticmethod(got.append)}))
    assert got == [mask]


def test_bad_splitk_setting_is_named(monkeypatch):
    from turbo_hipblaslt import _ext

    monkeypatch.setenv("TURBO_HIPBLASLT_SPLITK", "fast")
    with pytest.raises(ExtensionUnavailable, match="TURBO_HIPBLASLT_SPLITK: expected one of"):
        _ext._configure(type("M", (), {"set_reduction_mask": staticmethod(lambda m: None)}))
