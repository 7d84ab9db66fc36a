"""Benchmark suites by name."""

SUITES = ("gemm",)
