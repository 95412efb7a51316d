"""Engine assignment: every node gets the best engine that supports it and is not excluded."""

from __future__ import annotations

from typing import Iterable

from aioge.engines import Engine, select_engine
from aioge.errors import CompileError
from aioge.ir.graph import Graph
from aioge.ops.registry import get_schema

__all__ = ["assign_engines"]


def assign_engines(graph: Graph, excluded: Iterable[Engine] = ()) -> dict[str, Engine]:
    """Map every node name to its engine.

    Raises:
        CompileError (EZ3003): some nodes have no engine left; names every such node and the
            excluded engines.
    """
    excluded = frozenset(excluded)
    out: dict[str, Engine] = {}
    orphans: list[tuple[str, str]] = []  # node name, "op type; runs on ..."
    for node in graph.nodes:
        schema = get_schema(node.op_type, node.domain)
        supported = schema.engines_for([v.desc if v is not None else None for v in node.inputs])
        engine = select_engine(supported, excluded)
        if engine is None:
            able = ", ".join(e.value for e in sorted(supported, key=lambda e: e.priority)) or "no engine"
            orphans.append((node.name, f"{node.op_type}; runs on {able}"))
        else:
            out[node.name] = engine
    if orphans:
        names = ", ".join(sorted(e.value for e in excluded)) or "none"
        raise CompileError(
            f"no engine left for {len(orphans)} node(s): {', '.join(f'{n} ({t})' for n, t in orphans)}; excluded engines: {names}",
            graph=graph.name,
            nodes=[n for n, _ in orphans],
            code="EZ3003",
        )
    return out
