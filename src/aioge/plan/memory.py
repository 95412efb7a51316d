"""The memory plan as data: arena offsets of the planned tensors (made by ``compiler.memory.plan_memory``)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Sequence

from aioge.ir.graph import Node, Value, ValueKind
from aioge.plan.streams import StreamPlan, clocks_before

__all__ = ["Buffer", "MemoryPlan", "check_reuse", "is_view", "plannable"]


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
    lower_bound_bytes: int  # heaviest set of tensors live together under the stream plan
    no_reuse_bytes: int  # every tensor in its own region
    reuse: bool = True
    strategy: str = ""  # the placement order and gap rule that won
    views: tuple[tuple[str, str], ...] = ()  # (a view op's output, the buffer's value it shares), in production order

    def offsets(self) -> dict[str, tuple[int, int]]:
        """Value name -> (offset, nbytes) in the arena (a view's: its buffer's)."""
        out = {b.value: (b.offset, b.nbytes) for b in self.buffers}
        return out | {v: out[r] for v, r in self.views}


def is_view(node: Node) -> bool:
    """Whether ``node``'s one output is its first input's bytes as they are (a Reshape, a
    Transpose moving only size-1 axes, ...): the planner gives it the input's buffer."""
    x, out = (node.inputs or (None,))[0], node.outputs[0]
    if x is None or node.domain or len(node.outputs) != 1 or (x.desc.dtype, x.desc.size) != (out.desc.dtype, out.desc.size):
        return False
    if node.op_type == "Transpose":
        dims = tuple(x.desc.shape)  # type: ignore[arg-type]
        perm = [p for p in node.attrs.get("perm") or range(len(dims) - 1, -1, -1) if dims[p] != 1]
        return perm == sorted(perm)
    return node.op_type in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")


def plannable(v: Value, graph_outputs: set[int]) -> bool:
    """Intermediates of static shape and fixed-size dtype that are not graph outputs.

    Sequences and optionals are never planned: a sequence is a run-time Python list of
    arrays whose length and element shapes follow from the data, an optional may hold
    nothing. Their kernels return fresh objects (as for tensors of run-time shape) and the
    executor passes them on; the tensors inside hold no arena bytes (``desc.static`` is False).
    """
    return (
        v.kind is ValueKind.INTERMEDIATE
        and id(v) not in graph_outputs
        and v.desc.static
        and v.desc.dtype != "str"
        and v.desc.size > 0
    )


def check_reuse(buffers: Sequence[tuple[Buffer, Sequence[int]]], streams: StreamPlan) -> str:
    """Why a plan's buffers (each with the nodes that read it) share bytes unsafely under
    ``streams``, or '' when they do not: where two buffers overlap, every use of the earlier
    one (its producer when nothing reads it) must happen-before the later one's producer —
    the rule ``plan_memory`` places by. ``streams`` must be a plan ``check_stream_plan``
    accepted.

    Buffers are swept in producer order over a map of which buffer last took each byte
    range; checking only those suffices, since a buffer that took bytes over did so after
    every use of the one before it.
    """
    order = sorted(buffers, key=lambda bu: bu[0].producer)
    pos, clocks = clocks_before(streams, {b.producer for b, _ in order})
    stream = streams.node_stream
    starts: list[int] = []  # disjoint segments [start, end) -> the buffer that last took them
    segs: list[tuple[int, int, int]] = []
    for k, (b, _) in enumerate(order):
        lo, hi = b.offset, b.offset + b.nbytes
        if hi <= lo:
            continue
        first = bisect.bisect_right(starts, lo) - 1
        if first < 0 or segs[first][1] <= lo:
            first += 1
        last = first
        clock = clocks[b.producer]
        while last < len(segs) and segs[last][0] < hi:
            a, uses = order[segs[last][2]]
            for u in uses or (a.producer,):
                if u == b.producer or clock[stream[u]] < pos[u]:
                    return (
                        f"buffers of {a.value!r} and {b.value!r} share arena bytes, but node {u} (using "
                        f"{a.value!r}) does not end before node {b.producer} writes {b.value!r}"
                    )
            last += 1
        keep: list[tuple[int, int, int]] = []
        if first < last and segs[first][0] < lo:
            keep.append((segs[first][0], lo, segs[first][2]))
        keep.append((lo, hi, k))
        if first < last and segs[last - 1][1] > hi:
            keep.append((hi, segs[last - 1][1], segs[last - 1][2]))
        segs[first:last] = keep
        starts[first:last] = [s[0] for s in keep]
    return ""
