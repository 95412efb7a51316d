"""ai.onnx.preview.training Gradient (aioge.frontends.onnx_gradient) against analytic gradients.

(onnx.reference has no Gradient; the model suites' two Gradient models check against their stored outputs.)
"""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import aioge
from aioge.errors import UnsupportedOpError

OPTIONS = {"aioge.tune_mode": "heuristic", "ge.op_compiler_cache_mode": "disable"}


def _model(nodes: list[onnx.NodeProto], inputs: list[tuple[str, list[int]]], outputs: list[str]) -> onnx.ModelProto:
    graph = h.make_graph(
        nodes,
        "grad",
        [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in inputs],
        [h.make_tensor_value_info(n, T.FLOAT, None) for n in outputs],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.preview.training", 1)])


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        async with aioge.Session(OPTIONS) as sess:
            return await sess.run(aioge.load_onnx(model), feeds)

    return anyio.run(go)


def test_gradient_of_add_and_mul() -> None:
    """The model suites' Gradient graph: d = a + b, e = d * a; de/da = 2a + b, de/db = a."""
    nodes = [
        h.make_node("Add", ["a", "b"], ["d"]),
        h.make_node("Mul", ["d", "a"], ["e"]),
        h.make_node("Gradient", ["a", "b"], ["de_da", "de_db"], domain="ai.onnx.preview.training", xs=["a", "b"], y="e"),
    ]
    model = _model(nodes, [("a", [2, 3]), ("b", [2, 3])], ["e", "de_da", "de_db"])
    rng = np.random.default_rng(1)
    feeds = {k: rng.standard_normal((2, 3)).astype(np.float32) for k in "ab"}
    got = _run(model, feeds)
    a, b = feeds["a"], feeds["b"]
    np.testing.assert_allclose(got["e"], (a + b) * a, rtol=1e-6)
    np.testing.assert_allclose(got["de_da"], 2 * a + b, rtol=1e-6)
    np.testing.assert_allclose(got["de_db"], a, rtol=1e-6)


def test_gradient_through_broadcasting_sub_div_and_matmul() -> None:
    """y = ((x @ w) - c) / s with c and s broadcast: gradients summed back to each input's shape."""
    nodes = [
        h.make_node("MatMul", ["x", "w"], ["m"]),
        h.make_node("Sub", ["m", "c"], ["u"]),
        h.make_node("Div", ["u", "s"], ["y"]),
        h.make_node(
            "Gradient",
            ["x", "w", "c", "s"],
            ["gx", "gw", "gc", "gs"],
            domain="ai.onnx.preview.training",
            xs=["x", "w", "c", "s"],
            y="y",
        ),
    ]
    model = _model(nodes, [("x", [4, 3]), ("w", [3, 5]), ("c", [5]), ("s", [4, 1])], ["y", "gx", "gw", "gc", "gs"])
    rng = np.random.default_rng(2)
    x, w, c = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3, 5), (5,)))
    s = rng.uniform(1, 2, (4, 1)).astype(np.float32)
    got = _run(model, {"x": x, "w": w, "c": c, "s": s})
    ones = np.ones((4, 5), np.float32)
    np.testing.assert_allclose(got["gx"], (ones / s) @ w.T, rtol=1e-5)
    np.testing.assert_allclose(got["gw"], x.T @ (ones / s), rtol=1e-5)
    np.testing.assert_allclose(got["gc"], -(ones / s).sum(0), rtol=1e-5)
    np.testing.assert_allclose(got["gs"], (-(x @ w - c) / s**2).sum(1, keepdims=True), rtol=1e-5)
    assert got["gc"].shape == (5,) and got["gs"].shape == (4, 1)


def test_gradient_of_an_x_y_does_not_read_is_zero() -> None:
    nodes = [
        h.make_node("Neg", ["a"], ["y"]),
        h.make_node("Gradient", ["a", "b"], ["ga", "gb"], domain="ai.onnx.preview.training", xs=["a", "b"], y="y"),
    ]
    model = _model(nodes, [("a", [3]), ("b", [2])], ["ga", "gb"])
    got = _run(model, {"a": np.ones(3, np.float32), "b": np.ones(2, np.float32)})
    np.testing.assert_array_equal(got["ga"], -np.ones(3, np.float32))
    np.testing.assert_array_equal(got["gb"], np.zeros(2, np.float32))


def test_gradient_through_an_op_without_a_rule_is_unsupported() -> None:
    nodes = [
        h.make_node("Tanh", ["a"], ["t"]),
        h.make_node("Mul", ["t", "a"], ["y"]),
        h.make_node("Gradient", ["a"], ["ga"], domain="ai.onnx.preview.training", xs=["a"], y="y"),
    ]
    model = _model(nodes, [("a", [3])], ["ga"])
    with pytest.raises(UnsupportedOpError, match=r"ai.onnx::Tanh \(no gradient rule\)"):
        aioge.load_onnx(model)
