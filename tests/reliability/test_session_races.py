"""Session races: concurrent first runs of graph objects, concurrent adds of one id, sessions
never closed, and sessions closed while runs are in flight (sink, host and device modes).

Each test failed on the code before the fix: ``Session.run`` gave two graphs seen at once the
same id (and later served one graph's model for the other), compiled once per concurrent
first caller, ignored later ``options=`` and kept every graph forever; two ``add_graph`` of
one id in flight both succeeded; an unclosed session warned nothing; closing a host-mode
session hung its runs forever (past ``fail_after``) and sink-mode runs got a bare
RuntimeError.
"""

from __future__ import annotations

import gc
import threading
import time
import warnings
import weakref
from typing import Any

import anyio
import numpy as np
import pytest

import aioge
from aioge import ops
from aioge import session as session_module
from aioge.errors import GraphError, SessionClosedError

pytestmark = pytest.mark.anyio

OPTS = {"aioge.tune_mode": "heuristic"}


def _scaled_tanh(scale: float, name: str = "g") -> aioge.Graph:
    g = aioge.Graph(name)
    x = g.input("x", (4, 8))
    g.output(ops.tanh(ops.mul(x, scale)), names=["y"])
    return g


def _ref(x: np.ndarray, scale: float) -> np.ndarray:
    return np.tanh(x * np.float32(scale))


def _x(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((4, 8)).astype(np.float32)


class _CountCompiles:
    """Wraps session.compile_graph: how many graphs were compiled, with which options."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, Any]] = []
        real = session_module.compile_graph

        async def counted(graph: aioge.Graph, signature: Any, resolved: Any, **kw: Any) -> Any:
            self.calls.append((graph.name, resolved))
            await anyio.sleep(0.01)  # a compile takes time: concurrent first callers overlap it
            return await real(graph, signature, resolved, **kw)

        monkeypatch.setattr(session_module, "compile_graph", counted)


async def _gather(*fns: Any) -> list[Any]:
    """Run the async callables concurrently; each result or the exception it raised."""
    out: list[Any] = [None] * len(fns)

    async def one(k: int) -> None:
        try:
            out[k] = await fns[k]()
        except Exception as exc:
            out[k] = exc

    async with anyio.create_task_group() as tg:
        for k in range(len(fns)):
            tg.start_soon(one, k)
    return out


# -- Session.run ----------------------------------------------------------------------


async def test_two_graphs_first_run_concurrently_each_get_their_own_model() -> None:
    a, b = _scaled_tanh(1.0, "a"), _scaled_tanh(-3.0, "b")
    x = _x()
    async with aioge.Session(OPTS) as s:
        ra, rb = await _gather(lambda: s.run(a, {"x": x}), lambda: s.run(b, {"x": x}))
        np.testing.assert_allclose(ra["y"], _ref(x, 1.0), rtol=1e-6)
        np.testing.assert_allclose(rb["y"], _ref(x, -3.0), rtol=1e-6)
        for _ in range(2):  # later runs, one at a time and concurrently, never serve the other's model
            np.testing.assert_allclose((await s.run(a, {"x": x}))["y"], _ref(x, 1.0), rtol=1e-6)
            np.testing.assert_allclose((await s.run(b, {"x": x}))["y"], _ref(x, -3.0), rtol=1e-6)
            many = await _gather(*[(lambda g=g: s.run(g, {"x": x})) for g in (a, b) * 4])
            for k, r in enumerate(many):
                np.testing.assert_allclose(r["y"], _ref(x, 1.0 if k % 2 == 0 else -3.0), rtol=1e-6)


async def test_twenty_concurrent_first_runs_compile_once(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = _CountCompiles(monkeypatch)
    g = _scaled_tanh(0.5)
    xs = [_x(k) for k in range(20)]
    async with aioge.Session(OPTS) as s:
        results = await _gather(*[(lambda x=x: s.run(g, {"x": x})) for x in xs])
        for x, r in zip(xs, results, strict=True):
            np.testing.assert_allclose(r["y"], _ref(x, 0.5), rtol=1e-6)
        assert len(counter.calls) == 1, f"{len(counter.calls)} compiles for 20 concurrent first runs"
        await s.run(g, {"x": xs[0]})
        assert len(counter.calls) == 1
        assert len(s._graphs) == 1


async def test_other_options_for_the_same_graph_make_another_build(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = _CountCompiles(monkeypatch)
    g = _scaled_tanh(2.0)
    x = _x()
    async with aioge.Session(OPTS) as s:
        await s.run(g, {"x": x})
        out = await s.run(g, {"x": x}, {"ge.exec.exclude_engines": "AiCore|AiVec"})
        np.testing.assert_allclose(out["y"], _ref(x, 2.0), rtol=1e-6)
        assert len(counter.calls) == 2, "options= that differ were silently ignored"
        assert counter.calls[1][1].exclude_engines != counter.calls[0][1].exclude_engines
        built = {e.graph_id: e for e in s._graphs.values()}
        engines = [{n.engine for n in next(iter(e.builds.values())).model.nodes} for e in built.values()]
        assert {"AiCpu"} in engines and any(es != {"AiCpu"} for es in engines)
        # The same options again (as an alias, in another order) select the existing build.
        await s.run(g, {"x": x}, {"EXCLUDE_ENGINES": "AiCore|AiVec"})
        await s.run(g, {"x": x})
        assert len(counter.calls) == 2


async def test_graphs_given_to_run_are_not_kept_forever() -> None:
    bound = session_module.ANONYMOUS_GRAPHS
    x = _x()
    refs = []  # Graph has no weakref slot: follow each graph's constant, which only the graph holds
    async with aioge.Session(OPTS) as s:
        for k in range(3 * bound):
            g = aioge.Graph(f"g{k}")
            w = np.full(8, 0.1 * (k + 1), np.float32)
            w.setflags(write=False)  # a read-only constant is stored as is, not copied
            g.output(ops.tanh(ops.mul(g.input("x", (4, 8)), g.constant(w, "w"))), names=["y"])
            np.testing.assert_allclose((await s.run(g, {"x": x}))["y"], np.tanh(x * w), rtol=1e-6)
            refs.append(weakref.ref(w))
            del g, w
        assert len(s._anonymous) <= bound and len(s._graphs) <= bound
        gc.collect()
        dead = sum(r() is None for r in refs)
        assert dead >= 2 * bound, f"only {dead} of {len(refs)} graphs given to run() were freed"
        assert all(r() is not None for r in refs[-bound:]), "the most recently run graphs are kept"
        # A graph dropped from the session compiles again when it comes back: still right.
        again = _scaled_tanh(0.1, "again")
        np.testing.assert_allclose((await s.run(again, {"x": x}))["y"], _ref(x, 0.1), rtol=1e-6)


async def test_a_graph_removed_by_its_anonymous_id_is_added_again_by_run() -> None:
    g = _scaled_tanh(1.5)
    x = _x()
    async with aioge.Session(OPTS) as s:
        await s.run(g, {"x": x})
        (gid,) = s._graphs
        await s.remove_graph(gid)
        np.testing.assert_allclose((await s.run(g, {"x": x}))["y"], _ref(x, 1.5), rtol=1e-6)


# -- add_graph ------------------------------------------------------------------------


async def test_two_adds_of_one_id_in_flight_at_once_the_second_raises() -> None:
    a, b = _scaled_tanh(1.0, "a"), _scaled_tanh(-3.0, "b")
    x = _x()
    async with aioge.Session(OPTS) as s:
        results = await _gather(lambda: s.add_graph(1, a), lambda: s.add_graph(1, b))
        errors = [r for r in results if isinstance(r, Exception)]
        assert len(errors) == 1 and isinstance(errors[0], GraphError), results
        assert "graph id 1 is already added" in str(errors[0])
        won = a if results[0] is None else b
        np.testing.assert_allclose((await s.run_graph(1, {"x": x}))["y"], _ref(x, 1.0 if won is a else -3.0), rtol=1e-6)
        # A failed add releases its claim: the id is free again once removed.
        await s.remove_graph(1)
        await s.add_graph(1, b)
        np.testing.assert_allclose((await s.run_graph(1, {"x": x}))["y"], _ref(x, -3.0), rtol=1e-6)


async def test_two_loads_without_an_id_in_flight_at_once_get_two_ids(tmp_path) -> None:
    from aioge.plan.serialize import encode_model

    x = _x()
    paths = []
    async with aioge.Session(OPTS) as s:
        for k, scale in enumerate((1.0, -3.0)):
            await s.add_graph(k, _scaled_tanh(scale, f"m{k}"))
            om, _ = encode_model(await s.build_graph(k))
            paths.append(tmp_path / f"m{k}.om")
            paths[-1].write_bytes(om)
    async with aioge.Session(OPTS) as s:
        ids = await _gather(lambda: s.load_model(paths[0]), lambda: s.load_model(paths[1]))
        assert sorted(ids) == [1, 2], ids
        for gid, scale in zip(ids, (1.0, -3.0)):
            np.testing.assert_allclose((await s.run_graph(gid, {"x": x}))["y"], _ref(x, scale), rtol=1e-6)
        results = await _gather(lambda: s.load_model(paths[0], 5), lambda: s.load_model(paths[1], 5))
        assert sum(isinstance(r, GraphError) for r in results) == 1, results


async def test_an_add_that_fails_validation_frees_its_id() -> None:
    bad = aioge.Graph("bad")
    bad.input("x", (2,))  # no outputs: invalid
    async with aioge.Session(OPTS) as s:
        with pytest.raises(GraphError):
            await s.add_graph(7, bad)
        await s.add_graph(7, _scaled_tanh(1.0))
        assert 7 in s._graphs


# -- sessions never closed ------------------------------------------------------------


async def test_an_unclosed_session_warns_and_stops_its_threads_when_collected(tmp_path) -> None:
    s = aioge.Session(OPTS)
    await s.add_graph(1, _scaled_tanh(1.0))
    await s.run_graph(1, {"x": _x()}, trace=tmp_path / "t.json")  # traced: on the lanes, not the C queue's runner
    assert s._workers is not None
    threads = [lane._thread for lane in s._workers._started]
    assert threads and all(t.is_alive() for t in threads)
    with pytest.warns(ResourceWarning, match=r"unclosed aioge\.Session holding \d+ engine thread"):
        del s
        gc.collect()
    deadline = time.perf_counter() + 5.0
    while any(t.is_alive() for t in threads) and time.perf_counter() < deadline:
        await anyio.sleep(0.01)
    assert not any(t.is_alive() for t in threads)


async def test_closed_and_unstarted_sessions_do_not_warn() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        async with aioge.Session(OPTS) as s:
            await s.run(_scaled_tanh(1.0), {"x": _x()})
        del s
        idle = aioge.Session(OPTS)  # holds no thread or process yet
        del idle
        gc.collect()
    assert not [w for w in seen if issubclass(w.category, ResourceWarning)], [str(w.message) for w in seen]


# -- closing with runs in flight --------------------------------------------------------


_W = (np.eye(128, dtype=np.float32) * 0.9 + 0.01).astype(np.float32)


def _long_chain(n: int = 150) -> aioge.Graph:
    """n MatMul + Tanh pairs that do not fuse: a host-mode run dispatches 2n ops (~25 ms)."""
    g = aioge.Graph("long")
    h = g.input("x", (128, 128))
    for k in range(n):
        h = ops.tanh(ops.matmul(h, g.constant(_W, f"w{k}")))
    g.output(h, names=["y"])
    return g


def _long_ref(x: np.ndarray, n: int = 150) -> np.ndarray:
    h = x
    for _ in range(n):
        h = np.tanh(h @ _W)
    return h


@pytest.mark.timeout(60)  # before the fix, host mode hung past fail_after: only this stopped it
@pytest.mark.parametrize("mode", ["sink", "host", "devices"])
async def test_closing_with_runs_in_flight_fails_them_promptly(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from aioge.runtime import schedule

    monkeypatch.setattr(schedule, "INLINE_US", 0.0)  # every run goes to the lanes (or devices)
    opts = {**OPTS, "aioge.exec_mode": "host" if mode == "host" else "sink"}
    if mode == "devices":
        opts["aioge.exec_devices"] = "1"
    x = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)
    s = aioge.Session(opts)
    await s.__aenter__()
    await s.add_graph(1, _long_chain())
    await s.run_graph(1, {"x": x})  # compiled, engines (and the device) started
    results: list[Any] = []
    started = threading.Event()

    async def one() -> None:
        started.set()
        try:
            results.append(await s.run_graph(1, {"x": x}))
        except Exception as exc:
            results.append(exc)

    with anyio.fail_after(30):  # before the fix, host mode hung here forever, past any deadline
        async with anyio.create_task_group() as tg:
            for _ in range(12):
                tg.start_soon(one)
            await anyio.sleep(0.015)  # the first runs are part way through their ops
            assert started.is_set()
            await s.aclose()
    assert len(results) == 12
    closed = [r for r in results if isinstance(r, SessionClosedError)]
    other = [r for r in results if not isinstance(r, (dict, SessionClosedError))]
    assert not other, [repr(r) for r in other]
    assert closed, "no run was still in flight when the session closed"
    want = _long_ref(x)
    for r in results:
        if isinstance(r, dict):
            np.testing.assert_allclose(r["y"], want, rtol=1e-4, atol=1e-5)
    with pytest.raises(SessionClosedError):
        await s.run_graph(1, {"x": x})
    with pytest.raises(SessionClosedError):
        await s.run(_scaled_tanh(1.0), {"x": _x()})
