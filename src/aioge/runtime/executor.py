"""The executor: binds a CompiledModel's kernels once, then runs it many times.

Sink mode (default, GE's model sinking): each stream's whole op list runs inside one
worker thread; cross-stream events are thread-level ``threading.Event``s; the event loop is
touched once per run. Host mode: ops are dispatched one by one from the event loop, each
in a worker thread, in execution order.

A run takes an execution context (the arena and its views) from the model's pool and gives
it back when it ends, so concurrent runs never share live buffers and steady-state runs
allocate nothing but their outputs (and tensors whose shapes are only known at run time).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import anyio
import anyio.from_thread
import numpy as np

from aioge.compiler.model import CompiledModel
from aioge.errors import ExecutionError
from aioge.ir.desc import numpy_dtype
from aioge.ir.graph import ValueKind
from aioge.ops.registry import get_schema
from aioge.ops.schema import RunFn

__all__ = ["Executable", "TraceSpan"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TraceSpan:
    node: int
    stream: int
    start: float  # perf_counter seconds
    end: float


@dataclass(slots=True)
class _Step:
    index: int
    name: str
    op_type: str
    engine: str
    run: RunFn
    inputs: tuple[int, ...]  # env slots; -1 for an absent optional input
    outputs: tuple[int, ...]
    waits: tuple[int, ...]  # event ids
    records: tuple[int, ...]


@dataclass(slots=True)
class _Context:
    arena: np.ndarray
    env: list[Any]  # slot -> array (constants and arena views prefilled)


@dataclass(slots=True)
class _RunState:
    events: list[threading.Event]
    abort: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    spans: list[TraceSpan] | None = None


class Executable:
    """A compiled model bound to kernels, ready to run concurrently."""

    def __init__(self, model: CompiledModel, variables: Mapping[str, np.ndarray] | None = None) -> None:
        self.model = model
        g = model.graph
        self._slot: dict[str, int] = {}
        for v in g.values():
            self._slot[v.name] = len(self._slot)
        self._nslots = len(self._slot)
        self._constants = {self._slot[v.name]: v.data for v in g.constants.values()}
        self._variables = dict(variables or {})
        self._var_slots = {self._slot[name]: name for name in g.variables}
        self._inputs = [(v.name, self._slot[v.name], v.desc) for v in g.inputs]
        self._outputs = [(v.name, self._slot[v.name]) for v in g.outputs]
        offsets = model.memory.offsets()
        self._views: list[tuple[int, int, int, tuple[int, ...], np.dtype]] = []
        for name, (offset, nbytes) in offsets.items():
            desc = g.value(name).desc
            self._views.append((self._slot[name], offset, nbytes, tuple(int(d) for d in desc.shape), numpy_dtype(desc.dtype)))  # type: ignore[union-attr]
        planned = {self._slot[name] for name in offsets}
        waits: dict[int, list[int]] = {}
        records: dict[int, list[int]] = {}
        for e in model.streams.events:
            waits.setdefault(e.consumer, []).append(e.id)
            records.setdefault(e.producer, []).append(e.id)
        self._steps: list[_Step] = []
        by_name = {n.name: n for n in g.nodes}
        for plan in model.nodes:
            node = by_name[plan.name]
            schema = get_schema(node.op_type, node.domain)
            impl = schema.impl(plan.kernel.impl)
            run = impl.build(
                node.attrs, plan.kernel.params,
                [v.desc if v is not None else None for v in node.inputs], [o.desc for o in node.outputs],
            )
            outs = tuple(self._slot[o.name] for o in node.outputs)
            self._steps.append(
                _Step(
                    plan.index, plan.name, plan.op_type, plan.engine, run,
                    tuple(self._slot[v.name] if v is not None else -1 for v in node.inputs),
                    outs if all(s in planned for s in outs) else tuple(-1 - s for s in outs),
                    tuple(waits.get(plan.index, ())), tuple(records.get(plan.index, ())),
                )
            )
        self._streams = [[self._steps[i] for i in s.nodes] for s in model.streams.streams]
        self._pool: list[_Context] = []
        self._contexts_made = 0

    # -- contexts ---------------------------------------------------------------------

    def _new_context(self) -> _Context:
        arena = np.empty(max(self.model.memory.arena_bytes, 1), dtype=np.uint8)
        env: list[Any] = [None] * self._nslots
        for slot, data in self._constants.items():
            env[slot] = data
        for slot, offset, nbytes, shape, dtype in self._views:
            count = int(np.prod(shape, dtype=np.int64)) if shape else 1
            env[slot] = arena[offset : offset + count * dtype.itemsize].view(dtype).reshape(shape)
        self._contexts_made += 1
        return _Context(arena, env)

    @property
    def contexts_made(self) -> int:
        """How many execution contexts (arenas) this executable has allocated so far."""
        return self._contexts_made

    @property
    def pool_size(self) -> int:
        return len(self._pool)

    # -- running ----------------------------------------------------------------------

    async def run(
        self,
        feeds: Mapping[str, np.ndarray],
        *,
        mode: str = "sink",
        thread_limiter: anyio.CapacityLimiter | None = None,
        trace: list[TraceSpan] | None = None,
        poison: Callable[[np.ndarray, int], None] | None = None,
    ) -> dict[str, np.ndarray]:
        """Run once on checked feeds; returns the outputs by name (fresh arrays the caller owns).

        Raises:
            ExecutionError: a kernel failed (names node, op type and engine).
        """
        ctx = self._pool.pop() if self._pool else self._new_context()
        env = list(ctx.env)
        for name, slot, _ in self._inputs:
            env[slot] = feeds[name]
        for slot, name in self._var_slots.items():
            env[slot] = self._variables[name]
        state = _RunState([threading.Event() for _ in self.model.streams.events], spans=trace)
        try:
            if mode == "host":
                for step in sorted((s for st in self._streams for s in st), key=lambda s: s.index):
                    await anyio.to_thread.run_sync(self._run_steps, [step], env, state, False, poison, limiter=thread_limiter)
            elif len(self._streams) == 1:
                await anyio.to_thread.run_sync(self._run_steps, self._streams[0], env, state, True, poison, limiter=thread_limiter)
            else:
                async with anyio.create_task_group() as tg:
                    for steps in self._streams:
                        tg.start_soon(self._run_stream_thread, steps, env, state, poison, thread_limiter)
            if state.error is not None:
                raise state.error
            return self._collect(env, ctx)
        finally:
            # Every worker has returned (to_thread is shielded), so no thread touches the arena.
            self._pool.append(ctx)

    async def _run_stream_thread(self, steps: list[_Step], env: list[Any], state: _RunState, poison: Any, limiter: Any) -> None:
        await anyio.to_thread.run_sync(self._run_steps, steps, env, state, True, poison, limiter=limiter)

    def _run_steps(self, steps: Sequence[_Step], env: list[Any], state: _RunState, check: bool, poison: Any) -> None:
        """Run a stream's steps in order inside one worker thread."""
        events = state.events
        spans = state.spans
        graph = self.model.graph.name
        try:
            for step in steps:
                for e in step.waits:
                    events[e].wait()
                if state.abort.is_set():
                    return
                if check:
                    anyio.from_thread.check_cancelled()
                ins = [env[s] if s >= 0 else None for s in step.inputs]
                planned = step.outputs[0] >= 0 if step.outputs else True
                outs = [env[s] for s in step.outputs] if planned else None
                t0 = time.perf_counter() if spans is not None else 0.0
                try:
                    results = step.run(ins, outs)
                except Exception as exc:
                    raise ExecutionError(
                        f"{type(exc).__name__}: {exc}", graph=graph, node=step.name, op_type=step.op_type, engine=step.engine
                    ) from exc
                if spans is not None:
                    spans.append(TraceSpan(step.index, self.model.nodes[step.index].stream, t0, time.perf_counter()))
                if not planned:
                    for s, r in zip(step.outputs, results):
                        env[-1 - s] = r
                if poison is not None:
                    poison(env, step.index)
                for e in step.records:
                    events[e].set()
        except BaseException as exc:
            if state.error is None and isinstance(exc, Exception):
                state.error = exc
            state.abort.set()
            for ev in events:
                ev.set()
            if not isinstance(exc, Exception):
                raise

    def _collect(self, env: list[Any], ctx: _Context) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        arena = ctx.arena
        foreign = [a for a in self._variables.values()]
        for name, slot in self._outputs:
            a = np.asarray(env[slot])
            if (
                not a.flags.writeable
                or np.may_share_memory(a, arena)
                or any(np.may_share_memory(a, f) for f in foreign)
                or self.model.graph.value(name).kind is not ValueKind.INTERMEDIATE
            ):
                a = a.copy()
            out[name] = a
        return out
