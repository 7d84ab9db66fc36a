"""grouped_linear module (being written)."""

__all__: list[str] = []
