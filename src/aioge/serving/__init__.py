"""Serving: `aioge serve` (server.py) over the Open Inference Protocol."""

__all__: list[str] = []
