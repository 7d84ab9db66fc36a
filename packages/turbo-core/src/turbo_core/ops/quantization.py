"""Public quantization ops (being written)."""

__all__: list[str] = []
