"""Small helpers with no place in a floor of their own (imported by compiler and cache alike)."""

__all__: list[str] = []
