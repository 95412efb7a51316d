"""compile_graph: the whole path from a user's graph to a CompiledModel, as a table of steps."""

from __future__ import annotations

import logging
import time
from typing import Sequence

import anyio

from aioge.compiler.memory import plan_memory
from aioge.compiler.model import CompiledModel, CompileStats, NodePlan
from aioge.compiler.ops import compile_kernels_heuristic
from aioge.compiler.specialize import specialize
from aioge.compiler.streams import plan_streams
from aioge.engines.assign import assign_engines
from aioge.ir.graph import Graph
from aioge.options import CompileOptions
from aioge.passes import run_passes

__all__ = ["compile_graph", "compile_graph_sync"]

log = logging.getLogger(__name__)


async def compile_graph(
    graph: Graph,
    signature: Sequence[tuple[str, tuple[int, ...]]],
    options: CompileOptions,
    *,
    limiter: anyio.CapacityLimiter | None = None,
) -> CompiledModel:
    """Compile ``graph`` for the given input shapes, off the event loop.

    Raises:
        GraphError: the graph is malformed or rejects the shapes.
        CompileError: no engine or kernel for some nodes.
    """
    return await anyio.to_thread.run_sync(compile_graph_sync, graph, tuple(signature), options, limiter=limiter)


def compile_graph_sync(graph: Graph, signature: Sequence[tuple[str, tuple[int, ...]]], options: CompileOptions) -> CompiledModel:
    """The blocking form of ``compile_graph``."""
    start = time.perf_counter()
    fingerprint = graph.fingerprint()
    g = specialize(graph, signature)
    stats = CompileStats(nodes_before_passes=len(g.nodes))
    stats.passes_applied = run_passes(g, options.optimization_switch)
    engines = assign_engines(g, options.exclude_engines)
    kernels = compile_kernels_heuristic(g, engines, options)
    stats.kernels_compiled = len(kernels)
    order, streams = plan_streams(g, g.topological_order(), engines, options)
    memory = plan_memory(g, order, streams, reuse=not options.disable_reuse_memory)
    g.nodes[:] = order
    nodes = tuple(
        NodePlan(i, n.name, n.op_type, engines[n.name].value, streams.node_stream[i], kernels[n.name])
        for i, n in enumerate(order)
    )
    stats.compile_seconds = time.perf_counter() - start
    log.info("compiled %s: %d nodes, %d streams, arena %d bytes", g.name, len(nodes), streams.num_streams, memory.arena_bytes)
    return CompiledModel(g, nodes, streams, memory, fingerprint, tuple(signature), dict(options.raw), stats=stats)
