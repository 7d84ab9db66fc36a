"""Conformance cases of the normalization family (being written)."""

CASES: list = []
