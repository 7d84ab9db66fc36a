"""Finding a BLASLt toolkit and the command that compiles ``csrc/turbo_blaslt.cpp`` with it.

Used by the wheel's build hook (``hatch_build.py``) and by the opt-in JIT build (``_jit.py``), so it
imports the standard library only (no torch, no turbo_core: the build runs in an isolated env).
Nothing is downloaded; nothing runs except the compiler, and only from :func:`compile_extension`.

Where it looks (first hit wins; ``TURBO_HIPBLASLT_PLATFORM=cuda|rocm`` restricts the search):

* ROCm: ``$TURBO_HIPBLASLT_ROCM_HOME``, ``$ROCM_PATH``, ``$ROCM_HOME``, the parent of ``hipcc`` on
  ``PATH``, ``/opt/rocm``. Needs ``include/hipblaslt/hipblaslt.h`` and ``lib/libhipblaslt.so*``;
  compiles with ``bin/hipcc`` (else ``$CXX``/``c++`` with ``-D__HIP_PLATFORM_AMD__``).
* CUDA: ``$TURBO_HIPBLASLT_CUDA_HOME``, ``$CUDA_HOME``, ``$CUDA_PATH``, the parent of ``nvcc`` on
  ``PATH``, ``/usr/local/cuda``; then (``search_pip=True``) the ``nvidia/*`` pip packages on
  ``sys.path``. Needs ``cublasLt.h`` (with ``crt/host_defines.h`` and ``nv/target``, which CUDA 13
  keeps under ``include/cccl``) and ``libcublasLt.so*``. No device code is compiled, so the host
  compiler (``$CXX``, ``c++``, ``g++``, ``clang++``) does it; nvcc is not needed.

``TURBO_HIPBLASLT_SEARCH_SYSTEM=0`` keeps only the roots named by the environment variables (no
``PATH``, no default locations, no pip packages): a hermetic build.

Feature macros (``TURBO_BLASLT_HAS_*``, see ``csrc/blaslt_alias.h``) come from grepping the headers
for the enum names, so one source builds against old and new libraries.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["NO_TOOLKIT", "SOURCES", "Toolchain", "compile_command", "compile_extension", "csrc_dir",
           "find_toolchain", "python_include", "source_hash", "wheel_tag"]

#: The start of every "nothing to build with" reason (the probe and the tests quote it).
NO_TOOLKIT = "built without a BLASLt toolkit; found neither ROCm hipBLASLt nor CUDA cuBLASLt"
SOURCES = ("turbo_blaslt.cpp", "blaslt_alias.h")
#: Stable-ABI floor of the extension (``Py_LIMITED_API`` in the source): one .abi3.so for CPython >= 3.10.
LIMITED_API = (3, 10)


@dataclass(frozen=True)
class Toolchain:
    """What compiles the extension: ``platform`` ("cuda" or "rocm"), the toolkit ``root``, the
    ``compiler``, ``include_dirs``, the ``library`` file linked, preprocessor ``defines``."""

    platform: str
    root: str
    compiler: str
    include_dirs: tuple[str, ...]
    library: str
    defines: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def describe(self) -> dict:
        return asdict(self)


def csrc_dir() -> Path:
    return Path(__file__).resolve().parent / "csrc"


def source_hash(extra: Sequence[str] = ()) -> str:
    """sha256 of the C++ sources and ``extra`` strings (the toolchain), for cache keys."""
    h = hashlib.sha256()
    for name in SOURCES:
        h.update(name.encode())
        h.update((csrc_dir() / name).read_bytes())
    for item in extra:
        h.update(b"\0" + item.encode())
    return h.hexdigest()


def python_include() -> str:
    return sysconfig.get_paths()["include"]


def wheel_tag() -> str:
    """``cp310-abi3-<platform>``: the tag of a wheel holding the stable-ABI extension."""
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"cp{LIMITED_API[0]}{LIMITED_API[1]}-abi3-{plat}"


# -- discovery ------------------------------------------------------------------------------------------

def _grep(path: Path, pattern: str) -> bool:
    try:
        return re.search(pattern, path.read_text(errors="replace")) is not None
    except OSError:
        return False


def _first_file(dirs: Sequence[Path], pattern: str) -> Path | None:
    """The best ``pattern`` match (an unversioned name first, else the highest version) in ``dirs``."""
    for d in dirs:
        hits = sorted(glob.glob(str(d / pattern)))
        if hits:
            plain = [h for h in hits if h.endswith(".so")]
            return Path(plain[0] if plain else hits[-1])
    return None


def _host_compiler(env: Mapping[str, str]) -> str | None:
    for name in (env.get("CXX"), "c++", "g++", "clang++"):
        found = shutil.which(name, path=env.get("PATH")) if name else None
        if found:
            return found
    return None


def _system_search(env: Mapping[str, str]) -> bool:
    return env.get("TURBO_HIPBLASLT_SEARCH_SYSTEM", "1").strip() != "0"


def _roots(env: Mapping[str, str], names: Sequence[str], tool: str, default: str) -> list[Path]:
    roots = [Path(env[n]) for n in names if env.get(n)]
    if _system_search(env):
        found = shutil.which(tool, path=env.get("PATH"))
        if found:
            roots.append(Path(found).resolve().parent.parent)
        roots.append(Path(default))
    unique: list[Path] = []
    for r in roots:
        if r not in unique:
            unique.append(r)
    return unique


def _cuda_from_dirs(root: Path, include_dirs: list[Path], lib_dirs: list[Path], env) -> Toolchain | str:
    header = next((d / "cublasLt.h" for d in include_dirs if (d / "cublasLt.h").is_file()), None)
    if header is None:
        return f"{root}: no cublasLt.h"
    for extra in ("crt/host_defines.h", "nv/target"):
        if not any((d / extra).exists() for d in include_dirs):
            return f"{root}: has cublasLt.h but not {extra} (the CUDA runtime/CCCL headers cublasLt.h includes)"
    library = _first_file(lib_dirs, "libcublasLt.so*")
    if library is None:
        return f"{root}: has cublasLt.h but no libcublasLt.so"
    compiler = _host_compiler(env)
    if compiler is None:
        return f"{root}: cuBLASLt found but no C++ compiler ($CXX, c++, g++, clang++)"
    defines = ["TURBO_BLASLT_HAS_OCP_FP8"]
    for macro, name in (("TURBO_BLASLT_HAS_SCALE_MODE", "CUBLASLT_MATMUL_DESC_A_SCALE_MODE"),
                        ("TURBO_BLASLT_HAS_OUTER_VEC", "CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F"),
                        ("TURBO_BLASLT_HAS_BLOCK128", "CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F")):
        if _grep(header, rf"\b{name}\b"):
            defines.append(macro)
    return Toolchain("cuda", str(root), compiler, tuple(str(d) for d in include_dirs), str(library), tuple(defines))


def _cuda_toolkit(root: Path, env: Mapping[str, str]) -> Toolchain | str:
    includes = [root / "include"]
    includes += [p for p in (root / "include" / "cccl", *map(Path, glob.glob(str(root / "targets" / "*" / "include"))))
                 if p.is_dir()]
    libs = [root / "lib64", root / "lib", *map(Path, glob.glob(str(root / "targets" / "*" / "lib")))]
    return _cuda_from_dirs(root, includes, libs, env)


def _cuda_pip(paths: Sequence[str], env: Mapping[str, str]) -> Toolchain | str:
    """The headers and library of the ``nvidia-*`` pip packages (``nvidia/<pkg>/{include,lib}``)."""
    for entry in paths:
        base = Path(entry) / "nvidia"
        if not base.is_dir():
            continue
        includes = sorted(Path(p) for p in glob.glob(str(base / "*" / "include")))
        libs = sorted(Path(p) for p in glob.glob(str(base / "*" / "lib")))
        if any((d / "cublasLt.h").is_file() for d in includes):
            return _cuda_from_dirs(base, includes, libs, env)
    return "no nvidia-cublas pip package on sys.path"


def _rocm_toolkit(root: Path, env: Mapping[str, str]) -> Toolchain | str:
    header = root / "include" / "hipblaslt" / "hipblaslt.h"
    if not header.is_file():
        return f"{root}: no include/hipblaslt/hipblaslt.h"
    library = _first_file([root / "lib", root / "lib64"], "libhipblaslt.so*")
    if library is None:
        return f"{root}: has hipblaslt.h but no libhipblaslt.so"
    hipcc = root / "bin" / "hipcc"
    compiler = str(hipcc) if hipcc.is_file() else _host_compiler(env)
    if compiler is None:
        return f"{root}: hipBLASLt found but no compiler (bin/hipcc, $CXX, c++)"
    defines = ["TURBO_BLASLT_ROCM", "__HIP_PLATFORM_AMD__"]
    for macro, name in (("TURBO_BLASLT_HAS_SCALE_MODE", "HIPBLASLT_MATMUL_DESC_A_SCALE_MODE"),
                        ("TURBO_BLASLT_HAS_OUTER_VEC", "HIPBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F"),
                        ("TURBO_BLASLT_HAS_BLOCK128", "HIPBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F")):
        if _grep(header, rf"\b{name}\b"):
            defines.append(macro)
    if _grep(root / "include" / "hipblaslt" / "hipblaslt-ext.hpp", r"\bvoid\s+setAlpha\s*\("):
        defines.append("TURBO_BLASLT_EXT_SETTERS")  # GemmInputs/GemmProblemType are classes (hipBLASLt >= 1.0)
    types = root / "include" / "hip" / "library_types.h"
    if _grep(types, r"\bHIP_R_8F_E4M3\b"):
        defines.append("TURBO_BLASLT_HAS_OCP_FP8")
    if _grep(types, r"\bHIP_R_8F_E4M3_FNUZ\b"):
        defines.append("TURBO_BLASLT_HAS_FNUZ_FP8")
    return Toolchain("rocm", str(root), compiler, (str(root / "include"),), str(library), tuple(defines))


def find_toolchain(env: Mapping[str, str] | None = None, *, platform: str | None = None, search_pip: bool = False,
                   sys_path: Sequence[str] | None = None) -> tuple[Toolchain | None, str]:
    """``(toolchain, "")`` for the first usable toolkit, else ``(None, reason)`` where ``reason``
    starts with :data:`NO_TOOLKIT` and lists what was looked at. ``platform`` (default
    ``$TURBO_HIPBLASLT_PLATFORM``, else both, ROCm first) restricts the search."""
    env = os.environ if env is None else env
    platform = platform or env.get("TURBO_HIPBLASLT_PLATFORM") or None
    if platform not in (None, "cuda", "rocm"):
        raise ValueError(f"platform: expected 'cuda', 'rocm' or None, got {platform!r}")
    tried: dict[str, list[str]] = {"rocm": [], "cuda": []}
    if platform in (None, "rocm"):
        for root in _roots(env, ("TURBO_HIPBLASLT_ROCM_HOME", "ROCM_PATH", "ROCM_HOME"), "hipcc", "/opt/rocm"):
            found = _rocm_toolkit(root, env)
            if isinstance(found, Toolchain):
                return found, ""
            tried["rocm"].append(found)
    if platform in (None, "cuda"):
        for root in _roots(env, ("TURBO_HIPBLASLT_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"), "nvcc", "/usr/local/cuda"):
            found = _cuda_toolkit(root, env)
            if isinstance(found, Toolchain):
                return found, ""
            tried["cuda"].append(found)
        if search_pip and _system_search(env):
            found = _cuda_pip(sys.path if sys_path is None else sys_path, env)
            if isinstance(found, Toolchain):
                return found, ""
            tried["cuda"].append(found)
    detail = "; ".join(f"{p}: {', '.join(v)}" for p, v in tried.items() if v) or "no location to search"
    return None, f"{NO_TOOLKIT} ({detail})"


# -- compiling -------------------------------------------------------------------------------------------

def compile_command(tc: Toolchain, output: str | os.PathLike, *, include: str | None = None) -> list[str]:
    """The compiler command line building ``output`` (``_C.abi3.so``) from ``csrc/turbo_blaslt.cpp``."""
    lib_dir = str(Path(tc.library).parent)
    return [
        tc.compiler, "-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden",
        f"-DPy_LIMITED_API=0x{LIMITED_API[0]:02X}{LIMITED_API[1]:02X}0000",
        *[f"-D{d}" for d in tc.defines],
        *[f"-I{d}" for d in tc.include_dirs],
        f"-I{include or python_include()}",
        f"-I{csrc_dir()}",
        str(csrc_dir() / "turbo_blaslt.cpp"),
        tc.library,
        f"-Wl,-rpath,{lib_dir}",
        "-o", str(output),
    ]


def compile_extension(tc: Toolchain, output: str | os.PathLike, *, timeout: float = 600.0) -> None:
    """Run :func:`compile_command`; ``RuntimeError`` with the compiler's output on failure."""
    cmd = compile_command(tc, output)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout)[-4000:]
        raise RuntimeError(f"compiling turbo_hipblaslt._C failed ({' '.join(cmd)}):\n{tail}")
