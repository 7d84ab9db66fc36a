"""Reference (TORCH) kernels of the grouped_gemm family (being written)."""

KERNELS: list = []
