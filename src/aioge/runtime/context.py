"""Execution contexts: one arena, its views, and every step bound to them, ready to call.

Everything a run needs is resolved when a context is made: each step becomes a zero-argument
callable over argument lists that already hold the arena views and constants, and each stream
becomes a flat program of those callables with its event waits and records. A run only patches
its feeds (and the variables) into the argument lists that read them, so the hot loop is
``for f in program: f()`` and a steady-state run allocates no arrays but its outputs.

A context serves one run at a time; the executable's pool hands them out.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aioge.errors import ExecutionError
from aioge.ops.schema import RunFn

__all__ = ["POISON_BYTE", "Context", "Layout", "Step"]

# Fill byte for freed regions under the poison test: 0xFF.. is NaN in every float dtype.
POISON_BYTE = 0xFF

Program = tuple[list[Callable[[], object]], list[int]]  # callables; node index per entry (-1 - index: not a kernel)


@dataclass(frozen=True, slots=True)
class Step:
    """One node as the executor runs it."""

    index: int
    name: str
    op_type: str
    engine: str
    stream: int
    run: RunFn
    inputs: tuple[int, ...]  # env slots; -1 for an absent optional input
    outputs: tuple[int, ...]  # env slots
    planned: bool  # every output has an arena view: the kernel writes into them
    waits: tuple[int, ...]  # event ids
    records: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Layout:
    """What every context of one executable shares: slots, views, steps, streams."""

    graph: str
    nslots: int
    arena_bytes: int
    constants: Mapping[int, np.ndarray]
    views: tuple[tuple[int, int, tuple[int, ...], np.dtype], ...]  # slot, offset, shape, dtype
    runtime: frozenset[int]  # slots filled per run: feeds, variables, unplanned outputs
    steps: tuple[Step, ...]
    streams: tuple[tuple[int, ...], ...]  # step indices per stream, in order
    num_events: int
    poison: tuple[tuple[tuple[int, int], ...], ...]  # per step: arena byte ranges it reuses
    check_finite: bool = False  # op_debug_level != 0: a kernel whose outputs hold NaN/Inf from finite inputs fails
    threads: tuple[tuple[int, ...], ...] = ()  # sink mode: step indices per worker thread, in order (default: the streams)
    local_events: frozenset[int] = frozenset()  # events whose producer and consumer share a thread: dropped
    fresh: Mapping[int, tuple[tuple[int, ...], np.dtype]] = field(default_factory=dict)  # unplanned outputs of static shape


class Context:
    """An arena with its views and bound steps; owned by one run at a time."""

    __slots__ = (
        "layout",
        "arena",
        "env",
        "events",
        "_shared",
        "abort",
        "error",
        "calls",
        "elapsed",
        "native",
        "_targets",
        "_programs",
        "_lock",
    )

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.arena = np.empty(max(layout.arena_bytes, 1), dtype=np.uint8)
        env: list[Any] = [None] * layout.nslots
        for slot, data in layout.constants.items():
            env[slot] = data
        for slot, offset, shape, dtype in layout.views:
            count = int(np.prod(shape, dtype=np.int64)) if shape else 1
            env[slot] = self.arena[offset : offset + count * dtype.itemsize].view(dtype).reshape(shape)
        self.env = env
        self.events = [threading.Event() for _ in range(layout.num_events)]
        # The events programs wait on and set: local ones are dropped from the programs, so a
        # run has none of them to clear (a one-thread plan: none at all; BERT's had 57, 20 us).
        self._shared = [e for i, e in enumerate(self.events) if i not in layout.local_events]
        self.abort = [False]  # a list: the programs' loops read it without an attribute lookup
        self.error: ExecutionError | None = None
        self.elapsed = 0.0  # seconds the last program of the run took (one-thread plans: the run's compute)
        self.native: Any = None  # runtime.native_program: this context's program, False for none, None untried
        self._lock = threading.Lock()
        # Where each per-run value goes: (argument list, position) pairs.
        self._targets: dict[int, list[tuple[list[Any], int]]] = {s: [] for s in layout.runtime}
        args: list[list[Any]] = []
        for step in layout.steps:
            ins: list[Any] = []
            for p, s in enumerate(step.inputs):
                ins.append(env[s] if s >= 0 else None)
                if s in self._targets:
                    self._targets[s].append((ins, p))
            args.append(ins)
        self.calls: list[Callable[[], object]] = []
        for step, ins in zip(layout.steps, args):
            ufunc = getattr(step.run, "ufunc", None)
            if (
                ufunc is not None
                and step.planned
                and len(step.outputs) == 1
                and all(s >= 0 and s not in self._targets for s in step.inputs)
            ):
                # A plain ufunc over arena views and constants only: called directly, one
                # Python frame less per op (0.18 of 1.07 us for a small Add).
                self.calls.append(partial(ufunc, *ins, out=env[step.outputs[0]]))
            elif step.planned:
                self.calls.append(partial(step.run, ins, [env[s] for s in step.outputs]))
            else:
                self.calls.append(_fresh_outputs(step.run, ins, [(s, self._targets[s]) for s in step.outputs], env, self.arena))
        if layout.check_finite:
            self.calls = [_finite_checked(call, step, ins, env) for call, step, ins in zip(self.calls, layout.steps, args)]
        self._programs: dict[tuple[bool, int], list[Program]] = {}

    # -- per run ----------------------------------------------------------------------

    def bind(self, values: Mapping[int, Any]) -> None:
        """Reset for a new run and put this run's values (feeds, variables) where steps read them."""
        self.abort[0] = False
        self.error = None
        for ev in self._shared:
            ev.clear()
        env, targets = self.env, self._targets
        for slot, x in values.items():
            env[slot] = x
            for lst, p in targets[slot]:
                lst[p] = x

    def unbind(self) -> None:
        """Drop every reference to the last run's values, so the pool keeps no user arrays alive."""
        env = self.env
        for slot, targets in self._targets.items():
            env[slot] = None
            for lst, p in targets:
                lst[p] = None

    def fail(self, exc: BaseException, node: int) -> None:
        """Record the first kernel error of the run and abort it (from any worker)."""
        step = self.layout.steps[node]
        with self._lock:
            if self.error is None:
                err = ExecutionError(
                    f"{type(exc).__name__}: {exc}",
                    graph=self.layout.graph,
                    node=step.name,
                    op_type=step.op_type,
                    engine=step.engine,
                )
                err.__cause__ = exc
                self.error = err
        self.cancel()

    def cancel(self) -> None:
        """Stop the run between ops: raise the flag, then wake every stream blocked on an event."""
        self.abort[0] = True  # first the flag: a stream woken below sees it before its next op
        for ev in self.events:
            ev.set()

    # -- programs ---------------------------------------------------------------------

    def programs(self, poison: bool, cpu: threading.Semaphore) -> list[Program]:
        """Per worker thread (``layout.threads``, else per stream): its callables (waits, poison
        fills, kernels, records) and their node indices.

        The streams run holding a token of ``cpu``; each wait gives it back while it blocks.
        """
        key = (poison, id(cpu))
        made = self._programs.get(key)
        if made is None:
            made = self._programs[key] = [
                self._program(steps, poison, cpu) for steps in self.layout.threads or self.layout.streams
            ]
        return made

    def _program(self, steps: Sequence[int], poison: bool, cpu: threading.Semaphore) -> Program:
        fns: list[Callable[[], object]] = []
        meta: list[int] = []
        local = self.layout.local_events
        for i in steps:
            step = self.layout.steps[i]
            for e in step.waits:
                if e not in local:
                    fns.append(partial(_wait_without_token, self.events[e], cpu))
                    meta.append(-1 - i)
            if poison:
                for fill in self.poison_fills(i):
                    fns.append(fill)
                    meta.append(-1 - i)
            fns.append(self.calls[i])
            meta.append(i)
            for e in step.records:
                if e not in local:
                    fns.append(self.events[e].set)
                    meta.append(-1 - i)
        return fns, meta

    def poison_fills(self, step: int) -> list[Callable[[], object]]:
        """Callables that fill the arena bytes ``step`` reuses (dead tensors' bytes) with poison."""
        return [partial(self.arena[lo:hi].fill, POISON_BYTE) for lo, hi in self.layout.poison[step]]


def _wait_without_token(event: threading.Event, cpu: threading.Semaphore) -> None:
    """Wait for another stream's event, lending the CPU token meanwhile (its producer may need it)."""
    if event.is_set():
        return
    cpu.release()
    try:
        event.wait()
    finally:
        cpu.acquire()


def _finite_checked(call: Callable[[], object], step: Step, ins: list[Any], env: list[Any]) -> Callable[[], None]:
    """``call``, then a check of the step's float outputs (GE's op_debug_level overflow check).

    Only the kernel that *makes* a NaN or Inf fails: when one of its float inputs already
    holds one (a feed, or a tensor an unchecked path produced), its outputs may too."""
    outs = step.outputs

    def checked() -> None:
        call()
        for k, slot in enumerate(outs):
            a = env[slot]
            if isinstance(a, np.ndarray) and a.dtype.kind in "fc" and a.size and not np.isfinite(a).all():
                if any(isinstance(x, np.ndarray) and x.dtype.kind in "fc" and not np.isfinite(x).all() for x in ins):
                    return  # not this kernel's doing
                nan = int(np.count_nonzero(np.isnan(a)))
                raise FloatingPointError(
                    f"output {k} ({a.dtype}{list(a.shape)}) holds {nan} NaN and {a.size - nan - int(np.count_nonzero(np.isfinite(a)))} "
                    f"Inf values although every input is finite (op_debug_level checks)"
                )

    return checked


def _fresh_outputs(
    run: RunFn, ins: list[Any], outs: list[tuple[int, list[tuple[list[Any], int]]]], env: list[Any], arena: np.ndarray
) -> Callable[[], None]:
    """A step whose outputs are not in the arena: the kernel returns them; pass them on.

    The memory plan counts on such results being fresh arrays (the kernel contract); a view
    into the arena would outlive the bytes it shows, so one is copied (a bounds check).
    """

    def call() -> None:
        results = run(ins, None)
        for (slot, targets), r in zip(outs, results, strict=True):
            if isinstance(r, np.ndarray) and np.may_share_memory(r, arena):
                r = r.copy()
            env[slot] = r
            for lst, p in targets:
                lst[p] = r

    return call
