"""Fake plugin: backend FAKEC, a gemm kernel configured through fakekit."""

import fakekit

from turbo_core.plugins import hookimpl


@hookimpl
def turbo_backend_info():
    return fakekit.info("FAKEC")


@hookimpl
def turbo_register_kernels(register):
    for kernel in fakekit.kernels("FAKEC"):
        register(kernel)
