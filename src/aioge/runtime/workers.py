"""Engine worker pools: real threads, one FIFO queue per stream lane, and thread-to-loop wake-ups.

Each engine (AiCore, AiVec, AiCpu) owns a pool of lanes; a lane is one thread with its own
queue. A run maps each of its worker threads (a stream, or streams that share a thread:
``compiler.threads``) to a distinct lane of its engine (rotating, so concurrent runs of
one-thread plans spread over the lanes) and enqueues all of their work under one lock. That lock gives all lanes the same order of runs, so an item blocked on
an event of its own run only ever waits for items queued ahead of it or in its own run:
streams of concurrent runs cannot deadlock, however they share lanes.

numpy releases the GIL in its kernels, so lanes of different streams really overlap. There
may be more lanes than cores (``ge.streamMaxParallelNum`` allows AiCore 4 streams), so lanes
compute only while holding one of ``cpu_slots`` tokens (the core count): a stream takes one
when it starts, gives it back while it waits for an event, and returns it when it ends. More
busy threads than cores only slowed every kernel down (GIL hand-offs, cache thrash), and a
stream blocked on an event never holds a token its producer needs.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import weakref
from collections import deque
from typing import Any, Callable, Mapping, Sequence

import anyio
import anyio.lowlevel
from anyio.from_thread import RunFinishedError

from aioge._util import backend
from aioge._util.backend import Event, FutureEvent
from aioge.errors import SessionClosedError

__all__ = ["Completion", "CpuTokens", "EngineWorkers", "FutureEvent", "Lane", "RunGate", "new_event"]

log = logging.getLogger(__name__)


class Lane:
    """One worker thread of an engine, running the callables put on its queue in order (or,
    given ``shared``, taking them off that queue with the other lanes made with it)."""

    __slots__ = ("name", "_queue", "_thread")

    def __init__(self, name: str, shared: queue.SimpleQueue[Callable[[], object] | None] | None = None) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[Callable[[], object] | None] = shared if shared is not None else queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def put(self, fn: Callable[[], object]) -> None:
        """Queue ``fn`` to run after everything queued before it (callers go through ``EngineWorkers.enqueue``)."""
        self._queue.put(fn)

    def _serve(self) -> None:
        get = self._queue.get
        while True:
            fn = get()
            if fn is None:
                return
            try:
                fn()
            except BaseException:  # items report their own errors; this only keeps the lane alive
                log.exception("worker %s: an item raised", self.name)

    def stop(self) -> None:
        """Let the thread end once the items queued so far have run."""
        self._queue.put(None)

    def join(self, timeout: float | None = None) -> None:
        """Wait (blocking) for the thread to end."""
        self._thread.join(timeout)


class CpuTokens(threading.Semaphore):
    """The CPU tokens: a ``threading.Semaphore`` whose uncontended acquire and release take one
    C lock and skip the condition variable (threading's take it, and notify, every time: about
    0.7 us each; an inline run takes and gives back every token, a lane run one), plus
    ``take_all``/``give_all`` in one step each."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self._lock = threading.Lock()  # the condition's lock
        self._cond = threading.Condition(self._lock)
        self._size = value
        self._waiting = 0

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        with self._lock:
            if self._value > 0:
                self._value -= 1
                return True
            if not blocking:
                return False
            self._waiting += 1
            try:
                if not self._cond.wait_for(lambda: self._value > 0, timeout):
                    return False
            finally:
                self._waiting -= 1
            self._value -= 1
            return True

    __enter__ = acquire

    def release(self, n: int = 1) -> None:
        with self._lock:
            self._value += n
            if self._waiting:
                self._cond.notify(n)

    def idle(self) -> int:
        """The tokens no one holds (read without the lock: a hint)."""
        return self._value

    def take_all(self) -> bool:
        """Every token if none is taken, without waiting."""
        with self._lock:
            if self._value != self._size:
                return False
            self._value = 0
            return True

    def give_all(self) -> None:
        """Give back what ``take_all`` took."""
        self.release(self._size)


class EngineWorkers:
    """The worker pools of the three engines. Lanes are started on first use.

    ``min_lanes`` (default: the core count) is how many lanes each engine gets at least, so
    that concurrent runs of one-stream models use every core. ``cpu_slots`` (default: the
    core count) is how many lanes may compute at once; ``cpu`` is that token semaphore (the
    runtime lends it to big kernels run by run: ``kernels.parallel.cpu_tokens``).

    Lane threads are daemons, and pools that are never closed (a session dropped without
    ``aclose``) stop them when they are garbage-collected: the lanes hold no reference back
    to the pools, so a finalizer can tell each one to end after its queued work.
    """

    def __init__(self, min_lanes: int | None = None, cpu_slots: int | None = None) -> None:
        cores = os.cpu_count() or 2
        self._min = max(1, min_lanes if min_lanes is not None else cores)
        self.cpu_slots = max(1, cpu_slots if cpu_slots is not None else cores)
        self.cpu = CpuTokens(self.cpu_slots)
        # What an inline run lends its kernels to split onto: it holds every CPU token
        # (``cpu.take_all``), so the other cores are its own.
        self.inline_spare = threading.Semaphore(self.cpu_slots - 1)
        self._lock = threading.Lock()
        self._lanes: dict[str, list[Lane]] = {}
        self._rotation: dict[str, int] = {}
        self._closed = False
        self._started: list[Lane] = []  # every lane ever started, for the finalizer
        self._queues: list[Any] = []  # the program queue, once made (runtime.program_queue)
        self.lane_runs = 0  # native programs handed to lanes or split-queued, not yet awaited (executor)
        self._finalizer = weakref.finalize(self, _stop_lanes, self._started, self._queues)

    @property
    def threads(self) -> int:
        """How many lane threads have been started."""
        return sum(len(v) for v in self._lanes.values())

    def lanes(self, counts: Mapping[str, int], *, rotate: bool = True) -> dict[str, list[Lane]]:
        """For each engine, ``counts[engine]`` distinct lanes for one run's streams: the next
        ones in rotation, or with ``rotate`` False always the first ones.

        Raises:
            SessionClosedError: the pools are closed.
        """
        with self._lock:
            if self._closed:
                raise SessionClosedError("the session closed: its engine worker pools are stopped")
            out: dict[str, list[Lane]] = {}
            for engine, k in counts.items():
                pool = self._lanes.setdefault(engine, [])
                while len(pool) < max(k, self._min):
                    lane = Lane(f"aioge-{engine}-{len(pool)}")
                    pool.append(lane)
                    self._started.append(lane)
                r = self._rotation.get(engine, 0) if rotate else 0
                if rotate:
                    self._rotation[engine] = (r + 1) % len(pool)
                out[engine] = [pool[(r + j) % len(pool)] for j in range(k)]
            return out

    def whole_lane(self) -> Lane:
        """A lane for whole native programs beside others, whose queue ``cpu_slots`` threads
        share: a program starts on whichever is free, never behind another while a core idles.

        Raises:
            SessionClosedError: the pools are closed.
        """
        with self._lock:
            if self._closed:
                raise SessionClosedError("the session closed: its engine worker pools are stopped")
            if "whole" not in self._lanes:  # stopped and joined with the engines' lanes, one stop each
                shared: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
                self._lanes["whole"] = [Lane(f"aioge-whole-{i}", shared) for i in range(self.cpu_slots)]
                self._started += self._lanes["whole"]
            return self._lanes["whole"][0]

    def program_queue(self) -> Any:
        """The pools' ``ProgramQueue`` (made on first use, runners on the cores less one), or
        None without the compiled tier or once closed."""
        if self._queues:
            return self._queues[0]
        from aioge.runtime.program_queue import ProgramQueue  # it imports this module

        with self._lock:
            if self._closed or self._queues:
                return self._queues[0] if self._queues else None
            q = ProgramQueue.create(max(1, self.cpu_slots - 1))
            if q is not None:
                self._queues.append(q)
            return q

    def enqueue(self, items: Sequence[tuple[Lane, Callable[[], object]]]) -> None:
        """Put one run's items on their lanes, all at once with respect to other runs.

        Under the lock ``close`` takes before it stops the lanes: an item is either queued
        ahead of the lane's stop (and runs) or refused, never left on a lane that has ended.

        Raises:
            SessionClosedError: the pools are closed (a host-mode run's next op, say).
        """
        with self._lock:
            if self._closed:
                raise SessionClosedError("the session closed: its engine worker pools are stopped")
            for lane, fn in items:
                lane.put(fn)

    def stop_nowait(self) -> None:
        """Refuse new work and let every lane end after its queued work, without waiting."""
        with self._lock:
            self._closed = True
        self._finalizer()  # runs _stop_lanes once, then is dead

    def close(self, timeout: float = 5.0) -> None:
        """Stop every lane after the work already queued (blocking up to ``timeout`` per lane)."""
        with self._lock:
            self._closed = True
            lanes = [lane for pool in self._lanes.values() for lane in pool]
            self._lanes.clear()
        self._finalizer.detach()
        for lane in lanes:
            lane.stop()
        for lane in lanes:
            lane.join(timeout)
        for q in self._queues:
            q.close()


def _stop_lanes(lanes: list[Lane], queues: list[Any]) -> None:
    """Finalizer of unclosed pools: tell every lane to end after its queued work (never
    blocks), and stop the program queue's runners (nothing is queued: no caller is left)."""
    for lane in lanes:
        lane.stop()
    for q in queues:
        q.close()


class _LoopWaker:
    """Wakes tasks of one event loop from worker threads, one loop wake-up per batch.

    A thread-safe callback costs a write to the loop's self-pipe and an epoll wake-up (tens of
    microseconds each on a small VM). Under load many runs end while the loop is busy, so the
    events to set queue here and one callback sets them all: the first post schedules it, the
    rest only append until it has run.
    """

    __slots__ = ("_token", "_lock", "_ready", "_scheduled")

    def __init__(self, token: anyio.lowlevel.EventLoopToken) -> None:
        self._token = token
        self._lock = threading.Lock()
        self._ready: list[Event] = []
        self._scheduled = False

    def post(self, event: Event) -> None:
        """Have ``event`` set on the loop (from any thread, never blocking)."""
        with self._lock:
            self._ready.append(event)
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._token.backend_class.run_sync_soon(self._drain, (), self._token.native_token)
        except RunFinishedError:  # the loop is gone, and with it whoever waited
            pass

    def _drain(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
            self._scheduled = False
        for event in ready:
            event.set()


_waker: anyio.lowlevel.RunVar[_LoopWaker] = anyio.lowlevel.RunVar("aioge_loop_waker")
# asyncio loops' wakers, found without anyio's RunVar (a backend look-up, about 1.3 us a run).
_wakers: weakref.WeakKeyDictionary[object, _LoopWaker] = weakref.WeakKeyDictionary()


def new_event() -> Event:
    """A fresh one-shot event of the running loop: a ``FutureEvent`` on asyncio, else anyio's."""
    return backend.current().event_factory()()


class RunGate:
    """A bound on runs (or batches) in flight that costs nothing (no checkpoint) while it is
    not reached: a CapacityLimiter or a Semaphore checkpoints on every acquire, about 10 us."""

    __slots__ = ("limit", "busy", "waiters")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.busy = 0
        self.waiters: deque[Event] = deque()

    async def enter(self) -> None:
        if self.busy < self.limit and not self.waiters:
            self.busy += 1
            return
        ev = new_event()
        self.waiters.append(ev)
        try:
            await ev.wait()
        except BaseException:
            if ev in self.waiters:
                self.waiters.remove(ev)
            else:  # handed a slot while being cancelled: hand it on
                self.leave()
            raise

    @property
    def idle(self) -> int:
        """Slots nobody holds."""
        return self.limit - self.busy

    def leave(self) -> None:
        if self.waiters:
            self.waiters.popleft().set()  # the slot passes to the first waiter
        else:
            self.busy -= 1


def _loop_waker() -> _LoopWaker:
    loop = backend.current().loop()
    if loop is not None:
        waker = _wakers.get(loop)
        if waker is None:
            waker = _wakers[loop] = _LoopWaker(anyio.lowlevel.current_token())
        return waker
    try:
        return _waker.get()
    except LookupError:
        waker = _LoopWaker(anyio.lowlevel.current_token())
        _waker.set(waker)
        return waker


class Completion:
    """A countdown that worker threads tick and one task awaits.

    The last tick wakes the task through the event loop's thread-safe callback queue without
    blocking the worker (anyio's ``run_sync_soon`` on the loop token, batched per loop by
    ``_LoopWaker``; ``from_thread.run_sync`` would wait for the loop). Create it in the task
    that awaits it.
    """

    __slots__ = ("_waker", "_event", "_lock", "_left")

    def __init__(self, count: int) -> None:
        self._waker = _loop_waker()
        self._event = new_event()
        self._lock = threading.Lock()
        self._left = count
        if count <= 0:
            self._event.set()

    def tick(self) -> None:
        """Count one item done (from any thread)."""
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._waker.post(self._event)

    async def wait(self) -> None:
        """Wait until every item has ticked (cancellable)."""
        await self._event.wait()

    async def wait_shielded(self) -> None:
        """Wait even if the task is being cancelled (the workers still use what the waiter owns)."""
        with anyio.CancelScope(shield=True):
            await self._event.wait()
