"""Fake plugin whose register hookimpl misspells the hook's argument (pluggy rejects it)."""

from turbo_core.plugins import BackendInfo, hookimpl


@hookimpl
def turbo_backend_info():
    return BackendInfo(name="FAKESPELL", package="turbo-fakespell", version="1.0")


@hookimpl
def turbo_register_kernels(registr):
    raise AssertionError("never called")
