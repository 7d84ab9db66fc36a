"""Typed specs of every primitive, one module per family (importing defines them)."""

from turbo_core.dispatch.specs import (  # noqa: F401
    activation,
    attention,
    gemm,
    gemm_fp8,
    grouped_gemm,
    grouped_gemm_fp8,
    moe,
    normalization,
    quantization,
)
