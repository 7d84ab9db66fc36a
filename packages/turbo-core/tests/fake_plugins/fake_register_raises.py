"""Fake plugin that registers one good kernel, then raises: all its registrations are discarded."""

from turbo_core.plugins import BackendInfo, Kernel, hookimpl


def _impl(args):
    raise AssertionError("a discarded kernel must never run")


@hookimpl
def turbo_backend_info():
    return BackendInfo(name="FAKEREG", package="turbo-fakereg", version="1.0")


@hookimpl
def turbo_register_kernels(register):
    register(Kernel("gemm", "FAKEREG", _impl))
    raise RuntimeError("register exploded halfway")
