"""Plugin module of the DEEP_EP backend (entry point ``deep_ep`` in ``turbo.backends``).

Cheap to import: the kernel library is only imported by the probe and the kernels, on first use.
"""

from __future__ import annotations

from turbo_core.plugins import BackendInfo, hookimpl
from turbo_deepep import __version__


@hookimpl
def turbo_backend_info():
    return BackendInfo(
        name="DEEP_EP",
        package="turbo-deepep",
        version=__version__,
        platforms=("cpu", "cuda", "rocm"),
        archs=None,
        probe="turbo_deepep.probe:probe",
        description="MoE dispatch/combine over torch.distributed all-to-all; DeepEP's Buffer when installed",
        notes="no kernels registered yet: moe_dispatch/moe_combine are not implemented yet",
    )


@hookimpl
def turbo_register_kernels(register):
    """Registers nothing yet: this backend has no kernel that can run (see ``notes``)."""
