"""Primitive specs of the activation family (being written)."""
