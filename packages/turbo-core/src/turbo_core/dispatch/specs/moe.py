"""Primitive specs of the moe family (being written)."""
