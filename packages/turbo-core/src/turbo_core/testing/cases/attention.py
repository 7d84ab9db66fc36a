"""Conformance cases of the attention family (being written)."""

CASES: list = []
