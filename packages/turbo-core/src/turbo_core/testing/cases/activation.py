"""Conformance cases of the activation family (being written)."""

CASES: list = []
