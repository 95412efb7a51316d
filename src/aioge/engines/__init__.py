"""The three simulated NPU engines, their priority, and the selection rule.

As in GE, the lower cost wins: AiCore (1) before AiVec (2) before AiCpu (3). Each op
declares the engines that can run it (see ``aioge.ops``); a node gets the highest-priority
engine that supports it and is not excluded by ``ge.exec.exclude_engines``. ``Engine`` itself is defined in
``aioge.kernels.contract`` (below the op schemas, which name it) and re-exported here.
"""

from __future__ import annotations

from typing import Iterable

from aioge.kernels.contract import Engine, engine_names, parse_engine

__all__ = ["Engine", "engine_names", "parse_engine", "select_engine"]


def select_engine(supported: Iterable[Engine], excluded: Iterable[Engine] = ()) -> Engine | None:
    """Return the highest-priority engine in ``supported`` that is not excluded, or None."""
    out = set(excluded)
    candidates = [e for e in supported if e not in out]
    return min(candidates, key=lambda e: e.priority) if candidates else None
