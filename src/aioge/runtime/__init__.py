"""The runtime: execution contexts, stream workers, events and traces."""

from aioge.runtime.executor import Executable, TraceSpan

__all__ = ["Executable", "TraceSpan"]
