"""SingleFlight: one computation per key for concurrent callers, errors shared, a cancelled
leader replaced by a waiter, and no entry left behind — on asyncio and trio."""

from __future__ import annotations

import anyio
import pytest

from aioge._util.singleflight import SingleFlight

pytestmark = pytest.mark.anyio


async def test_concurrent_callers_share_one_run() -> None:
    sf: SingleFlight[str, int] = SingleFlight()
    runs = 0
    results: list[tuple[int, bool]] = []

    async def work() -> int:
        nonlocal runs
        runs += 1
        await anyio.sleep(0.02)
        return 42

    async def call() -> None:
        results.append(await sf.run("k", work))

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(call)
    assert runs == 1
    assert sorted(results) == [(42, False)] + [(42, True)] * 19
    assert len(sf) == 0


async def test_different_keys_run_separately() -> None:
    sf: SingleFlight[str, str] = SingleFlight()
    seen: list[str] = []

    async def work(k: str) -> str:
        seen.append(k)
        await anyio.sleep(0.01)
        return k.upper()

    out: dict[str, str] = {}

    async def call(k: str) -> None:
        out[k] = (await sf.run(k, lambda: work(k)))[0]

    async with anyio.create_task_group() as tg:
        for k in "abcab":
            tg.start_soon(call, k)
    assert sorted(seen) == ["a", "b", "c"] and out == {"a": "A", "b": "B", "c": "C"}
    assert len(sf) == 0


async def test_leader_error_reaches_every_waiter_and_is_not_cached() -> None:
    sf: SingleFlight[str, int] = SingleFlight()
    runs = 0

    async def boom() -> int:
        nonlocal runs
        runs += 1
        await anyio.sleep(0.02)
        raise ValueError("compile failed")

    errors: list[BaseException] = []

    async def call() -> None:
        try:
            await sf.run("k", boom)
        except ValueError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(call)
    assert runs == 1 and len(errors) == 5 and all(str(e) == "compile failed" for e in errors)
    assert len(sf) == 0

    async def ok() -> int:
        return 7

    assert await sf.run("k", ok) == (7, False)  # the failure was not cached
    assert len(sf) == 0


async def test_cancelled_leader_hands_over_to_a_waiter() -> None:
    sf: SingleFlight[str, int] = SingleFlight()
    runs = 0
    started = anyio.Event()

    async def work() -> int:
        nonlocal runs
        runs += 1
        started.set()
        await anyio.sleep(0.05)
        return runs

    results: list[tuple[int, bool]] = []

    async def waiter() -> None:
        results.append(await sf.run("k", work))

    leader_scope = anyio.CancelScope()

    async def leader() -> None:
        with leader_scope:
            await sf.run("k", work)

    async with anyio.create_task_group() as tg:
        tg.start_soon(leader)
        await started.wait()
        for _ in range(3):
            tg.start_soon(waiter)
        await anyio.sleep(0.01)
        leader_scope.cancel()
    assert runs == 2  # the leader's run was abandoned; one waiter ran it again
    assert sorted(r[0] for r in results) == [2, 2, 2]
    assert sorted(r[1] for r in results) == [False, True, True]
    assert len(sf) == 0


async def test_everyone_cancelled_leaves_nothing_behind() -> None:
    sf: SingleFlight[str, int] = SingleFlight()

    async def forever() -> int:
        await anyio.sleep(10)
        return 0

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(sf.run, "k", forever)
        await anyio.sleep(0.01)
        assert len(sf) == 1 and "k" in sf
        tg.cancel_scope.cancel()
    assert len(sf) == 0


async def test_leader_cancelled_during_a_thread_still_serves_its_waiters_or_hands_over() -> None:
    sf: SingleFlight[str, int] = SingleFlight()
    calls = 0

    def blocking() -> int:
        nonlocal calls
        calls += 1
        import time

        time.sleep(0.03)
        return 5

    async def work() -> int:
        return await anyio.to_thread.run_sync(blocking)

    got: list[int] = []

    async def waiter() -> None:
        got.append((await sf.run("k", work))[0])

    async with anyio.create_task_group() as tg:
        with anyio.move_on_after(0.01):
            tg.start_soon(waiter)
            await sf.run("k", work)
    assert got == [5] and 1 <= calls <= 2
    assert len(sf) == 0
