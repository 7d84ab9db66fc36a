"""Conformance cases, one module per op family; each module exports ``CASES``."""

from __future__ import annotations

from turbo_core.testing.cases import (
    activation,
    activation_fp8,
    attention,
    gemm,
    gemm_fp8,
    grouped_gemm,
    loss,
    moe,
    normalization,
    normalization_fp8,
    quantization,
    sparse_mla,
)

FAMILIES = ("gemm", "gemm_fp8", "grouped_gemm", "quantization", "attention", "normalization", "normalization_fp8",
            "activation", "activation_fp8", "moe", "sparse_mla", "loss")
_MODULES = (gemm, gemm_fp8, grouped_gemm, quantization, attention, normalization, normalization_fp8, activation,
            activation_fp8, moe, sparse_mla, loss)


def collect():
    """Every family's cases, in :data:`FAMILIES` order."""
    return [case for module in _MODULES for case in module.CASES]
