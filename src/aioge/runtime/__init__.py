"""The runtime: execution contexts, engine worker lanes, stream execution, events and traces."""

from aioge.runtime.executor import Executable, TraceSpan
from aioge.runtime.workers import EngineWorkers

__all__ = ["EngineWorkers", "Executable", "TraceSpan"]
