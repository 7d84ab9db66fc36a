"""Reference (TORCH) kernels of the attention family (being written)."""

KERNELS: list = []
