"""The executor: binds a CompiledModel's kernels once, then runs it many times, concurrently.

Sink mode (default, GE's model sinking): each stream's whole program runs inside one lane
(worker thread) of its engine; cross-stream events are ``threading.Event``s; the event loop
is touched once per run, when the last stream ends; a run of a one-thread plan that computes
for under a millisecond runs on the caller's thread instead, within a budget per turn of the
event loop (``schedule.INLINE_US``); a one-thread plan whose kernels all have C forms runs as a native
program instead (``runtime.native_program``: one C call, the GIL released once), and
concurrent callers' programs go to the session's C runner threads (``runtime.program_queue``)
while the loop runs the callers' Python. Host mode: the loop dispatches ops one
by one (one dispatcher task per stream, events as anyio events), each op on its stream's lane,
for tracing and stepping.

A run takes an execution context (the arena, its views and the bound steps) from the
model's pool and gives it back when it ends, so concurrent runs never share live buffers and
steady-state runs allocate nothing but their outputs (and tensors whose shapes are only known
at run time). Cancelling a run stops every stream between ops and waits until none of them
touches the arena before the context goes back to the pool. A kernel error fails that run
only, with an ``ExecutionError`` naming the node and its engine. With ``op_debug_level`` not 0
every kernel's float outputs are checked after it runs: NaN or Inf made from finite inputs
is such an error too (GE's overflow check). Kernels compute IEEE special values (log(0) =
-inf, ...) without numpy's warnings unless the caller set an error state of its own
(``_quiet_fp``).
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Mapping

import anyio
import anyio.lowlevel
import numpy as np

from aioge.errors import SessionClosedError
from aioge.ir.desc import numpy_dtype
from aioge.kernels import packbook
from aioge.kernels.parallel import cpu_tokens, lend_tokens, return_tokens, wake_helpers
from aioge.plan.model import CompiledModel
from aioge.runtime import schedule
from aioge.runtime.bind import bind
from aioge.runtime.context import Context, Layout, Program
from aioge.runtime.native_program import NativeProgram
from aioge.runtime.program_queue import ProgramQueue
from aioge.runtime.schedule import Placement, Strategy, choose, inline_budget
from aioge.runtime.workers import Completion, EngineWorkers, Lane

__all__ = ["Executable", "TraceSpan"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TraceSpan:
    node: int
    stream: int
    start: float  # perf_counter seconds
    end: float


Feeds = Mapping[str, np.ndarray]
Outputs = dict[str, np.ndarray]
Spans = list[TraceSpan] | None


class Executable:
    """A compiled model bound to kernels, ready to run concurrently."""

    def __init__(
        self,
        model: CompiledModel,
        variables: Mapping[str, np.ndarray] | None = None,
        *,
        check_finite: bool | None = None,
        threads: str = "auto",
    ) -> None:
        """Bind ``model``'s kernels. ``check_finite`` (default: the model's ``op_debug_level``
        is not 0) makes a kernel whose outputs hold NaN or Inf from finite inputs fail its run.
        ``threads`` (sink mode): ``"auto"`` runs the streams in the worker threads the
        compiler grouped them into (``model.threads``, from ``compiler.threads``); ``"streams"``
        gives every stream its own.

        Raises:
            ValueError: ``threads`` is neither.
        """
        if threads not in ("auto", "streams"):
            raise ValueError(f"threads must be 'auto' or 'streams', not {threads!r}")
        self.model = model
        if check_finite is None:
            check_finite = str(model.options.get("ge.opDebugLevel", "0")).strip() not in ("", "0")
        self._variables: Mapping[str, np.ndarray] = variables if variables is not None else {}
        bound = bind(model, threads=threads, check_finite=check_finite)
        self._layout = bound.layout
        self._inputs, self._var_slots, self._outputs = bound.inputs, bound.variables, bound.outputs
        plan, groups = model.streams, bound.groups
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
        # Native programs (one-thread plans of C forms only): None until a context tried.
        g = model.graph
        tensors = all(v.desc.is_tensor for v in (*g.inputs, *g.outputs))
        self.native_ok: bool | None = None if self._one_thread and not self._var_slots and tensors else False
        shapes = dict(model.signature)
        dtypes = {v.name: v.desc.dtype for v in g.inputs}
        self._native_specs = (
            [(name, slot, tuple(shapes.get(name, ())), numpy_dtype(dtypes[name])) for name, slot in self._inputs]
            if self.native_ok is None
            else []
        )
        self.native_runs = 0
        self.queued_runs = 0
        self.here_runs = 0  # run_here: synchronous callers' runs in their own thread
        self.callers = schedule.Callers()
        self.threads = threads

    # -- inline runs ------------------------------------------------------------------

    def observe(self, seconds: float) -> None:
        """Count a run's compute time (sink mode, one thread) into the recent average."""
        if not self._one_thread:
            return
        us = seconds * 1e6
        self._run_us = us if self._run_us is None else 0.8 * self._run_us + 0.2 * us

    @property
    def short(self) -> bool:
        """Whether recent runs of this one-thread plan computed for under ``schedule.INLINE_US``."""
        return self._one_thread and self._run_us is not None and self._run_us < schedule.INLINE_US

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
        try:  # a synchronous caller (run_here) may take the last one between a check and a pop
            return self._pool.pop()
        except IndexError:
            pass
        self._contexts_made += 1
        return Context(self._layout)

    @staticmethod
    def _lanes(
        workers: EngineWorkers, mapping: tuple[list[tuple[str, int]], dict[str, int]], *, rotate: bool = True
    ) -> list[Lane]:
        # One run's lanes, per stream or thread of mapping (_stream_lanes or _thread_lanes).
        lane_of, counts = mapping
        lanes = workers.lanes(counts, rotate=rotate)
        return [lanes[engine][j] for engine, j in lane_of]

    def _bind(self, ctx: Context, feeds: Mapping[str, np.ndarray]) -> None:
        values: dict[int, Any] = {s: feeds[name] for name, s in self._inputs}
        for name, s in self._var_slots:
            values[s] = self._variables[name]
        ctx.bind(values)

    def _release(self, ctx: Context) -> None:
        packbook.flush()  # the packs a graph-cache model's first run made go to its entry
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
        placement: Placement = Placement.QUEUE,
        devices: Any = None,
    ) -> dict[str, np.ndarray]:
        """Run once on checked feeds; returns the outputs by name (fresh arrays the caller owns).

        ``trace`` collects one span per node. ``poison`` fills the arena bytes each node
        reuses with NaN right before the node writes them, the test that reuse is safe.
        ``placement`` is where the caller lets the run go and ``devices`` a ``DevicePool`` it
        may go to; ``schedule.choose`` picks the strategy (``_STRATEGIES``).

        Raises:
            ExecutionError: a kernel failed (names node, op type and engine).
            SessionClosedError: ``workers`` closed before or during the run.
        """
        traced = trace is not None or poison
        strategy = choose(self, workers, mode=mode, placement=placement, traced=traced, devices=devices)
        if strategy is Strategy.DEVICES:
            outputs: dict[str, np.ndarray] = await devices.run(self, feeds, self.threads)
            return outputs
        ctx = self._acquire(poison)
        try:
            if strategy.value.startswith("native") and self._native_program(ctx) is None:
                if strategy in _HOLDING:  # chosen holding every token: the next choice may take them again
                    workers.cpu.give_all()
                strategy = choose(self, workers, mode=mode, placement=placement, traced=traced)
            return await _STRATEGIES[strategy](self, ctx, feeds, workers, trace, poison)
        finally:
            # Every stream has ended (waited for even under cancellation): no worker touches the arena.
            self._release(ctx)

    # -- the strategies (schedule.Strategy; each runs ctx and returns the outputs) --------

    async def _host(self, ctx: Context, feeds: Feeds, workers: EngineWorkers, trace: Spans, poison: bool) -> Outputs:
        self._bind(ctx, feeds)
        await self._run_host(ctx, workers, self._lanes(workers, self._stream_lanes), trace, poison)
        return self._outputs_of(ctx, feeds)

    async def _inline(self, ctx: Context, feeds: Feeds, workers: EngineWorkers, *_: Any) -> Outputs:
        self._bind(ctx, feeds)
        try:
            start = time.perf_counter()
            # The run holds every token: its big kernels may split onto the other cores
            # (without this, none did: MLP's 32x784x256 Gemm ran in 200 us, not 80).
            lent = lend_tokens(workers.inline_spare)
            try:
                _execute(ctx, ctx.programs(False, workers.cpu)[0], None)
            finally:
                return_tokens(lent)
            inline_budget.spend(time.perf_counter() - start)
        finally:
            workers.cpu.give_all()
        self.inline_runs += 1
        self.observe(ctx.elapsed)
        await _after_inline()
        return self._outputs_of(ctx, feeds)

    async def _on_lanes(self, ctx: Context, feeds: Feeds, workers: EngineWorkers, trace: Spans, poison: bool) -> Outputs:
        # Short runs that could not go inline (the loop's budget spent: many callers) share one
        # lane: two lanes running them ping-pong the GIL between their small kernels (a third
        # of the transformer example's CPU went to context switches), while one leaves the
        # other core to the kernels' C helper and the loop.
        self._bind(ctx, feeds)
        lanes = self._lanes(workers, self._thread_lanes, rotate=not self.short)
        if workers.cpu.idle() > len(lanes):
            wake_helpers()  # the C helper spins by the first split (csrc/par.c): it wakes with the lane
        await self._run_sink(ctx, workers, lanes, trace, poison)
        self.observe(ctx.elapsed)
        return self._outputs_of(ctx, feeds)

    def _outputs_of(self, ctx: Context, feeds: Feeds) -> Outputs:
        if ctx.error is not None:
            raise ctx.error
        return self._collect(ctx, feeds)

    async def _native_inline(self, ctx: Context, feeds: Feeds, workers: EngineWorkers, *_: Any) -> Outputs:
        """A lone caller's program on the loop's thread, every CPU token held: its big jobs split over the idle cores."""
        start = time.perf_counter()
        wake_helpers()  # spinning by the first split, woken while the feeds are staged
        try:
            outputs = ctx.native.run(feeds, True)
        finally:  # a run a kernel failed ran inline too, as _inline counts it
            workers.cpu.give_all()
            elapsed = time.perf_counter() - start
            inline_budget.spend(elapsed)
            self.inline_runs += 1
            self.native_runs += 1
        self.observe(elapsed)
        await _after_inline()
        return outputs

    async def _native_queue(self, ctx: Context, feeds: Feeds, workers: EngineWorkers, *_: Any) -> Outputs:
        return await self._run_queued(workers.program_queue(), ctx.native, feeds)

    async def _run_queued(self, queue: ProgramQueue, prog: NativeProgram, feeds: Feeds) -> Outputs:
        """Stage ``prog`` and queue it for the runner threads; wait for its outcome."""
        prog.stage(feeds)
        waiter = queue.submit(prog)
        if waiter is None:
            return prog.run_staged(False)
        await queue.wait(waiter)
        self.native_runs += 1
        self.queued_runs += 1
        return prog.finish()

    async def _native_queue_split(self, ctx: Context, feeds: Feeds, workers: EngineWorkers, *_: Any) -> Outputs:
        """A lone caller's long program, every CPU token held, run by the C runner splitting its big
        jobs: no lane thread to wake, no GIL in the hand-back (csrc/queue.c)."""
        prog, queue, waiter = ctx.native, workers.program_queue(), None
        workers.lane_runs += 1  # counted as a lane run: long runs of other callers meanwhile go whole (choose)
        try:
            prog.stage(feeds)
            wake_helpers()
            waiter = queue.submit(prog, split=True)
            if waiter is not None:
                await queue.wait(waiter)
        finally:
            workers.cpu.give_all()
            workers.lane_runs -= 1
        if waiter is None:  # closed or full: a lane runs it
            return await self._native_lane(ctx, feeds, workers)
        self.observe(prog.queued_seconds())
        self.native_runs += 1
        self.queued_runs += 1
        return prog.finish()

    async def _native_lane(self, ctx: Context, feeds: Feeds, workers: EngineWorkers, *_: Any, split: bool = True) -> Outputs:
        """The program on the engine's first lane, its big jobs split over an idle core, or
        (``split`` False: a batch or run beside others) whole on a free ``whole_lane``. The transformer
        example's 32-row batches, two at a time, served 1.5x the requests whole on lanes of
        their own that they did sharing the first lane and splitting whenever a core was idle
        (the second then waited out the first)."""
        prog, done, box, cpu = ctx.native, Completion(1), [], workers.cpu

        def work() -> None:
            cpu.acquire()
            # an idle core, and no other lane run waits for one (a burst's first run went split, then
            # its followers waited it out): the big jobs may split onto it
            extra = split and workers.lane_runs <= 1 and cpu.acquire(blocking=False)
            start = time.perf_counter()
            try:
                box.append(prog.run(feeds, extra))
            except BaseException as exc:  # raised in the awaiting task
                box.append(exc)
            finally:
                self.observe(time.perf_counter() - start)
                if extra:
                    cpu.release()
                cpu.release()
                done.tick()

        if split and cpu.idle() >= 2:
            wake_helpers()  # the C helper spins by the first split: it wakes while the lane does
        lane = self._lanes(workers, self._thread_lanes, rotate=False)[0] if split else workers.whole_lane()
        workers.enqueue([(lane, work)])
        workers.lane_runs += 1
        try:
            await done.wait()
        except BaseException:
            await done.wait_shielded()
            raise
        finally:
            workers.lane_runs -= 1
        self.native_runs += 1
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    def _native_program(self, ctx: Context) -> NativeProgram | None:
        prog = ctx.native
        if prog is None:
            prog = NativeProgram.build(ctx, self._native_specs, [(n, s) for n, s, _ in self._outputs])
            ctx.native = prog if prog is not None else False
            self.native_ok = prog is not None
        return prog or None

    def run_here(self, feeds: Mapping[str, np.ndarray], workers: EngineWorkers) -> dict[str, np.ndarray] | None:
        """Run on checked feeds in the calling thread, blocking, as a lone caller's inline run
        (every CPU token held; the native program when the plan has one), for a synchronous
        caller that is not on the session's loop (``aioge.torch``'s compiled modules): no hop to
        the loop's thread and back. None when the plan has more than one thread or a CPU token
        is taken (other runs in flight): the caller runs it through ``run`` instead.

        Raises:
            ExecutionError: a kernel failed (names node, op type and engine).
        """
        if not self._one_thread or not workers.cpu.take_all():
            return None
        start = time.perf_counter()
        ctx = self._acquire(False)
        try:
            prog = self._native_program(ctx) if self.native_ok is not False else None
            if prog is not None:
                outputs = prog.run(feeds, True)
                self.native_runs += 1
            else:
                self._bind(ctx, feeds)
                lent = lend_tokens(workers.inline_spare)
                try:
                    for program in ctx.programs(False, workers.cpu)[:1]:
                        _execute(ctx, program, None)
                finally:
                    return_tokens(lent)
                outputs = self._outputs_of(ctx, feeds)
        finally:
            workers.cpu.give_all()
            self._release(ctx)
        self.observe(time.perf_counter() - start)
        self.here_runs += 1
        return outputs

    def run_sync(self, feeds: Mapping[str, np.ndarray], *, workers: EngineWorkers) -> dict[str, np.ndarray]:
        """Run once in sink mode from a plain thread (a device process's main thread), blocking.

        The first thread group's program runs in the calling thread, holding one of
        ``workers.cpu``'s tokens; any other group runs on a lane as in ``run``. A one-group plan
        therefore makes no thread hop at all, and one whose kernels all have C forms runs as
        its native program (one C call: the transformer example's device runs took 540 us of
        CPU so, not 800).

        Raises:
            ExecutionError: a kernel failed (names node, op type and engine).
        """
        ctx = self._acquire(False)
        try:
            prog = self._native_program(ctx) if self.native_ok is not False else None
            if prog is not None:
                self.native_runs += 1
                return prog.run(feeds, False)
            self._bind(ctx, feeds)
            programs = ctx.programs(False, workers.cpu)
            if not programs:  # no nodes: the outputs are feeds or constants
                return self._collect(ctx, feeds)
            done = _Countdown(len(programs))
            if len(programs) > 1:
                lanes = self._lanes(workers, self._thread_lanes)
                workers.enqueue(
                    [
                        (lane, partial(_run_program, ctx, program, None, workers.cpu, done))
                        for lane, program in zip(lanes[1:], programs[1:], strict=True)
                    ]
                )
            _run_program(ctx, programs[0], None, workers.cpu, done)
            done.wait()
            if ctx.error is not None:
                raise ctx.error
            return self._collect(ctx, feeds)
        finally:
            self._release(ctx)

    async def _run_sink(
        self, ctx: Context, workers: EngineWorkers, lanes: list[Lane], trace: list[TraceSpan] | None, poison: bool
    ) -> None:
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

    async def _run_host(
        self, ctx: Context, workers: EngineWorkers, lanes: list[Lane], trace: list[TraceSpan] | None, poison: bool
    ) -> None:
        events = [anyio.Event() for _ in ctx.events]
        closed: list[SessionClosedError] = []
        async with anyio.create_task_group() as tg:
            for s, steps in enumerate(self._layout.streams):
                tg.start_soon(self._host_stream, ctx, workers, lanes[s], steps, events, trace, poison, tg.cancel_scope, closed)
        if closed:
            raise closed[0]

    async def _host_stream(
        self,
        ctx: Context,
        workers: EngineWorkers,
        lane: Lane,
        steps: tuple[int, ...],
        events: list[anyio.Event],
        trace: list[TraceSpan] | None,
        poison: bool,
        scope: anyio.CancelScope,
        closed: list[SessionClosedError],
    ) -> None:
        for i in steps:
            step = self._layout.steps[i]
            for e in step.waits:
                await events[e].wait()
            done = Completion(1)
            fns = [*ctx.poison_fills(i), ctx.calls[i]] if poison else [ctx.calls[i]]
            try:
                workers.enqueue(
                    [(lane, partial(contextvars.copy_context().run, _run_op, ctx, fns, i, step.stream, trace, workers.cpu, done))]
                )
            except SessionClosedError as exc:  # the session closed mid-run: its lanes take no more ops
                closed.append(
                    SessionClosedError(
                        f"the session closed while this run was in flight (before node {step.name!r})", graph=self._layout.graph
                    )
                )
                closed[-1].__cause__ = exc
                scope.cancel()
                return
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

    def _collect(self, ctx: Context, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        arena = ctx.arena
        foreign: list[np.ndarray] | None = None
        for name, slot, intermediate in self._outputs:
            raw = ctx.env[slot]
            if raw is None or isinstance(raw, list):
                # An empty optional; a sequence, whose kernels made fresh tensors (a fed one is the caller's).
                out[name] = raw if raw is None else [t.copy() if not intermediate or not t.flags.writeable else t for t in raw]
                continue
            a = np.asarray(raw)
            if intermediate and a.base is None and a.flags.writeable:
                # An array that owns its memory: made by this run's kernel (the caller's to keep),
                # unless it is a feed or a variable itself (no view of one owns memory).
                if all(a is not f for f in feeds.values()) and all(a is not v for v in self._variables.values()):
                    out[name] = a
                    continue
            if foreign is None:
                foreign = [*self._variables.values(), *(f for f in feeds.values() if isinstance(f, np.ndarray))]
            # Copy what the caller must not share: the arena, constants, variables, its own feeds.
            if (
                not intermediate
                or not a.flags.writeable
                or np.may_share_memory(a, arena)
                or any(np.may_share_memory(a, f) for f in foreign)
            ):
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
    quiet = _quiet_fp()
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
        _restore_fp(quiet)
        ctx.elapsed = time.perf_counter() - start


def _run_program(
    ctx: Context, program: Program, trace: list[TraceSpan] | None, cpu: threading.Semaphore, done: Completion | _Countdown
) -> None:
    """Run one thread's program inside its lane, holding a CPU token; errors abort the run, never the lane."""
    cpu.acquire()
    try:
        with cpu_tokens(cpu):  # a big kernel may borrow an idle token of this run's workers
            _execute(ctx, program, trace)
    finally:
        cpu.release()
        done.tick()


async def _after_inline() -> None:
    # Others run (and a cancellation lands) between inline runs; short of INLINE_YIELD only a
    # cancellation: a turn of the loop per run cost 7.5 us of the builder MLP's 160.
    yielding = inline_budget.used >= schedule.INLINE_YIELD
    await (anyio.lowlevel.checkpoint() if yielding else anyio.lowlevel.checkpoint_if_cancelled())


def _run_op(
    ctx: Context,
    fns: list[Any],
    node: int,
    stream: int,
    trace: list[TraceSpan] | None,
    cpu: threading.Semaphore,
    done: Completion,
) -> None:
    """Run one op (and its poison fills) inside its lane, holding a CPU token, for host mode."""
    quiet = _quiet_fp()
    try:
        with cpu, cpu_tokens(cpu):
            if not ctx.abort[0]:
                t0 = time.perf_counter()
                for f in fns:
                    f()
                if trace is not None:
                    trace.append(TraceSpan(node, stream, t0, time.perf_counter()))
    except BaseException as exc:  # reported to the run, which raises it
        ctx.fail(exc, node)
    finally:
        _restore_fp(quiet)
        done.tick()


# numpy's floating-point warnings inside kernels. ONNX computes IEEE 754: log(0) = -inf,
# 1/0 = inf, sqrt(-1) = NaN, exp(1000) = inf, and onnxruntime does so silently. numpy warns
# ("divide by zero encountered in log") on every run of valid models: T5's relative position
# buckets take the log of 0 and cast the -inf to int64, then select those entries away. Under
# numpy's default error state (warn) kernels therefore run with divide, overflow and invalid
# off; an error state the caller set (np.errstate(invalid="raise"), say) applies as given, and
# op_debug_level's check is the way to fail runs that make NaN or Inf. The state is numpy 2's
# context variable: reading it and setting it costs well under a microsecond a program, where
# np.errstate costs several.
try:
    from numpy._core._ufunc_config import _extobj_contextvar as _FP_STATE  # type: ignore[attr-defined]  # numpy >= 2
except ImportError:  # pragma: no cover - numpy 1.26: a per-thread state, read and set with geterr/seterr
    _FP_STATE = None


def _quiet_state() -> Any:
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        return _FP_STATE.get()


if _FP_STATE is not None:
    _FP_DEFAULT = contextvars.Context().run(_FP_STATE.get)  # numpy's default state (an opaque object)
    _FP_QUIET = contextvars.Context().run(_quiet_state)
_NUMPY_DEFAULT_ERR = {"divide": "warn", "over": "warn", "under": "ignore", "invalid": "warn"}


def _quiet_fp() -> Any:
    """Turn numpy's floating-point warnings off here if the error state is numpy's default;
    what to hand to ``_restore_fp`` afterwards (in the same thread and context)."""
    if _FP_STATE is not None:
        return _FP_STATE.set(_FP_QUIET) if _FP_STATE.get() is _FP_DEFAULT else None
    if np.geterr() != _NUMPY_DEFAULT_ERR:  # pragma: no cover - numpy 1.26
        return None
    return np.seterr(divide="ignore", over="ignore", invalid="ignore")  # pragma: no cover


def _restore_fp(token: Any) -> None:
    if token is None:
        return
    if _FP_STATE is not None:
        _FP_STATE.reset(token)
    else:  # pragma: no cover - numpy 1.26
        np.seterr(**token)


class _Countdown:  # Completion for a waiter that is a plain thread: the last tick sets a threading.Event
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


def _with_poison(layout: Layout, model: CompiledModel) -> Layout:  # per step, the arena bytes its outputs take over
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


_HOLDING = (Strategy.NATIVE_INLINE, Strategy.NATIVE_QUEUE_SPLIT)  # strategies chosen holding every CPU token
_STRATEGIES: dict[Strategy, Any] = {
    Strategy.HOST: Executable._host,
    Strategy.INLINE: Executable._inline,
    Strategy.LANES: Executable._on_lanes,
    Strategy.NATIVE_INLINE: Executable._native_inline,
    Strategy.NATIVE_QUEUE: Executable._native_queue,
    Strategy.NATIVE_QUEUE_SPLIT: Executable._native_queue_split,
    Strategy.NATIVE_LANE_SPLIT: Executable._native_lane,
    Strategy.NATIVE_LANE_WHOLE: partial(Executable._native_lane, split=False),
}
