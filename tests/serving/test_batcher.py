"""Dynamic batching: concurrent runs stacked into one, each caller gets exactly its rows
(bit-identical to running alone), bad feeds and cancellations stay with their request,
a kernel fault fails only its own request, batches in flight are bounded, statistics are kept."""

from __future__ import annotations

import re
from typing import TypeVar

import anyio
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aioge
import aioge.session
from aioge import ops
from aioge.errors import ExecutionError, FeedError, GraphError
from aioge.serving.batcher import PROBE_EVERY, SPLIT_AFTER, Batcher

T = TypeVar("T")

pytestmark = pytest.mark.anyio


class FakeClock:
    """The batcher's clock (its ``time.perf_counter``), moved only by the fake kernels below:
    a batch measures exactly the time its kernel says it took, however loaded the machine
    (real sleeps measured on a loaded machine made a fast batch look slow)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import types

        import aioge.serving.batcher as batcher

        self.now = 1000.0
        monkeypatch.setattr(batcher, "time", types.SimpleNamespace(perf_counter=lambda: self.now))

    async def run_for(self, seconds: float) -> None:
        """A kernel that takes ``seconds`` beside any other: it ends ``seconds`` after it
        started. Ten checkpoints: a leader woken when this batch was taken (a step or two to
        its own) takes its batch before this one ends, in any scheduling order (trio shuffles
        its run queue within a batch of ready tasks)."""
        start = self.now
        for _ in range(10):
            await anyio.lowlevel.checkpoint()
        self.now = max(self.now, start + seconds)

    async def step(self, seconds: float) -> None:
        """One step of a shared core: the clock moves for every kernel on it."""
        self.now += seconds
        await anyio.lowlevel.checkpoint()


W = np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32)
W2 = np.random.default_rng(1).standard_normal((32, 4)).astype(np.float32)
SESSION = {"aioge.tune_mode": "heuristic"}


def _mlp() -> aioge.Graph:
    g = aioge.Graph("mlp")
    x = g.input("x", ("N", 16), "float32")
    h = ops.relu(ops.matmul(x, g.constant(W)))
    g.output(ops.softmax(ops.matmul(h, g.constant(W2)), axis=-1), names=["y"])
    return g


def _ref(x: np.ndarray) -> np.ndarray:
    z = np.maximum(x @ W, 0) @ W2
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _rows(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 16)).astype(np.float32)


# One batch size (8): a request runs padded to 8 rows alone or in a batch, so the same kernels
# see its rows at the same places in every case, and the results must agree to the bit.
BATCH8 = {"aioge.batch_max_rows": "8", "aioge.batch_preferred_sizes": "8", "aioge.batch_max_delay_us": "2000"}


async def _arrivals(backend_pattern: list[tuple[int, int]]) -> None:
    async with aioge.Session(SESSION) as s:
        await s.add_graph(1, _mlp(), BATCH8)
        feeds = [_rows(i, n) for i, (n, _) in enumerate(backend_pattern)]
        alone = [(await s.run_graph(1, {"x": x}))["y"] for x in feeds]  # one at a time: each is a batch of its own
        got: dict[int, np.ndarray] = {}

        async def one(i: int, delay_us: int) -> None:
            await anyio.sleep(delay_us / 1e6)
            got[i] = (await s.run_graph(1, {"x": feeds[i]}))["y"]

        async with anyio.create_task_group() as tg:
            for i, (_, delay) in enumerate(backend_pattern):
                tg.start_soon(one, i, delay)
        for i, x in enumerate(feeds):
            assert got[i].shape == (len(x), 4)
            np.testing.assert_array_equal(got[i], alone[i])  # bit-identical
            np.testing.assert_allclose(got[i], _ref(x), rtol=1e-5, atol=1e-6)
        stats = s.batch_stats(1)
        assert stats.requests == 2 * len(feeds) and stats.rows == 2 * sum(len(x) for x in feeds)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pattern=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 3000)), min_size=1, max_size=14))
def test_each_caller_gets_exactly_its_rows_whatever_the_arrivals(backend: str, pattern: list[tuple[int, int]]) -> None:
    anyio.run(_arrivals, pattern, backend=backend)


async def test_concurrent_calls_are_stacked_and_statistics_kept() -> None:
    async with aioge.Session(SESSION) as s:
        await s.add_graph(1, _mlp(), {"aioge.batch_max_rows": "16", "aioge.batch_max_delay_us": "20000"})
        got: dict[int, np.ndarray] = {}

        async def one(i: int) -> None:
            got[i] = (await s.run_graph(1, {"x": _rows(i, 1)}))["y"]

        async with anyio.create_task_group() as tg:
            for i in range(32):
                tg.start_soon(one, i)
        for i in range(32):
            np.testing.assert_allclose(got[i], _ref(_rows(i, 1)), rtol=1e-5, atol=1e-6)
        stats = s.batch_stats(1)
        assert stats.requests == 32 and stats.rows == 32
        assert stats.batches <= 4 and stats.mean_batch_rows >= 8, stats
        assert 0 <= stats.queue_delay_p50 <= stats.queue_delay_p99 < 1.0
        assert set(stats.as_dict()) == {"batches", "requests", "rows", "mean_batch_rows", "queue_delay_p50", "queue_delay_p99"}
        await s.add_graph(2, _mlp())
        with pytest.raises(GraphError, match="does not batch"):
            s.batch_stats(2)


async def test_session_run_batches_too() -> None:
    g = _mlp()
    async with aioge.Session(SESSION) as s:
        got: dict[int, np.ndarray] = {}

        async def one(i: int) -> None:
            got[i] = (await s.run(g, {"x": _rows(i, 2)}, {"aioge.batch_max_rows": "8"}))["y"]

        async with anyio.create_task_group() as tg:
            for i in range(12):
                tg.start_soon(one, i)
        for i in range(12):
            np.testing.assert_allclose(got[i], _ref(_rows(i, 2)), rtol=1e-5, atol=1e-6)


async def test_buckets_are_compiled_up_front(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = aioge.session.compile_graph

    async def counting(graph, signature, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(signature)
        return await real(graph, signature, *args, **kwargs)

    monkeypatch.setattr(aioge.session, "compile_graph", counting)
    async with aioge.Session(SESSION) as s:
        await s.add_graph(1, _mlp(), {"aioge.batch_max_rows": "12"})
        assert sorted(sig[0][1][0] for sig in calls) == [1, 2, 4, 8, 12]  # type: ignore[index]
        calls.clear()
        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(s.run_graph, 1, {"x": _rows(i, 1 + i % 3)})
        await s.run_graph(1, {"x": _rows(0, 11)})
        assert calls == []


async def test_batching_pads_to_gears_when_gears_are_set() -> None:
    options = {"ge.inputShape": "x:-1,16", "ge.dynamicBatchSize": "2,6", "aioge.batch_max_rows": "64"}
    async with aioge.Session(SESSION) as s:
        await s.add_graph(1, _mlp(), options)
        got: dict[int, np.ndarray] = {}

        async def one(i: int) -> None:
            got[i] = (await s.run_graph(1, {"x": _rows(i, 1 + i % 2)}))["y"]

        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(one, i)
        for i in range(10):
            np.testing.assert_allclose(got[i], _ref(_rows(i, 1 + i % 2)), rtol=1e-5, atol=1e-6)
        assert s.batch_stats(1).mean_batch_rows <= 6  # the largest gear bounds a batch


async def test_a_bad_feed_fails_only_its_own_request() -> None:
    async with aioge.Session(SESSION) as s:
        await s.add_graph(1, _mlp(), {"aioge.batch_max_rows": "8", "aioge.batch_max_delay_us": "20000"})
        out: dict[int, object] = {}
        bad = {3: np.zeros((1, 15), np.float32), 5: np.zeros((1, 16), np.float64), 6: np.zeros(16, np.float32)}

        async def one(i: int) -> None:
            try:
                out[i] = (await s.run_graph(1, {"x": bad.get(i, _rows(i, 1))}))["y"]
            except FeedError as exc:
                out[i] = exc

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(one, i)
        for i in range(8):
            if i in bad:
                assert isinstance(out[i], FeedError)
            else:
                np.testing.assert_allclose(out[i], _ref(_rows(i, 1)), rtol=1e-5, atol=1e-6)  # type: ignore[arg-type]
        assert "expects" in str(out[3]) and "float64" in str(out[5]) and "got shape (16,)" in str(out[6])
        assert s.batch_stats(1).requests == 5


async def test_a_kernel_fault_fails_only_its_own_request() -> None:
    # One batch of four whose run fails on one caller's value: it runs again in halves, and
    # only that caller gets the error (before, all four did).
    g = aioge.Graph("parse")
    t = g.input("t", ("N",), "str")
    g.output(ops.add(ops.cast(t, to="float32", name="parse"), 1.0), names=["v"])
    async with aioge.Session(SESSION) as s:
        await s.add_graph(1, g, {"aioge.batch_max_rows": "4", "aioge.batch_max_delay_us": "50000"})
        out: dict[int, object] = {}

        async def one(i: int) -> None:
            try:
                out[i] = (await s.run_graph(1, {"t": np.array(["two" if i == 1 else f"{i}.5"])}))["v"]
            except ExecutionError as exc:
                out[i] = exc

        async with anyio.create_task_group() as tg:
            for i in range(4):  # one batch of four
                tg.start_soon(one, i)
        assert isinstance(out[1], ExecutionError) and "two" in str(out[1]), out
        for i in (0, 2, 3):
            np.testing.assert_array_equal(out[i], [i + 1.5])
        assert s.batch_stats(1).batches == 1
        np.testing.assert_array_equal((await s.run_graph(1, {"t": np.array(["1.5"])}))["v"], [2.5])


async def test_one_bad_index_among_twenty_fails_alone() -> None:
    # An out-of-range GatherElements index passes every feed check and makes the kernel raise:
    # the batch is bisected, 19 callers get their rows, the bad one the error.
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    g = aioge.Graph("gather")
    idx = g.input("i", ("N", 6), "int64")
    g.output(ops.gather_elements(g.constant(data), idx, axis=0), names=["y"])
    feeds = [np.random.default_rng(i).integers(0, 4, (1 + i % 3, 6)) for i in range(20)]
    feeds[13][-1, 2] = 4
    async with aioge.Session(SESSION) as s:
        await s.add_graph(1, g, {"aioge.batch_max_rows": "64", "aioge.batch_max_delay_us": "200000"})
        out: dict[int, object] = {}

        async def one(i: int) -> None:
            try:
                out[i] = (await s.run_graph(1, {"i": feeds[i]}))["y"]
            except ExecutionError as exc:
                out[i] = exc

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(one, i)
        # the step's IndexError, or the native program's (GatherElements has a C form: issue 41)
        assert isinstance(out[13], ExecutionError) and re.search("index out of range|an index outside its axis", str(out[13]))
        for i in set(range(20)) - {13}:
            np.testing.assert_array_equal(out[i], np.take_along_axis(data, feeds[i], axis=0))
        assert s.batch_stats(1).requests == 20


async def test_a_cancelled_caller_is_dropped_and_the_others_run() -> None:
    async with aioge.Session(SESSION) as s:
        # A 10 s delay: the batch forms until it is full, never on a timer (a loaded machine
        # once ran it before the cancellations).
        await s.add_graph(1, _mlp(), {"aioge.batch_max_rows": "8", "aioge.batch_max_delay_us": "10000000"})
        got: dict[int, np.ndarray] = {}
        scopes: dict[int, anyio.CancelScope] = {}

        async def one(i: int) -> None:
            with anyio.CancelScope() as scope:
                scopes[i] = scope
                got[i] = (await s.run_graph(1, {"x": _rows(i, 1)}))["y"]

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for i in range(6):
                    tg.start_soon(one, i)
                await anyio.wait_all_tasks_blocked()  # all queued, the batch still forming
                scopes[0].cancel()  # the one leading the batch
                scopes[3].cancel()
                await anyio.wait_all_tasks_blocked()
                for i in range(6, 10):  # four more fill the batch: 8 rows, one run
                    tg.start_soon(one, i)
        assert sorted(got) == [1, 2, 4, 5, 6, 7, 8, 9]
        for i in got:
            np.testing.assert_allclose(got[i], _ref(_rows(i, 1)), rtol=1e-5, atol=1e-6)
        stats = s.batch_stats(1)
        assert stats.requests == 8 and stats.batches == 1


async def test_batches_in_flight_are_bounded_and_the_lead_moves_on() -> None:
    running = peak = 0

    async def run(feeds: dict[str, np.ndarray], alone: bool) -> dict[str, np.ndarray]:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.01)
        running -= 1
        return {"y": feeds["x"] * 2, "n": np.array(len(feeds["x"]))}

    b = Batcher(run, max_rows=3, max_delay=0.0, batched=frozenset({"y"}), in_flight=2)
    got: dict[int, dict[str, np.ndarray]] = {}

    async def one(i: int) -> None:
        got[i] = await b.submit({"x": np.full((1, 2), i)}, 1)

    async with anyio.create_task_group() as tg:
        for i in range(30):
            tg.start_soon(one, i)
    assert peak == 2
    for i in range(30):
        np.testing.assert_array_equal(got[i]["y"], np.full((1, 2), 2 * i))
        assert 1 <= int(got[i]["n"]) <= 3  # unbatched outputs go whole to each request
    stats = b.stats()
    assert stats.requests == 30 and stats.batches >= 10 and stats.mean_batch_rows > 1


async def test_the_runner_learns_whether_requests_queue_behind_a_batch() -> None:
    # 5 one-row requests at once, batches of at most 3: the first batch leaves 2 queued, the
    # second leaves none (a session then runs a short batch on the loop's thread)
    seen: list[tuple[int, bool]] = []

    async def run(feeds: dict[str, np.ndarray], alone: bool) -> dict[str, np.ndarray]:
        seen.append((len(feeds["x"]), alone))
        await anyio.sleep(0)
        return {"y": feeds["x"] * 3}

    b = Batcher(run, max_rows=3, max_delay=0.0, batched=frozenset({"y"}), in_flight=1)
    got: dict[int, np.ndarray] = {}

    async def one(i: int) -> None:
        got[i] = (await b.submit({"x": np.full((1, 2), i)}, 1))["y"]

    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(one, i)
    assert seen == [(3, False), (2, True)]
    for i in range(5):
        np.testing.assert_array_equal(got[i], np.full((1, 2), 3 * i))


@pytest.mark.parametrize("split_after", [SPLIT_AFTER, None])
async def test_a_batch_beside_another_or_a_slow_one_does_not_run_alone(
    split_after: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # alone = nothing queued behind, no other batch running, and not slow (more requests would
    # queue behind a slow one while it runs); a session runs the others whole on lanes of their own
    clock = FakeClock(monkeypatch)
    seen: list[tuple[int, bool]] = []

    async def run(feeds: dict[str, np.ndarray], alone: bool) -> dict[str, np.ndarray]:
        seen.append((len(feeds["x"]), alone))
        await clock.run_for(0.05)
        return {"y": feeds["x"] + 1}

    b = Batcher(run, max_rows=3, max_delay=0.0, batched=frozenset({"y"}), in_flight=2, split_after=split_after)
    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(b.submit, {"x": np.full((1, 1), i)}, 1)
    assert seen == [(3, False), (2, False)]  # the second started while the first ran
    (y,) = (await b.submit({"x": np.full((1, 1), 9)}, 1)).values()
    assert y[0, 0] == 10
    # 16 ms a row: past SPLIT_AFTER a lone row counts as slow; with no split_after nothing does
    assert seen[-1] == (1, split_after is None)


async def test_a_cancelled_leader_hands_the_lead_on() -> None:
    async def run(feeds: dict[str, np.ndarray], alone: bool) -> dict[str, np.ndarray]:
        return {"y": feeds["x"] + 1}

    b = Batcher(run, max_rows=3, max_delay=30.0, batched=frozenset({"y"}))
    got: dict[int, np.ndarray] = {}

    async def one(i: int) -> None:
        got[i] = (await b.submit({"x": np.full((1, 1), i)}, 1))["y"]

    first = anyio.CancelScope()

    async def leader() -> None:
        with first:
            await one(0)

    with anyio.fail_after(10):  # a lead lost with its leader would wait the 30 s window
        async with anyio.create_task_group() as tg:
            tg.start_soon(leader)  # leads, waits for rows
            await anyio.sleep(0.01)
            tg.start_soon(one, 1)
            await anyio.sleep(0.01)
            first.cancel()
            await anyio.sleep(0.01)
            for i in (2, 3):  # 1, 2, 3 fill the batch: it runs at once
                tg.start_soon(one, i)
    assert sorted(got) == [1, 2, 3] and all(got[i][0, 0] == i + 1 for i in got)
    assert b.stats().batches == 1 and b.stats().requests == 3


async def test_a_loaded_geared_model_batches(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from aioge.errors import OptionError
    from aioge.plan.serialize import save_model

    gears = {"ge.inputShape": "x:-1,16", "ge.dynamicBatchSize": "1,4,8"}
    async with aioge.Session(SESSION) as s:
        await s.add_graph(1, _mlp(), gears)
        await save_model(tmp_path / "g.om", await s.build_graph(1))
        await s.add_graph(2, _mlp())
        await save_model(tmp_path / "plain.om", await s.build_graph(2, {"x": (4, 16)}))
    async with aioge.Session() as s:
        gid = await s.load_model(tmp_path / "g.om", options={"aioge.batch_max_rows": "8", "aioge.batch_max_delay_us": "20000"})
        got: dict[int, np.ndarray] = {}

        async def one(i: int) -> None:
            got[i] = (await s.run_graph(gid, {"x": _rows(i, 1)}))["y"]

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(one, i)
        for i in range(8):
            np.testing.assert_allclose(got[i], _ref(_rows(i, 1)), rtol=1e-5, atol=1e-6)
        assert s.batch_stats(gid).batches == 1
        with pytest.raises(OptionError, match="no batch gears"):
            await s.load_model(tmp_path / "plain.om", options={"aioge.batch_max_rows": "8"})
        with pytest.raises(OptionError, match="only aioge.batch_"):
            await s.load_model(tmp_path / "g.om", options={"ge.dynamicBatchSize": "1,2"})


async def test_a_graph_with_variables_does_not_batch() -> None:
    from aioge.errors import OptionError

    g = aioge.Graph("counter")
    x = g.input("x", ("N", 2), "float32")
    g.output(ops.add(x, g.variable("bias", np.zeros(2, np.float32))), names=["y"])
    async with aioge.Session(SESSION) as s:
        with pytest.raises(OptionError, match="has variables"):
            await s.add_graph(1, g, {"aioge.batch_max_rows": "8"})


async def test_slow_batches_are_split_over_idle_slots_and_rows_stay_exact() -> None:
    """Batches that would run SPLIT_AFTER s or more: one taken while another slot idles takes half the queue
    and the other half starts at once, so both run together (on two lanes in a session)."""
    sizes: list[int] = []
    running = peak = 0

    async def run(feeds: dict[str, np.ndarray], alone: bool) -> dict[str, np.ndarray]:
        nonlocal running, peak
        sizes.append(len(feeds["x"]))
        running += 1
        peak = max(peak, running)
        await anyio.sleep(2 * SPLIT_AFTER)
        running -= 1
        return {"y": feeds["x"] * 2}

    b = Batcher(run, max_rows=8, max_delay=0.05, batched=frozenset({"y"}), in_flight=2)
    got: dict[int, np.ndarray] = {}

    async def one(i: int) -> None:
        got[i] = (await b.submit({"x": np.full((1, 2), i)}, 1))["y"]

    await one(-1)  # the first batch measures the run time: no split before it is known
    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(one, i)
    assert sizes == [1, 4, 4] and peak == 2
    for i in range(-1, 8):
        np.testing.assert_array_equal(got[i], np.full((1, 2), 2 * i))
    async with anyio.create_task_group() as tg:  # without the split: one batch of eight
        b2 = Batcher(run, max_rows=8, max_delay=0.05, batched=frozenset({"y"}), in_flight=2, split_after=None)
        sizes.clear()
        await b2.submit({"x": np.zeros((1, 2))}, 1)
        for i in range(8):
            tg.start_soon(b2.submit, {"x": np.zeros((1, 2))}, 1)
    assert sizes == [1, 8]


async def test_a_batch_runs_on_a_lane_while_requests_queue_behind_it_else_on_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A short batch with requests queued behind it runs on a lane, so the event loop gathers
    the next batch meanwhile; with none queued the loop has nothing to gather, and the batch
    runs on its thread (no hand-off, no wake-up). Whether a run counts as short, and the loop's
    inline budget, are measured times: both are widened here so that a loaded machine (a run of
    over 1 ms) cannot change which path the batcher chose; so is the batcher's own "slow" (rows
    that would take SPLIT_AFTER): a first run stretched past 4 ms by a loaded machine had made the
    next batches not alone, and none ran inline."""
    import aioge.runtime.schedule as schedule

    monkeypatch.setattr(schedule, "INLINE_US", 1e9)
    monkeypatch.setattr(schedule, "INLINE_BUDGET", 1e9)
    monkeypatch.setattr(Batcher, "_slow", lambda self, rows: False)
    async with aioge.Session(SESSION) as s:
        await s.add_graph(1, _mlp(), {"aioge.batch_max_rows": "4", "aioge.batch_preferred_sizes": "4"})
        for i in range(5):  # one at a time: nothing behind any batch
            got = await s.run_graph(1, {"x": _rows(i, 1)})
            np.testing.assert_allclose(got["y"], _ref(_rows(i, 1)), rtol=1e-5, atol=1e-6)
        exe = s.executable(1)
        assert exe.short and exe.inline_runs >= 3  # the first run is timed on a lane
        before = exe.inline_runs
        got_all: dict[int, dict[str, np.ndarray]] = {}

        async def one(i: int) -> None:
            got_all[i] = await s.run_graph(1, {"x": _rows(i, 1)})

        async with anyio.create_task_group() as tg:  # 8 at once: the first batch leaves 4 queued
            for i in range(8):
                tg.start_soon(one, i)
        assert s.batch_stats(1).batches == 7
        assert exe.inline_runs - before <= 1  # the first of the two went to a lane
        for i in range(8):
            np.testing.assert_allclose(got_all[i]["y"], _ref(_rows(i, 1)), rtol=1e-5, atol=1e-6)


async def test_slow_batches_start_at_a_share_of_max_rows_without_waiting_out_the_delay() -> None:
    """Once batches are slow, a leader waits for max_rows / in_flight rows, not max_rows: the
    callers of a split half queue again and start at once (a 30 s max_delay would otherwise
    hold them)."""

    async def run(feeds: dict[str, np.ndarray], alone: bool) -> dict[str, np.ndarray]:
        await anyio.sleep(2 * SPLIT_AFTER)
        return {"y": feeds["x"] + 1}

    b = Batcher(run, max_rows=8, max_delay=30.0, batched=frozenset({"y"}), in_flight=2)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:  # the first batch: 8 rows, full at once
            for i in range(8):
                tg.start_soon(b.submit, {"x": np.full((1, 1), i)}, 1)
        got = []

        async def one(i: int) -> None:
            got.append((await b.submit({"x": np.full((1, 1), i)}, 1))["y"][0, 0])

        async with anyio.create_task_group() as tg:  # four rows start a batch now that runs are slow
            for i in range(4):
                tg.start_soon(one, i)
    assert sorted(got) == [1, 2, 3, 4]


async def test_splits_stop_when_overlapping_batches_run_no_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Splits are measured: on a busy core (two runs at once each take three times as long:
    they share it, and thrash its cache) a split's rows run slower than alone, and batches
    are taken whole again."""
    clock = FakeClock(monkeypatch)
    sizes: list[int] = []
    running = 0

    async def one_core(feeds: dict[str, np.ndarray], alone: bool) -> dict[str, np.ndarray]:
        nonlocal running
        sizes.append(len(feeds["x"]))
        running += 1
        work = 2.0 * len(feeds["x"])  # alone, 8 rows: 16 steps of SPLIT_AFTER / 4
        while work > 0:
            await clock.step(SPLIT_AFTER / 4)
            work -= 1 / (2 * running - 1)
        running -= 1
        return {"y": feeds["x"] * 2}

    b = Batcher(one_core, max_rows=8, max_delay=0.05, batched=frozenset({"y"}), in_flight=2)
    for _ in range(6):
        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(b.submit, {"x": np.full((1, 1), i)}, 1)
    assert sizes[:3] == [8, 4, 4], "whole while run times are unknown; then slow, and split once"
    assert sizes[3:] == [8] * 4, "measured: the split halves ran no faster, so no more splits"
    assert PROBE_EVERY > 5


async def one_then_eights(b: Batcher, seen: list[T], rounds: int = 40) -> list[list[T]]:
    """One caller with one row, then rounds of eight at once; what ``run`` saw in each round."""
    out = []
    for round_ in range(rounds):
        before = len(seen)
        async with anyio.create_task_group() as tg:
            for i in range(1 if round_ == 0 else 8):
                tg.start_soon(b.submit, {"x": np.full((1, 1), i)}, 1)
        out.append(seen[before:])
    return out


async def test_a_slow_first_batch_does_not_keep_fast_batches_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seconds per row that decide a split follow every batch: a slow first run (a cold
    start) is forgotten once batches are fast, split or not. On the fake clock: a loaded
    machine made the fast batches' real sleeps look slow (issue 43: [4, 2] once in a full run)."""
    clock = FakeClock(monkeypatch)
    sizes: list[int] = []

    async def run(feeds: dict[str, np.ndarray], alone: bool) -> dict[str, np.ndarray]:
        sizes.append(len(feeds["x"]))
        await clock.run_for(10 * SPLIT_AFTER if len(sizes) == 1 else SPLIT_AFTER / 40)
        return {"y": feeds["x"]}

    b = Batcher(run, max_rows=8, max_delay=0.05, batched=frozenset({"y"}), in_flight=2)
    rounds = await one_then_eights(b, sizes)
    assert rounds[:2] == [[1], [4, 4]], "after the slow first batch, the next is split"
    assert rounds[-10:] == [[8]] * 10, "fast batches are taken whole again"


async def test_a_batch_takes_a_compiled_size_rather_than_pad_more_rows_than_it_leaves() -> None:
    """With compiled sizes 1, 2, 4, 8, 16, 32, 64 queued 40 rows run as 32 and then 8 (not as
    one batch padded to 64); 56 rows pad to 64 (8 padded against 24 left). Every caller gets
    its own rows."""
    sizes_run: list[int] = []

    async def run(feeds: dict[str, np.ndarray], alone: bool) -> dict[str, np.ndarray]:
        sizes_run.append(len(feeds["x"]))
        await anyio.sleep(0.01)
        return {"y": feeds["x"] * 2}

    for queued, want in ((40, [32, 8]), (56, [56])):
        sizes_run.clear()
        b = Batcher(run, max_rows=64, max_delay=0.2, batched=frozenset({"y"}), in_flight=1, sizes=(1, 2, 4, 8, 16, 32, 64))
        got: dict[int, np.ndarray] = {}

        async def one(i: int, b: Batcher = b) -> None:
            got[i] = (await b.submit({"x": np.full((1, 2), i)}, 1))["y"]

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for i in range(queued):  # all queued while the leader waits out max_delay
                    tg.start_soon(one, i)
        assert sizes_run == want, f"{queued} queued"
        for i in range(queued):
            np.testing.assert_array_equal(got[i], np.full((1, 2), 2 * i))


@pytest.mark.parametrize("alone_row", [0.4 * SPLIT_AFTER / 8, 2 * SPLIT_AFTER / 8])
async def test_a_full_batch_with_nothing_beside_it_splits_over_the_cores(
    alone_row: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two cores: a batch alone splits over both (its rows take alone_row each), halves side by side
    run whole (3x: beside each other, its rows take three times as long, so halves do not pay). The
    first run of each compiled size is cold (10x SPLIT_AFTER, a program built) and not timed: timed,
    it left the alone figure stale and every batch split in halves (the cnn example, main bc0f03b).
    Fast or slow, full batches with nothing queued or running run alone (a session: split)."""
    clock = FakeClock(monkeypatch)
    seen: list[tuple[int, bool]] = []
    warm: set[int] = set()

    async def run(feeds: dict[str, np.ndarray], alone: bool) -> dict[str, np.ndarray]:
        rows = len(feeds["x"])
        seen.append((rows, alone))
        cold = rows not in warm
        warm.add(rows)
        await clock.run_for(10 * SPLIT_AFTER if cold else rows * alone_row * (1 if alone else 3))
        return {"y": feeds["x"]}

    b = Batcher(run, max_rows=8, max_delay=0.05, batched=frozenset({"y"}), in_flight=2, sizes=(1, 2, 4, 8))
    rounds = await one_then_eights(b, seen)
    tail = rounds[-PROBE_EVERY:]
    assert sum(r == [(8, True)] for r in tail) >= PROBE_EVERY - 1, rounds  # one probe of halves at most
