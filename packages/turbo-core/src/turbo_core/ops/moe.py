"""Public moe ops (being written)."""

__all__: list[str] = []
