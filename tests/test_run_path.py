"""The light run path: feed checks remembered per feed layout (never skipping a check a new
layout needs), runs in flight bounded without a checkpoint while the bound is not reached."""

from __future__ import annotations

import anyio
import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.errors import FeedError
from aioge.runtime.executor import Executable

pytestmark = pytest.mark.anyio


def _graph() -> aioge.Graph:
    g = aioge.Graph("one")
    x = g.input("x", ("N", 4), "float32")
    g.output(ops.relu(x), names=["y"])
    return g


async def test_a_remembered_feed_check_still_rejects_new_layouts() -> None:
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _graph())
        x = np.array([[-1, 2, -3, 4]], np.float32)
        for _ in range(3):
            np.testing.assert_array_equal((await s.run_graph(1, {"x": x}))["y"], [[0, 2, 0, 4]])
        with pytest.raises(FeedError, match="got shape"):
            await s.run_graph(1, {"x": np.zeros((1, 5), np.float32)})
        with pytest.raises(FeedError, match="got dtype float64"):
            await s.run_graph(1, {"x": x.astype(np.float64)})
        with pytest.raises(FeedError, match="unknown inputs"):
            await s.run_graph(1, {"x": x, "z": x})
        np.testing.assert_array_equal((await s.run_graph(1, {"x": [[-1.0, 1.0, 0.0, 2.0]]}))["y"], [[0, 1, 0, 2]])
        for n in range(1, 80):  # more layouts than are remembered: old ones are forgotten, all still checked
            assert (await s.run_graph(1, {"x": np.ones((n, 4), np.float32)}))["y"].shape == (n, 4)
        with pytest.raises(FeedError, match="got shape"):
            await s.run_graph(1, {"x": np.zeros((2, 3), np.float32)})


async def test_runs_in_flight_stay_bounded_and_waiters_can_be_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    running = peak = 0
    real = Executable.run

    async def slow(self, feeds, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            await anyio.sleep(0.01)
            return await real(self, feeds, **kwargs)
        finally:
            running -= 1

    monkeypatch.setattr(Executable, "run", slow)
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _graph())
        gate = s._engines.runs
        done = 0

        async def one() -> None:
            nonlocal done
            await s.run_graph(1, {"x": np.ones((1, 4), np.float32)})
            done += 1

        async with anyio.create_task_group() as tg:
            for _ in range(3 * gate.limit):
                tg.start_soon(one)
            await anyio.sleep(0.001)
            with anyio.move_on_after(0.001):  # a waiter cancelled in the queue gives up its place
                await one()
        assert peak == gate.limit and done == 3 * gate.limit
        assert gate.busy == 0 and not gate.waiters
