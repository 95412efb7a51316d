"""Engine choice: AiCore > AiVec > AiCpu, per-op support, dtype limits, ge.exec.exclude_engines, EZ3003."""

from __future__ import annotations

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.engines import Engine, parse_engine, select_engine
from aioge.engines.assign import assign_engines
from aioge.errors import CompileError, OptionError
from aioge.ops.registry import get_schema
from aioge.options import check_options, resolve_options

pytestmark = pytest.mark.anyio


def _graph() -> aioge.Graph:
    """tanh (every engine), elu (AiVec, AiCpu), cast (AiCpu only), add on int32 (AiCpu: not float)."""
    g = aioge.Graph("engines")
    x = g.input("x", (2, 3), "float32")
    i = g.input("i", (2, 3), "int32")
    t = ops.tanh(x, name="tanh")
    e = ops.elu(t, name="elu")
    c = ops.cast(e, to="float64", name="cast")
    k = ops.add(i, i, name="int_add")
    g.output(c, k, names=["c", "k"])
    return g


def _assign(excluded: str = "") -> dict[str, str]:
    options = resolve_options(check_options({"ge.exec.exclude_engines": excluded} if excluded else {}, "session"))
    return {name: e.value for name, e in assign_engines(_graph(), options.exclude_engines).items()}


def test_priority_order_and_names() -> None:
    assert [e.priority for e in (Engine.AICORE, Engine.AIVEC, Engine.AICPU)] == [1, 2, 3]
    assert select_engine(set(Engine)) is Engine.AICORE
    assert select_engine({Engine.AICPU, Engine.AIVEC}) is Engine.AIVEC
    assert select_engine(set(Engine), {Engine.AICORE, Engine.AIVEC}) is Engine.AICPU
    assert select_engine({Engine.AICPU}, {Engine.AICPU}) is None
    assert parse_engine("AiVector") is parse_engine("AiVec") is Engine.AIVEC  # GE's code says AiVector, its docs AiVec


def test_each_node_gets_its_best_supported_engine() -> None:
    assert get_schema("Elu").engines == {Engine.AIVEC, Engine.AICPU}
    assert _assign() == {"tanh": "AiCore", "elu": "AiVec", "cast": "AiCpu", "int_add": "AiCpu"}


def test_exclusion_moves_nodes_down_the_priority_list() -> None:
    assert _assign("AiCore") == {"tanh": "AiVec", "elu": "AiVec", "cast": "AiCpu", "int_add": "AiCpu"}
    assert _assign("AiCore|AiVector") == {"tanh": "AiCpu", "elu": "AiCpu", "cast": "AiCpu", "int_add": "AiCpu"}


def test_excluding_the_only_engine_names_every_orphan() -> None:
    with pytest.raises(CompileError) as info:
        _assign("AiCpu")
    err = info.value
    assert err.code == "EZ3003" and sorted(err.nodes) == ["cast", "int_add"]
    assert "cast (Cast; runs on AiCpu)" in str(err) and "int_add (Add; runs on AiCpu)" in str(err)
    assert "excluded engines: AiCpu" in str(err) and "tanh" not in str(err)


def test_all_excluded_fails_every_node() -> None:
    with pytest.raises(
        CompileError, match=r"EZ3003.*no engine left for 4 node\(s\).*excluded engines: AiCore, AiCpu, AiVec"
    ) as info:
        _assign("AiCore|AiVec|AiCpu")
    assert sorted(info.value.nodes) == ["cast", "elu", "int_add", "tanh"]


def test_bad_engine_name_is_an_option_error() -> None:
    with pytest.raises(OptionError, match=r"'TPU' is not one"):
        check_options({"EXCLUDE_ENGINES": "AiCore|TPU"}, "graph")


async def test_graph_level_exclusion_reaches_the_compiled_model() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    i = np.arange(6, dtype=np.int32).reshape(2, 3)
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _graph())
        await s.add_graph(2, _graph(), {"ge.exec.exclude_engines": "AiCore"})
        a = await s.run_graph(1, {"x": x, "i": i})
        b = await s.run_graph(2, {"x": x, "i": i})
        assert {n.name: n.engine for n in s.compiled(1).nodes}["tanh"] == "AiCore"
        assert {n.name: n.engine for n in s.compiled(2).nodes}["tanh"] == "AiVec"
        # Streams belong to engines: every node runs on a stream of its own engine.
        for gid in (1, 2):
            m = s.compiled(gid)
            assert all(m.streams.streams[n.stream].engine == n.engine for n in m.nodes)
        t = np.tanh(x)
        np.testing.assert_allclose(a["c"], np.where(t > 0, t, np.expm1(t)), rtol=1e-6)
        np.testing.assert_array_equal(a["c"], b["c"])
        np.testing.assert_array_equal(a["k"], i + i)
