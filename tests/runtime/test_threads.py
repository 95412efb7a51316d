"""Streams sharing worker threads (sink mode): the grouping's choices, and that any grouping of a
multi-stream plan runs exact, under poisoned reuse and concurrency, without deadlock."""

from __future__ import annotations

import dataclasses
import random

import anyio
import numpy as np
import pytest

import aioge
import aioge.compiler.threads as threads_module
from aioge.compiler.threads import CONTENTION, THREAD_US, WAKE_US, group_streams, simulate
from aioge.examples import build_transformer
from aioge.plan import serialize
from aioge.runtime.executor import Executable
from aioge.runtime.workers import EngineWorkers
from tests.compiler.test_memory import _inception
from tests.runtime.test_executor import OPTIONS, _branches, _branches_ref

pytestmark = pytest.mark.anyio


def test_a_chain_across_two_streams_shares_one_thread() -> None:
    # 0 (s0) -> 1 (s1) -> 2 (s0) -> 3 (s1): every op waits for the other stream.
    node_stream, cost, waits = [0, 1, 0, 1], [20.0] * 4, [[], [0], [1], [2]]
    assert simulate([(0,), (1,)], node_stream, cost, waits, 2) == pytest.approx(80 * CONTENTION + 3 * WAKE_US + 2 * THREAD_US)
    assert simulate([(0, 1)], node_stream, cost, waits, 2) == pytest.approx(80 + THREAD_US)
    assert group_streams(2, node_stream, cost, waits, 2) == [(0, 1)]


def test_greedy_merging_that_stalls_still_ends_in_one_thread_when_that_wins() -> None:
    # Found by search: greedy merging reaches [(0, 3), (1,), (2,)] (2535 us simulated) and no
    # single merge improves on it while two threads still contend; one thread takes 2215.
    node_stream, cost, waits = [0, 1, 2, 3, 0], [400.0, 400.0, 200.0, 400.0, 800.0], [[], [], [], [1, 2], [1, 3]]
    assert simulate([(0, 1, 2, 3)], node_stream, cost, waits, 2) < simulate([(0, 3), (1,), (2,)], node_stream, cost, waits, 2)
    assert group_streams(4, node_stream, cost, waits, 2) == [(0, 1, 2, 3)]


def test_heavy_independent_branches_keep_their_threads_while_cores_allow() -> None:
    # Two 1 ms branches joined by a tiny op on stream 0.
    node_stream, cost, waits = [0, 1, 0], [1000.0, 1000.0, 5.0], [[], [], [1]]
    assert group_streams(2, node_stream, cost, waits, 2) == [(0,), (1,)]
    assert group_streams(2, node_stream, cost, waits, 1) == [(0, 1)], "one core: the overlap cannot happen"
    # A third stream of tiny work between them joins one of them; the heavy pair stays apart.
    node_stream, cost, waits = [0, 1, 2, 0], [1000.0, 1000.0, 5.0, 5.0], [[], [], [1], [2]]
    groups = group_streams(3, node_stream, cost, waits, 2)
    assert len(groups) == 2 and not any({0, 1} <= set(t) for t in groups)


def test_group_streams_rejects_a_stream_out_of_range() -> None:
    with pytest.raises(ValueError, match="outside 0..1"):
        group_streams(2, [0, 2], [1.0, 1.0], [[], []], 2)


def test_executable_rejects_an_unknown_threads_mode() -> None:
    with pytest.raises(ValueError, match="'auto' or 'streams'"):
        Executable(None, threads="one")  # type: ignore[arg-type]


async def test_aioge_exec_threads_option_is_checked() -> None:
    with pytest.raises(aioge.errors.OptionError, match="aioge.exec_threads"):
        aioge.Session({"aioge.exec_threads": "all"})


async def test_the_grouping_is_planned_by_the_compiler_and_kept_in_the_om(monkeypatch: pytest.MonkeyPatch) -> None:
    g, feeds, _ = build_transformer()
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, g)
        await s.build_graph(1, feeds)
        model = s.executable(1).model
    streams = model.streams
    assert model.threads and sorted(x for t in model.threads for x in t) == list(range(streams.num_streams))

    def replan(*_a: object) -> None:
        raise AssertionError("the runtime planned thread groups")

    monkeypatch.setattr(threads_module, "group_streams", replan)
    for m in (model, serialize.decode_model(serialize.encode_model(model)[0], weight_dir="."), Executable(model).model):
        exe = Executable(m)
        assert m.threads == model.threads
        assert exe.thread_groups == tuple(tuple(sorted(i for x in t for i in streams.streams[x].nodes)) for t in model.threads)
    # A file written before the grouping was planned (layout 1) is stale: a format error, then a recompile.
    monkeypatch.setattr(serialize, "OM_LAYOUT", 1)
    old = serialize.encode_model(model)[0]
    monkeypatch.setattr(serialize, "OM_LAYOUT", 2)
    with pytest.raises(aioge.errors.ModelFormatError, match="payload layout 1, this aioge reads 2"):
        serialize.decode_model(old)


async def test_exec_threads_shapes_the_compile() -> None:
    from aioge.keys import compile_options

    assert "aioge.exec_threads" in compile_options({"aioge.exec_threads": "streams", "aioge.exec_mode": "host"})
    assert "aioge.exec_mode" in compile_options({"aioge.exec_mode": "host"})  # the compiler reads it (prefer_native)
    assert "aioge.exec_devices" not in compile_options({"aioge.exec_devices": "2"})  # the compiler never reads it


async def test_the_transformer_chain_runs_on_fewer_threads_than_streams_and_agrees() -> None:
    g, feeds, reference = build_transformer()
    got = {}
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        for gid, mode in ((1, "auto"), (2, "streams")):
            await s.add_graph(gid, g, {"aioge.exec_threads": mode})
            got[mode] = await s.run_graph(gid, feeds)
        auto, per_stream = s.executable(1), s.executable(2)
    streams = auto.model.streams.num_streams
    assert streams > 1, "the transformer's plan crosses engines"
    assert len(auto.thread_groups) < streams and len(per_stream.thread_groups) == streams
    assert sorted(i for t in auto.thread_groups for i in t) == list(range(len(auto.model.nodes)))
    for name, want in reference(feeds).items():
        np.testing.assert_allclose(got["auto"][name], want, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(got["auto"][name], got["streams"][name])


def _partitions(n: int, rng: random.Random, count: int) -> list[list[tuple[int, ...]]]:
    """``count`` random partitions of ``range(n)`` (always including all-in-one and one each)."""
    out = [[tuple(range(n))], [(s,) for s in range(n)]]
    while len(out) < count:
        label = [rng.randrange(n) for _ in range(n)]
        groups = sorted(tuple(s for s in range(n) if label[s] == k) for k in set(label))
        out.append(groups)
    return out


async def test_every_grouping_of_multi_stream_plans_runs_exact_under_poison(workers: EngineWorkers) -> None:
    rng = np.random.default_rng(3)
    g, weights = _branches()
    inception = _inception(c=16, hw=16)
    cases = [
        (g, {"x": rng.standard_normal((96, 96)).astype(np.float32)}),
        (inception, {"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}),
    ]
    pick = random.Random(7)
    async with aioge.Session(OPTIONS) as s:
        for gid, (graph, feeds) in enumerate(cases, 1):
            await s.add_graph(gid, graph)
            await s.build_graph(gid, feeds)
            model = s.executable(gid).model
            n = model.streams.num_streams
            assert n >= 3
            want = await s.run_graph(gid, feeds)
            if gid == 1:
                np.testing.assert_allclose(want["y"], _branches_ref(feeds["x"], weights), rtol=1e-4, atol=1e-5)
            for groups in _partitions(n, pick, 10):
                exe = Executable(dataclasses.replace(model, threads=tuple(groups)))
                assert [sorted({model.nodes[i].stream for i in t}) for t in exe.thread_groups] == [list(t) for t in groups]
                results = []

                async def one(exe: Executable = exe, feeds: dict[str, np.ndarray] = feeds) -> None:
                    results.append(await exe.run(feeds, workers=workers, poison=True))

                with anyio.fail_after(30):  # a deadlock would hang here
                    async with anyio.create_task_group() as tg:
                        for _ in range(4):
                            tg.start_soon(one)
                for r in results:
                    for name in want:
                        np.testing.assert_array_equal(r[name], want[name], err_msg=f"groups {groups}")
