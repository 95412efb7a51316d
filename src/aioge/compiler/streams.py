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

from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Sequence

from aioge.engines import Engine
from aioge.ir.graph import Graph, Node
from aioge.ops.registry import REGISTRY
from aioge.options import CompileOptions

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

# The most streams a plan can have: every engine at ge.streamMaxParallelNum's ceiling (64).
MAX_STREAMS = 64 * len(Engine)

# The ops whose cost counts multiply-adds (OpSchema.cost).
_MATMUL_OPS = frozenset(s.name for s in REGISTRY.values() if s.cost == "matmul")
_CONV_OPS = frozenset(s.name for s in REGISTRY.values() if s.cost == "conv")


@dataclass(frozen=True, slots=True)
class Stream:
    id: int
    engine: str  # whose worker pool runs it (for a single mixed stream: the best engine among its nodes)
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
        """The events node ``node`` waits for before it starts."""
        return [e for e in self.events if e.consumer == node]

    def records(self, node: int) -> list[Event]:
        """The events node ``node`` records when it ends."""
        return [e for e in self.events if e.producer == node]


def plan_streams(graph: Graph, order: Sequence[Node], engines: Mapping[str, Engine], options: CompileOptions) -> tuple[list[Node], StreamPlan]:
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


def predecessors(order: Sequence[Node]) -> list[list[int]]:
    """For each node of ``order``, the sorted indices of the nodes producing its inputs."""
    index = {id(node): i for i, node in enumerate(order)}
    return [
        sorted({index[id(v.producer)] for v in node.inputs if v is not None and v.producer is not None and id(v.producer) in index})
        for node in order
    ]


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
                k = int(w.shape[0]) if len(w.shape) == 2 else int(w.shape[-2])
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


def happens_before(plan: StreamPlan, n: int) -> list[int]:
    """For each node, a bitset (int) of the nodes that end before it starts, under the plan."""
    before = [0] * n
    last_on: dict[int, int] = {}
    waits: dict[int, list[int]] = {}
    for e in plan.events:
        waits.setdefault(e.consumer, []).append(e.producer)
    for i in range(n):
        s = plan.node_stream[i]
        bits = 0
        for p in (last_on.get(s, -1), *waits.get(i, ())):
            if p >= 0:
                bits |= before[p] | (1 << p)
        before[i] = bits
        last_on[s] = i
    return before


def check_stream_plan(plan: StreamPlan, preds: Sequence[Sequence[int]]) -> str:
    """Why ``plan`` cannot run the nodes whose data predecessors are ``preds`` (node indices in
    execution order, as ``predecessors`` gives them), or '' when it can.

    A plan the planner made always passes: every stream runs its nodes in execution order,
    every event's producer comes before its consumer (so happens-before, stream order plus
    events, is acyclic and no stream can wait for a node that waits for it), and every data
    edge is ordered by happens-before (a consumer never reads what may not be written yet).
    Costs O(nodes + events x streams), checked with vector clocks.
    """
    n = len(preds)
    num = len(plan.streams)
    if num > MAX_STREAMS:
        return f"{num} streams, more than the {MAX_STREAMS} any plan has"
    if len(plan.node_stream) != n or any(not 0 <= s < num for s in plan.node_stream):
        return "the stream plan does not cover the nodes"
    engines = {e.value for e in Engine}
    pos = [-1] * n
    for k, st in enumerate(plan.streams):
        if st.id != k or st.engine not in engines:
            return f"stream {k} is malformed (id {st.id}, engine {st.engine!r})"
        last = -1
        for j, i in enumerate(st.nodes):
            if not 0 <= i < n or plan.node_stream[i] != k or pos[i] >= 0:
                return f"stream {k} holds node {i}, which is not its own or is held twice"
            if i <= last:
                return f"stream {k} runs node {i} after node {last}, against the execution order"
            pos[i], last = j, i
    if any(p < 0 for p in pos):
        return "streams do not hold every node exactly once"
    waits: list[list[int]] = [[] for _ in range(n)]
    recorded = bytearray(n)
    for k, e in enumerate(plan.events):
        if e.id != k or not (0 <= e.producer < n and 0 <= e.consumer < n):
            return f"event {k} is out of range"
        if e.producer >= e.consumer:
            return (f"event {k} makes node {e.consumer} wait for node {e.producer}, which runs after it"
                    " (a cycle between streams: the run would hang)")
        waits[e.consumer].append(e.producer)
        recorded[e.producer] = 1
    for i, clock in _clocks(plan, pos, waits, recorded):
        s = plan.node_stream[i]
        for p in preds[i]:
            if not 0 <= p < i:
                return f"node {i} reads the output of node {p}, which does not run before it"
            if plan.node_stream[p] != s and clock[plan.node_stream[p]] < pos[p]:
                return (f"node {i} (stream {s}) reads the output of node {p} (stream {plan.node_stream[p]})"
                        " with no event ordering them")
    return ""


def clocks_before(plan: StreamPlan, nodes: Iterable[int]) -> tuple[list[int], dict[int, list[int]]]:
    """``(position, clocks)`` of a plan that ``check_stream_plan`` accepted: each node's
    position on its stream, and for each node of ``nodes`` its vector clock — per stream,
    the last position that ends before the node starts (-1: none). Node ``u`` happens
    before node ``j`` when ``clocks[j][node_stream[u]] >= position[u]``."""
    n = len(plan.node_stream)
    pos = [0] * n
    for st in plan.streams:
        for j, i in enumerate(st.nodes):
            pos[i] = j
    waits: list[list[int]] = [[] for _ in range(n)]
    recorded = bytearray(n)
    for e in plan.events:
        waits[e.consumer].append(e.producer)
        recorded[e.producer] = 1
    wanted = set(nodes)
    return pos, {i: list(clock) for i, clock in _clocks(plan, pos, waits, recorded) if i in wanted}


def _clocks(plan: StreamPlan, pos: Sequence[int], waits: Sequence[Sequence[int]], recorded: bytearray) -> Iterator[tuple[int, list[int]]]:
    """Each node in execution order with its vector clock as it starts (a live list: copy it
    to keep it). Stream order and events only, so O(nodes + events x streams)."""
    num = len(plan.streams)
    clocks = [[-1] * num for _ in range(num)]  # per stream: the clock after its last node
    at_record: dict[int, list[int]] = {}  # the clock of each event producer, as it ended
    for i in range(len(plan.node_stream)):
        s = plan.node_stream[i]
        clock = clocks[s]
        for p in waits[i]:
            for t, x in enumerate(at_record[p]):
                if x > clock[t]:
                    clock[t] = x
        yield i, clock
        clock[s] = pos[i]
        if recorded[i]:
            at_record[i] = list(clock)
