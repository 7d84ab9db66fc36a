"""Plugin module of the reference backend TORCH (entry point ``torch`` of turbo-core).

Each family module ``turbo_core.reference.<family>`` lists its kernels in ``KERNELS``; those
modules import only torch and the specs.
"""

from __future__ import annotations

import importlib

from turbo_core._version import __version__
from turbo_core.backend import BackendType
from turbo_core.plugins import BackendInfo, hookimpl

FAMILIES = ("gemm", "gemm_fp8", "grouped_gemm", "grouped_gemm_fp8", "quantization", "attention", "normalization", "normalization_fp8",
            "activation", "activation_fp8", "moe", "sparse_mla", "loss")


@hookimpl
def turbo_backend_info():
    return BackendInfo(
        name=BackendType.TORCH,
        package="turbo-core",
        version=__version__,
        platforms=("cpu", "cuda", "rocm"),
        description="reference kernels in plain PyTorch (fp32/fp64 accumulation); the test oracle",
    )


@hookimpl
def turbo_register_kernels(register):
    for family in FAMILIES:
        for kernel in importlib.import_module(f"turbo_core.reference.{family}").KERNELS:
            register(kernel)
