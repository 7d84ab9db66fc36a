"""Primitive specs of the attention family (being written)."""
