"""Primitive specs of the quantization family (being written)."""
