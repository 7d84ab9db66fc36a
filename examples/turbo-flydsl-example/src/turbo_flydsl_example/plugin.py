"""The plugin module: describe the backend and register its kernels. Nothing heavy is imported."""

from turbo_core.plugins import BackendInfo, Kernel, hookimpl
from turbo_flydsl_example import __version__


@hookimpl
def turbo_backend_info():
    return BackendInfo(
        name="FLYDSL",
        package="turbo-flydsl-example",
        version=__version__,
        platforms=("cpu", "cuda", "rocm"),
        description="example third-party backend: K-blocked GEMM in pure PyTorch",
    )


@hookimpl
def turbo_register_kernels(register):
    register(Kernel(
        primitive="gemm",
        backend="FLYDSL",
        impl="turbo_flydsl_example.gemm:gemm",
        check="turbo_flydsl_example.gemm:can_handle",
        variants=("fp16", "bf16", "fp32"),
    ))
