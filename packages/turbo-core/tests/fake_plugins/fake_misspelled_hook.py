"""Fake plugin whose register hookimpl misspells the hook's name (no such hookspec)."""

from turbo_core.plugins import BackendInfo, Kernel, hookimpl


@hookimpl
def turbo_backend_info():
    return BackendInfo(name="FAKEHOOK", package="turbo-fakehook", version="1.0")


@hookimpl
def turbo_register_kernel(register):  # missing the trailing "s"
    register(Kernel("gemm", "FAKEHOOK", lambda args: None))
