"""Reference (TORCH) kernels of the normalization family (being written)."""

KERNELS: list = []
