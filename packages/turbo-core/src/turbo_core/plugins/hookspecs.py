"""The hooks a turbo backend plugin implements (pluggy project name ``turbo``)."""

from __future__ import annotations

import pluggy

PROJECT = "turbo"
ENTRY_POINT_GROUP = "turbo.backends"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def turbo_backend_info():
    """Describe the backend(s) this plugin provides.

    Return a :class:`turbo_core.plugins.BackendInfo` or a list of them. Must be cheap: no import of
    the kernel library, no compilation, no GPU access (availability is a lazy ``probe``).
    """


@hookspec
def turbo_register_kernels(register):
    """Register kernels by calling ``register(Kernel(...))`` once per (primitive, backend).

    ``register`` is a :class:`turbo_core.plugins.Registrar`. A kernel may only name a backend that
    some plugin describes. Registrations of a plugin whose hook raises are all discarded.
    """
