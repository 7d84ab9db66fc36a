"""Fake plugin whose registration mistake is chosen by ``MODE`` (set by the test before loading)."""

from turbo_core.plugins import BackendInfo, Kernel, hookimpl

MODE = "not_a_kernel"


def _impl(args):
    raise AssertionError("never runs")


@hookimpl
def turbo_backend_info():
    if MODE == "duplicate_backend":
        return BackendInfo(name="TORCH", package="turbo-impostor", version="1.0")
    if MODE == "duplicate_backend_in_plugin":
        return [BackendInfo(name="FAKEBAD", package="p", version="1"),
                BackendInfo(name="fakebad", package="p", version="1")]
    if MODE == "not_backend_info":
        return {"name": "FAKEBAD"}
    if MODE == "bad_platform":
        return BackendInfo(name="FAKEBAD", package="p", version="1", platforms=("tpu",))
    return BackendInfo(name="FAKEBAD", package="turbo-fakebad", version="1.0")


@hookimpl
def turbo_register_kernels(register):
    if MODE == "not_a_kernel":
        register("gemm on FAKEBAD")
    elif MODE == "unknown_primitive":
        register(Kernel("no_such_primitive", "FAKEBAD", _impl))
    elif MODE == "undescribed_backend":
        register(Kernel("gemm", "NOBODY", _impl))
    elif MODE == "duplicate_kernel":
        register(Kernel("gemm", "FAKEBAD", _impl))
        register(Kernel("gemm", "FAKEBAD", _impl))
    elif MODE == "kernel_on_other_backend":
        register(Kernel("gemm", "TORCH", _impl))  # TORCH already has a gemm kernel
    else:
        register(Kernel("gemm", "FAKEBAD", _impl))
