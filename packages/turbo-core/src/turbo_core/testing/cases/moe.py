"""Conformance cases of the moe family (being written)."""

CASES: list = []
