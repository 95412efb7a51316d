"""The executor: poisoned reuse stays exact, bounded context pools, cancellation, kernel errors.

Every test runs on asyncio and trio, mostly on multi-stream plans.
"""

from __future__ import annotations

import dataclasses
import os
from functools import partial

import anyio
import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.compiler.memory import Buffer
from aioge.errors import ExecutionError
from aioge.examples import build_cnn
from aioge.ir.graph import Graph
from aioge.runtime.executor import Executable, TraceSpan
from aioge.runtime.workers import EngineWorkers
from tests.compiler.test_memory import _inception

pytestmark = pytest.mark.anyio

# Every stream on its own thread: these tests are about cross-stream events and reuse (test_threads
# covers streams sharing threads).
OPTIONS = {"aioge.tune_mode": "heuristic", "ge.optimizationSwitch": "ElementwiseFusionPass:off", "aioge.exec_threads": "streams"}


def _branches(n: int = 96, seed: int = 0) -> tuple[Graph, list[np.ndarray]]:
    """Four matmul-tanh branches of different depths, joined pairwise: a four-stream plan
    where the short branches' dead tensors are reused while the long ones still run."""
    rng = np.random.default_rng(seed)
    g = Graph("branches")
    x = g.input("x", (n, n))
    weights, tails = [], []
    for b in range(4):
        h = x
        for _ in range(b + 2):
            w = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
            weights.append(w)
            h = ops.tanh(ops.matmul(h, g.constant(w)))
        tails.append(h)
    g.output(ops.add(ops.add(tails[0], tails[1]), ops.mul(tails[2], tails[3])), names=["y"])
    return g, weights


def _branches_ref(x: np.ndarray, weights: list[np.ndarray]) -> np.ndarray:
    tails, k = [], 0
    for b in range(4):
        h = x
        for _ in range(b + 2):
            h = np.tanh(h @ weights[k])
            k += 1
        tails.append(h)
    return tails[0] + tails[1] + tails[2] * tails[3]


def _cross_stream_reuse(exe: Executable) -> int:
    """How many pairs of tensors on different streams share arena bytes."""
    m = exe.model
    count = 0
    bufs = m.memory.buffers
    for i, a in enumerate(bufs):
        for b in bufs[i + 1 :]:
            if a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes:
                count += m.nodes[a.producer].stream != m.nodes[b.producer].stream
    return count


async def _executable(
    s: aioge.Session, g: Graph, feeds: dict[str, np.ndarray], options: dict[str, str] | None = None
) -> Executable:
    await s.add_graph(1, g, options)
    await s.build_graph(1, feeds)
    return s.executable(1)


@pytest.mark.parametrize("mode", ["sink", "host"])
async def test_poisoned_reuse_stays_exact_on_multi_stream_plans(mode: str, workers: EngineWorkers) -> None:
    rng = np.random.default_rng(1)
    g, weights = _branches()
    inception = _inception(c=16, hw=16)
    cnn, cnn_feeds, cnn_ref = build_cnn(batch=2)
    cases = [
        (g, {"x": rng.standard_normal((96, 96)).astype(np.float32)}, lambda f: {"y": _branches_ref(f["x"], weights)}),
        (inception, {"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}, None),
        (cnn, cnn_feeds, cnn_ref),
    ]
    async with aioge.Session(OPTIONS) as s:
        for graph, feeds, ref in cases:
            await s.add_graph(len(s._graphs) + 1, graph)
            gid = len(s._graphs)
            await s.build_graph(gid, feeds)
            exe = s.executable(gid)
            plain = await exe.run(feeds, workers=workers, mode=mode)
            assert exe.model.memory.arena_bytes < exe.model.memory.no_reuse_bytes
            results: list[dict[str, np.ndarray]] = []

            async def poisoned(feeds: dict[str, np.ndarray] = feeds, exe: Executable = exe) -> None:
                results.append(await exe.run(feeds, workers=workers, mode=mode, poison=True))

            async with anyio.create_task_group() as tg:  # concurrent poisoned runs: separate contexts, same plan
                for _ in range(6):
                    tg.start_soon(poisoned)
            assert any(exe._layout.poison), "the plan reuses bytes, so there is something to poison"
            for r in results:
                for name in plain:
                    np.testing.assert_array_equal(r[name], plain[name])
                    assert np.isfinite(r[name]).all()
            if ref is not None:
                for name, want in ref(feeds).items():
                    np.testing.assert_allclose(plain[name], want, rtol=1e-4, atol=1e-5)
        branches = s.executable(1)
        assert branches.model.streams.num_streams == 4 and _cross_stream_reuse(branches) > 0


async def test_poison_catches_an_unsafe_plan(workers: EngineWorkers) -> None:
    """Control: a plan that overlaps live tensors (everything at offset 0) gives NaN under poison."""
    g = Graph("diamond")
    x = g.input("x", (64,))
    a = ops.tanh(x)
    b = ops.sigmoid(a)
    g.output(ops.add(a, b), names=["y"])
    feeds = {"x": np.linspace(-1, 1, 64, dtype=np.float32)}
    async with aioge.Session(OPTIONS) as s:
        exe = await _executable(s, g, feeds)
        mem = exe.model.memory
        assert len(mem.buffers) == 2
        broken = dataclasses.replace(
            mem, buffers=tuple(Buffer(b.value, 0, b.nbytes, b.producer, b.last_use) for b in mem.buffers)
        )
        unsafe = Executable(dataclasses.replace(exe.model, memory=broken))
        out = await unsafe.run(feeds, workers=workers, poison=True)
        assert np.isnan(out["y"]).all()
        safe = await exe.run(feeds, workers=workers, poison=True)
        np.testing.assert_allclose(safe["y"], np.tanh(feeds["x"]) + 1 / (1 + np.exp(-np.tanh(feeds["x"]))), rtol=1e-6, atol=1e-7)


async def test_100_concurrent_runs_share_a_bounded_pool() -> None:
    g, weights = _branches(n=48)
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal((48, 48)).astype(np.float32) for _ in range(10)]
    expect = [_branches_ref(x, weights) for x in inputs]
    async with aioge.Session(OPTIONS) as s:
        exe = await _executable(s, g, {"x": inputs[0]})
        assert exe.model.streams.num_streams > 1
        for _round in range(2):
            results: dict[int, np.ndarray] = {}

            async def one(i: int) -> None:
                results[i] = (await s.run_graph(1, {"x": inputs[i % 10]}))["y"]

            async with anyio.create_task_group() as tg:
                for i in range(100):
                    tg.start_soon(one, i)
            assert len(results) == 100
            for i, r in results.items():
                np.testing.assert_allclose(r, expect[i % 10], rtol=1e-5, atol=1e-5)
            made = exe.contexts_made
            assert 1 <= made <= 2 * (os.cpu_count() or 2), "one context per admitted run (twice the cores), at most"
            assert exe.pool_size == made, "every context is back in the pool"
        assert exe.contexts_made == made, "the second hundred reused the pool"


def _blocking_graph(n: int = 512, long: int = 200) -> Graph:
    """Stream 0: a long tanh chain. Stream 1: a sigmoid, then a join that waits for an early
    node of the chain, then more work: cancelled early, stream 1 sits blocked on that event."""
    g = Graph("blocking")
    x = g.input("x", (n, n))
    h = x
    chain = []
    for k in range(long):
        h = ops.tanh(h, name=f"long{k}")
        chain.append(h)
    side = ops.sigmoid(ops.sigmoid(x, name="side0"), name="side1")
    j = ops.add(side, chain[long - 20], name="join")
    for k in range(10):
        j = ops.sigmoid(j, name=f"after{k}")
    g.output(ops.add(h, j, name="end"), names=["y"])
    return g


def _blocking_ref(x: np.ndarray, long: int = 200) -> np.ndarray:
    h, chain = x, []
    for _ in range(long):
        h = np.tanh(h)
        chain.append(h)
    j = 1 / (1 + np.exp(-(1 / (1 + np.exp(-x))))) + chain[long - 20]
    for _ in range(10):
        j = 1 / (1 + np.exp(-j))
    return h + j


@pytest.mark.parametrize("mode", ["sink", "host"])
async def test_cancel_stops_between_ops_and_returns_the_context(mode: str, workers: EngineWorkers) -> None:
    x = np.random.default_rng(3).standard_normal((512, 512)).astype(np.float32)
    async with aioge.Session(OPTIONS) as s:
        exe = await _executable(s, _blocking_graph(), {"x": x})
        m = exe.model
        names = [n.name for n in m.nodes]
        join = names.index("join")
        assert m.streams.num_streams == 2 and m.nodes[join].stream != m.nodes[names.index("long0")].stream
        assert any(e.consumer == join and names[e.producer].startswith("long") for e in m.streams.events)
        full = await exe.run({"x": x}, workers=workers, mode=mode)
        np.testing.assert_allclose(full["y"], _blocking_ref(x), rtol=1e-5, atol=1e-5)
        spans: list[TraceSpan] = []
        scope = anyio.CancelScope()

        async def cancel_once_started() -> None:
            # Cancel on progress, not on a timer: the first ops ran, the side stream is (or will
            # soon be) blocked on the chain's event, and most of the chain is still to run.
            while len(spans) < 3:
                await anyio.sleep(0.0002)
            scope.cancel()

        with anyio.fail_after(10):  # a stream left blocked on its event would hang here
            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_once_started)
                with scope:
                    await exe.run({"x": x}, workers=workers, mode=mode, trace=spans)
                tg.cancel_scope.cancel()
        assert scope.cancelled_caught
        ran = len(spans)
        assert 0 < ran < len(m.nodes), "stopped between ops"
        done = {names[sp.node] for sp in spans}
        assert "join" not in done and "end" not in done, "the side stream was still waiting for the chain's event"
        assert exe.pool_size == exe.contexts_made, "the context is back"
        await anyio.sleep(0.05)
        assert len(spans) == ran, "no worker kept running the cancelled run"
        again = await exe.run({"x": x}, workers=workers, mode=mode)
        np.testing.assert_array_equal(again["y"], full["y"])


def _cast_graph() -> Graph:
    """A heavy AiCore branch beside an AiCpu Cast of strings, which raises on a non-number."""
    g = Graph("cast")
    x = g.input("x", (128, 128))
    t = g.input("t", (4,), "str")
    h = x
    for _ in range(4):
        h = ops.tanh(h)
    v = ops.add(ops.cast(t, to="float32", name="parse"), 1.0)
    g.output(h, ops.reduce_sum(v, keepdims=0), names=["h", "v"])
    return g


async def test_a_kernel_error_fails_only_its_run() -> None:
    x = np.random.default_rng(4).standard_normal((128, 128)).astype(np.float32)
    good = np.array(["1", "2.5", "-3", "4"])
    bad = np.array(["1", "two", "-3", "4"])
    async with aioge.Session(OPTIONS) as s:
        exe = await _executable(s, _cast_graph(), {"x": x, "t": good})
        assert exe.model.streams.num_streams > 1
        outcomes: dict[int, object] = {}

        async def one(i: int) -> None:
            try:
                outcomes[i] = await s.run_graph(1, {"x": x, "t": bad if i % 3 == 0 else good})
            except ExecutionError as exc:
                outcomes[i] = exc

        async with anyio.create_task_group() as tg:
            for i in range(30):
                tg.start_soon(one, i)
        ref = np.tanh(np.tanh(np.tanh(np.tanh(x))))
        for i, r in outcomes.items():
            if i % 3 == 0:
                assert isinstance(r, ExecutionError)
                assert r.node == "parse" and r.engine == "AiCpu" and r.op_type == "Cast"
                assert "node 'parse' (Cast on AiCpu)" in str(r) and "two" in str(r)
                assert isinstance(r.__cause__, ValueError)
            else:
                assert isinstance(r, dict)
                np.testing.assert_allclose(r["h"], ref, rtol=1e-5, atol=1e-6)
                assert r["v"] == pytest.approx(8.5)
        assert exe.pool_size == exe.contexts_made


@pytest.mark.parametrize("mode", ["sink", "host"])
async def test_callers_errstate_applies_inside_the_workers(mode: str) -> None:
    g = Graph("sqrt")
    x = g.input("x", (3,))
    g.output(ops.sqrt(x, name="root"), names=["y"])
    feeds = {"x": np.array([4.0, -1.0, 9.0], np.float32)}
    async with aioge.Session({**OPTIONS, "aioge.exec_mode": mode}) as s:
        await s.add_graph(1, g)
        with np.errstate(invalid="raise"):
            with pytest.raises(ExecutionError, match=r"node 'root' \(Sqrt on AiCore\): FloatingPointError"):
                await s.run_graph(1, feeds)
        with np.errstate(invalid="ignore"):
            out = await s.run_graph(1, feeds)
        np.testing.assert_array_equal(out["y"], [2, np.nan, 3])


async def test_outputs_are_fresh_arrays_the_caller_owns() -> None:
    g = Graph("owned")
    x = g.input("x", (4, 4))
    a = ops.tanh(x)
    g.output(ops.identity(x), ops.reshape(a, np.array([-1], np.int64)), names=["same", "flat"])
    async with aioge.Session(OPTIONS) as s:
        await s.add_graph(1, g)
        x1 = np.ones((4, 4), np.float32)
        first = await s.run_graph(1, {"x": x1})
        assert not any(np.may_share_memory(first[k], x1) for k in first)
        await s.run_graph(1, {"x": np.zeros((4, 4), np.float32)})
        np.testing.assert_array_equal(first["flat"], np.tanh(np.ones(16, np.float32)))
        np.testing.assert_array_equal(first["same"], x1)
        first["same"][0, 0] = 5  # writable, and nobody else's
        assert x1[0, 0] == 1


@pytest.mark.parametrize("mode", ["sink", "host"])
async def test_an_output_that_is_a_variable_or_a_feed_itself_is_copied(mode: str, workers: EngineWorkers) -> None:
    """An output array that owns its memory goes to the caller as it is, unless it is the
    session's variable or the caller's feed: a kernel that returned its input itself (Identity,
    patched to) would hand those out, so they are copied."""
    g = Graph("own")
    x = g.input("x", (3,))
    v = g.variable("v", np.array([1.0, 2.0, 3.0], np.float32))
    g.output(ops.identity(v, name="var"), ops.identity(x, name="feed"), ops.tanh(x, name="fresh"), names=["var", "feed", "fresh"])
    options = {**OPTIONS, "ge.optimizationSwitch": OPTIONS["ge.optimizationSwitch"] + ";IdentityRemovalPass:off"}
    x1 = np.zeros(3, np.float32)
    async with aioge.Session(options) as s:
        exe = await _executable(s, g, {"x": x1})
        layout = exe._layout
        steps = [
            dataclasses.replace(st, run=lambda ins, outs: (ins[0],)) if st.name in ("var", "feed") else st for st in layout.steps
        ]
        exe._layout = dataclasses.replace(layout, steps=tuple(steps))
        exe._pool.clear()
        out = await exe.run({"x": x1}, workers=workers, mode=mode)
        assert out["fresh"].base is None  # made by the kernel: handed over as it is
        assert out["var"] is not exe._variables["v"] and out["feed"] is not x1
        out["var"][:] = 7
        out["feed"][:] = 9
        again = await exe.run({"x": x1}, workers=workers, mode=mode)
    np.testing.assert_array_equal(again["var"], [1, 2, 3])
    np.testing.assert_array_equal(x1, 0)


async def test_sink_and_host_modes_agree() -> None:
    g, weights = _branches(n=32)
    x = np.random.default_rng(5).standard_normal((32, 32)).astype(np.float32)
    outs = []
    for mode in ("sink", "host"):
        async with aioge.Session({**OPTIONS, "aioge.exec_mode": mode}) as s:
            await s.add_graph(1, g)
            outs.append(await s.run_graph(1, {"x": x}))
    np.testing.assert_array_equal(outs[0]["y"], outs[1]["y"])
    np.testing.assert_allclose(outs[0]["y"], _branches_ref(x, weights), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("single", [False, True])
@pytest.mark.parametrize("mode", ["sink", "host"])
async def test_a_kernel_returning_a_view_into_the_arena_is_made_safe(mode: str, single: bool, workers: EngineWorkers) -> None:
    """Kernels return fresh arrays when they have no preallocated output (the contract the
    memory plan relies on). One that returns its planned input instead (here Identity, patched
    to do so) would hand out ``a``'s arena bytes while ``c``, ``c2`` and ``d`` (the same size,
    born after ``a``'s last reader) are written there; the executor copies such a result."""
    n = 128
    g = Graph("views")
    x = g.input("x", (n, n))
    a = ops.tanh(ops.mul(x, 0.5), name="a")
    flat = ops.identity(a, name="flat")  # a graph output: not planned
    c = ops.tanh(ops.add(x, ops.reduce_mean(flat, keepdims=0), name="c"), name="c2")
    d = ops.sigmoid(c, name="d")
    g.output(flat, ops.reduce_mean(d, keepdims=0), names=["flat", "late"])
    xv = np.random.default_rng(6).standard_normal((n, n)).astype(np.float32)
    options = {**OPTIONS, "ge.enableSingleStream": "true" if single else "false"}
    options["ge.optimizationSwitch"] += ";IdentityRemovalPass:off"
    async with aioge.Session(options) as s:
        exe = await _executable(s, g, {"x": xv})
        layout = exe._layout
        k = next(i for i, st in enumerate(layout.steps) if st.name == "flat")
        assert not layout.steps[k].planned
        offsets = exe.model.memory.offsets()
        a_bytes = offsets[exe.model.graph.nodes[k].inputs[0].name]  # type: ignore[union-attr]
        later = [
            b for b in exe.model.memory.buffers if b.producer > k and b.offset < sum(a_bytes) and a_bytes[0] < b.offset + b.nbytes
        ]
        assert later or not single, "on one stream a later tensor does take a's bytes"
        bad = dataclasses.replace(layout.steps[k], run=lambda ins, outs: (ins[0],))  # the very arena view
        exe._layout = dataclasses.replace(layout, steps=(*layout.steps[:k], bad, *layout.steps[k + 1 :]))
        exe._pool.clear()
        runs = [await exe.run({"x": xv}, workers=workers, mode=mode, poison=True) for _ in range(3)]
    a_ref = np.tanh(xv * np.float32(0.5))
    d_ref = 1 / (1 + np.exp(-np.tanh(xv + a_ref.mean())))
    for r in runs:
        np.testing.assert_allclose(r["flat"], a_ref, rtol=1e-6)
        assert r["late"] == pytest.approx(d_ref.mean(), rel=1e-5)


@pytest.mark.parametrize("mode", ["sink", "host"])
async def test_cpu_tokens_bound_how_many_streams_compute_at_once(mode: str) -> None:
    """With one token, four streams still finish (a stream waiting for an event lends its
    token to the producer) and no two kernels ever overlap in time."""
    g, weights = _branches(n=64)
    x = np.random.default_rng(7).standard_normal((64, 64)).astype(np.float32)
    one = EngineWorkers(cpu_slots=1)
    try:
        async with aioge.Session(OPTIONS) as s:
            exe = await _executable(s, g, {"x": x})
            assert exe.model.streams.num_streams == 4 and exe.model.streams.events
            spans: list[TraceSpan] = []
            with anyio.fail_after(10):
                out = await exe.run({"x": x}, workers=one, mode=mode, trace=spans)
        np.testing.assert_allclose(out["y"], _branches_ref(x, weights), rtol=1e-5, atol=1e-5)
        spans.sort(key=lambda sp: sp.start)
        assert len(spans) == len(exe.model.nodes)
        assert all(a.end <= b.start for a, b in zip(spans, spans[1:])), "one token: one kernel at a time"
    finally:
        one.close()


async def test_ufunc_steps_called_directly_still_read_each_runs_feeds() -> None:
    """Steps that are a plain ufunc over arena tensors are bound straight to the ufunc; the
    ones reading a feed keep their patched argument lists, so every run sees its own feeds."""
    g = Graph("adds")
    x = g.input("x", (4, 8))
    h = ops.add(x, x)
    for _ in range(3):
        h = ops.add(h, h)
    g.output(ops.mul(h, x), names=["y"])
    async with aioge.Session({**OPTIONS, "ge.optimizationSwitch": "ElementwiseFusionPass:off"}) as s:
        await s.add_graph(1, g)
        await s.build_graph(1, {"x": np.zeros((4, 8), np.float32)})
        ctx = s.executable(1)._acquire(False)
        direct = sum(isinstance(c, partial) and c.func in (np.add, np.multiply) for c in ctx.calls)
        assert direct == 3, "the three inner Adds; the first Add and the Mul read the feed"
        for k in range(4):
            xv = np.full((4, 8), k + 1, np.float32)
            out = await s.run_graph(1, {"x": xv})
            np.testing.assert_array_equal(out["y"], 16 * xv * xv)
