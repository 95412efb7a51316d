"""Engine lanes: real threads per engine, distinct lanes per run, FIFO order shared by all lanes,
and thread-to-loop wake-ups that never block the worker."""

from __future__ import annotations

import threading
import time

import anyio
import pytest
import sniffio

from aioge.runtime.workers import Completion, EngineWorkers

pytestmark = pytest.mark.anyio


def test_lanes_are_distinct_per_run_and_rotate_across_runs() -> None:
    pool = EngineWorkers(min_lanes=2)
    try:
        first = pool.lanes({"AiCore": 4, "AiCpu": 1})
        assert len(set(map(id, first["AiCore"]))) == 4, "a run's streams never share a lane"
        assert pool.threads == 4 + 2  # AiCore grew to 4 lanes; AiCpu has its minimum of 2
        singles = [pool.lanes({"AiCpu": 1})["AiCpu"][0] for _ in range(4)]
        assert len({id(lane) for lane in singles}) == 2, "one-stream runs spread over the engine's lanes"
        names = {lane.name for lane in first["AiCore"]}
        assert names == {f"aioge-AiCore-{k}" for k in range(4)}
        threads = [lane._thread for lane in first["AiCore"]]
        assert all(t.is_alive() and t in threading.enumerate() for t in threads), "lanes are real threads"
    finally:
        pool.close()
    # Other sessions in this process may have lanes of the same names: check this pool's own threads.
    assert not any(t.is_alive() for t in threads), "close() stops and joins the lanes"
    with pytest.raises(RuntimeError, match="closed"):
        pool.lanes({"AiCore": 1})


def test_the_whole_run_lanes_share_one_queue_one_thread_per_cpu_slot() -> None:
    # Items on the whole-run lane go to whichever of its threads is free: two block each other
    # at a barrier (broken, and the test fails, unless both threads run at once), and a third
    # queued behind them still runs; close stops every thread after the work queued.
    pool = EngineWorkers(cpu_slots=2)
    both = threading.Barrier(2, timeout=10)
    seen: list[str] = []
    done = threading.Event()
    lane = pool.whole_lane()
    assert pool.whole_lane() is lane and pool.threads == 2
    for _ in range(2):
        pool.enqueue([(lane, lambda: (both.wait(), seen.append(threading.current_thread().name)))])
    pool.enqueue([(lane, done.set)])
    assert done.wait(10)
    threads = [t for t in threading.enumerate() if t.name.startswith("aioge-whole-")]
    pool.close()
    assert sorted(seen) == ["aioge-whole-0", "aioge-whole-1"] and not both.broken
    assert threads and not any(t.is_alive() for t in threads)


def test_lanes_run_their_items_in_order_on_their_own_thread() -> None:
    pool = EngineWorkers(min_lanes=1)
    try:
        (lane,) = pool.lanes({"AiVec": 1})["AiVec"]
        seen: list[tuple[int, str]] = []
        done = threading.Event()
        pool.enqueue([(lane, lambda k=k: seen.append((k, threading.current_thread().name))) for k in range(50)])
        pool.enqueue([(lane, done.set)])
        assert done.wait(5)
        assert [k for k, _ in seen] == list(range(50))
        assert {name for _, name in seen} == {lane.name}
    finally:
        pool.close()


def test_runs_enqueued_atomically_cannot_deadlock_on_shared_lanes() -> None:
    """Run A: lane 0 waits for an event lane 1 sets. Run B: the mirror image. Were B's lane-1
    item queued before A's, lane 1 would wait for B's setter behind A's waiter on lane 0: a
    cycle. Enqueuing each run at once keeps one order of runs on every lane."""
    pool = EngineWorkers(min_lanes=2)
    try:
        lanes = pool.lanes({"AiCore": 2})["AiCore"]
        for _ in range(20):
            a, b = threading.Event(), threading.Event()
            pool.enqueue([(lanes[0], a.wait), (lanes[1], a.set)])
            pool.enqueue([(lanes[1], b.wait), (lanes[0], b.set)])
        flag = threading.Event()
        pool.enqueue([(lanes[0], flag.set)])
        assert flag.wait(5), "the lanes deadlocked"
    finally:
        pool.close()


def test_an_item_that_raises_does_not_kill_its_lane(caplog: pytest.LogCaptureFixture) -> None:
    pool = EngineWorkers(min_lanes=1)
    try:
        (lane,) = pool.lanes({"AiCpu": 1})["AiCpu"]
        ok = threading.Event()

        def boom() -> None:
            raise ValueError("boom")

        pool.enqueue([(lane, boom), (lane, ok.set)])
        assert ok.wait(5)
        assert "an item raised" in caplog.text
    finally:
        pool.close()


async def test_completion_wakes_the_loop_from_foreign_threads_without_blocking_them() -> None:
    done = Completion(3)
    returned = threading.Semaphore(0)

    def tick_later() -> None:
        time.sleep(0.01)
        done.tick()
        returned.release()

    threads = [threading.Thread(target=tick_later) for _ in range(3)]
    for th in threads:
        th.start()
    # The loop is blocked here: a tick() that waited for it would never return. Not a
    # measured time (a loaded machine stalls a thread for longer than any bound).
    assert all(returned.acquire(timeout=30) for _ in range(3)), "tick() never waits for the loop"
    with anyio.fail_after(5):
        await done.wait()
    for th in threads:
        th.join()
    with anyio.fail_after(5):
        await Completion(0).wait()


async def test_shielded_wait_survives_cancellation() -> None:
    done = Completion(1)
    timer = threading.Timer(0.05, done.tick)
    timer.start()
    waited = False
    with anyio.move_on_after(0.001) as scope:
        try:
            await done.wait()
        finally:
            await done.wait_shielded()  # the worker still owns what we share: wait for it anyway
            waited = True
    assert scope.cancelled_caught and waited


def test_unclosed_pools_stop_their_lanes_when_collected() -> None:
    import gc

    pool = EngineWorkers(min_lanes=2)
    pool.lanes({"AiCore": 3, "AiVec": 1})
    threads = [lane._thread for lane in pool._started]
    assert len(threads) == 5 and all(t.is_alive() for t in threads)
    del pool
    gc.collect()
    for t in threads:
        t.join(5.0)
    assert not any(t.is_alive() for t in threads), "a pool dropped without close() leaked its lane threads"


def test_closed_pools_detach_their_finalizer() -> None:
    pool = EngineWorkers(min_lanes=1)
    pool.lanes({"AiCpu": 1})
    assert pool._finalizer.alive
    pool.close()
    assert not pool._finalizer.alive, "close() already stopped the lanes; the finalizer must not run again"


async def test_an_event_waited_again_after_a_cancelled_wait_still_waits_for_set() -> None:
    """new_event (a bare future on asyncio): a cancelled wait must not end a later shielded
    one (a run's Completion is waited for shielded after its first wait was cancelled)."""
    from aioge.runtime.workers import FutureEvent, new_event

    ev = new_event()
    assert isinstance(ev, FutureEvent) == (sniffio.current_async_library() == "asyncio")
    with anyio.move_on_after(0.01) as scope:
        await ev.wait()
    assert scope.cancelled_caught and not ev.is_set()
    woke: list[float] = []

    async def shielded() -> None:
        with anyio.CancelScope(shield=True):
            await ev.wait()
        woke.append(anyio.current_time())

    async with anyio.create_task_group() as tg:
        tg.start_soon(shielded)
        await anyio.sleep(0.02)
        assert woke == []
        set_at = anyio.current_time()
        ev.set()
    assert ev.is_set() and woke and woke[0] >= set_at
    await ev.wait()  # set: returns at once
