"""numpy kernel implementations, one module per op family."""

__all__: list[str] = []
