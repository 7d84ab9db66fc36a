"""Public normalization ops (being written)."""

__all__: list[str] = []
