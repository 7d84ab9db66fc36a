"""Plugin module of the TRITON backend (entry point ``triton`` in ``turbo.backends``).

Cheap to import: the kernel library is only imported by the probe and the kernels, on first use.
"""

from __future__ import annotations

from turbo_core.plugins import BackendInfo, hookimpl
from turbo_triton import __version__


@hookimpl
def turbo_backend_info():
    return BackendInfo(
        name="TRITON",
        package="turbo-triton",
        version=__version__,
        platforms=("cuda", "rocm", "cpu"),
        archs=None,
        probe="turbo_triton.probe:probe",
        description="Triton kernels (portable: AMD and NVIDIA; the CPU through TRITON_INTERPRET=1)",
        notes="no kernels registered yet: GEMM, attention, norm and MoE kernels are not implemented yet",
    )


@hookimpl
def turbo_register_kernels(register):
    """Registers nothing yet: this backend has no kernel that can run (see ``notes``)."""
