"""Reference (TORCH) kernels of the moe family (being written)."""

KERNELS: list = []
