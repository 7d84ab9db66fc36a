"""Fake toolkit trees and a fake compiler for the build tests: the real layout of a CUDA toolkit,
a ROCm install and the nvidia pip packages (only the files the discovery looks at), and a "compiler"
script that writes its ``-o`` output and counts its runs, so the build hook and the JIT are
exercised without a GPU toolkit."""

from __future__ import annotations

import os
import stat
from pathlib import Path

CUDA_HEADER_12_9 = """
typedef enum { CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F = 0, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F = 3,
  CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F = 4, CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F = 5 } s;
typedef enum { CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17, CUBLASLT_MATMUL_DESC_A_SCALE_MODE = 31 } a;
"""
CUDA_HEADER_12_0 = "typedef enum { CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17 } a;\n"


def touch(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def fake_cuda(root: Path, *, header: str = CUDA_HEADER_12_9, cccl: bool = True, nv_target: bool = True,
              lib: str = "libcublasLt.so.13") -> Path:
    touch(root / "include" / "cublasLt.h", header)
    touch(root / "include" / "crt" / "host_defines.h")
    if nv_target:
        touch(root / "include" / ("cccl/nv" if cccl else "nv") / "target")
    if lib:
        touch(root / "lib64" / lib)
    return root


def fake_rocm(root: Path, *, scale_mode: bool = True, ocp: bool = True, hipcc: bool = True,
              ext_setters: bool = False) -> Path:
    touch(root / "include" / "hipblaslt" / "hipblaslt.h",
          "HIPBLASLT_MATMUL_DESC_A_SCALE_MODE = 31, HIPBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F = 3,"
          if scale_mode else "HIPBLASLT_MATMUL_DESC_A_SCALE_POINTER = 5,")
    touch(root / "include" / "hipblaslt" / "hipblaslt-ext.hpp",  # hipBLASLt >= 1.0: classes with setters
          "HIPBLASLT_EXPORT void setAlpha(const void* alpha);" if ext_setters else "void* alpha = nullptr;")
    touch(root / "include" / "hip" / "library_types.h",
          ("HIP_R_8F_E4M3 = 28,\n" if ocp else "") + "HIP_R_8F_E4M3_FNUZ = 1000,\n")
    touch(root / "lib" / "libhipblaslt.so")
    if hipcc:
        fake_compiler(root / "bin" / "hipcc", root / "hipcc.count")
    return root


def fake_pip_cuda(site: Path) -> Path:
    touch(site / "nvidia" / "cublas" / "include" / "cublasLt.h", CUDA_HEADER_12_9)
    touch(site / "nvidia" / "cublas" / "lib" / "libcublasLt.so.12")
    touch(site / "nvidia" / "cuda_runtime" / "include" / "cuda_runtime_api.h")
    touch(site / "nvidia" / "cuda_nvcc" / "include" / "crt" / "host_defines.h")
    touch(site / "nvidia" / "cuda_cccl" / "include" / "nv" / "target")
    return site


def fake_compiler(path: Path, counter: Path, *, fail: bool = False, sleep: float = 0.0) -> Path:
    """A shell "compiler": appends a line to ``counter``, sleeps, then writes its ``-o`` argument
    (or fails with a message on stderr)."""
    body = f"""#!/bin/sh
echo run >> "{counter}"
sleep {sleep}
"""
    if fail:
        body += 'echo "fake.cpp:1: error: no such thing" >&2\nexit 1\n'
    else:
        body += 'out=""\nwhile [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then out="$2"; fi; shift; done\n' \
                'printf "ELF" > "$out"\n'
    touch(path, body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def runs(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def hermetic_env(**extra: str) -> dict[str, str]:
    """An environment naming no toolkit: no system search, no toolkit variables from the host."""
    drop = {"CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "ROCM_HOME", "TURBO_HIPBLASLT_CUDA_HOME",
            "TURBO_HIPBLASLT_ROCM_HOME", "TURBO_HIPBLASLT_PLATFORM", "TURBO_HIPBLASLT_BUILD", "TURBO_HIPBLASLT_JIT",
            "TURBO_HIPBLASLT_CACHE_DIR", "CXX"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["TURBO_HIPBLASLT_SEARCH_SYSTEM"] = "0"
    env.update(extra)
    return env
