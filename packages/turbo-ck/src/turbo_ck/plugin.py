"""Plugin module of the CK backend (entry point ``ck`` in ``turbo.backends``).

Cheap to import: the kernel library is only imported by the probe and the kernels, on first use.
"""

from __future__ import annotations

from turbo_ck import __version__
from turbo_core.plugins import BackendInfo, hookimpl


@hookimpl
def turbo_backend_info():
    return BackendInfo(
        name="CK",
        package="turbo-ck",
        version=__version__,
        platforms=("rocm",),
        archs=("gfx942", "gfx950"),
        probe="turbo_ck.probe:probe",
        description="Composable Kernel instances (ROCm only): FP8 GEMM, grouped GEMM",
        notes="no kernels registered yet: the CK instances and their build hook are not implemented yet",
    )


@hookimpl
def turbo_register_kernels(register):
    """Registers nothing yet: this backend has no kernel that can run (see ``notes``)."""
