"""Typed specs of every primitive, one module per family (importing defines them)."""

from turbo_core.dispatch.specs import (  # noqa: F401
    activation,
    attention,
    gemm,
    grouped_gemm,
    moe,
    normalization,
    quantization,
)
