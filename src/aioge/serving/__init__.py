"""Serving: GE's dynamic gears (shape variants compiled ahead, one .om), the dynamic
batcher (concurrent runs of a graph stacked into one), and the model repository reader
(``serving.repository``: Triton's folders and config.toml). Between runtime/ and session.py.
The HTTP server (`aioge serve`) sits above the session, in ``aioge.server``."""

from aioge.serving.batcher import Batcher, BatchStats
from aioge.serving.gears import GearSet, gear_set

__all__ = ["BatchStats", "Batcher", "GearSet", "gear_set"]
