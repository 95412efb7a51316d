"""The stream planner: nodes onto streams, with events on cross-stream edges.

Nodes are placed by list scheduling (HEFT without insertion): in decreasing order of their
upward rank (the longest remaining path, in estimated microseconds), each node goes to the
stream of its engine on which it would finish earliest, counting a cross-stream event as
``SYNC_COST_US``. A chain therefore stays on one stream (its predecessor's stream is free the
moment the predecessor ends, any other stream pays the event), independent branches open
new streams while that finishes them sooner, and tiny ops never split (the event costs more
than the overlap wins). Each engine has at most ``ge.streamMaxParallelNum`` streams;
``ge.enableSingleStream=true`` puts every node on one stream.

Every data edge between streams becomes an event (record after the producer, wait before the
consumer), minus those the consumer already waits for transitively (vector clocks). The
execution order is the simulated start order: each stream's nodes, and every event's
producer, come before their consumers in it, so no stream can wait for a node that waits for
it — plans cannot deadlock.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from aioge.engines import Engine
from aioge.ir.graph import Graph, Node
from aioge.ops.registry import REGISTRY
from aioge.options import CompileOptions
from aioge.plan.streams import (
    MAX_STREAMS,
    Event,
    Stream,
    StreamPlan,
    check_stream_plan,
    clocks_before,
    happens_before,
    predecessors,
)

__all__ = [
    "MAX_STREAMS",
    "SYNC_COST_US",
    "Event",
    "Stream",
    "StreamPlan",
    "check_stream_plan",
    "clocks_before",
    "happens_before",
    "node_cost",
    "plan_streams",
    "predecessors",
]

# What a cross-stream event costs on this runtime: a worker thread waking another (measured
# about 10-40 us on the 2-core CI machine). Overlap smaller than this is not worth a stream.
SYNC_COST_US = 30.0


# The ops whose cost counts multiply-adds (OpSchema.cost).
_MATMUL_OPS = frozenset(s.name for s in REGISTRY.values() if s.cost == "matmul")
_CONV_OPS = frozenset(s.name for s in REGISTRY.values() if s.cost == "conv")


def plan_streams(
    graph: Graph, order: Sequence[Node], engines: Mapping[str, Engine], options: CompileOptions
) -> tuple[list[Node], StreamPlan]:
    """Lay the nodes onto streams.

    ``order`` is any topological order of ``graph``'s nodes; ``engines`` maps node names to
    their engines. Returns the execution order (a topological order consistent with every
    stream) and the plan, whose node indices refer to that execution order.
    """
    n = len(order)
    preds = predecessors(order)
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    cost = [node_cost(node) for node in order]
    rank = [0.0] * n
    for i in reversed(range(n)):  # order is topological, so successors are done first
        rank[i] = cost[i] + max((rank[s] for s in succs[i]), default=0.0)

    node_engine = [engines[node.name] for node in order]
    stream_engine: list[Engine] = []
    stream_nodes: list[list[int]] = []
    ready: list[float] = []  # when each stream's last node ends
    per_engine: dict[Engine, list[int]] = {}
    stream_of = [-1] * n
    start = [0.0] * n
    finish = [0.0] * n
    # Upward rank strictly decreases along every edge (costs are positive): a topological order.
    for i in sorted(range(n), key=lambda i: (-rank[i], i)):
        engine = node_engine[i]
        if options.single_stream:
            candidates = [0] if stream_nodes else [-1]
        else:
            candidates = list(per_engine.get(engine, ()))
            if len(candidates) < options.streams_for(engine):
                candidates.append(-1)  # a new stream
        best: tuple[float, int, int, int, float] | None = None
        for s in candidates:
            est = ready[s] if s >= 0 else 0.0
            holds_pred = 0
            for p in preds[i]:
                if stream_of[p] == s:
                    holds_pred = 1
                    est = max(est, finish[p])
                else:
                    est = max(est, finish[p] + SYNC_COST_US)
            # Earliest finish first; then a stream that holds a predecessor (fewer events),
            # then an existing stream over a new one, then the lower id.
            key = (est + cost[i], -holds_pred, 1 if s < 0 else 0, s, est)
            if best is None or key < best:
                best = key
        assert best is not None
        s = best[3]
        if s < 0:
            s = len(stream_nodes)
            stream_engine.append(engine)
            stream_nodes.append([])
            ready.append(0.0)
            per_engine.setdefault(engine, []).append(s)
        finish[i] = best[0]
        start[i] = best[4]
        stream_of[i] = s
        stream_nodes[s].append(i)
        ready[s] = finish[i]
        if options.single_stream and engine.priority < stream_engine[s].priority:
            stream_engine[s] = engine

    # Execution order: simulated start time. A node starts after its predecessors end and
    # after the previous node of its stream ends, so this is topological and stream-consistent.
    sched = sorted(range(n), key=lambda i: (start[i], -rank[i], i))
    new_index = {old: k for k, old in enumerate(sched)}
    # Streams numbered by their first node, so stream 0 runs the first node.
    stream_ids = {s: k for k, s in enumerate(sorted(range(len(stream_nodes)), key=lambda s: new_index[stream_nodes[s][0]]))}
    streams = [Stream(0, "", ())] * len(stream_nodes)
    for s, nodes in enumerate(stream_nodes):
        streams[stream_ids[s]] = Stream(stream_ids[s], stream_engine[s].value, tuple(sorted(new_index[i] for i in nodes)))
    node_stream = tuple(stream_ids[stream_of[old]] for old in sched)
    new_preds = [[new_index[p] for p in preds[old]] for old in sched]
    events = _events(new_preds, node_stream, len(streams))
    return [order[i] for i in sched], StreamPlan(tuple(streams), node_stream, tuple(events))


def node_cost(node: Node, *, dispatch_us: float = 1.0, us_per_flop: float = 1e-4) -> float:
    """A rough estimate of a node's run time in microseconds, for list scheduling.

    A fixed dispatch cost, memory traffic over its static inputs and outputs, and the
    multiply-adds of matrix products and convolutions (by default 10 GFLOP/s per worker).
    """
    elements = 0
    for v in (*node.inputs, *node.outputs):
        if v is not None and v.desc.static:
            elements += v.desc.size
    flops = 0
    if node.op_type in _MATMUL_OPS or node.op_type in _CONV_OPS:
        out = node.outputs[0].desc
        w = node.inputs[1].desc if len(node.inputs) > 1 and node.inputs[1] is not None else None
        if out.static and w is not None and w.static and w.shape:
            if node.op_type in _CONV_OPS:
                k = 1
                for d in w.shape[1:]:
                    k *= int(d)
            elif node.op_type in ("Gemm", "FusedGemm") and node.attrs.get("transB"):
                k = int(w.shape[-1])
            else:
                k = int(w.shape[0]) if len(w.shape) <= 2 else int(w.shape[-2])  # a 1-D B is (k,)
            flops = 2 * out.size * k
    return dispatch_us + elements * 1e-3 + flops * us_per_flop


def _events(preds: Sequence[Sequence[int]], node_stream: Sequence[int], num_streams: int) -> list[Event]:
    """One event per cross-stream edge, minus those implied by stream order and other events.

    ``known[i][s]`` (a vector clock) is the last position on stream ``s`` that node ``i`` is
    known to follow. Predecessors are tried latest first: a later one may imply an earlier
    one, never the reverse, so every event kept is needed.
    """
    n = len(preds)
    position = [0] * n
    count = [0] * num_streams
    for i in range(n):
        position[i] = count[node_stream[i]]
        count[node_stream[i]] += 1
    known: list[list[int]] = [[]] * n
    last_on: list[int] = [-1] * num_streams
    events: list[Event] = []
    for i in range(n):
        s = node_stream[i]
        prev = last_on[s]
        k = list(known[prev]) if prev >= 0 else [-1] * num_streams
        for p in sorted(preds[i], reverse=True):
            ps = node_stream[p]
            if ps == s or k[ps] >= position[p]:
                continue
            events.append(Event(len(events), p, i))
            k = [max(a, b) for a, b in zip(k, known[p])]
        k[s] = position[i]
        known[i] = k
        last_on[s] = i
    return events
