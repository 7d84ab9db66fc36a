"""Plugin module of the CK backend (entry point ``ck`` in ``turbo.backends``).

Cheap to import: registration only checks whether the wheel ships a compiled ``turbo_ck._C`` (without
importing it); the probe loads it, and the kernels on first use. The kernels are registered either
way, so ``turbo backends`` lists what CK serves on every machine; without the extension each kernel's
check declines every call with the reason (the probe reports the same reason first).
"""

from __future__ import annotations

from turbo_ck import __version__
from turbo_ck._ext import EXTENSION
from turbo_core.plugins import BackendInfo, Kernel, hookimpl

SERVES = ("gemm_fp8 (TENSORWISE/ROWWISE and BLOCKWISE 1x128 x 128x128; E4M3/E5M2 and mixed pairs; bf16/fp16 "
          "results; gfx942 FNUZ, gfx950 OCP), grouped_gemm (bf16/fp16), grouped_gemm_fp8 (TENSORWISE/ROWWISE); "
          "grouped calls read the group offsets on the host")
NOT_DONE = "variable-K grouped GEMMs, accumulate-into-out, fp32 results and MX/FP4 are not implemented"


@hookimpl
def turbo_backend_info():
    return BackendInfo(
        name="CK",
        package="turbo-ck",
        version=__version__,
        platforms=("rocm",),
        archs=("gfx942", "gfx950"),
        probe="turbo_ck.probe:probe",
        description="Composable Kernel instances (ROCm only): FP8 GEMM, grouped GEMM; CPython stable-ABI "
                    "extension, no libtorch",
        notes=f"{SERVES}; {NOT_DONE}",
    )


@hookimpl
def turbo_register_kernels(register):
    """Registers every kernel; without the compiled extension their checks decline with the reason."""
    check = EXTENSION.check_or_decline
    register(Kernel("gemm_fp8", "CK", "turbo_ck.gemm_fp8:gemm_fp8", check=check("turbo_ck.gemm_fp8:can_handle"),
                    variants=("TENSORWISE", "ROWWISE", "BLOCKWISE", "e4m3", "e5m2", "hybrid", "fnuz")))
    register(Kernel("grouped_gemm", "CK", "turbo_ck.grouped_gemm:grouped_gemm",
                    check=check("turbo_ck.grouped_gemm:can_handle"), variants=("bf16", "fp16")))
    register(Kernel("grouped_gemm_fp8", "CK", "turbo_ck.grouped_gemm:grouped_gemm_fp8",
                    check=check("turbo_ck.grouped_gemm:can_handle_fp8"), variants=("TENSORWISE", "ROWWISE")))
