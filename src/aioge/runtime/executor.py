"""The executor: binds a CompiledModel's kernels once, then runs it many times, concurrently.

Sink mode (default, GE's model sinking): each stream's whole program runs inside one lane
(worker thread) of its engine; cross-stream events are ``threading.Event``s; the event loop
is touched once per run, when the last stream ends; a run of a one-thread plan that computes
for under a millisecond runs on the caller's thread instead, within a budget per turn of the
event loop (``INLINE_US``). Host mode: the loop dispatches ops one
by one (one dispatcher task per stream, events as anyio events), each op on its stream's lane,
for tracing and stepping.

A run takes an execution context (the arena, its views and the bound steps) from the
model's pool and gives it back when it ends, so concurrent runs never share live buffers and
steady-state runs allocate nothing but their outputs (and tensors whose shapes are only known
at run time). Cancelling a run stops every stream between ops and waits until none of them
touches the arena before the context goes back to the pool. A kernel error fails that run
only, with an ``ExecutionError`` naming the node and its engine. With ``op_debug_level`` not 0
every kernel's float outputs are checked after it runs: NaN or Inf made from finite inputs
is such an error too (GE's overflow check).
"""

from __future__ import annotations

import contextvars
import logging
import os
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Mapping

import anyio
import anyio.lowlevel
import numpy as np

from aioge.compiler.model import CompiledModel
from aioge.compiler.streams import node_cost
from aioge.ir.desc import numpy_dtype
from aioge.ir.graph import ValueKind
from aioge.ops.registry import get_schema
from aioge.runtime.context import Context, Layout, Program, Step
from aioge.runtime.threads import group_streams
from aioge.runtime.workers import Completion, EngineWorkers, Lane

__all__ = ["INLINE_US", "Executable", "TraceSpan"]

log = logging.getLogger(__name__)

# Runs whose recent compute took under INLINE_US run on the caller's thread (the event loop)
# when no lane is computing: no lane hand-off, no loop wake-up, and a warm core. A lane woken
# per run computed the MLP example in 370 us where the loop thread takes 190 (the VM's idle
# cores come back slow), and the hand-offs cost about 150 us more. The loop keeps the
# "nothing over a millisecond" rule; INLINE_BUDGET of every INLINE_WINDOW bounds concurrent
# inline runs.
INLINE_US = 1000.0
INLINE_WINDOW = 0.010
INLINE_BUDGET = 0.004

# The cost model of thread grouping (microseconds): numpy's dispatch of one small op, and
# BLAS at about 100 GFLOP/s on one core (single-thread sgemm measures 130 on the CI machine).
_DISPATCH_US = 6.0
_US_PER_FLOP = 1e-5


@dataclass(frozen=True, slots=True)
class TraceSpan:
    node: int
    stream: int
    start: float  # perf_counter seconds
    end: float


class Executable:
    """A compiled model bound to kernels, ready to run concurrently."""

    def __init__(
        self, model: CompiledModel, variables: Mapping[str, np.ndarray] | None = None, *, check_finite: bool | None = None,
        threads: str = "auto",
    ) -> None:
        """Bind ``model``'s kernels. ``check_finite`` (default: the model's ``op_debug_level``
        is not 0) makes a kernel whose outputs hold NaN or Inf from finite inputs fail its run.
        ``threads`` (sink mode): ``"auto"`` runs streams whose overlap does not pay for the
        thread wake-ups between them in one worker thread (``runtime.threads``); ``"streams"``
        gives every stream its own.

        Raises:
            ValueError: ``threads`` is neither.
        """
        if threads not in ("auto", "streams"):
            raise ValueError(f"threads must be 'auto' or 'streams', not {threads!r}")
        self.model = model
        if check_finite is None:
            check_finite = str(model.options.get("op_debug_level", "0")).strip() not in ("", "0")
        g = model.graph
        slot: dict[str, int] = {}
        for v in g.values():
            slot[v.name] = len(slot)
        self._variables: Mapping[str, np.ndarray] = variables if variables is not None else {}
        self._inputs = [(v.name, slot[v.name]) for v in g.inputs]
        self._var_slots = [(name, slot[name]) for name in g.variables]
        self._outputs = [(v.name, slot[v.name], v.kind is ValueKind.INTERMEDIATE) for v in g.outputs]
        offsets = model.memory.offsets()
        views = []
        for name, (offset, _) in offsets.items():
            desc = g.value(name).desc
            views.append((slot[name], offset, tuple(int(d) for d in desc.shape), numpy_dtype(desc.dtype)))  # type: ignore[union-attr]
        waits: dict[int, list[int]] = {}
        records: dict[int, list[int]] = {}
        for e in model.streams.events:
            waits.setdefault(e.consumer, []).append(e.id)
            records.setdefault(e.producer, []).append(e.id)
        by_name = {n.name: n for n in g.nodes}
        steps = []
        unplanned: set[int] = set()
        for node_plan in model.nodes:
            node = by_name[node_plan.name]
            impl = get_schema(node.op_type, node.domain).impl(node_plan.kernel.impl)
            run = impl.build(
                node.attrs, node_plan.kernel.params,
                [v.desc if v is not None else None for v in node.inputs], [o.desc for o in node.outputs],
            )
            outs = tuple(slot[o.name] for o in node.outputs)
            planned = all(o.name in offsets for o in node.outputs)
            if not planned:
                unplanned.update(outs)
            steps.append(Step(
                node_plan.index, node_plan.name, node_plan.op_type, node_plan.engine, node_plan.stream, run,
                tuple(slot[v.name] if v is not None else -1 for v in node.inputs), outs, planned,
                tuple(waits.get(node_plan.index, ())), tuple(records.get(node_plan.index, ())),
            ))
        plan = model.streams
        if threads == "streams" or plan.num_streams <= 1:
            groups: list[tuple[int, ...]] = [(s.id,) for s in plan.streams]
        else:
            cost = [node_cost(by_name[p.name], dispatch_us=_DISPATCH_US, us_per_flop=_US_PER_FLOP) for p in model.nodes]
            producers: list[list[int]] = [[] for _ in model.nodes]
            for e in plan.events:
                producers[e.consumer].append(e.producer)
            groups = group_streams(plan.num_streams, plan.node_stream, cost, producers, os.cpu_count() or 1)
        thread_of = {s: k for k, group in enumerate(groups) for s in group}
        self._layout = Layout(
            g.name, len(slot), model.memory.arena_bytes,
            {slot[v.name]: v.data for v in g.constants.values()},  # type: ignore[misc]
            tuple(views),
            frozenset(unplanned | {s for _, s in self._inputs} | {s for _, s in self._var_slots}),
            tuple(steps),
            tuple(s.nodes for s in plan.streams),
            len(plan.events),
            (),  # poison ranges: computed on first use (tests only)
            check_finite,
            tuple(tuple(sorted(i for s in group for i in plan.streams[s].nodes)) for group in groups),
            frozenset(e.id for e in plan.events
                      if thread_of[plan.node_stream[e.producer]] == thread_of[plan.node_stream[e.consumer]]),
        )
        # Each stream (host mode) or thread (sink mode) runs on a distinct lane of its engine,
        # (engine, j): the j-th of that engine. A thread's engine is that of its first stream.
        self._stream_lanes = _lanes_of([s.engine for s in plan.streams])
        self._thread_lanes = _lanes_of([plan.streams[group[0]].engine for group in groups])
        self._pool: list[Context] = []
        self._contexts_made = 0
        # Inline runs (sink mode, one thread): the measured compute of recent runs, and how
        # many ran on the caller's thread instead of a lane.
        self._one_thread = len(self._layout.threads) == 1
        self._run_us: float | None = None
        self.inline_runs = 0

    # -- inline runs ------------------------------------------------------------------

    def observe(self, seconds: float) -> None:
        """Count a run's compute time (sink mode, one thread) into the recent average."""
        if not self._one_thread:
            return
        us = seconds * 1e6
        self._run_us = us if self._run_us is None else 0.8 * self._run_us + 0.2 * us

    @property
    def short(self) -> bool:
        """Whether recent runs of this one-thread plan computed for under ``INLINE_US``."""
        return self._one_thread and self._run_us is not None and self._run_us < INLINE_US

    def _inline_now(self, workers: EngineWorkers) -> bool:
        """Whether this run goes on the caller's (event loop's) thread: a one-thread plan whose
        recent runs computed for under ``INLINE_US``, the loop's inline budget not spent, and
        no lane computing (every CPU token is taken; the caller gives them back). A lane busy
        beside it would make the loop thread wait for the GIL between kernels."""
        return self.short and _inline.allows() and workers.take_all_cpu()

    # -- contexts ---------------------------------------------------------------------

    @property
    def thread_groups(self) -> tuple[tuple[int, ...], ...]:
        """Per worker thread of a sink-mode run, the step indices it runs, in order."""
        return self._layout.threads

    @property
    def contexts_made(self) -> int:
        """How many execution contexts (arenas) this executable has allocated so far."""
        return self._contexts_made

    @property
    def pool_size(self) -> int:
        """How many contexts are idle in the pool."""
        return len(self._pool)

    def _acquire(self, poison: bool) -> Context:
        if poison and not self._layout.poison:
            self._layout = _with_poison(self._layout, self.model)
            self._pool.clear()  # contexts made before hold the old layout
        if self._pool:
            return self._pool.pop()
        self._contexts_made += 1
        return Context(self._layout)

    @staticmethod
    def _lanes(workers: EngineWorkers, mapping: tuple[list[tuple[str, int]], dict[str, int]]) -> list[Lane]:
        """One run's lanes, per stream or thread of ``mapping`` (``_stream_lanes`` or ``_thread_lanes``)."""
        lane_of, counts = mapping
        lanes = workers.lanes(counts)
        return [lanes[engine][j] for engine, j in lane_of]

    def _bind(self, ctx: Context, feeds: Mapping[str, np.ndarray]) -> None:
        values: dict[int, Any] = {s: feeds[name] for name, s in self._inputs}
        for name, s in self._var_slots:
            values[s] = self._variables[name]
        ctx.bind(values)

    def _release(self, ctx: Context) -> None:
        ctx.unbind()
        if ctx.layout is self._layout:
            self._pool.append(ctx)

    # -- running ----------------------------------------------------------------------

    async def run(
        self,
        feeds: Mapping[str, np.ndarray],
        *,
        workers: EngineWorkers,
        mode: str = "sink",
        trace: list[TraceSpan] | None = None,
        poison: bool = False,
    ) -> dict[str, np.ndarray]:
        """Run once on checked feeds; returns the outputs by name (fresh arrays the caller owns).

        ``trace`` collects one span per node. ``poison`` fills the arena bytes each node
        reuses with NaN right before the node writes them, the test that reuse is safe.

        Raises:
            ExecutionError: a kernel failed (names node, op type and engine).
        """
        ctx = self._acquire(poison)
        try:
            self._bind(ctx, feeds)
            if mode == "host":
                await self._run_host(ctx, workers, self._lanes(workers, self._stream_lanes), trace, poison)
            elif trace is None and not poison and self._inline_now(workers):
                try:
                    start = time.perf_counter()
                    _execute(ctx, ctx.programs(False, workers.cpu)[0], None)
                    _inline.spend(time.perf_counter() - start)
                finally:
                    workers.give_all_cpu()
                self.inline_runs += 1
                self.observe(ctx.elapsed)
                await anyio.lowlevel.checkpoint()  # others run (and a cancellation lands) between runs
            else:
                await self._run_sink(ctx, workers, self._lanes(workers, self._thread_lanes), trace, poison)
                self.observe(ctx.elapsed)
            if ctx.error is not None:
                raise ctx.error
            return self._collect(ctx, feeds)
        finally:
            # Every stream has ended (waited for even under cancellation): no worker touches the arena.
            self._release(ctx)

    def run_sync(self, feeds: Mapping[str, np.ndarray], *, workers: EngineWorkers) -> dict[str, np.ndarray]:
        """Run once in sink mode from a plain thread (a device process's main thread), blocking.

        The first thread group's program runs in the calling thread, holding one of
        ``workers.cpu``'s tokens; any other group runs on a lane as in ``run``. A one-group plan
        therefore makes no thread hop at all.

        Raises:
            ExecutionError: a kernel failed (names node, op type and engine).
        """
        ctx = self._acquire(False)
        try:
            self._bind(ctx, feeds)
            programs = ctx.programs(False, workers.cpu)
            if not programs:  # no nodes: the outputs are feeds or constants
                return self._collect(ctx, feeds)
            done = _Countdown(len(programs))
            if len(programs) > 1:
                lanes = self._lanes(workers, self._thread_lanes)
                workers.enqueue([(lane, partial(_run_program, ctx, program, None, workers.cpu, done))
                                 for lane, program in zip(lanes[1:], programs[1:], strict=True)])
            _run_program(ctx, programs[0], None, workers.cpu, done)
            done.wait()
            if ctx.error is not None:
                raise ctx.error
            return self._collect(ctx, feeds)
        finally:
            self._release(ctx)

    async def _run_sink(self, ctx: Context, workers: EngineWorkers, lanes: list[Lane], trace: list[TraceSpan] | None, poison: bool) -> None:
        programs = ctx.programs(poison, workers.cpu)
        done = Completion(len(programs))
        items = []
        for lane, program in zip(lanes, programs, strict=True):
            # A context per thread: numpy's errstate and other context variables of the caller
            # apply inside the worker, as they do inside anyio's to_thread.
            items.append((lane, partial(contextvars.copy_context().run, _run_program, ctx, program, trace, workers.cpu, done)))
        workers.enqueue(items)
        try:
            await done.wait()
        except BaseException:
            ctx.cancel()
            await done.wait_shielded()
            raise

    async def _run_host(self, ctx: Context, workers: EngineWorkers, lanes: list[Lane], trace: list[TraceSpan] | None, poison: bool) -> None:
        events = [anyio.Event() for _ in ctx.events]
        async with anyio.create_task_group() as tg:
            for s, steps in enumerate(self._layout.streams):
                tg.start_soon(self._host_stream, ctx, workers, lanes[s], steps, events, trace, poison, tg.cancel_scope)

    async def _host_stream(
        self, ctx: Context, workers: EngineWorkers, lane: Lane, steps: tuple[int, ...], events: list[anyio.Event],
        trace: list[TraceSpan] | None, poison: bool, scope: anyio.CancelScope,
    ) -> None:
        for i in steps:
            step = self._layout.steps[i]
            for e in step.waits:
                await events[e].wait()
            done = Completion(1)
            fns = [*ctx.poison_fills(i), ctx.calls[i]] if poison else [ctx.calls[i]]
            workers.enqueue([(lane, partial(contextvars.copy_context().run, _run_op, ctx, fns, i, step.stream, trace, workers.cpu, done))])
            try:
                await done.wait()
            except BaseException:
                await done.wait_shielded()
                raise
            if ctx.error is not None:
                scope.cancel()  # the other streams stop at their next op; the error is raised by run()
                return
            for e in step.records:
                events[e].set()

    def _collect(self, ctx: Context, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        arena = ctx.arena
        foreign = [*self._variables.values(), *feeds.values()]
        for name, slot, intermediate in self._outputs:
            a = np.asarray(ctx.env[slot])
            # Copy what the caller must not share: the arena, constants, variables, its own feeds.
            if not intermediate or not a.flags.writeable or np.may_share_memory(a, arena) or any(np.may_share_memory(a, f) for f in foreign):
                a = a.copy()
            out[name] = a
        return out


def _execute(ctx: Context, program: Program, trace: list[TraceSpan] | None) -> None:
    """Run one thread's program (one or more streams) here; a kernel error aborts the run and
    is recorded on it, never raised. Trace spans carry each node's own stream."""
    fns, meta = program
    abort = ctx.abort
    k = 0
    start = time.perf_counter()
    try:
        if trace is None:
            for k, f in enumerate(fns):  # noqa: B007 - k names the failing entry in the handler
                if abort[0]:
                    break
                f()
        else:
            clock = time.perf_counter
            steps = ctx.layout.steps
            for k, f in enumerate(fns):
                if abort[0]:
                    break
                node = meta[k]
                if node >= 0:
                    t0 = clock()
                    f()
                    trace.append(TraceSpan(node, steps[node].stream, t0, clock()))
                else:
                    f()
    except BaseException as exc:  # reported to the run, which raises it
        node = meta[k]
        ctx.fail(exc, node if node >= 0 else -1 - node)
    finally:
        ctx.elapsed = time.perf_counter() - start


def _run_program(
    ctx: Context, program: Program, trace: list[TraceSpan] | None, cpu: threading.Semaphore, done: Completion | _Countdown
) -> None:
    """Run one thread's program inside its lane, holding a CPU token; errors abort the run, never the lane."""
    cpu.acquire()
    try:
        _execute(ctx, program, trace)
    finally:
        cpu.release()
        done.tick()


class _InlineBudget(threading.local):
    """Per event-loop thread: how much of the last ``INLINE_WINDOW`` s went to inline runs.

    Concurrent tasks may each start a short run in one turn of the loop; past
    ``INLINE_BUDGET`` s in the window the rest go to the lanes, so inline runs hold the loop
    for a few milliseconds at most, whatever the concurrency."""

    def __init__(self) -> None:
        self.start = 0.0
        self.used = 0.0

    def allows(self) -> bool:
        now = time.perf_counter()
        if now - self.start > INLINE_WINDOW:
            self.start, self.used = now, 0.0
        return self.used < INLINE_BUDGET

    def spend(self, seconds: float) -> None:
        self.used += seconds


_inline = _InlineBudget()


def _run_op(
    ctx: Context, fns: list[Any], node: int, stream: int, trace: list[TraceSpan] | None, cpu: threading.Semaphore, done: Completion
) -> None:
    """Run one op (and its poison fills) inside its lane, holding a CPU token, for host mode."""
    try:
        with cpu:
            if not ctx.abort[0]:
                t0 = time.perf_counter()
                for f in fns:
                    f()
                if trace is not None:
                    trace.append(TraceSpan(node, stream, t0, time.perf_counter()))
    except BaseException as exc:  # reported to the run, which raises it
        ctx.fail(exc, node)
    finally:
        done.tick()


class _Countdown:
    """``Completion`` for a waiter that is a plain thread: the last tick sets a ``threading.Event``."""

    __slots__ = ("_event", "_lock", "_left")

    def __init__(self, count: int) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._left = count

    def tick(self) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._event.set()

    def wait(self) -> None:
        self._event.wait()


def _lanes_of(engines: list[str]) -> tuple[list[tuple[str, int]], dict[str, int]]:
    """(engine, j) for each item (the j-th item of that engine), and the count per engine."""
    lane_of: list[tuple[str, int]] = []
    counts: dict[str, int] = {}
    for engine in engines:
        j = counts.get(engine, 0)
        lane_of.append((engine, j))
        counts[engine] = j + 1
    return lane_of, counts


def _with_poison(layout: Layout, model: CompiledModel) -> Layout:
    """The layout with, per step, the arena bytes its outputs take over from earlier tensors."""
    from dataclasses import replace

    buffers = sorted(model.memory.buffers, key=lambda b: b.producer)
    ranges: list[list[tuple[int, int]]] = [[] for _ in layout.steps]
    for k, b in enumerate(buffers):
        for a in buffers[:k]:
            if a.producer == b.producer:
                continue
            lo, hi = max(a.offset, b.offset), min(a.offset + a.nbytes, b.offset + b.nbytes)
            if lo < hi:
                ranges[b.producer].append((lo, hi))
    merged: list[tuple[tuple[int, int], ...]] = []
    for rs in ranges:
        out: list[tuple[int, int]] = []
        for lo, hi in sorted(rs):
            if out and lo <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], hi))
            else:
                out.append((lo, hi))
        merged.append(tuple(out))
    return replace(layout, poison=tuple(merged))
