"""A kernel that raises, or makes NaN under ``op_debug_level``, fails only its own run.

The error is an ``ExecutionError`` naming the graph, the node, its op type and its engine;
runs of the same session in flight at the same time, and the next run, are right. Faults:
an out-of-range Gather index (a real kernel error), a kernel wrapped to raise on a marked
input (injected where the runtime binds kernels), and Sqrt of a negative number with
``op_debug_level=1`` (the executor's NaN/Inf check after every kernel).
"""

from __future__ import annotations

import dataclasses

import anyio
import numpy as np
import pytest

import aioge
import aioge.runtime.bind as binding
from aioge import ops
from aioge.errors import ExecutionError
from aioge.runtime import schedule

pytestmark = pytest.mark.anyio

MODES = ["sink", "host"]
W = (np.arange(64, dtype=np.float32).reshape(8, 8) - 32) / 64


async def _concurrently(s: aioge.Session, feeds: list[dict[str, np.ndarray]]) -> list[object]:
    """Run every feed at once; each result is the outputs or the exception."""
    results: list[object] = [None] * len(feeds)

    async def one(k: int) -> None:
        try:
            results[k] = await s.run_graph(1, feeds[k])
        except ExecutionError as exc:
            results[k] = exc

    async with anyio.create_task_group() as tg:
        for k in range(len(feeds)):
            tg.start_soon(one, k)
    return results


def _opts(mode: str, **more: str) -> dict[str, str]:
    return {"aioge.tune_mode": "heuristic", "aioge.exec_mode": mode, **more}


@pytest.mark.parametrize("mode", [*MODES, "devices"])
async def test_gather_out_of_range_fails_only_that_run(mode, monkeypatch) -> None:
    g = aioge.Graph("gather")
    d, i = g.input("d", (5, 4)), g.input("i", (3,), "int64")
    g.output(ops.gather(d, i, axis=0) * 2.0, names=["y"])
    data = np.arange(20, dtype=np.float32).reshape(5, 4)
    feeds = [{"d": data, "i": np.array([k % 5, (k + 1) % 5, 9 if k % 4 == 1 else 2])} for k in range(24)]
    # "devices": the runs go to two device processes (aioge.exec_devices), the error comes back
    # (even though they are short: runs under a millisecond would come back to this process).
    if mode == "devices":
        monkeypatch.setattr(schedule, "INLINE_US", 0.0)
    options = _opts("sink", **{"aioge.exec_devices": "2"}) if mode == "devices" else _opts(mode)
    async with aioge.Session(options) as s:
        await s.add_graph(1, g)
        results = await _concurrently(s, feeds)
        gather = next(p for p in s.compiled(1).nodes if p.op_type == "Gather")
        for k, r in enumerate(results):
            if k % 4 == 1:
                assert isinstance(r, ExecutionError)
                assert (r.graph, r.node, r.op_type, r.engine) == ("gather", gather.name, "Gather", gather.engine)
                assert f"node {gather.name!r} (Gather on {gather.engine})" in str(r) and "IndexError" in str(r)
                assert ("on device" in str(r)) == (mode == "devices")
            else:
                np.testing.assert_array_equal(r["y"], data[feeds[k]["i"]] * 2)
        y = (await s.run_graph(1, {"d": data, "i": np.array([4, 3, 0])}))["y"]
        np.testing.assert_array_equal(y, data[[4, 3, 0]] * 2)


def _mlp() -> aioge.Graph:
    g = aioge.Graph("mlp")
    x = g.input("x", (4, 8))
    g.output(ops.tanh(ops.einsum(x, g.constant(W, "w"), equation="ni,ij->nj")), names=["y"])
    return g


@pytest.mark.parametrize("mode", MODES)
async def test_injected_raising_kernel_fails_only_its_runs(mode, monkeypatch) -> None:
    real = binding.get_schema

    class Faulty:  # the schema, with kernels that raise when their first input is marked
        def __init__(self, schema):
            self._schema = schema

        def impl(self, name):
            impl = self._schema.impl(name)

            def build(*args):
                run = impl.build(*args)

                def faulty(ins, outs):
                    x = ins[0]
                    if isinstance(x, np.ndarray) and x.size and x.flat[0] == 13.0:
                        raise RuntimeError("injected kernel fault")
                    return run(ins, outs)

                return faulty

            return dataclasses.replace(impl, build=build)

    monkeypatch.setattr(binding, "get_schema", lambda op, domain="": Faulty(real(op, domain)))
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((4, 8)).astype(np.float32)} for _ in range(32)]
    for k in range(0, 32, 5):
        feeds[k]["x"][0, 0] = 13.0
    async with aioge.Session(_opts(mode)) as s:
        await s.add_graph(1, _mlp())
        results = await _concurrently(s, feeds)
        first = s.compiled(1).nodes[0]  # the node that reads x
        assert s.compiled(1).graph.nodes[0].inputs[0].name == "x"
        for k, r in enumerate(results):
            if k % 5 == 0:
                assert isinstance(r, ExecutionError) and (r.node, r.engine) == (first.name, first.engine)
                assert "RuntimeError: injected kernel fault" in str(r) and first.engine in str(r)
            else:
                np.testing.assert_allclose(r["y"], np.tanh(feeds[k]["x"] @ W), rtol=1e-5, atol=1e-6)
        x = feeds[1]["x"]
        np.testing.assert_allclose((await s.run_graph(1, {"x": x}))["y"], np.tanh(x @ W), rtol=1e-5, atol=1e-6)


def _sqrt() -> aioge.Graph:
    g = aioge.Graph("root")
    x = g.input("x", (6,))
    g.output(ops.sqrt(x) * 2.0, names=["y"])
    return g


@pytest.mark.parametrize("mode", MODES)
async def test_nan_under_op_debug_level_fails_only_that_run(mode) -> None:
    feeds = [{"x": np.arange(6, dtype=np.float32) - (3 if k % 3 == 0 else 0)} for k in range(18)]
    with np.errstate(invalid="ignore"):  # numpy's own warning is not the check under test
        async with aioge.Session(_opts(mode, op_debug_level="1")) as s:
            await s.add_graph(1, _sqrt())
            results = await _concurrently(s, feeds)
            node = s.compiled(1).nodes[0]
            for k, r in enumerate(results):
                if k % 3 == 0:
                    assert isinstance(r, ExecutionError) and (r.graph, r.node, r.engine) == ("root", node.name, node.engine)
                    assert "FloatingPointError" in str(r) and "3 NaN" in str(r) and "op_debug_level" in str(r)
                else:
                    np.testing.assert_allclose(r["y"], np.sqrt(feeds[k]["x"]) * 2, rtol=1e-6)
            y = (await s.run_graph(1, {"x": np.full(6, 4.0, np.float32)}))["y"]
            np.testing.assert_array_equal(y, np.full(6, 4.0, np.float32))
            # NaN that came in with a feed is not the kernel's doing: it passes through.
            y = (await s.run_graph(1, {"x": np.array([np.nan, 1, 1, 1, 1, 1], np.float32)}))["y"]
            assert np.isnan(y[0]) and (y[1:] == 2).all()
        async with aioge.Session(_opts(mode)) as s:  # op_debug_level 0: no check, NaN is a value
            await s.add_graph(1, _sqrt())
            y = (await s.run_graph(1, {"x": np.arange(6, dtype=np.float32) - 3}))["y"]
            assert np.isnan(y[:3]).all() and np.array_equal(y[3:], np.sqrt([0, 1, 2]).astype(np.float32) * 2)
