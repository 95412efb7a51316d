"""The program queue: callers wait for their native programs while C runners run them.

The waiting protocol (one caller polls the queue's eventfd at a time, wakes the callers whose
programs ended and hands the poll on) is checked against a queue the test drives, over any
order of arrivals, completions and cancellations; then the real queue under concurrent
callers, cancellations and a session's close."""

from __future__ import annotations

import asyncio
import gc
import os

import anyio
import anyio.lowlevel
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aioge
from aioge.examples import EXAMPLES
from aioge.kernels import native
from aioge.runtime.program_queue import ProgramQueue

pytestmark = pytest.mark.anyio


class _Driven:
    """The C side of a queue, driven by the test: a program ends when ``end`` says so."""

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_NONBLOCK)
        self.completed = 0
        self.armed = False
        self.pushed: set[int] = set()

    def fns(self) -> tuple:
        return (lambda runners: 1, lambda h: self.fd, self.push, lambda h: 0, self.arm, self.free)

    def free(self, h: int) -> None:
        os.close(self.fd)
        self.fd = -1

    def push(self, h: int, record: int) -> int:
        self.pushed.add(record)
        return 1  # never deep enough for the caller to take one

    def arm(self, h: int) -> int:
        self.armed = True
        return self.completed

    def end(self, prog: _Program) -> None:
        prog.done = True
        self.completed += 1
        if self.armed:
            self.armed = False
            os.eventfd_write(self.fd, 1)


class _Program:
    def __init__(self, i: int) -> None:
        self.record_address = i
        self.done = False

    def pend(self, split: bool = False) -> None:
        self.done = False

    def pending(self) -> bool:
        return not self.done


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_every_caller_returns_once_its_program_ended_never_before(backend: str, data: st.DataObject) -> None:
    # Drawn outside the event loop. Drawn inside, a draw hypothesis stopped (StopTest) left
    # anyio's runner task with an exception nobody retrieved, logged when the task was freed; one
    # run in about seven of this test alone then failed in an import's ast.parse with CPython
    # 3.11's "AST constructor recursion depth mismatch" (its traceback formatting parses too).
    n = data.draw(st.integers(1, 6), label="callers")
    order = data.draw(st.permutations(range(n)), label="order of the programs' ends")
    cancelled = data.draw(st.sets(st.sampled_from(range(n))), label="cancelled callers")
    turns = data.draw(st.lists(st.integers(0, 3), min_size=2 * n, max_size=2 * n), label="loop turns between events")
    anyio.run(_callers_and_ends, n, order, cancelled, turns, backend=backend)


async def _callers_and_ends(n: int, order: list[int], cancelled: set[int], turns: list[int]) -> None:
    c = _Driven()
    q = ProgramQueue(1, c.fns())
    progs = [_Program(i) for i in range(n)]
    scopes = [anyio.CancelScope() for _ in range(n)]
    ended_first: dict[int, bool] = {}

    async def caller(i: int) -> None:
        with scopes[i]:
            me = q.submit(progs[i])  # type: ignore[arg-type]
            assert me is not None
            await q.wait(me)
        ended_first[i] = progs[i].done  # a cancelled caller too: the runner used its context

    async with anyio.create_task_group() as tg:
        try:
            with anyio.fail_after(30):  # a caller nobody wakes would wait forever (a hang guard, not a time bound)
                for i in range(n):
                    tg.start_soon(caller, i)
                    for _ in range(turns[i]):
                        await anyio.lowlevel.checkpoint()
                for k, i in enumerate(order):
                    if i in cancelled:
                        scopes[i].cancel()
                    for _ in range(turns[n + k]):
                        await anyio.lowlevel.checkpoint()
                    while i not in c.pushed:
                        await anyio.lowlevel.checkpoint()
                    c.end(progs[i])
                while len(ended_first) < n:
                    await anyio.sleep(0.001)
        finally:
            for p in progs:  # a cancelled caller waits for its program, shielded
                if p.pending():
                    c.end(p)
    assert ended_first == dict.fromkeys(range(n), True)
    assert not q._waiting and not q._polling and q._loop is None and not q._asleep  # the reader is gone
    q.close()


def test_on_asyncio_one_reader_wakes_a_burst_of_callers() -> None:
    """On asyncio the fd's reader is added once for callers that wait together, not per wait, and
    goes with the last; a program that ends out of order wakes its caller with the next end."""

    async def burst() -> None:
        loop, added = asyncio.get_running_loop(), []
        add = loop.add_reader
        loop.add_reader = lambda fd, cb: (added.append(fd), add(fd, cb))  # type: ignore[method-assign]
        c = _Driven()
        q = ProgramQueue(1, c.fns())
        progs = [_Program(i) for i in range(4)]
        done: list[int] = []

        async def caller(i: int) -> None:
            await q.wait(q.submit(progs[i]))  # type: ignore[arg-type]
            done.append(i)

        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(caller, i)
            await anyio.wait_all_tasks_blocked()
            for i in (1, 0, 3, 2):
                c.end(progs[i])
                await anyio.wait_all_tasks_blocked()
                assert done == {1: [], 0: [0, 1], 3: [0, 1], 2: [0, 1, 2, 3]}[i]
        assert added == [c.fd] and q._loop is None
        q.close()

    anyio.run(burst, backend="asyncio")


async def test_a_queue_closed_while_callers_wait_is_freed_by_the_last_of_them() -> None:
    # A session closes its workers from a worker thread; callers still waiting poll the queue's
    # eventfd, so it must outlive them.
    c = _Driven()
    q = ProgramQueue(1, c.fns())
    progs = [_Program(i) for i in range(2)]
    waiters = [q.submit(p) for p in progs]  # type: ignore[arg-type]
    done: list[int] = []

    async def caller(i: int) -> None:
        await q.wait(waiters[i])  # type: ignore[arg-type]
        done.append(i)

    async with anyio.create_task_group() as tg:
        try:
            for i in range(2):
                tg.start_soon(caller, i)
            await anyio.wait_all_tasks_blocked()
            await anyio.to_thread.run_sync(q.close)
            assert c.fd >= 0 and q.submit(_Program(9)) is None, "closed: no new program, the waiters' queue lives"  # type: ignore[arg-type]
            c.end(progs[0])
            with anyio.fail_after(30):  # a hang guard
                while not done:
                    await anyio.sleep(0.001)
            assert done == [0] and c.fd >= 0
        finally:
            if progs[1].pending():
                c.end(progs[1])
    assert done == [0, 1] and c.fd == -1, "the last waiter freed it"


needs_tier = pytest.mark.skipif(not native.available(), reason="needs the compiled kernels")


@pytest.fixture
def native_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan takes every native alternative however its tuned times compare: whether a program
    exists is tuning's call (the compiler's NATIVE_EXTRA budget), which the machine's ISA and
    timing noise decide, and these tests are about the queue."""
    monkeypatch.setattr("aioge.compiler.graph.NATIVE_SLACK_MS", float("inf"))


def _feeds(name: str, seed: int) -> dict[str, np.ndarray]:
    _, feeds, _ = EXAMPLES[name](batch=1)  # type: ignore[call-arg]
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in feeds.items()}


@needs_tier
async def test_concurrent_callers_run_through_the_queue_and_each_gets_its_own_rows(tmp_path, native_plans) -> None:
    graph, _, _ = EXAMPLES["cnn"](batch=1)  # type: ignore[call-arg]
    feeds = [_feeds("cnn", seed) for seed in range(24)]
    async with aioge.Session() as s:
        await s.add_graph(1, graph)
        alone = [await s.run_graph(1, f, trace=tmp_path / "t.json") for f in feeds]
        got: dict[int, dict[str, np.ndarray]] = {}

        async def caller(i: int) -> None:
            for _ in range(3):
                got[i] = await s.run_graph(1, feeds[i])

        async with anyio.create_task_group() as tg:
            for i in range(len(feeds)):
                tg.start_soon(caller, i)
        exe = s.executable(1)
        assert exe.queued_runs > 0, "concurrent callers' programs go through the queue"
    for i, want in enumerate(alone):
        assert np.array_equal(got[i]["logits"], want["logits"]), f"caller {i} got another's rows"


@needs_tier
async def test_cancelled_callers_leave_the_others_their_rows(native_plans) -> None:
    # A cancelled caller waits for its queued program before its context is reused: were it
    # given back at once, the next caller would stage its feeds under a running program.
    graph, _, reference = EXAMPLES["cnn"](batch=1)  # type: ignore[call-arg]
    feeds = [_feeds("cnn", seed) for seed in range(16)]
    async with aioge.Session() as s:
        await s.add_graph(1, graph)
        for f in feeds[:3]:
            await s.run_graph(1, f)
        got: dict[tuple[int, int], np.ndarray] = {}

        async def caller(i: int) -> None:
            for k in range(40):
                with anyio.CancelScope() as scope:
                    if (i + k) % 3 == 0:
                        scope.cancel()  # at its first checkpoint: while its program is queued or running
                    got[i, k] = (await s.run_graph(1, feeds[i]))["logits"]

        async with anyio.create_task_group() as tg:
            for i in range(len(feeds)):
                tg.start_soon(caller, i)
        assert s.executable(1).queued_runs > 0
    assert len(got) > len(feeds) * 20
    for (i, _), logits in got.items():
        np.testing.assert_allclose(logits, reference(feeds[i])["logits"], rtol=1e-4, atol=1e-5)


def _runner_tids() -> set[int]:
    """The queue runner threads of this process (named by csrc/queue.c); other threads come
    and go meanwhile (anyio's idle workers end after a while)."""
    tids = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                if f.read().strip() == "aioge-queue":
                    tids.add(int(task))
        except FileNotFoundError:  # the thread ended meanwhile
            pass
    return tids


def _runners() -> int:
    return len(_runner_tids())


@needs_tier
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads thread affinities in /proc")
async def test_a_sleeping_runner_is_kept_off_the_cpu_of_the_thread_that_polls() -> None:
    """Woken by the loop, a runner landed on the loop's CPU and shared it while the other idled
    (sched_vcpu_pack): a poll (or a push) first lets it run anywhere but the poller's CPU."""
    allowed = os.sched_getaffinity(0)
    gc.collect()
    before = _runner_tids()
    q = ProgramQueue(1)
    try:
        (tid,) = _runner_tids() - before
        await anyio.sleep(0.05)  # past its spin (QSPIN_US): asleep
        assert os.sched_getaffinity(tid) == allowed
        q._arm(q._h)  # what a polling caller does before it waits
        left = os.sched_getaffinity(tid)
        if len(allowed) > 1:
            assert len(left) == len(allowed) - 1 and left < allowed, (allowed, left)
        else:
            assert left == allowed  # one CPU: nowhere else to go
    finally:
        q.close()


@needs_tier
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts named threads in /proc")
async def test_closing_stops_the_runner_threads() -> None:
    gc.collect()  # an earlier session's finalizer stops its runners now, not midway
    before = _runners()
    q = ProgramQueue(2)
    assert _runners() == before + 2
    q.close()
    assert _runners() == before and q.submit(None) is None  # type: ignore[arg-type]  # closed: the caller runs it
    graph, feeds, _ = EXAMPLES["mlp"](batch=1)  # type: ignore[call-arg]
    async with aioge.Session() as s:
        await s.add_graph(1, graph)
        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(s.run_graph, 1, feeds)
        q = s._workers.program_queue()  # type: ignore[union-attr]
        assert q is not None and q._h
    assert not q._h, "the session's close closed its queue"


async def _bursts(s: aioge.Session, feeds: dict[str, np.ndarray], n: int, callers: int = 64) -> None:
    for _ in range(n):  # as the bench's concurrency rounds: the callers of a burst spawned together
        async with anyio.create_task_group() as tg:
            for _ in range(callers):
                tg.start_soon(s.run_graph, 1, feeds)


@needs_tier
async def test_bursts_of_queued_callers_leave_no_cyclic_garbage(native_plans) -> None:
    """A run must free what it made by reference counts alone: garbage in cycles is what makes
    the collector run (and its full collections stall the loop in a process holding many models)."""
    graph, _, _ = EXAMPLES["cnn"](batch=1)  # type: ignore[call-arg]
    feeds = _feeds("cnn", 0)
    async with aioge.Session() as s:
        await s.add_graph(1, graph)
        await _bursts(s, feeds, 3)  # contexts, programs and the queue made
        gc.collect()
        gc.disable()
        try:
            await _bursts(s, feeds, 10)
            assert s.executable(1).queued_runs > 0
            assert gc.collect() == 0, "runs left objects only the collector frees"
        finally:
            gc.enable()


@needs_tier
def test_no_loop_callback_runs_more_than_one_program_while_64_callers_complete(monkeypatch, native_plans) -> None:
    """The loop's thread helps the runners one program per caller's step at most, and the
    eventfd's reader only wakes callers (their outputs are copied in their own steps): a loop
    callback's work is bounded, whatever the callers waiting."""
    from aioge.runtime.native_program import NativeProgram

    ran = [0]
    per_callback: dict[str, int] = {}
    handle_run = asyncio.events.Handle._run

    def counted(self: asyncio.Handle) -> None:
        ran[0] = 0
        handle_run(self)
        what = getattr(self._callback, "__name__", "?")  # type: ignore[attr-defined]
        per_callback[what] = max(per_callback.get(what, 0), ran[0])

    def counting(fn):  # type: ignore[no-untyped-def]
        def run(*args):  # type: ignore[no-untyped-def]
            ran[0] += 1
            return fn(*args)

        return run

    monkeypatch.setattr(NativeProgram, "run_staged", counting(NativeProgram.run_staged))  # run's too
    graph, _, _ = EXAMPLES["cnn"](batch=1)  # type: ignore[call-arg]
    feeds = _feeds("cnn", 0)

    async def main() -> None:
        async with aioge.Session() as s:
            await s.add_graph(1, graph)
            await _bursts(s, feeds, 2)
            q = s._workers.program_queue()  # type: ignore[union-attr]
            take = q._take

            def taking(h: int) -> int:
                took = take(h)
                ran[0] += took
                return took

            q._take = taking
            monkeypatch.setattr(asyncio.events.Handle, "_run", counted)
            before = q.taken
            await _bursts(s, feeds, 20)
            monkeypatch.setattr(asyncio.events.Handle, "_run", handle_run)
            assert q.taken > before, "the loop's thread helped: the case under test happened"

    anyio.run(main, backend="asyncio")
    assert per_callback.get("_readable", 0) == 0, per_callback
    assert max(per_callback.values()) <= 1, per_callback
