"""The memory planner: one arena, offsets by greedy-by-size, reuse only when it is safe under streams.

Every intermediate with a static shape gets a region of the arena (graph outputs are
allocated per run, so the caller owns them). Two tensors may share bytes only when every
use of one happens-before the production of the other under the stream plan (same-stream
order or an event path), not merely earlier in the execution order: the two then
*conflict*. Values the runtime does not plan (graph outputs, tensors of run-time shape) are
fresh arrays by the kernel contract, so they hold no arena bytes (the executor copies any
result that breaks it). Sequences and optionals are never planned: a sequence is a run-time
Python list of arrays whose length and element shapes follow from the data, and its kernels
copy every tensor they put in one, so a list never holds arena bytes that a later tensor reuses.

Placement is greedy (TFLite's and XNNPACK's greedy by size): tensors in some order, each into
the smallest gap between the already-placed tensors it conflicts with. As GE does, several
orders and gap rules are tried and the smallest arena is kept; the search stops as soon as an
arena meets the lower bound, and falls back to seeded jittered size orders when none does.

The lower bound is the heaviest set of pairwise-conflicting tensors (they must all be
disjoint in any arena). On one stream that is exactly the maximum over the execution order of
the live bytes; with several streams it also counts tensors that streams keep live at once,
so it stays a true lower bound for the plan's schedule.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from aioge.ir.desc import numpy_dtype
from aioge.ir.graph import Graph, Node, Value
from aioge.plan.memory import Buffer, MemoryPlan, check_reuse, is_view, plannable
from aioge.plan.streams import StreamPlan

__all__ = ["ALIGNMENT", "Buffer", "MemoryPlan", "check_reuse", "plan_memory", "plannable"]

ALIGNMENT = 64
# Expansions the exact clique search may spend improving the lower bound; any clique found is
# already a valid bound, so running out only loosens it.
_CLIQUE_BUDGET = 20_000
# When no fixed order reaches the bound: this many largest-first orders with sizes jittered by
# up to 30% (seeded, so plans are reproducible). Greedy by size misses the bound on DenseNet
# by ~5% and a few jittered orders close it; each try costs one greedy placement.
_JITTERED_ORDERS = 48
_JITTER = 0.3


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclass(slots=True)
class _Tensor:
    value: Value
    producer: int
    uses: list[int]  # node indices that read it
    nbytes: int


def plan_memory(graph: Graph, order: Sequence[Node], streams: StreamPlan, *, reuse: bool = True) -> MemoryPlan:
    """Assign arena offsets to every plannable tensor of the graph.

    ``order`` is the execution order the stream plan's node indices refer to. Returns the plan;
    with ``reuse=False`` every tensor gets its own region.
    """
    n = len(order)
    tensors, views = _tensors(graph, order)
    no_reuse = sum(t.nbytes for t in tensors)
    if not tensors:
        return MemoryPlan(0, (), 0, 0, reuse=reuse, strategy="none")
    # Index tensors largest first, so bit order is size order (the clique search and the
    # greedy-by-size order rely on it).
    tensors.sort(key=lambda t: (-t.nbytes, t.producer))
    conf = _conflicts(tensors, streams, n)
    sizes = [t.nbytes for t in tensors]
    lower = _lower_bound(tensors, conf, n, exact=streams.num_streams > 1)
    if not reuse:
        offsets, offset = [0] * len(tensors), 0
        for k in sorted(range(len(tensors)), key=lambda k: tensors[k].producer):
            offsets[k] = offset
            offset += sizes[k]
        arena, strategy = offset, "no-reuse"
    else:
        arena, offsets, strategy = -1, [], ""
        for name, ordering in _ORDERINGS:
            seq = ordering(tensors, conf, n)
            for fit in ("best-fit", "first-fit"):
                size, offs = _place(seq, sizes, conf, best_fit=fit == "best-fit")
                if arena < 0 or size < arena:
                    arena, offsets, strategy = size, offs, f"{name}/{fit}"
                if arena == lower:
                    break
            if arena == lower:
                break
        rng = random.Random(0)
        for trial in range(_JITTERED_ORDERS if arena > lower else 0):
            jittered = [s * (1 + rng.uniform(-_JITTER, _JITTER)) for s in sizes]
            size, offs = _place(sorted(range(len(sizes)), key=lambda k: -jittered[k]), sizes, conf, best_fit=True)
            if size < arena:
                arena, offsets, strategy = size, offs, f"jittered-size#{trial}/best-fit"
                if arena == lower:
                    break
    buffers = sorted(
        (Buffer(t.value.name, offsets[k], t.nbytes, t.producer, max(t.uses)) for k, t in enumerate(tensors)),
        key=lambda b: (b.producer, b.value),
    )
    return MemoryPlan(arena, tuple(buffers), lower, no_reuse, reuse=reuse, strategy=strategy, views=tuple(views))


def _tensors(graph: Graph, order: Sequence[Node]) -> tuple[list[_Tensor], list[tuple[str, str]]]:
    """The planned tensors, each with the nodes that read it (its producer if none does), and
    the views: a view op's planned output over a planned input takes its tensor, whose uses
    then hold the view's (so its bytes live until the last reader of either)."""
    index = {id(node): i for i, node in enumerate(order)}
    outs = {id(v) for v in graph.outputs}
    tensors: list[_Tensor] = []
    of: dict[int, _Tensor] = {}  # id(value) -> its tensor
    views: list[tuple[str, str]] = []
    for i, node in enumerate(order):
        for v in node.outputs:
            if plannable(v, outs):
                uses = sorted({index[id(c)] for c, _ in v.uses if id(c) in index})
                if (t := of.get(id(node.inputs[0] if node.inputs else None))) is not None and is_view(node):
                    t.uses = sorted({*t.uses, *uses})
                    views.append((v.name, t.value.name))
                else:
                    t = _Tensor(v, i, uses or [i], _align(v.desc.size * numpy_dtype(v.desc.dtype).itemsize))
                    tensors.append(t)
                of[id(v)] = t
    return tensors, views


def _bits(mask: int) -> Iterator[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _conflicts(tensors: Sequence[_Tensor], plan: StreamPlan, n: int) -> list[int]:
    """For each tensor, the bitset of tensors it may be live together with under ``plan``.

    ``a`` and ``b`` are disjoint in time when every use of ``a`` ends before ``b``'s producer
    starts, or the reverse. Happens-before restricted to one stream is a prefix (nodes that
    end before ``j``) or a suffix (nodes that start after ``u``), so it is kept as vector
    clocks and the disjoint sets are built from per-stream prefix and suffix bitsets, without
    comparing every pair.
    """
    num = plan.num_streams
    length = [len(s.nodes) for s in plan.streams]
    stream = plan.node_stream
    pos = [0] * n
    for st in plan.streams:
        for k, i in enumerate(st.nodes):
            pos[i] = k
    waits: list[list[int]] = [[] for _ in range(n)]
    records: list[list[int]] = [[] for _ in range(n)]
    for e in plan.events:
        waits[e.consumer].append(e.producer)
        records[e.producer].append(e.consumer)
    # before[j][s]: last position on s that ends before j starts (-1: none).
    before: list[list[int]] = [[]] * n
    last_on = [-1] * num
    for j in range(n):
        clock = [-1] * num
        for p in (last_on[stream[j]], *waits[j]):
            if p >= 0:
                clock = [max(a, b) for a, b in zip(clock, before[p])]
                clock[stream[p]] = max(clock[stream[p]], pos[p])
        before[j] = clock
        last_on[stream[j]] = j
    # after[u][s]: first position on s that starts after u ends (length[s]: none).
    after: list[list[int]] = [[]] * n
    next_on = [-1] * num
    for u in reversed(range(n)):
        clock = list(length)
        for c in (next_on[stream[u]], *records[u]):
            if c >= 0:
                clock = [min(a, b) for a, b in zip(clock, after[c])]
                clock[stream[c]] = min(clock[stream[c]], pos[c])
        after[u] = clock
        next_on[stream[u]] = u

    count = len(tensors)
    last_use = [[-1] * num for _ in range(count)]  # per stream: last position of a use (-1: none)
    first_free = [[0] * num for _ in range(count)]  # per stream: first position after every use
    for k, t in enumerate(tensors):
        lu, ff = last_use[k], first_free[k]
        for u in t.uses:
            lu[stream[u]] = max(lu[stream[u]], pos[u])
            ff[:] = [max(a, b) for a, b in zip(ff, after[u])]
    # dead_upto[s][k + 1]: tensors whose uses on s all end at or before position k.
    dead_upto: list[list[int]] = []
    born_from: list[list[int]] = []  # born_from[s][k]: tensors produced on s at position >= k
    for s in range(num):
        by_last = [0] * (length[s] + 1)
        by_birth = [0] * (length[s] + 1)
        for k in range(count):
            by_last[last_use[k][s] + 1] |= 1 << k
            p = tensors[k].producer
            if stream[p] == s:
                by_birth[pos[p]] |= 1 << k
        acc, prefix = 0, []
        for k in range(length[s] + 1):
            acc |= by_last[k]
            prefix.append(acc)
        dead_upto.append(prefix)
        acc, suffix = 0, [0] * (length[s] + 1)
        for k in reversed(range(length[s] + 1)):
            acc |= by_birth[k]
            suffix[k] = acc
        born_from.append(suffix)
    full = (1 << count) - 1
    conf = []
    for k, t in enumerate(tensors):
        clock = before[t.producer]
        dead = full
        for s in range(num):
            dead &= dead_upto[s][clock[s] + 1]
        later = 0
        for s in range(num):
            later |= born_from[s][first_free[k][s]]
        conf.append(full & ~(dead | later | (1 << k)))
    return conf


def _lower_bound(tensors: Sequence[_Tensor], conf: Sequence[int], n: int, *, exact: bool) -> int:
    """The weight of the heaviest clique of the conflict graph that the search finds.

    The live set of each step of the execution order is a clique (live together in sequence
    means live together under any plan); on one stream the heaviest of them is the maximum
    clique. With several streams, greedy cliques and a bounded branch-and-bound improve it.
    """
    sizes = [t.nbytes for t in tensors]
    delta = [0] * (n + 1)
    for t in tensors:
        delta[t.producer] += t.nbytes
        delta[max(t.uses) + 1] -= t.nbytes
    best = live = 0
    for d in delta:
        live += d
        best = max(best, live)
    if not exact:
        return best
    for k in range(len(tensors)):  # greedy: heaviest compatible tensor first (bit order is size order)
        weight, cand = sizes[k], conf[k]
        while cand:
            low = cand & -cand
            j = low.bit_length() - 1
            weight += sizes[j]
            cand &= conf[j] & ~low
        best = max(best, weight)
    budget = [_CLIQUE_BUDGET]

    def expand(weight: int, cand: int) -> None:
        nonlocal best
        while cand:
            budget[0] -= 1
            if budget[0] < 0 or weight + sum(sizes[j] for j in _bits(cand)) <= best:
                return
            low = cand & -cand
            j = low.bit_length() - 1
            cand ^= low
            expand(weight + sizes[j], cand & conf[j])
        best = max(best, weight)

    expand(0, (1 << len(tensors)) - 1)
    return best


def _place(order: Sequence[int], sizes: Sequence[int], conf: Sequence[int], *, best_fit: bool) -> tuple[int, list[int]]:
    """Place tensors in ``order``: each at the smallest (or first) gap between the placed tensors
    it conflicts with that fits it, else after them. Returns the arena size and the offsets."""
    offsets = [0] * len(sizes)
    placed = 0
    arena = 0
    for t in order:
        size = sizes[t]
        chosen, chosen_gap, cursor = -1, -1, 0
        for lo, hi in sorted((offsets[j], offsets[j] + sizes[j]) for j in _bits(conf[t] & placed)):
            gap = lo - cursor
            if gap >= size and (chosen < 0 or gap < chosen_gap):
                chosen, chosen_gap = cursor, gap
                if not best_fit:
                    break
            cursor = max(cursor, hi)
        offsets[t] = chosen if chosen >= 0 else cursor
        placed |= 1 << t
        arena = max(arena, offsets[t] + size)
    return arena, offsets


def _by_size(tensors: Sequence[_Tensor], conf: Sequence[int], n: int) -> list[int]:
    return list(range(len(tensors)))  # tensors are indexed largest first


def _by_size_then_lifetime(tensors: Sequence[_Tensor], conf: Sequence[int], n: int) -> list[int]:
    return sorted(range(len(tensors)), key=lambda k: (-tensors[k].nbytes, -(max(tensors[k].uses) - tensors[k].producer), k))


def _by_conflict_weight(tensors: Sequence[_Tensor], conf: Sequence[int], n: int) -> list[int]:
    weight = [tensors[k].nbytes + sum(tensors[j].nbytes for j in _bits(conf[k])) for k in range(len(tensors))]
    return sorted(range(len(tensors)), key=lambda k: (-weight[k], k))


def _by_breadth(tensors: Sequence[_Tensor], conf: Sequence[int], n: int) -> list[int]:
    """TFLite's greedy by breadth: the busiest steps first, each step's tensors largest first."""
    live: list[list[int]] = [[] for _ in range(n)]
    for k, t in enumerate(tensors):
        for step in range(t.producer, max(t.uses) + 1):
            live[step].append(k)
    breadth = [sum(tensors[k].nbytes for k in ks) for ks in live]
    seen: set[int] = set()
    out: list[int] = []
    for step in sorted(range(n), key=lambda s: (-breadth[s], s)):
        for k in sorted(live[step]):
            if k not in seen:
                seen.add(k)
                out.append(k)
    return out


def _chronological(tensors: Sequence[_Tensor], conf: Sequence[int], n: int) -> list[int]:
    return sorted(range(len(tensors)), key=lambda k: (tensors[k].producer, k))


_ORDERINGS: tuple[tuple[str, Callable[[Sequence[_Tensor], Sequence[int], int], list[int]]], ...] = (
    ("size", _by_size),
    ("size-lifetime", _by_size_then_lifetime),
    ("conflict-weight", _by_conflict_weight),
    ("breadth", _by_breadth),
    ("chronological", _chronological),
)
