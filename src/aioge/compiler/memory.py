"""The memory planner: one arena, offsets by greedy-by-size, reuse only when it is safe under streams.

Every intermediate with a static shape gets a region of the arena (graph outputs are
allocated per run, so the caller owns them). Two tensors may share bytes only when every
use of one happens-before the production of the other under the stream plan (same-stream
order or an event path), not merely earlier in topological order. Tensors are placed
largest first, each into the smallest gap between already-placed tensors it conflicts
with (TFLite's and XNNPACK's greedy by size).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from aioge.compiler.streams import StreamPlan, happens_before
from aioge.ir.desc import numpy_dtype
from aioge.ir.graph import Graph, Node, Value, ValueKind

__all__ = ["ALIGNMENT", "Buffer", "MemoryPlan", "plan_memory"]

ALIGNMENT = 64


@dataclass(frozen=True, slots=True)
class Buffer:
    value: str
    offset: int
    nbytes: int
    producer: int  # node index
    last_use: int  # node index of the last consumer in execution order (or producer)


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Arena offsets for the planned tensors, and the figures to judge the plan by."""

    arena_bytes: int
    buffers: tuple[Buffer, ...]
    lower_bound_bytes: int  # max over the execution order of the live bytes
    no_reuse_bytes: int  # every tensor in its own region
    reuse: bool = True

    def offsets(self) -> dict[str, tuple[int, int]]:
        return {b.value: (b.offset, b.nbytes) for b in self.buffers}


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def plannable(v: Value, graph_outputs: set[int]) -> bool:
    """Intermediates of static shape and fixed-size dtype that are not graph outputs."""
    return (
        v.kind is ValueKind.INTERMEDIATE
        and id(v) not in graph_outputs
        and v.desc.static
        and v.desc.dtype != "str"
        and v.desc.size > 0
    )


def plan_memory(graph: Graph, order: Sequence[Node], streams: StreamPlan, *, reuse: bool = True) -> MemoryPlan:
    """Assign arena offsets to every plannable tensor of the graph."""
    index = {id(n): i for i, n in enumerate(order)}
    outs = {id(v) for v in graph.outputs}
    tensors: list[tuple[Value, int, list[int], int]] = []  # value, producer, consumers, bytes
    for node in order:
        for v in node.outputs:
            if plannable(v, outs):
                consumers = sorted({index[id(n)] for n, _ in v.uses})
                nbytes = v.desc.size * numpy_dtype(v.desc.dtype).itemsize
                tensors.append((v, index[id(node)], consumers, _align(nbytes)))
    no_reuse = sum(t[3] for t in tensors)
    lower = _lower_bound(tensors, len(order))
    if not reuse:
        buffers, offset = [], 0
        for v, prod, cons, size in tensors:
            buffers.append(Buffer(v.name, offset, size, prod, max(cons, default=prod)))
            offset += size
        return MemoryPlan(offset, tuple(buffers), lower, no_reuse, reuse=False)

    before = happens_before(streams, len(order))

    def disjoint(a: tuple[Value, int, list[int], int], b: tuple[Value, int, list[int], int]) -> bool:
        # a is dead before b is born: all of a's uses (or its producer, if unused) finish before b's producer starts.
        uses = a[2] or [a[1]]
        return all((before[b[1]] >> u) & 1 for u in uses)

    placed: list[tuple[int, int, tuple[Value, int, list[int], int]]] = []  # offset, size, tensor
    buffers = []
    arena = 0
    for t in sorted(tensors, key=lambda t: (-t[3], t[1])):
        conflicts = sorted(((o, s) for o, s, u in placed if not (disjoint(u, t) or disjoint(t, u))))
        best, best_gap, cursor = None, None, 0
        for o, s in conflicts:
            gap = o - cursor
            if gap >= t[3] and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, o + s)
        offset = best if best is not None else cursor
        placed.append((offset, t[3], t))
        buffers.append(Buffer(t[0].name, offset, t[3], t[1], max(t[2], default=t[1])))
        arena = max(arena, offset + t[3])
    buffers.sort(key=lambda b: b.producer)
    return MemoryPlan(arena, tuple(buffers), lower, no_reuse)


def _lower_bound(tensors: list[tuple[Value, int, list[int], int]], n: int) -> int:
    """Max over the execution order of the bytes live at each step (a tensor is live from its
    producer to its last consumer, both included)."""
    delta = [0] * (n + 1)
    for _, prod, cons, size in tensors:
        last = max(cons, default=prod)
        delta[prod] += size
        delta[last + 1] -= size
    live = peak = 0
    for d in delta:
        live += d
        peak = max(peak, live)
    return peak
