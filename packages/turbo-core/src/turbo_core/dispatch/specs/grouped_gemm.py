"""Primitive specs of the grouped_gemm family (being written)."""
