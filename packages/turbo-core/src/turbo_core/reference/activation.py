"""Reference (TORCH) kernels of the activation family (being written)."""

KERNELS: list = []
