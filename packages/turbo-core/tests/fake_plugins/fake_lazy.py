"""Fake plugin naming its kernel and probe lazily ("module:function"): nothing heavy at discovery."""

from turbo_core.plugins import BackendInfo, Kernel, hookimpl


@hookimpl
def turbo_backend_info():
    return BackendInfo(name="FAKELAZY", package="turbo-fakelazy", version="2.0",
                       probe="fake_lazy_kernels:probe")


@hookimpl
def turbo_register_kernels(register):
    register(Kernel("gemm", "FAKELAZY", "fake_lazy_kernels:gemm", check="fake_lazy_kernels:check"))
