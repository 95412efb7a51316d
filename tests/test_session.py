"""Session: add/build/run/remove, feeds checking, variables, concurrency on asyncio and trio."""

from __future__ import annotations

import time

import anyio
import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.errors import FeedError, GraphError, OptionError

pytestmark = pytest.mark.anyio


def _graph() -> aioge.Graph:
    g = aioge.Graph("chain")
    x = g.input("x", ("N", 8), "float32")
    h = ops.tanh(ops.mul(x, 0.5)) + ops.sigmoid(x)
    g.output(ops.relu(h - 0.25), names=["y"])
    return g


def _ref(x: np.ndarray) -> np.ndarray:
    return np.maximum(np.tanh(x * 0.5) + 1 / (1 + np.exp(-x)) - 0.25, 0)


async def test_add_build_run_remove() -> None:
    async with aioge.Session({"ge.optimizationSwitch": "ElementwiseFusionPass:off"}) as s:
        await s.add_graph(1, _graph())
        model = await s.build_graph(1, {"x": (4, 8)})
        assert {n.op_type for n in model.nodes} >= {"Tanh", "Sigmoid", "Relu"}
        assert all(n.engine in ("AiCore", "AiVec", "AiCpu") for n in model.nodes)
        x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
        out = await s.run_graph(1, {"x": x})
        np.testing.assert_allclose(out["y"], _ref(x), rtol=1e-6, atol=1e-6)
        stats = s.compiled(1).stats
        assert stats.kernels_compiled + stats.kernel_cache_hits == len(model.nodes) and stats.compile_seconds > 0
        await s.remove_graph(1)
        with pytest.raises(GraphError, match="no graph with id 1"):
            await s.run_graph(1, {"x": x})


async def test_feeds_are_checked() -> None:
    async with aioge.Session() as s:
        await s.add_graph(1, _graph())
        with pytest.raises(FeedError, match=r"missing feeds for inputs x: float32\[N, 8\]"):
            await s.run_graph(1, {})
        with pytest.raises(FeedError, match="unknown inputs"):
            await s.run_graph(1, {"x": np.zeros((1, 8), np.float32), "z": 1})
        with pytest.raises(FeedError, match=r"'x' expects float32\[N, 8\], got shape \(1, 7\)"):
            await s.run_graph(1, {"x": np.zeros((1, 7), np.float32)})
        with pytest.raises(FeedError, match="got dtype float64"):
            await s.run_graph(1, {"x": np.zeros((1, 8))})


async def test_dynamic_dims_compile_per_shape() -> None:
    async with aioge.Session() as s:
        await s.add_graph(1, _graph())
        for n in (1, 3, 1):
            x = np.ones((n, 8), np.float32)
            out = await s.run_graph(1, {"x": x})
            assert out["y"].shape == (n, 8)
        assert len(s._graphs[1].builds) == 2


async def test_builds_per_graph_are_bounded() -> None:
    # aioge.max_builds_per_graph=2: a third shape drops the least recently run build, which
    # is compiled again when it comes back; every result stays right.
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _graph(), {"aioge.max_builds_per_graph": "2"})
        builds = s._graphs[1].builds
        for n in (1, 2, 1, 3, 2):
            x = np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)
            np.testing.assert_allclose((await s.run_graph(1, {"x": x}))["y"], _ref(x), rtol=1e-6, atol=1e-6)
            assert len(builds) <= 2
        # 1 was run after 2, so 3 dropped 2; 2 came back (compiled again) and dropped 1.
        assert [sig[0][1][0] for sig in builds] == [3, 2]
    with pytest.raises(OptionError, match="max_builds_per_graph"):
        aioge.Session({"aioge.max_builds_per_graph": "0"})


async def test_the_build_bound_keeps_every_batch_size_batching_compiled() -> None:
    # Batching compiles sizes 1, 2, 4, 8, 16 up front: a bound of 2 must not make them evict
    # each other (a recompile per batch); a new feed layout may evict an old one's, LRU.
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _graph(), {"aioge.max_builds_per_graph": "2", "aioge.batch_max_rows": "16"})
        builds = s._graphs[1].builds
        for n in (1, 3, 16, 5):
            x = np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)
            np.testing.assert_allclose((await s.run_graph(1, {"x": x}))["y"], _ref(x), rtol=1e-6, atol=1e-6)
            if n == 1:
                first = dict(builds)
        assert sorted(sig[0][1][0] for sig in builds) == [1, 2, 4, 8, 16]
        assert all(builds[sig] is exe for sig, exe in first.items())  # none compiled twice


async def test_bad_options_raise() -> None:
    with pytest.raises(OptionError):
        aioge.Session({"ge.exec.exclude_engines": "TPU"})
    async with aioge.Session() as s:
        with pytest.raises(OptionError):
            await s.add_graph(1, _graph(), {"ge.graph_compiler_cache_dir": "/tmp"})


async def test_run_convenience_and_outputs_are_owned() -> None:
    g = aioge.Graph("id")
    x = g.input("x", (3,))
    g.output(ops.relu(x), names=["y"])
    async with aioge.Session() as s:
        a = await s.run(g, {"x": np.array([-1, 2, 3], np.float32)})
        b = await s.run(g, {"x": np.array([4, -5, 6], np.float32)})
        np.testing.assert_array_equal(a["y"], [0, 2, 3])  # not overwritten by the second run
        np.testing.assert_array_equal(b["y"], [4, 0, 6])


async def test_variables_persist_and_read_back() -> None:
    g = aioge.Graph("v")
    x = g.input("x", (2,))
    v = g.variable("bias", np.array([1.0, 2.0], np.float32))
    g.output(x + v, names=["y"])
    async with aioge.Session() as s:
        await s.add_graph(1, g)
        out = await s.run_graph(1, {"x": np.zeros(2, np.float32)})
        np.testing.assert_array_equal(out["y"], [1, 2])
        np.testing.assert_array_equal(s.variable("bias"), [1, 2])
        with pytest.raises(GraphError, match="no variable named 'nope'"):
            s.variable("nope")


async def test_exclude_engines_all_is_compile_error() -> None:
    from aioge.errors import CompileError

    async with aioge.Session({"ge.exec.exclude_engines": "AiCore|AiVec|AiCpu"}) as s:
        await s.add_graph(1, _graph())
        with pytest.raises(CompileError, match=r"EZ3003.*no engine left.*excluded engines: AiCore, AiCpu, AiVec"):
            await s.build_graph(1, {"x": (1, 8)})


async def test_200_concurrent_runs_and_loop_stays_responsive() -> None:
    g = aioge.Graph("big")
    x = g.input("x", (256, 256), "float32")
    h = x
    for _ in range(6):
        h = ops.tanh(ops.mul(h, 1.01))
    g.output(h, names=["y"])
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((256, 256)).astype(np.float32) for _ in range(8)]
    expect = []
    for a in inputs:
        r = a
        for _ in range(6):
            r = np.tanh(r * np.float32(1.01))
        expect.append(r)
    worst = 0.0
    done = anyio.Event()

    async def watchdog() -> None:
        nonlocal worst
        while not done.is_set():
            t = time.perf_counter()
            await anyio.sleep(0.005)
            worst = max(worst, time.perf_counter() - t - 0.005)

    results: dict[int, np.ndarray] = {}
    async with aioge.Session() as s:
        await s.add_graph(1, g)
        await s.build_graph(1)

        async def one(i: int) -> None:
            results[i] = (await s.run_graph(1, {"x": inputs[i % 8]}))["y"]

        async with anyio.create_task_group() as tg:
            tg.start_soon(watchdog)
            async with anyio.create_task_group() as runs:
                for i in range(200):
                    runs.start_soon(one, i)
            done.set()
    assert len(results) == 200
    for i, r in results.items():
        np.testing.assert_allclose(r, expect[i % 8], rtol=1e-5, atol=1e-6)
    # Work on the loop would stall it for the length of a compile or many runs (hundreds of
    # ms and up); the bound leaves room for a noisy shared machine (a 75 ms outlier was seen
    # once with the loop doing nothing wrong). aioge bench measures the lag itself.
    assert worst < 0.250, f"event loop stalled for {worst * 1e3:.1f} ms"


async def test_cancelled_run_leaves_session_usable() -> None:
    g = aioge.Graph("slow")
    x = g.input("x", (512, 512), "float32")
    h = x
    for _ in range(40):
        h = ops.tanh(h)
    g.output(h, names=["y"])
    a = np.random.default_rng(2).standard_normal((512, 512)).astype(np.float32)
    async with aioge.Session() as s:
        await s.add_graph(1, g)
        await s.build_graph(1)
        with anyio.move_on_after(0.002):
            await s.run_graph(1, {"x": a})
        out = await s.run_graph(1, {"x": a})
        r = a
        for _ in range(40):
            r = np.tanh(r)
        np.testing.assert_allclose(out["y"], r, rtol=1e-5, atol=1e-6)


async def test_unclosed_session_stops_its_lanes_when_collected(tmp_path) -> None:
    import gc

    s = aioge.Session()
    await s.add_graph(1, _graph())
    x = np.ones((2, 8), np.float32)
    # traced: step by step on the lanes (a first untraced run may go to the C queue's runner instead)
    np.testing.assert_allclose((await s.run_graph(1, {"x": x}, trace=tmp_path / "t.json"))["y"], _ref(x), rtol=1e-6, atol=1e-6)
    assert s._workers is not None
    threads = [lane._thread for lane in s._workers._started]
    assert threads and all(t.is_alive() for t in threads)
    with pytest.warns(ResourceWarning, match="unclosed aioge.Session"):
        del s  # never closed
        gc.collect()
    deadline = time.perf_counter() + 5.0
    while any(t.is_alive() for t in threads) and time.perf_counter() < deadline:
        await anyio.sleep(0.01)
    assert not any(t.is_alive() for t in threads), "a session dropped without aclose() leaked its lane threads"


async def test_64_concurrent_runs_bound_the_arenas_and_stay_correct() -> None:
    import os

    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((16, 8)).astype(np.float32) for _ in range(64)]
    results: dict[int, np.ndarray] = {}
    async with aioge.Session() as s:
        await s.add_graph(1, _graph())

        async def one(i: int) -> None:
            results[i] = (await s.run_graph(1, {"x": inputs[i]}))["y"]

        async with anyio.create_task_group() as tg:
            for i in range(64):
                tg.start_soon(one, i)
        made = s.executable(1).contexts_made
    for i in range(64):
        np.testing.assert_allclose(results[i], _ref(inputs[i]), rtol=1e-6, atol=1e-6)
    # Runs in flight are bounded (twice the cores), and so are the arenas they hold.
    assert 1 <= made <= 2 * (os.cpu_count() or 2), made
