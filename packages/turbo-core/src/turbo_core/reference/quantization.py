"""Reference (TORCH) kernels of the quantization family (being written)."""

KERNELS: list = []
