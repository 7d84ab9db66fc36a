"""Plugin module of the HIPBLASLT backend (entry point ``hipblaslt`` in ``turbo.backends``).

Cheap to import: registration only checks whether an extension exists to load (the wheel's compiled
``turbo_hipblaslt._C``, or a toolkit for the opt-in JIT build) without importing or building it;
the probe loads it lazily, and the kernels on first use. The kernels are registered either way, so
``turbo backends`` lists what HIPBLASLT serves on every machine; without an extension each kernel's
check declines every call with the reason (the probe reports the same reason first). It also names the version probes of the
libraries ``cublaslt`` / ``hipblaslt`` for the tuning database (``turbo_core.tuning.versions``).
"""

from __future__ import annotations

from turbo_core.plugins import BackendInfo, Kernel, hookimpl
from turbo_core.tuning.versions import register_library
from turbo_hipblaslt import __version__
from turbo_hipblaslt._ext import EXTENSION
from turbo_hipblaslt.probe import cublaslt_version, hipblaslt_version

SERVES = ("gemm (fp16/bf16/fp32, every layout, accumulate-into-out; bias/GELU epilogues through "
          "turbo_hipblaslt.api.gemm/linear), gemm_fp8 (TENSORWISE E4M3/E5M2/HYBRID; ROWWISE and BLOCKWISE 1x128/128x128 "
          "where the library has the scale modes: turbo_hipblaslt.api.capabilities(); fp32 results not on "
          "sm89/sm90, whose FP8 accumulation is imprecise, unless TURBO_HIPBLASLT_FP8_FP32_OUT=1), grouped_gemm and "
          "grouped_gemm_variable_k (one host sync per call; ROCm: one hipBLASLt grouped-GEMM launch, written against "
          "the header but not yet compiled or run; CUDA: a loop of cuBLASLt calls)")
NOT_DONE = "MX/FP4 GEMM and grouped FP8 GEMM are not implemented"

# The libraries tuned algorithm ranks depend on (turbo_hipblaslt.algos): probed only when a tuning database
# or campaign names them; each answers None on the other platform or when it cannot tell cheaply.
register_library("cublaslt", cublaslt_version)
register_library("hipblaslt", hipblaslt_version)


@hookimpl
def turbo_backend_info():
    return BackendInfo(
        name="HIPBLASLT",
        package="turbo-hipblaslt",
        version=__version__,
        platforms=("cuda", "rocm"),
        archs=None,
        probe="turbo_hipblaslt.probe:probe",
        description="one C++ source over hipBLASLt (ROCm) and cuBLASLt (CUDA); CPython stable-ABI extension, "
                    "no libtorch",
        notes=f"{SERVES}; {NOT_DONE}",
    )


@hookimpl
def turbo_register_kernels(register):
    """Registers every kernel; without an extension to load their checks decline with the reason."""
    check = EXTENSION.check_or_decline
    dense = ("bf16", "fp16", "fp32")
    register(Kernel("gemm", "HIPBLASLT", "turbo_hipblaslt.gemm:gemm", check=check("turbo_hipblaslt.gemm:can_handle"),
                    variants=dense))
    register(Kernel("gemm_fp8", "HIPBLASLT", "turbo_hipblaslt.gemm_fp8:gemm_fp8",
                    check=check("turbo_hipblaslt.gemm_fp8:can_handle"),
                    variants=("TENSORWISE", "ROWWISE", "BLOCKWISE", "e4m3", "e5m2", "hybrid", "fnuz")))
    register(Kernel("grouped_gemm", "HIPBLASLT", "turbo_hipblaslt.grouped_gemm:grouped_gemm",
                    check=check("turbo_hipblaslt.grouped_gemm:can_handle"), variants=dense))
    register(Kernel("grouped_gemm_variable_k", "HIPBLASLT", "turbo_hipblaslt.grouped_gemm:grouped_gemm_variable_k",
                    check=check("turbo_hipblaslt.grouped_gemm:can_handle_variable_k"), variants=dense))
