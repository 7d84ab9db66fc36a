"""Plugin module of the reference backend TORCH (entry point ``torch`` of turbo-core)."""

from __future__ import annotations

from turbo_core._version import __version__
from turbo_core.backend import BackendType
from turbo_core.plugins import BackendInfo, Kernel, hookimpl

_FLOAT_VARIANTS = ("fp32", "fp16", "bf16")


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
    register(Kernel("gemm", BackendType.TORCH, "turbo_core.reference.gemm:gemm",
                    variants=_FLOAT_VARIANTS, priority=-100))
