"""Graph options end to end: ``ge.inputShape`` alone (no gears) is ATC's static shape for the
inputs it names (issue 43); the graph cache keys the options the compiler reads (issue 40)."""

from __future__ import annotations

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.errors import FeedError, OptionError

pytestmark = pytest.mark.anyio

W = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)


def _graph() -> aioge.Graph:
    g = aioge.Graph("sym")
    x = g.input("x", ("batch", 64), "float32")
    g.output(ops.relu(ops.matmul(x, g.constant(W, "w"))), names=["y"])
    return g


@pytest.mark.parametrize("key", ["ge.inputShape", "input_shape", "INPUT_SHAPE"])
async def test_input_shape_alone_fixes_the_named_inputs(key: str) -> None:
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _graph(), {key: "x:3,64"})
        model = await s.build_graph(1)  # no shapes given: the option's
        assert [(n, tuple(sh)) for n, sh in model.signature] == [("x", (3, 64))]
        x = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
        (y,) = (await s.run_graph(1, {"x": x})).values()
        np.testing.assert_allclose(y, np.maximum(x @ W, 0), rtol=1e-5, atol=1e-5)
        with pytest.raises(FeedError, match="'x'"):  # static now: another batch is refused
            await s.run_graph(1, {"x": np.zeros((2, 64), np.float32)})


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("y:3,64", "names no input 'y'"),
        ("x:3,65", "a shape graph 'sym' accepts"),
        ("x:3", "a shape graph 'sym' accepts"),
        ("x:-1,64", "with ge.dynamicBatchSize or ge.dynamicDims, or give every dim"),
    ],
)
async def test_a_static_input_shape_the_graph_cannot_take_names_the_option(value: str, reason: str) -> None:
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        with pytest.raises(OptionError, match=reason) as info:
            await s.add_graph(1, _graph(), {"ge.inputShape": value})
        assert info.value.key == "ge.inputShape"


async def test_the_graph_cache_keys_exec_mode_and_not_exec_devices(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 40: the compiler reads aioge.exec_mode (sink plans take native kernels), so a graph
    compiled for one mode is not served to the other; aioge.exec_devices only says where runs
    go, so changing it reuses the entry."""

    async def build(**session: str) -> bool:
        opts = {"ge.graph_compiler_cache_dir": str(tmp_path), "aioge.tune_mode": "heuristic", **session}
        async with aioge.Session(opts) as s:
            g = aioge.Graph("static")
            g.output(ops.relu(ops.matmul(g.input("x", (2, 64), "float32"), g.constant(W, "w"))), names=["y"])
            await s.add_graph(1, g, {"ge.graph_key": "static"})
            return (await s.build_graph(1)).stats.graph_cache_hit

    assert not await build(**{"aioge.exec_mode": "sink"})
    assert not await build(**{"aioge.exec_mode": "host"}), "a sink plan was served to host mode"
    assert await build(**{"aioge.exec_mode": "host"})
    assert await build(**{"aioge.exec_mode": "sink", "aioge.exec_devices": "1"}), "exec_devices recompiled"
