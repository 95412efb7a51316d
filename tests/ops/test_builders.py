"""The typed builders of ``aioge.ops``: generated from the registry, current, and complete."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest

import aioge.ops as ops
from aioge.errors import GraphError
from aioge.ir import Graph
from aioge.ops import builders, gen
from aioge.ops.registry import REGISTRY, builder_name


def test_committed_builders_file_is_what_the_generator_makes() -> None:
    committed = Path(builders.__file__).read_text(encoding="utf-8")
    assert committed == gen.render(), "aioge/ops/builders.py is stale: run python -m aioge.ops.gen"


def test_builder_names_are_the_registry_names_plus_aliases() -> None:
    expected = {builder_name(s) for s in REGISTRY.values()} | set(gen.ALIASES)
    assert set(builders.__all__) == expected
    assert set(gen.builder_names()) == expected
    assert set(ops.__all__) == expected | {"apply", "infer_node", "schemas"}
    assert ops.conv is ops.conv2d


def test_every_builder_is_a_real_def_a_type_checker_can_see() -> None:
    tree = ast.parse(Path(builders.__file__).read_text(encoding="utf-8"))
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for schema in REGISTRY.values():
        name = builder_name(schema)
        fn = defs[name]
        assert fn.returns is not None and ast.get_docstring(fn, clean=True).startswith(f"{schema.name}:")
        keywords = {a.arg for a in fn.args.kwonlyargs}
        assert set(schema.attrs) - {"num_outputs"} <= keywords, name  # every attribute a typed keyword
        assert {"name", "num_outputs"} <= keywords
        assert getattr(ops, name).__name__ == name


def test_builder_signature_carries_attribute_defaults() -> None:
    sig = inspect.signature(ops.conv2d)
    assert sig.parameters["group"].default == 1 and sig.parameters["auto_pad"].default == "NOTSET"
    assert sig.parameters["b"].default is None  # the optional bias (input names from the ONNX schema)
    assert sig.parameters["x"].kind is inspect.Parameter.POSITIONAL_ONLY
    with pytest.raises(TypeError, match="kernel_shape"):
        ops.max_pool(Graph("g").input("x", (1, 1, 4, 4)))  # a required attribute


def test_builders_shadow_family_modules_of_the_same_name() -> None:
    from aioge.ops import attention, shape

    assert callable(shape) and callable(attention) and callable(ops.conv)
    g = Graph("g")
    x = g.input("x", (2, 3))
    assert shape(x).desc.shape == (2,)


def test_builders_keep_variadic_lists_and_tuples_of_outputs() -> None:
    g = Graph("g")
    a, b = g.input("a", (2, 3)), g.input("b", (2, 3))
    assert ops.concat([a, b], axis=0).desc.shape == (4, 3)
    assert ops.concat(a, b, axis=1).desc.shape == (2, 6)
    parts = ops.split(a, np.array([1, 2], np.int64), axis=1, num_outputs=2)
    assert isinstance(parts, tuple) and [p.desc.shape for p in parts] == [(2, 1), (2, 2)]
    assert ops.and_(g.input("p", (2,), "bool"), True).dtype == "bool"


def test_unknown_attribute_is_a_graph_error_naming_the_node() -> None:
    g = Graph("g")
    with pytest.raises(GraphError, match=r"node 'r'.*unknown attribute"):
        ops.relu(g.input("x", (2,)), beta=1.0, name="r")  # type: ignore[call-arg]


def test_value_arithmetic_without_the_op_floor_raises_a_graph_error(monkeypatch) -> None:
    from aioge.ir import graph as ir_graph

    g = Graph("g")
    x = g.input("x", (2, 3))
    y = -(2.0 * x + 1.0) / x @ np.ones((3, 3), np.float32)
    assert [n.op_type for n in g.nodes] == ["Mul", "Add", "Neg", "Div", "MatMul"]
    assert y.desc.shape == (2, 3)
    monkeypatch.setattr(ir_graph, "_op_builder", None)
    with pytest.raises(GraphError, match="Add by Value arithmetic needs the op registry"):
        x + 1.0
