"""Plugin module of the AITER backend (entry point ``aiter`` in ``turbo.backends``).

Cheap to import: aiter is imported by the kernels on their first call on a ROCm device
(:func:`turbo_aiter.library.load`), never at discovery; the probe only looks for it.
"""

from __future__ import annotations

from turbo_aiter import __version__
from turbo_core.plugins import BackendInfo, Kernel, hookimpl

NOTES = ("adapters over amd-aiter (written against 0.1.7.post2.dev18): CK flash attention forward/backward "
         "(dense and varlen, fp16/bf16, causal, window, GQA, deterministic backward, head dims padded to a "
         "multiple of 8, up to 256), FP8 GEMM (a8w8 ROWWISE and 128-BLOCKWISE; E4M3 FNUZ on gfx942, OCP on "
         "gfx950), MXFP4 GEMM (a4w4, gfx950, weights preshuffled per call), RMSNorm forward; never compiled or "
         "run on AMD hardware (checked on CPU against fake aiter functions only)")


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
        notes=NOTES,
    )


@hookimpl
def turbo_register_kernels(register):
    attention = ("fp16", "bf16", "dense", "varlen", "gqa", "causal", "window", "deterministic")
    register(Kernel("attention_fwd", "AITER", "turbo_aiter.attention:attention_fwd",
                    check="turbo_aiter.attention:can_handle", variants=attention))
    # Deterministic only when asked (aiter's deterministic flag); otherwise dq is accumulated atomically.
    register(Kernel("attention_bwd", "AITER", "turbo_aiter.attention:attention_bwd",
                    check="turbo_aiter.attention:can_handle", variants=attention, deterministic=False))
    register(Kernel("gemm_fp8", "AITER", "turbo_aiter.gemm_fp8:gemm_fp8",
                    check="turbo_aiter.gemm_fp8:can_handle", variants=("ROWWISE", "BLOCKWISE", "e4m3", "fnuz")))
    register(Kernel("gemm_fp4", "AITER", "turbo_aiter.gemm_fp4:gemm_fp4",
                    check="turbo_aiter.gemm_fp4:can_handle", variants=("fp4", "MX_BLOCKWISE", "preshuffled")))
    register(Kernel("rmsnorm_fwd", "AITER", "turbo_aiter.rmsnorm:rmsnorm_fwd",
                    check="turbo_aiter.rmsnorm:can_handle", variants=("bf16", "fp16")))
