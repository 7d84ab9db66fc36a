"""Fake plugin whose describe hook raises."""

from turbo_core.plugins import hookimpl


@hookimpl
def turbo_backend_info():
    raise RuntimeError("describe exploded")


@hookimpl
def turbo_register_kernels(register):
    raise AssertionError("must not be called after describe failed")
