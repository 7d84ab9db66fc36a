"""A test backend that serves primitives with the reference kernels and records each call: which
backend a call (or its backward) ran on, observed through the plugin host."""

from __future__ import annotations

import sys
import types

from turbo_core.plugins import BackendInfo, Kernel, hookimpl


def install_spy_backend(monkeypatch, use_plugins, *, name: str, reference, primitives) -> list[str]:
    """Register backend ``name`` (CPU) serving ``primitives`` with ``reference``'s function of the same
    name, load it as the only plugin, and return the list each served call's primitive is appended to."""
    calls: list[str] = []
    module_name = f"{name.lower()}_spy_plugin"
    mod = types.ModuleType(module_name)

    def spy(primitive):
        def run(args):
            calls.append(primitive)
            return getattr(reference, primitive)(args)
        return run

    @hookimpl
    def turbo_backend_info():
        return BackendInfo(name=name, package=f"{name.lower()}-spy", version="0", platforms=("cpu",))

    @hookimpl
    def turbo_register_kernels(register):
        for primitive in primitives:
            register(Kernel(primitive, name, spy(primitive)))

    mod.turbo_backend_info, mod.turbo_register_kernels = turbo_backend_info, turbo_register_kernels
    monkeypatch.setitem(sys.modules, module_name, mod)
    use_plugins(module_name)
    return calls
