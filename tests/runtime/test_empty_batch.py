"""An empty batch (N=0) compiles and runs to empty outputs, as onnxruntime gives them, in
tune and heuristic mode: a node whose outputs have no elements is bound to no kernel at all
(``kernels.contract.bind_kernel``), so no C kernel or in-place activation sees a zero-size
geometry."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import aioge
from aioge.examples import EXAMPLES

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

pytestmark = pytest.mark.anyio
MODES = ["tune", "heuristic"]


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)


def _model(nodes: list[Any], inits: dict[str, np.ndarray], x: list[Any], y: list[Any]) -> bytes:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
        [numpy_helper.from_array(a, n) for n, a in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


def _mlp() -> tuple[bytes, tuple[int, ...]]:
    # Gemm + Relu (fused with an activation), MatMul + Add, Sigmoid, Softmax, a reduction over a non-batch axis.
    r = np.random.default_rng(0)
    inits = {"w1": _w(r, 32, 16), "b1": _w(r, 32), "w2": _w(r, 32, 8), "b2": _w(r, 8), "axes": np.array([1], np.int64)}
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["m"]),
        helper.make_node("Add", ["m", "b2"], ["a"]),
        helper.make_node("Sigmoid", ["a"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("ReduceMean", ["p", "axes"], ["y"], keepdims=1),
    ]
    return _model(nodes, inits, ["N", 16], ["N", 1]), (16,)


def _cnn() -> tuple[bytes, tuple[int, ...]]:
    # Conv + BatchNorm + Relu (folded and fused), a depthwise Conv, MaxPool, GlobalAveragePool, Flatten, Gemm, Tanh.
    r = np.random.default_rng(1)
    inits = {
        "w": _w(r, 8, 3, 3, 3),
        "b": _w(r, 8),
        "scale": np.abs(_w(r, 8)) + 0.5,
        "shift": _w(r, 8),
        "mean": _w(r, 8),
        "var": np.abs(_w(r, 8)) + 0.5,
        "dw": _w(r, 8, 1, 3, 3),
        "fc": _w(r, 4, 8),
        "fb": _w(r, 4),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("Conv", ["r", "dw"], ["d"], group=8, pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("MaxPool", ["d"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["mp"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fb"], ["g"], transB=1),
        helper.make_node("Tanh", ["g"], ["y"]),
    ]
    return _model(nodes, inits, ["N", 3, 16, 16], ["N", 4]), (3, 16, 16)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("build", [_mlp, _cnn], ids=["mlp", "cnn"])
async def test_an_empty_batch_of_an_onnx_model_matches_onnxruntime(build: Any, mode: str) -> None:
    data, tail = build()
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    graph = aioge.load_onnx(data)
    async with aioge.Session({"aioge.tune_mode": mode, "aioge.tune_budget_ms": "20"}) as s:
        for n in (0, 3, 0):  # empty, then a batch with rows (its own build), then empty again
            x = np.random.default_rng(n).standard_normal((n, *tail)).astype(np.float32)
            (want,) = sess.run(None, {"x": x})
            got = (await s.run(graph, {"x": x}))["y"]
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(EXAMPLES))
async def test_an_empty_batch_of_the_builder_examples_gives_the_references_shapes(name: str, mode: str) -> None:
    graph, feeds, reference = EXAMPLES[name](batch=0)  # type: ignore[call-arg]
    want = reference(feeds)
    async with aioge.Session({"aioge.tune_mode": mode, "aioge.tune_budget_ms": "20"}) as s:
        got = await s.run(graph, feeds)
    assert {k: (v.shape, v.dtype) for k, v in got.items()} == {k: (v.shape, v.dtype) for k, v in want.items()}
    assert all(v.shape[0] == 0 for v in got.values())


async def test_an_empty_batch_model_saves_and_loads(tmp_path: Any) -> None:
    # Loading binds every kernel once to check it: the empty nodes bind to nothing there too.
    graph, feeds, reference = EXAMPLES["cnn"](batch=0)  # type: ignore[call-arg]
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, graph)
        await (await s.build_graph(1)).save(tmp_path / "empty.om")
        gid = await s.load_model(tmp_path / "empty.om")
        got = await s.run_graph(gid, feeds)
    assert {k: v.shape for k, v in got.items()} == {k: v.shape for k, v in reference(feeds).items()}


@pytest.mark.parametrize(
    "options",
    [{"aioge.batch_max_rows": "8"}, {"ge.inputShape": "x:-1,16", "ge.dynamicBatchSize": "1,4"}],
    ids=["batching", "gears"],
)
async def test_an_empty_batch_with_gears_or_batching_runs_padded_and_gives_no_rows(options: dict[str, str]) -> None:
    from aioge import ops

    w = _w(np.random.default_rng(2), 16, 8)
    graph = aioge.Graph("mlp")
    x = graph.input("x", ("N", 16), "float32")
    graph.output(ops.softmax(ops.relu(ops.matmul(x, graph.constant(w))), axis=-1), names=["y"])
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, graph, options)
        for _ in range(2):  # the second with its layout known (it once reached the batcher: ZeroDivisionError)
            got = (await s.run_graph(1, {"x": np.zeros((0, 16), np.float32)}))["y"]
            assert got.shape == (0, 8) and got.dtype == np.float32
        one = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)  # and rows still run right
        z = np.maximum(one @ w, 0)
        want = np.exp(z - z.max(-1, keepdims=True))
        np.testing.assert_allclose((await s.run_graph(1, {"x": one}))["y"], want / want.sum(-1, keepdims=True), rtol=1e-5)
