"""Primitive specs of the normalization family (being written)."""
