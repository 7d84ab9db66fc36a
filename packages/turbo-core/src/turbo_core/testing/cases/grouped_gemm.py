"""Conformance cases of the grouped_gemm family (being written)."""

CASES: list = []
