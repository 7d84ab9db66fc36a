"""Plugin module of the AITER backend (entry point ``aiter`` in ``turbo.backends``).

Cheap to import: the kernel library is only imported by the probe and the kernels, on first use.
"""

from __future__ import annotations

from turbo_aiter import __version__
from turbo_core.plugins import BackendInfo, hookimpl


@hookimpl
def turbo_backend_info():
    return BackendInfo(
        name="AITER",
        package="turbo-aiter",
        version=__version__,
        platforms=("rocm",),
        archs=("gfx942", "gfx950"),
        probe="turbo_aiter.probe:probe",
        description="adapters over the amd-aiter package (ROCm only): attention, FP8/FP4 GEMM, RMSNorm",
        notes="no kernels registered yet: the aiter adapters are not implemented yet",
    )


@hookimpl
def turbo_register_kernels(register):
    """Registers nothing yet: this backend has no kernel that can run (see ``notes``)."""
