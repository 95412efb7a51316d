"""The stream planner: nodes onto streams, with events on cross-stream edges.

Each engine has up to ``ge.streamMaxParallelNum`` streams. A node continues the stream of
one of its producers on the same engine when that stream is free at that point (a chain
stays on one stream); otherwise it opens a new stream of its engine, up to the cap, and
then wraps to the least-loaded one. Nodes are visited in list-scheduling order: among the
ready nodes the one with the longest remaining path goes first, so the critical path is
laid first and independent branches spread over streams. Every data edge between streams
becomes an event (record after the producer, wait before the consumer); events implied by
others (the consumer already waits, transitively, for a later node of that stream) are
dropped.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Mapping, Sequence

from aioge.engines import Engine
from aioge.ir.graph import Graph, Node
from aioge.options import CompileOptions

__all__ = ["Event", "Stream", "StreamPlan", "happens_before", "plan_streams"]


@dataclass(frozen=True, slots=True)
class Stream:
    id: int
    engine: str
    nodes: tuple[int, ...]  # node indices in execution order


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    producer: int  # node index that records it
    consumer: int  # node index that waits for it


@dataclass(frozen=True, slots=True)
class StreamPlan:
    """Streams, per-node stream ids, and the events between streams."""

    streams: tuple[Stream, ...]
    node_stream: tuple[int, ...]
    events: tuple[Event, ...]

    @property
    def num_streams(self) -> int:
        return len(self.streams)

    def waits(self, node: int) -> list[Event]:
        return [e for e in self.events if e.consumer == node]


def plan_streams(graph: Graph, order: Sequence[Node], engines: Mapping[str, Engine], options: CompileOptions) -> tuple[list[Node], StreamPlan]:
    """Lay the nodes onto streams; returns the execution order and the plan."""
    index = {id(n): i for i, n in enumerate(order)}
    preds: list[list[int]] = [sorted({index[id(v.producer)] for v in n.inputs if v is not None and v.producer is not None}) for n in order]
    succs: list[list[int]] = [[] for _ in order]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    cost = [_cost(n) for n in order]
    rank = [0.0] * len(order)  # longest remaining path, including the node itself
    for i in reversed(range(len(order))):
        rank[i] = cost[i] + max((rank[s] for s in succs[i]), default=0.0)

    # List scheduling by rank: a topological order that lays the critical path first.
    indeg = [len(p) for p in preds]
    heap = [(-rank[i], i) for i in range(len(order)) if indeg[i] == 0]
    heapq.heapify(heap)
    sched: list[int] = []
    while heap:
        _, i = heapq.heappop(heap)
        sched.append(i)
        for s in succs[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (-rank[s], s))

    anc = [0] * len(order)  # bitset of ancestors, by original index (preds come first)
    for i in range(len(order)):
        for p in preds[i]:
            anc[i] |= anc[p] | (1 << p)
    streams: list[tuple[Engine, list[int]]] = []
    per_engine: dict[Engine, list[int]] = {}
    load: list[float] = []
    stream_of = [-1] * len(order)
    tail_of: dict[int, int] = {}  # stream -> last node laid on it
    for i in sched:
        engine = engines[order[i].name]
        cap = options.streams_for(engine)
        chosen = -1
        for p in sorted(preds[i], key=lambda p: -rank[p]):
            s = stream_of[p]
            if streams[s][0] is engine and tail_of.get(s) == p:
                chosen = s
                break
        if chosen < 0:
            mine = per_engine.setdefault(engine, [])
            # A stream whose last node is an ancestor of this one is free: continuing it loses no overlap.
            free = [s for s in mine if (anc[i] >> tail_of[s]) & 1]
            if free:
                chosen = max(free, key=lambda s: tail_of[s])
            elif len(mine) < cap:
                chosen = len(streams)
                streams.append((engine, []))
                load.append(0.0)
                mine.append(chosen)
            else:
                chosen = min(mine, key=lambda s: load[s])
        stream_of[i] = chosen
        streams[chosen][1].append(i)
        load[chosen] += cost[i]
        tail_of[chosen] = i

    # Renumber nodes in schedule order so indices follow execution order.
    new_index = {old: k for k, old in enumerate(sched)}
    exec_order = [order[i] for i in sched]
    node_stream = tuple(stream_of[i] for i in sched)
    plan_streams_ = tuple(Stream(s, e.value, tuple(new_index[i] for i in nodes)) for s, (e, nodes) in enumerate(streams))
    new_preds = [[new_index[p] for p in preds[old]] for old in sched]
    events = _events(new_preds, node_stream, plan_streams_)
    return exec_order, StreamPlan(plan_streams_, node_stream, tuple(events))


def _cost(node: Node) -> float:
    """A rough cost for list scheduling: output elements, times the reduction size for matmul/conv."""
    total = 0.0
    for out in node.outputs:
        if out.desc.static:
            total += out.desc.size
    if node.op_type in ("Conv", "MatMul", "Gemm", "FusedConv", "FusedGemm", "FusedMatMul") and node.inputs[1] is not None:
        w = node.inputs[1].desc
        if w.static and w.shape:
            k = 1
            for d in (w.shape[1:] if node.op_type.endswith("Conv") else w.shape[:1]):
                k *= int(d)
            total *= max(k, 1)
    return total + 1.0


def _events(preds: list[list[int]], node_stream: Sequence[int], streams: Sequence[Stream]) -> list[Event]:
    """One event per cross-stream edge, minus those implied by stream order and other events."""
    n = len(preds)
    position = {}
    for s in streams:
        for k, i in enumerate(s.nodes):
            position[i] = k
    # known[i][s] = the latest position on stream s that node i is known to follow.
    known: list[dict[int, int]] = [dict() for _ in range(n)]
    events: list[Event] = []
    prev_on_stream: dict[int, int] = {}
    for i in range(n):
        s = node_stream[i]
        k = known[i]
        if s in prev_on_stream:
            for st, pos in known[prev_on_stream[s]].items():
                if pos > k.get(st, -1):
                    k[st] = pos
        k[s] = position[i]
        for p in sorted(preds[i], reverse=True):
            ps = node_stream[p]
            if ps == s or k.get(ps, -1) >= position[p]:
                continue
            events.append(Event(len(events), p, i))
            for st, pos in known[p].items():
                if pos > k.get(st, -1):
                    k[st] = pos
        prev_on_stream[s] = i
    return events


def happens_before(plan: StreamPlan, n: int) -> list[int]:
    """For each node, a bitset (int) of the nodes that finish before it starts, under the plan."""
    before = [0] * n
    prev_on_stream: dict[int, int] = {}
    waits: dict[int, list[int]] = {}
    for e in plan.events:
        waits.setdefault(e.consumer, []).append(e.producer)
    for i in range(n):
        s = plan.node_stream[i]
        bits = 0
        if s in prev_on_stream:
            p = prev_on_stream[s]
            bits |= before[p] | (1 << p)
        for p in waits.get(i, ()):
            bits |= before[p] | (1 << p)
        before[i] = bits
        prev_on_stream[s] = i
    return before
