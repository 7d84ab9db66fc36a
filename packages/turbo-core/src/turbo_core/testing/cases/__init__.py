"""Conformance cases, one module per op family; each module exports ``CASES``."""

from __future__ import annotations

import importlib

FAMILIES = ("gemm", "gemm_fp8", "grouped_gemm", "quantization", "attention", "normalization", "activation", "moe")


def collect():
    cases = []
    for fam in FAMILIES:
        cases += importlib.import_module(f"turbo_core.testing.cases.{fam}").CASES
    return cases
