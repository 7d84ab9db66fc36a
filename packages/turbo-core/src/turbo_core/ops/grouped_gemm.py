"""Public grouped_gemm ops (being written)."""

__all__: list[str] = []
