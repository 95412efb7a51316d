"""schedule.choose: the one place a run's strategy is picked, from the caller's placement and the plan's state."""

from __future__ import annotations

from types import SimpleNamespace

import anyio
import pytest

from aioge._util import backend
from aioge.runtime.schedule import Placement, Strategy, choose

Q, ALONE, SPLIT, WHOLE = Placement.QUEUE, Placement.INLINE, Placement.LANE_SPLIT, Placement.LANE_WHOLE


def _pick(
    placement: Placement,
    *,
    native: bool = True,
    short: bool = True,
    contended: bool = False,
    tokens: bool = True,
    queue: bool = True,
    traced: bool = False,
    mode: str = "sink",
    devices: bool | None = None,
    lane_runs: int = 0,
) -> tuple[Strategy, bool]:
    """The strategy, and whether choose took every CPU token."""
    taken = []
    exe = SimpleNamespace(short=short, native_ok=None if native else False, callers=SimpleNamespace(contended=lambda: contended))
    workers = SimpleNamespace(
        program_queue=lambda: object() if queue else None,
        cpu=SimpleNamespace(take_all=lambda: bool(taken.append(tokens) or tokens)),
        lane_runs=lane_runs,
    )
    pool = None if devices is None else SimpleNamespace(eligible=lambda e: devices)
    strategy = choose(exe, workers, mode=mode, placement=placement, traced=traced, devices=pool)  # type: ignore[arg-type]
    return strategy, any(taken)


@pytest.mark.parametrize(
    ("placement", "facts", "want", "holds_tokens"),
    [
        (Q, {"mode": "host"}, Strategy.HOST, False),
        (Q, {"devices": True}, Strategy.DEVICES, False),
        (Q, {"devices": True, "traced": True}, Strategy.LANES, False),  # traced: step by step, here
        (Q, {"devices": False}, Strategy.NATIVE_INLINE, True),
        (Q, {"contended": True}, Strategy.NATIVE_QUEUE, False),
        (Q, {"contended": True, "queue": False}, Strategy.NATIVE_INLINE, True),
        (ALONE, {"contended": True}, Strategy.NATIVE_INLINE, True),  # a batch alone is never queued
        (ALONE, {"tokens": False}, Strategy.NATIVE_LANE_SPLIT, False),  # a lane computes: off the loop
        (Q, {"short": False}, Strategy.NATIVE_QUEUE_SPLIT, True),  # a lone caller's long run: the C runner, splitting
        (Q, {"short": False, "tokens": False}, Strategy.NATIVE_LANE_SPLIT, False),
        (Q, {"short": False, "queue": False}, Strategy.NATIVE_LANE_SPLIT, False),
        (ALONE, {"short": False}, Strategy.NATIVE_LANE_SPLIT, False),  # a batch alone is never queued
        (Q, {"short": False, "lane_runs": 1}, Strategy.NATIVE_LANE_WHOLE, False),  # beside another: whole
        (Q, {"tokens": False, "lane_runs": 3}, Strategy.NATIVE_LANE_WHOLE, False),
        (SPLIT, {"lane_runs": 1}, Strategy.NATIVE_LANE_SPLIT, False),  # asked for: kept
        (SPLIT, {}, Strategy.NATIVE_LANE_SPLIT, False),
        (WHOLE, {}, Strategy.NATIVE_LANE_WHOLE, False),
        (WHOLE, {"contended": True}, Strategy.NATIVE_LANE_WHOLE, False),
        (Q, {"native": False}, Strategy.INLINE, True),
        (ALONE, {"native": False, "tokens": False}, Strategy.LANES, False),
        (WHOLE, {"native": False}, Strategy.LANES, False),
        (Q, {"native": False, "short": False}, Strategy.LANES, False),
        (Q, {"traced": True}, Strategy.LANES, False),
    ],
)
def test_choose_picks_one_strategy_per_placement_and_state(
    placement: Placement, facts: dict, want: Strategy, holds_tokens: bool
) -> None:
    assert _pick(placement, **facts) == (want, holds_tokens)


@pytest.mark.anyio
async def test_the_backend_is_the_running_librarys(anyio_backend_name: str) -> None:
    b = backend.current()
    assert b.name == anyio_backend_name
    ids: list[int] = []
    done = anyio.Event()

    async def task() -> None:
        ids.append(b.task())
        await done.wait()  # alive (its identity not reused) until both have told theirs

    async with anyio.create_task_group() as tg:
        tg.start_soon(task)
        tg.start_soon(task)
        while len(ids) < 2:
            await anyio.sleep(0)
        assert len({*ids, b.task()}) == 3  # every task its own identity
        done.set()
    ev = b.event_factory()()
    called: list[int] = []
    b.call_soon(lambda: (called.append(1), ev.set()))
    await ev.wait()
    assert called == [1] and await b.to_thread(sum, (1, 2)) == 3
