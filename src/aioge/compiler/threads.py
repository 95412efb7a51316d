"""Which streams of a plan share a worker thread in sink mode (planned at compile time, kept in
``CompiledModel.threads``: the runtime does not re-plan).

The stream plan is GE's: one engine per stream, an event on every cross-stream edge. On real
hardware an engine switch is free; here every engine is a CPU thread, and an event its
consumer blocks on costs a thread wake-up (``WAKE_US``, about 45 us on the 2-core CI
machine, measured as half an ``Event`` ping-pong) on the critical path. A transformer's chain
of MatMul (AiCore) and Softmax or LayerNorm (AiVec) crossed streams at every op and spent
more time waking threads than computing.

So the compiler maps streams onto threads: streams whose overlap does not pay for the
wake-ups between them run in one thread, as one program in the plan's execution order. That
order is a linear extension of every stream's order and every event, so each happens-before
the memory plan relies on still holds, an event inside one thread is already set when it is
waited for and is dropped, and threads that still wait on each other cannot deadlock: the
blocked op with the lowest index always has its producers behind it in its own thread or
running in another.

The mapping is chosen by greedy merging over a simulation: each stream starts alone; the
merge of two thread groups that lowers the simulated makespan most is taken, until none
does; all streams in one thread is tried last, since greedy merging can stop short of it
(each merge alone may not pay while contention remains). The simulation runs the ops in execution order on their group's thread, a cross-group
event costing ``WAKE_US``, bounded below by the total work over the usable cores, plus
``THREAD_US`` per thread (its hand-off and the GIL switches it adds). With more than one
thread every op costs ``CONTENTION`` times more: threads of one process share the GIL for
the Python between kernels, and memory-bound kernels share the bandwidth (two threads of
numpy elementwise work run 1.2x faster than one on the CI machine; BLAS GEMMs run 2x).

Measured on 2 cores (median ms of one run; a thread per stream, then all in one thread):
inception_v1 37.0 and 26.6 (greedy merging without the contention term chose four threads,
31.4); resnet50 52.9 and 44.7; densenet121 108.6 and 72.4; the transformer 3.8 and 2.3.
Four independent conv branches are the one case near even (19-25 ms either way).
"""

from __future__ import annotations

import os
from typing import Sequence

from aioge.compiler.streams import node_cost
from aioge.ir.graph import Node
from aioge.plan.streams import StreamPlan

__all__ = ["CONTENTION", "THREAD_US", "WAKE_US", "group_streams", "plan_threads", "simulate"]

WAKE_US = 90.0
THREAD_US = 15.0
CONTENTION = 1.5

# The cost model of thread grouping (microseconds): numpy's dispatch of one small op, and
# BLAS at about 100 GFLOP/s on one core (single-thread sgemm measures 130 on the CI machine).
_DISPATCH_US = 6.0
_US_PER_FLOP = 1e-5


def plan_threads(
    order: Sequence[Node], plan: StreamPlan, mode: str = "auto", cores: int | None = None
) -> tuple[tuple[int, ...], ...]:
    """The stream ids each sink-mode worker thread runs, for nodes in execution ``order``.

    ``mode`` is ``aioge.exec_threads``: ``"auto"`` groups streams by ``group_streams`` (for
    ``cores``, default this machine's), ``"streams"`` gives every stream its own thread.

    Raises:
        ValueError: ``mode`` is neither.
    """
    if mode not in ("auto", "streams"):
        raise ValueError(f"threads must be 'auto' or 'streams', not {mode!r}")
    if mode == "streams" or plan.num_streams <= 1:
        return tuple((s.id,) for s in plan.streams)
    cost = [node_cost(node, dispatch_us=_DISPATCH_US, us_per_flop=_US_PER_FLOP) for node in order]
    producers: list[list[int]] = [[] for _ in order]
    for e in plan.events:
        producers[e.consumer].append(e.producer)
    return tuple(group_streams(plan.num_streams, plan.node_stream, cost, producers, cores or os.cpu_count() or 1))


def simulate(
    groups: Sequence[Sequence[int]],
    node_stream: Sequence[int],
    cost: Sequence[float],
    waits: Sequence[Sequence[int]],
    cores: int,
) -> float:
    """Estimated wall time (us) of one run with the streams of each group on one thread.

    ``waits[i]`` are the producers of the events node ``i`` waits for; nodes are in execution order.
    """
    thread = {s: g for g, streams in enumerate(groups) for s in streams}
    ready = [0.0] * len(groups)
    finish = [0.0] * len(cost)
    of = [thread[s] for s in node_stream]
    slow = CONTENTION if len(groups) > 1 else 1.0
    for i, c in enumerate(cost):
        g = of[i]
        t = ready[g]
        for p in waits[i]:
            if of[p] != g:
                t = max(t, finish[p] + WAKE_US)
        finish[i] = ready[g] = t + c * slow
    span = max(finish, default=0.0)
    return max(span, slow * sum(cost) / max(1, min(cores, len(groups)))) + THREAD_US * len(groups)


def group_streams(
    num_streams: int,
    node_stream: Sequence[int],
    cost: Sequence[float],
    waits: Sequence[Sequence[int]],
    cores: int,
) -> list[tuple[int, ...]]:
    """Streams grouped onto threads (each group sorted, groups by their first stream).

    Raises:
        ValueError: ``node_stream`` names a stream outside ``range(num_streams)``.
    """
    if any(not 0 <= s < num_streams for s in node_stream):
        raise ValueError(f"node_stream holds a stream outside 0..{num_streams - 1}")
    groups: list[tuple[int, ...]] = [(s,) for s in range(num_streams)]
    best = simulate(groups, node_stream, cost, waits, cores)
    # Pairs worth trying: with many streams, only those an event joins (merging unrelated
    # streams saves no wake-up, only a thread).
    linked: set[tuple[int, int]] = set()
    for i, ps in enumerate(waits):
        for p in ps:
            a, b = sorted((node_stream[p], node_stream[i]))
            linked.add((a, b))
    while len(groups) > 1:
        thread = {s: g for g, streams in enumerate(groups) for s in streams}
        pairs = [(a, b) for a in range(len(groups)) for b in range(a + 1, len(groups))]
        if len(groups) > 8:
            joined = {tuple(sorted((thread[a], thread[b]))) for a, b in linked}
            pairs = [p for p in pairs if p in joined]
        choice: tuple[float, list[tuple[int, ...]]] | None = None
        for a, b in pairs:
            merged = [g for k, g in enumerate(groups) if k not in (a, b)]
            merged.append(tuple(sorted((*groups[a], *groups[b]))))
            merged.sort()
            t = simulate(merged, node_stream, cost, waits, cores)
            if t < best and (choice is None or t < choice[0]):
                choice = (t, merged)
        if choice is None:
            break
        best, groups = choice
    # Greedy merging stops where no single merge helps; one thread (no contention) may still win.
    one = [tuple(range(num_streams))]
    if len(groups) > 1 and simulate(one, node_stream, cost, waits, cores) <= best:
        return one
    return groups
