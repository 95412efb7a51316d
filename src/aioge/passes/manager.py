"""The pass table and the manager that runs it to a fixed point."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Mapping

from aioge.ir.graph import Graph
from aioge.passes import cleanup

__all__ = ["PASSES", "GraphPass", "pass_names", "run_passes"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GraphPass:
    """A named graph pass: ``run(graph)`` edits the graph in place and returns True if it changed it."""

    name: str
    default: bool
    doc: str
    run: Callable[[Graph], bool]


PASSES: tuple[GraphPass, ...] = (
    GraphPass("IdentityRemovalPass", True, "remove Identity and inference-mode Dropout nodes", cleanup.remove_identity),
    GraphPass("DeadCodeEliminationPass", True, "remove nodes whose outputs reach no graph output", cleanup.dead_code),
)

_MAX_ROUNDS = 8


def pass_names() -> tuple[str, ...]:
    """Every pass name, in the order the passes run."""
    return tuple(p.name for p in PASSES)


def run_passes(graph: Graph, switch: Mapping[str, bool]) -> list[str]:
    """Run the enabled passes in order, repeating the table until no pass changes the graph.

    Returns the names of the passes that changed something, in the order they first did.
    """
    enabled = [p for p in PASSES if switch.get(p.name, p.default)]
    applied: list[str] = []
    for _ in range(_MAX_ROUNDS):
        changed = False
        for p in enabled:
            if p.run(graph):
                changed = True
                if p.name not in applied:
                    applied.append(p.name)
                log.debug("pass %s changed graph %s", p.name, graph.name)
        if not changed:
            break
    return applied
