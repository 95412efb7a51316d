"""Short runs of one-thread plans run on the event loop's thread (no lane hand-off), within a
budget per turn of the loop; everything else keeps going to the lanes."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.errors import ExecutionError
from aioge.runtime import executor as executor_module
from aioge.runtime import schedule
from tests.runtime.test_executor import _branches

pytestmark = pytest.mark.anyio


def _small(unary: str = "tanh") -> aioge.Graph:
    g = aioge.Graph("small")
    x = g.input("x", (16, 16))
    g.output(getattr(ops, unary)(ops.add(x, 1.0)), names=["y"])
    return g


async def test_short_runs_go_inline_after_the_first_and_stay_exact() -> None:
    rng = np.random.default_rng(0)
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _small())
        xs = [rng.standard_normal((16, 16)).astype(np.float32) for _ in range(20)]
        outs = [await s.run_graph(1, {"x": x}) for x in xs]
        exe = s.executable(1)
        assert exe.thread_groups and len(exe.thread_groups) == 1
        assert exe.inline_runs >= 15, "the first run measures on a lane; the short ones after run inline"
    for x, out in zip(xs, outs):
        np.testing.assert_allclose(out["y"], np.tanh(x + 1), rtol=1e-6)
        assert out["y"].flags.writeable and not np.shares_memory(out["y"], x)


async def test_long_runs_multi_thread_plans_and_traced_runs_use_the_lanes(tmp_path) -> None:
    g = aioge.Graph("long")
    x = g.input("x", (512, 512))
    h = x
    for _ in range(12):
        h = ops.tanh(ops.matmul(h, h))
    g.output(h, names=["y"])
    branches, _ = _branches(n=32)
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, g)
        await s.add_graph(2, branches, {"aioge.exec_threads": "streams"})
        await s.add_graph(3, _small())
        for _ in range(4):
            await s.run_graph(1, {"x": np.full((512, 512), 0.01, np.float32)})
            await s.run_graph(2, {"x": np.ones((32, 32), np.float32)})
        await s.run_graph(3, {"x": np.ones((16, 16), np.float32)})
        before = s.executable(3).inline_runs
        await s.run_graph(3, {"x": np.ones((16, 16), np.float32)}, trace=tmp_path / "t.json")
        assert s.executable(1).inline_runs == 0, "over a millisecond: a lane"
        assert len(s.executable(2).thread_groups) > 1 and s.executable(2).inline_runs == 0
        assert s.executable(3).inline_runs == before, "a traced run goes to its lane"


async def test_a_kernel_error_in_an_inline_run_fails_that_run_only() -> None:
    g = aioge.Graph("gather")
    d, i = g.input("d", (5, 4)), g.input("i", (3,), "int64")
    g.output(ops.gather(d, i, axis=0) * 2.0, names=["y"])
    data = np.arange(20, dtype=np.float32).reshape(5, 4)
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, g)
        for _ in range(3):
            await s.run_graph(1, {"d": data, "i": np.array([0, 1, 2])})
        exe = s.executable(1)
        gather = next(p for p in exe.model.nodes if p.op_type == "Gather")
        before = exe.inline_runs
        with pytest.raises(ExecutionError) as info:
            await s.run_graph(1, {"d": data, "i": np.array([0, 9, 2])})
        assert exe.inline_runs == before + 1 and info.value.node == gather.name and "IndexError" in str(info.value)
        y = (await s.run_graph(1, {"d": data, "i": np.array([4, 3, 0])}))["y"]
        np.testing.assert_array_equal(y, data[[4, 3, 0]] * 2)


async def test_concurrent_short_runs_are_right_and_share_the_cpu_tokens() -> None:
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((16, 16)).astype(np.float32) for _ in range(64)]
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _small())
        await s.run_graph(1, {"x": xs[0]})
        results: dict[int, np.ndarray] = {}

        async def one(k: int) -> None:
            results[k] = (await s.run_graph(1, {"x": xs[k]}))["y"]

        async with anyio.create_task_group() as tg:
            for k in range(64):
                tg.start_soon(one, k)
        workers = s._workers
        assert workers is not None and workers.cpu._value == workers.cpu_slots, "every token given back"
    for k, x in enumerate(xs):
        np.testing.assert_allclose(results[k], np.tanh(x + 1), rtol=1e-6)


async def test_the_inline_budget_bounds_each_turn_of_the_loop() -> None:
    """Runs past ``INLINE_BUDGET`` in one turn of the loop go to the lanes; the budget comes
    back once the loop has polled again, on asyncio and trio."""
    budget = schedule.InlineBudget()
    assert budget.allows()
    budget.spend(schedule.INLINE_BUDGET)
    assert not budget.allows(), "spent: the rest of this turn's runs go to the lanes"
    budget.spend(0.001)  # spent again in the same turn: still one reset scheduled
    assert not budget.allows()
    for _ in range(20):  # trio runs its run_sync_soon callbacks from a system task: a few turns
        await anyio.lowlevel.checkpoint()
        if budget.allows():
            break
    assert budget.allows() and budget.used == 0.0, "a new turn"
    budget.spend(0.001)
    assert budget.allows() and budget.pending


async def test_an_inline_run_lends_its_kernels_the_other_cores_to_split_onto(monkeypatch) -> None:
    """An inline run holds every CPU token, so its kernels may split onto the other cores: they
    run with ``EngineWorkers.inline_spare`` lent (``kernels.parallel.cpu_tokens``), the cores
    less one. Before, an inline run lent none and every kernel in it ran whole."""
    from aioge.kernels import parallel

    lent: list[object] = []
    real = executor_module._execute

    def watched(ctx, program, trace):  # type: ignore[no-untyped-def]
        lent.append(parallel._tokens.get())
        return real(ctx, program, trace)

    monkeypatch.setattr(executor_module, "_execute", watched)
    rng = np.random.default_rng(1)
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _small("sin"))  # Sin has no C form: the plan runs step by step
        await s.build_graph(1)
        inline = 0
        for _ in range(8):
            x = rng.standard_normal((16, 16)).astype(np.float32)
            before = s.executable(1).inline_runs
            lent.clear()
            out = await s.run_graph(1, {"x": x})
            np.testing.assert_allclose(out["y"], np.sin(x + 1), rtol=1e-6)
            if s.executable(1).inline_runs > before:
                inline += 1
                workers = s._workers
                assert workers is not None and lent == [workers.inline_spare]
                assert workers.inline_spare._value == workers.cpu_slots - 1  # type: ignore[attr-defined]
        assert inline >= 5


async def test_short_runs_the_loop_cannot_take_share_one_lane_and_long_ones_rotate(monkeypatch) -> None:
    """Many callers of a short graph spend the loop's inline budget; the rest of their runs
    queue on one lane, so two lanes never ping-pong the GIL between small kernels (the
    transformer example's unbatched serving: 968 -> 1413 req/s). Runs over a millisecond
    still rotate over the lanes, one per core."""
    import threading

    lanes: list[str] = []
    real = executor_module._run_program

    def watched(ctx, program, trace, cpu, done):  # type: ignore[no-untyped-def]
        lanes.append(threading.current_thread().name)
        return real(ctx, program, trace, cpu, done)

    monkeypatch.setattr(executor_module, "_run_program", watched)
    monkeypatch.setattr(schedule, "INLINE_BUDGET", 0.0)  # every caller finds the loop's budget spent
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((16, 16)).astype(np.float32) for _ in range(24)]
    outs: dict[int, dict[str, np.ndarray]] = {}
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _small("sin"))  # no C form: the plan runs step by step
        await s.run_graph(1, {"x": xs[0]})  # measures the run: short from now on
        assert s.executable(1).short
        lanes.clear()

        async def call(i: int) -> None:
            outs[i] = await s.run_graph(1, {"x": xs[i]})

        async with anyio.create_task_group() as tg:
            for i in range(len(xs)):
                tg.start_soon(call, i)
        assert len(lanes) == len(xs) and len(set(lanes)) == 1, lanes
        for i, x in enumerate(xs):
            np.testing.assert_allclose(outs[i]["y"], np.sin(x + 1), rtol=1e-6)
        monkeypatch.setattr(schedule, "INLINE_US", 0.0)  # now every run counts as long
        assert not s.executable(1).short
        lanes.clear()
        for x in xs[:4]:
            await s.run_graph(1, {"x": x})
        workers = s._workers
        assert workers is not None and len(set(lanes)) == min(4, workers.cpu_slots), lanes


async def test_run_graph_here_runs_a_built_layout_in_the_calling_thread() -> None:
    # aioge.torch's synchronous calls: a layout run_graph built runs in the caller's thread
    # (a worker thread here), by its native program or its steps, with no hop to the loop.
    gather = aioge.Graph("gather")
    d, i = gather.input("d", (5, 4)), gather.input("i", (3,), "int64")
    gather.output(ops.gather(d, i, axis=0) * 2.0, names=["y"])
    data = np.arange(20, dtype=np.float32).reshape(5, 4)
    x = np.linspace(-1, 1, 256, dtype=np.float32).reshape(16, 16)
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _small())
        await s.add_graph(2, gather)
        assert s.run_graph_here(1, {"x": x}) is None, "not built yet: the caller awaits run_graph"
        await s.run_graph(1, {"x": x})
        await s.run_graph(2, {"d": data, "i": np.array([0, 1, 2])})
        assert s.run_graph_here(1, {"x": x[:8]}) is None, "a layout not built: None"
        small, gathered = s.executable(1), s.executable(2)
        before = (small.here_runs, gathered.here_runs)
        y = await anyio.to_thread.run_sync(s.run_graph_here, 1, {"x": x})
        g = await anyio.to_thread.run_sync(s.run_graph_here, 2, {"d": data, "i": np.array([4, 3, 0])})
        assert y is not None and g is not None
        np.testing.assert_allclose(y["y"], np.tanh(x + 1), rtol=1e-6)
        np.testing.assert_array_equal(g["y"], data[[4, 3, 0]] * 2)
        assert (small.here_runs, gathered.here_runs) == (before[0] + 1, before[1] + 1)
        # A kernel error is raised to the caller; the context goes back to the pool for the next run.
        with pytest.raises(ExecutionError) as info:
            await anyio.to_thread.run_sync(s.run_graph_here, 2, {"d": data, "i": np.array([0, 9, 2])})
        assert "IndexError" in str(info.value) and gathered.pool_size >= 1
        # A token taken (another run in flight): None, and every token is still there after.
        workers = s._workers
        assert workers is not None and workers.cpu.take_all()
        try:
            assert await anyio.to_thread.run_sync(s.run_graph_here, 1, {"x": x}) is None
        finally:
            workers.cpu.give_all()
        assert workers.cpu._value == workers.cpu_slots


async def test_run_graph_here_declines_host_mode_and_multi_thread_plans() -> None:
    branches, weights = _branches(n=32)
    x = np.ones((32, 32), np.float32)
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _small(), {"aioge.exec_mode": "host"})
        await s.add_graph(2, branches, {"aioge.exec_threads": "streams"})
        await s.run_graph(1, {"x": x[:16, :16]})
        await s.run_graph(2, {"x": x})
        assert len(s.executable(2).thread_groups) > 1
        assert s.run_graph_here(1, {"x": x[:16, :16]}) is None
        assert s.run_graph_here(2, {"x": x}) is None
        assert s.executable(1).here_runs == s.executable(2).here_runs == 0
