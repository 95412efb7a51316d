"""The stream plan as data: streams, the stream of every node, and the events between streams
(made by ``compiler.streams.plan_streams``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from aioge.engines import Engine
from aioge.ir.graph import Node

__all__ = ["MAX_STREAMS", "Event", "Stream", "StreamPlan", "check_stream_plan", "clocks_before", "happens_before", "predecessors"]

# The most streams a plan can have: every engine at ge.streamMaxParallelNum's ceiling (64).
MAX_STREAMS = 64 * len(Engine)


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


def predecessors(order: Sequence[Node]) -> list[list[int]]:
    """For each node of ``order``, the sorted indices of the nodes producing its inputs."""
    index = {id(node): i for i, node in enumerate(order)}
    return [
        sorted(
            {index[id(v.producer)] for v in node.inputs if v is not None and v.producer is not None and id(v.producer) in index}
        )
        for node in order
    ]


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
            return (
                f"event {k} makes node {e.consumer} wait for node {e.producer}, which runs after it"
                " (a cycle between streams: the run would hang)"
            )
        waits[e.consumer].append(e.producer)
        recorded[e.producer] = 1
    for i, clock in _clocks(plan, pos, waits, recorded):
        s = plan.node_stream[i]
        for p in preds[i]:
            if not 0 <= p < i:
                return f"node {i} reads the output of node {p}, which does not run before it"
            if plan.node_stream[p] != s and clock[plan.node_stream[p]] < pos[p]:
                return (
                    f"node {i} (stream {s}) reads the output of node {p} (stream {plan.node_stream[p]})"
                    " with no event ordering them"
                )
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


def _clocks(
    plan: StreamPlan, pos: Sequence[int], waits: Sequence[Sequence[int]], recorded: bytearray
) -> Iterator[tuple[int, list[int]]]:
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
