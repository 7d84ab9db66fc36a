"""Plugin module of the HIPBLASLT backend (entry point ``hipblaslt`` in ``turbo.backends``).

Cheap to import: the kernel library is only imported by the probe and the kernels, on first use.
"""

from __future__ import annotations

from turbo_core.plugins import BackendInfo, hookimpl
from turbo_hipblaslt import __version__


@hookimpl
def turbo_backend_info():
    return BackendInfo(
        name="HIPBLASLT",
        package="turbo-hipblaslt",
        version=__version__,
        platforms=("cuda", "rocm"),
        archs=None,
        probe="turbo_hipblaslt.probe:probe",
        description="one C++ source over hipBLASLt (ROCm) and cuBLASLt (CUDA), pybind11, no libtorch",
        notes="no kernels registered yet: the BLASLt extension and its build hook are not implemented yet",
    )


@hookimpl
def turbo_register_kernels(register):
    """Registers nothing yet: this backend has no kernel that can run (see ``notes``)."""
