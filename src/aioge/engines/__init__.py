"""The three simulated NPU engines, their priority, and the selection rule.

As in GE, the lower cost wins: AiCore (1) before AiVec (2) before AiCpu (3). Each op
declares the engines that can run it (see ``aioge.ops``); a node gets the highest-priority
engine that supports it and is not excluded by ``ge.exec.exclude_engines``.
"""

from __future__ import annotations

import enum
from typing import Iterable

__all__ = ["Engine", "parse_engine", "select_engine"]


class Engine(enum.Enum):
    """A simulated engine; ``value`` is the name GE's options use."""

    AICORE = "AiCore"
    AIVEC = "AiVec"
    AICPU = "AiCpu"

    @property
    def priority(self) -> int:
        """GE's cost: lower is preferred."""
        return _PRIORITY[self]

    def __str__(self) -> str:
        return self.value


_PRIORITY = {Engine.AICORE: 1, Engine.AIVEC: 2, Engine.AICPU: 3}

# GE's docs say AiVec while its code accepts only AiVector: aioge accepts both.
_NAMES = {"AiCore": Engine.AICORE, "AiVec": Engine.AIVEC, "AiVector": Engine.AIVEC, "AiCpu": Engine.AICPU}


def parse_engine(name: str) -> Engine:
    """Return the engine GE calls ``name``.

    Raises:
        KeyError: not an engine name.
    """
    return _NAMES[name]


def engine_names() -> tuple[str, ...]:
    return tuple(_NAMES)


def select_engine(supported: Iterable[Engine], excluded: Iterable[Engine] = ()) -> Engine | None:
    """Return the highest-priority engine in ``supported`` that is not excluded, or None."""
    out = set(excluded)
    candidates = [e for e in supported if e not in out]
    return min(candidates, key=lambda e: e.priority) if candidates else None
