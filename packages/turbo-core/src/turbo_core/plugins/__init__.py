"""The plugin host: how backend packages describe themselves and register kernels.

A backend package declares an entry point in the ``turbo.backends`` group pointing at a small plugin
module. That module holds two pluggy hook implementations (project name ``turbo``)::

    from turbo_core.plugins import BackendInfo, Kernel, hookimpl

    @hookimpl
    def turbo_backend_info():
        return BackendInfo(name="FLYDSL", package="turbo-flydsl", version="1.0",
                           probe="turbo_flydsl.probe:probe")

    @hookimpl
    def turbo_register_kernels(register):
        register(Kernel(primitive="gemm", backend="FLYDSL",
                        impl="turbo_flydsl.gemm:gemm", check="turbo_flydsl.gemm:can_handle"))

Importing the plugin module must stay cheap: ``impl``, ``check`` and ``probe`` may be
``"module:attribute"`` strings that are imported on first use.
"""

from turbo_core.plugins.hookspecs import hookimpl, hookspec
from turbo_core.plugins.host import PluginHost, PluginRecord, get_host
from turbo_core.plugins.types import BackendInfo, Kernel, Registrar, resolve_ref

__all__ = [
    "BackendInfo",
    "Kernel",
    "PluginHost",
    "PluginRecord",
    "Registrar",
    "get_host",
    "hookimpl",
    "hookspec",
    "resolve_ref",
]
