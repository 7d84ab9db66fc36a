"""Conformance cases of the quantization family (being written)."""

CASES: list = []
