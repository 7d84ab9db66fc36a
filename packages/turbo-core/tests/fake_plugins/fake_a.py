"""Fake plugin: backend FAKEA, a gemm kernel configured through fakekit."""

import fakekit

from turbo_core.plugins import hookimpl


@hookimpl
def turbo_backend_info():
    return fakekit.info("FAKEA")


@hookimpl
def turbo_register_kernels(register):
    for kernel in fakekit.kernels("FAKEA"):
        register(kernel)
