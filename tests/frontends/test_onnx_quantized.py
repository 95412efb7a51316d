"""Quantized ONNX models as onnxruntime's quantizer writes them (quantize_static in the QDQ and
QOperator formats, per tensor and per channel, U8S8 and S8S8; quantize_dynamic) of a small CNN
and a small transformer-like MatMul block, built here with seeded weights: aioge's outputs
against onnxruntime's on the same quantized model, and the QDQ patterns fused into int8 ops.

Static models quantize with ``reduce_range`` (7-bit weights), as onnxruntime advises for U8S8
on AVX2 machines: its u8 x s8 kernel sums pairs of products in int16 with saturation
(vpmaddubsw), so with full-range weights its results can differ from the exact integer
products by a few units, while aioge's GEMM is exact (int16 x int16 pairs, no saturation).
With 7-bit weights nothing saturates and the outputs are equal bit for bit; the full-range
case is checked against aioge's own numpy tier instead (exact integers too).
"""

from __future__ import annotations

import collections
from typing import Any, Iterator

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

import aioge  # noqa: E402
from aioge.kernels import native  # noqa: E402
from tests.frontends.onnx_suite import Runner, runner  # noqa: E402

helper, T, numpy_helper = onnx.helper, onnx.TensorProto, onnx.numpy_helper
QF, QT = quantization.QuantFormat, quantization.QuantType


def _init(rng: np.random.Generator, name: str, shape: tuple[int, ...], scale: float = 0.2) -> Any:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _cnn() -> Any:
    """Conv-Relu, strided Conv-Relu, a residual-style Add, GlobalAveragePool, Flatten, Gemm."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Add", ["r2", "r2b"], ["a"]),
        helper.make_node("GlobalAveragePool", ["a"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    inits = [
        _init(rng, "w1", (8, 3, 3, 3)),
        _init(rng, "b1", (8,)),
        _init(rng, "w2", (16, 8, 3, 3)),
        _init(rng, "b2", (16,)),
        _init(rng, "r2b", (1, 16, 1, 1)),
        _init(rng, "wf", (10, 16)),
        _init(rng, "bf", (10,)),
    ]
    x = helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 11, 11])
    y = helper.make_tensor_value_info("y", T.FLOAT, [2, 10])
    return helper.make_model(helper.make_graph(nodes, "cnn", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)])


def _block() -> Any:
    """A transformer-style feed-forward block: MatMul + bias, Relu, MatMul, residual Add."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["a1"]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("MatMul", ["r1", "w2"], ["m2"]),
        helper.make_node("Add", ["m2", "x"], ["y"]),
    ]
    inits = [_init(rng, "w1", (24, 37)), _init(rng, "b1", (37,)), _init(rng, "w2", (37, 24))]
    x = helper.make_tensor_value_info("x", T.FLOAT, [2, 5, 24])
    y = helper.make_tensor_value_info("y", T.FLOAT, [2, 5, 24])
    return helper.make_model(helper.make_graph(nodes, "block", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)])


def _attention() -> Any:
    """One self-attention layer as torch exports it: projections, heads split by Reshape and
    Transpose, Q·K^T scaled, Softmax, P·V, heads joined, the output projection."""
    rng = np.random.default_rng(5)
    c = numpy_helper.from_array
    nodes = [helper.make_node("MatMul", ["x", f"w{t}"], [f"{t}0"]) for t in "qkv"]
    for t, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [
            helper.make_node("Reshape", [f"{t}0", "heads"], [f"{t}1"]),
            helper.make_node("Transpose", [f"{t}1"], [f"{t}2"], perm=perm),
        ]
    nodes += [
        helper.make_node("MatMul", ["q2", "k2"], ["s0"]),
        helper.make_node("Mul", ["s0", "scale"], ["s1"]),
        helper.make_node("Softmax", ["s1"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v2"], ["o0"]),
        helper.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["o1", "joined"], ["o2"]),
        helper.make_node("MatMul", ["o2", "wo"], ["y"]),
    ]
    inits = [_init(rng, f"w{t}", (16, 16), 0.5) for t in "qkvo"]
    inits += [c(np.array([1, 6, 2, 8], np.int64), "heads"), c(np.array([1, 6, 16], np.int64), "joined")]
    inits.append(c(np.array(8**-0.5, np.float32), "scale"))
    x = helper.make_tensor_value_info("x", T.FLOAT, [1, 6, 16])
    y = helper.make_tensor_value_info("y", T.FLOAT, [1, 6, 16])
    return helper.make_model(helper.make_graph(nodes, "attn", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)])


def _bottleneck() -> Any:
    """ResNet-50's pattern in small: a bottleneck (1x1, 3x3, 1x1 convs, biases as folded
    BatchNorms leave them) with an identity shortcut, a strided block with a projection
    shortcut, residual Adds and Relus, GlobalAveragePool, Flatten, Gemm."""
    rng = np.random.default_rng(6)
    conv = helper.make_node
    nodes = [
        conv("Conv", ["x", "w1", "b1"], ["c1"]),
        conv("Relu", ["c1"], ["r1"]),
        conv("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        conv("Relu", ["c2"], ["r2"]),
        conv("Conv", ["r2", "w3", "b3"], ["c3"]),
        conv("Add", ["c3", "x"], ["a1"]),
        conv("Relu", ["a1"], ["r3"]),
        conv("Conv", ["r3", "w4", "b4"], ["c4"], pads=[1, 1, 1, 1], strides=[2, 2]),
        conv("Relu", ["c4"], ["r4"]),
        conv("Conv", ["r4", "w5", "b5"], ["c5"]),
        conv("Conv", ["r3", "ws", "bs"], ["sc"], strides=[2, 2]),
        conv("Add", ["c5", "sc"], ["a2"]),
        conv("Relu", ["a2"], ["r5"]),
        conv("GlobalAveragePool", ["r5"], ["g"]),
        conv("Flatten", ["g"], ["f"]),
        conv("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    shapes = {"w1": (4, 8, 1, 1), "w2": (4, 4, 3, 3), "w3": (8, 4, 1, 1), "w4": (16, 8, 3, 3), "w5": (16, 16, 1, 1)}
    shapes.update({"ws": (16, 8, 1, 1), "wf": (10, 16)})
    inits = [_init(rng, k, v, 0.3) for k, v in shapes.items()]
    inits += [_init(rng, "b" + k[1:], (v[0],), 0.1) for k, v in shapes.items()]
    x = helper.make_tensor_value_info("x", T.FLOAT, [1, 8, 10, 10])
    y = helper.make_tensor_value_info("y", T.FLOAT, [1, 10])
    return helper.make_model(helper.make_graph(nodes, "res", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)])


MODELS = {
    "res": (_bottleneck, (1, 8, 10, 10)),
    "cnn": (_cnn, (2, 3, 11, 11)),
    "block": (_block, (2, 5, 24)),
    "attn": (_attention, (1, 6, 16)),
}
# The int8 ops each QDQ model's Conv/MatMul/Gemm nodes become.
FUSED = {"cnn": {"QLinearConv": 2, "QGemm": 1}, "block": {"QLinearMatMul": 2}}


class _Reader(quantization.CalibrationDataReader):  # type: ignore[misc]
    def __init__(self, shape: tuple[int, ...]) -> None:
        rng = np.random.default_rng(7)
        self._it = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(3)])

    def get_next(self) -> Any:
        return next(self._it, None)


def _quantize(tmp: Any, name: str, how: str, *, per_channel: bool = False, s8s8: bool = False, reduce_range: bool = True) -> str:
    make, shape = MODELS[name]
    src, dst = tmp / f"{name}.onnx", tmp / f"{name}_{how}_{per_channel}_{s8s8}_{reduce_range}.onnx"
    onnx.save(make(), src)
    if how == "dynamic":
        quantization.quantize_dynamic(str(src), str(dst))
    else:
        quantization.quantize_static(
            str(src),
            str(dst),
            _Reader(shape),
            quant_format=QF.QDQ if how == "qdq" else QF.QOperator,
            per_channel=per_channel,
            activation_type=QT.QInt8 if s8s8 else QT.QUInt8,
            weight_type=QT.QInt8,
            reduce_range=reduce_range,
        )
    return str(dst)


@pytest.fixture(scope="module")
def run() -> Iterator[Runner]:
    with runner() as r:
        yield r


def _aioge(run: Runner, path: str, x: np.ndarray) -> tuple[np.ndarray, collections.Counter[str]]:
    graph = aioge.load_onnx(path)

    async def go() -> tuple[np.ndarray, collections.Counter[str]]:
        await run.session.add_graph(1, graph)
        try:
            y = (await run.session.run_graph(1, {"x": x}))["y"]
            return y, collections.Counter(n.op_type for n in run.session.compiled(1).graph.nodes)
        finally:
            await run.session.remove_graph(1)

    return run.portal.call(go)


def _ort(path: str, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _feed(name: str) -> np.ndarray:
    return np.random.default_rng(11).standard_normal(MODELS[name][1]).astype(np.float32)


@pytest.mark.parametrize("name", ["cnn", "block"])
@pytest.mark.parametrize("how", ["qdq", "qoperator"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("s8s8", [False, True], ids=["U8S8", "S8S8"])
def test_static_quantized_models_equal_onnxruntime(run, tmp_path, name, how, per_channel, s8s8) -> None:  # type: ignore[no-untyped-def]
    path = _quantize(tmp_path, name, how, per_channel=per_channel, s8s8=s8s8)
    x = _feed(name)
    got, ops = _aioge(run, path, x)
    np.testing.assert_array_equal(got, _ort(path, x))  # dequantised int8 outputs: equal integers
    if how == "qdq":
        assert {op: ops[op] for op in FUSED[name]} == FUSED[name]
        assert not {"Conv", "MatMul", "Gemm"} & set(ops)  # no float product left


@pytest.mark.parametrize("name", ["cnn", "block"])
def test_dynamic_quantized_models_match_onnxruntime(run, tmp_path, name) -> None:  # type: ignore[no-untyped-def]
    path = _quantize(tmp_path, name, "dynamic")
    x = _feed(name)
    got, ops = _aioge(run, path, x)
    # every MatMul chain fused (DynamicQuantizeMatMulFusionPass)
    assert (ops["ConvInteger"], ops["DynamicQuantizeMatMul"]) == ((2, 1) if name == "cnn" else (0, 2))
    assert "MatMulInteger" not in ops
    # integer products are exact; the float scaling afterwards is float32 either way
    np.testing.assert_allclose(got, _ort(path, x), rtol=1e-6, atol=1e-6)


def test_full_range_u8s8_is_exact_where_onnxruntime_saturates(run, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Full-range weights: aioge's C GEMM equals its numpy tier (both exact integers), and
    both stay within onnxruntime's dequantised output by its int16 saturation's few steps."""
    path = _quantize(tmp_path, "cnn", "qdq", per_channel=True, reduce_range=False)
    x = _feed("cnn")
    got, ops = _aioge(run, path, x)
    assert ops["QLinearConv"] == 2
    monkeypatch.setattr(native, "function", lambda *a, **k: None)
    monkeypatch.setattr(native, "par_run", lambda: None)
    numpy_tier, _ = _aioge(run, path, x)
    np.testing.assert_array_equal(got, numpy_tier)
    np.testing.assert_allclose(got, _ort(path, x), atol=0.1)


def test_without_the_tier_a_qdq_model_still_equals_onnxruntime(run, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(native, "function", lambda *a, **k: None)
    monkeypatch.setattr(native, "par_run", lambda: None)
    path = _quantize(tmp_path, "block", "qdq", per_channel=True)
    x = _feed("block")
    got, ops = _aioge(run, path, x)
    assert ops["QLinearMatMul"] == 2
    np.testing.assert_array_equal(got, _ort(path, x))


def test_a_relu_whose_zero_point_is_not_the_least_value_keeps_the_float_path(run) -> None:  # type: ignore[no-untyped-def]
    """Q(Relu(Conv)) with y's zero point inside the range: saturation would not do the Relu."""
    rng = np.random.default_rng(2)
    w = rng.integers(-100, 100, (4, 3, 1, 1)).astype(np.int8)
    c = np.array
    nodes = [
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"]),
        helper.make_node("Conv", ["xf", "wf"], ["c"]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(v, k)
        for k, v in {
            "xs": c(0.05, np.float32),
            "xz": c(128, np.uint8),
            "w": w,
            "ws": c(0.01, np.float32),
            "wz": c(0, np.int8),
            "ys": c(0.02, np.float32),
            "yz": c(100, np.uint8),
        }.items()
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("xq", T.UINT8, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", T.UINT8, [1, 4, 4, 4])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    xq = rng.integers(0, 256, (1, 3, 4, 4)).astype(np.uint8)
    g = aioge.load_onnx(model)

    async def go() -> tuple[np.ndarray, set[str]]:
        await run.session.add_graph(2, g)
        try:
            y = (await run.session.run_graph(2, {"xq": xq}))["y"]
            return y, {n.op_type for n in run.session.compiled(2).graph.nodes}
        finally:
            await run.session.remove_graph(2)

    got, ops = run.portal.call(go)
    assert "QLinearConv" not in ops
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"xq": xq})[0]
    np.testing.assert_array_equal(got, want)
    assert got.min() == 100 and got.max() > 100


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_qlinear_matmul_ties_round_half_to_even_as_onnxruntime(run, dtype) -> None:  # type: ignore[no-untyped-def]
    """a * 0.5 lands on .5 for every odd a: onnxruntime (and aioge) round those to even."""
    tt = T.INT8 if dtype == np.int8 else T.UINT8
    consts = {"as": np.array(0.5, np.float32), "az": np.array(0, dtype), "b": np.array([[1]], np.int8)}
    consts.update({"bs": np.array(1.0, np.float32), "bz": np.array(0, np.int8), "ys": np.array(1.0, np.float32)})
    consts["yz"] = np.array(0, dtype)
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    graph = helper.make_graph(
        [node],
        "ties",
        [helper.make_tensor_value_info("a", tt, [6, 1])],
        [helper.make_tensor_value_info("y", tt, [6, 1])],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    a = np.array([[1], [3], [5], [7], [9], [11]], dtype)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    assert want.ravel().tolist() == [0, 2, 2, 4, 4, 6]
    got = run.run(aioge.load_onnx(model), {"a": a})["y"]
    np.testing.assert_array_equal(got, want)


def _qdq_chain(run: Runner, nodes: list[Any], consts: dict[str, np.ndarray], x: np.ndarray, out_shape: list[int]) -> Any:
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", T.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", T.FLOAT, out_shape)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    got, ops = _aioge(run, model.SerializeToString(), x)  # type: ignore[arg-type]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return got, want, ops


def test_data_movement_between_a_dq_and_a_q_of_one_scale_runs_on_the_integers(run) -> None:  # type: ignore[no-untyped-def]
    """Q -> DQ -> Reshape -> Q -> DQ -> Transpose -> Q(other scale) -> DQ: the Reshape's pair goes
    (Q(DQ(q)) is q exactly), the Transpose's stays (its Q has another scale)."""
    consts = {"s": np.array(0.05, np.float32), "z": np.array(3, np.int8), "s2": np.array(0.07, np.float32)}
    consts["shape"] = np.array([4, 6], np.int64)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q0"]),
        helper.make_node("DequantizeLinear", ["q0", "s", "z"], ["d0"]),
        helper.make_node("Reshape", ["d0", "shape"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "s", "z"], ["q1"]),
        helper.make_node("DequantizeLinear", ["q1", "s", "z"], ["d1"]),
        helper.make_node("Transpose", ["d1"], ["t"], perm=[1, 0]),
        helper.make_node("QuantizeLinear", ["t", "s2", "z"], ["q2"]),
        helper.make_node("DequantizeLinear", ["q2", "s2", "z"], ["y"]),
    ]
    x = (np.random.default_rng(3).standard_normal((2, 12)) * 4).astype(np.float32)
    got, want, ops = _qdq_chain(run, nodes, consts, x, [6, 4])
    np.testing.assert_array_equal(got, want)
    assert (ops["QuantizeLinear"], ops["DequantizeLinear"]) == (2, 2)  # 3 of each before


def test_a_maxpool_between_a_dq_and_a_q_of_one_scale_runs_on_the_integers(run) -> None:  # type: ignore[no-untyped-def]
    """ResNet's stem: Q -> DQ -> MaxPool (padded, strided) -> Q of the same scale -> DQ: the pool
    runs on the bytes (a max commutes with DQ's increasing map), equal to onnxruntime."""
    consts = {"s": np.array(0.05, np.float32), "z": np.array(7, np.uint8)}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q0"]),
        helper.make_node("DequantizeLinear", ["q0", "s", "z"], ["d0"]),
        helper.make_node("MaxPool", ["d0"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["p", "s", "z"], ["q1"]),
        helper.make_node("DequantizeLinear", ["q1", "s", "z"], ["y"]),
    ]
    x = (np.random.default_rng(8).standard_normal((1, 3, 9, 9)) * 4).astype(np.float32)
    got, want, ops = _qdq_chain(run, nodes, consts, x, [1, 3, 5, 5])
    np.testing.assert_array_equal(got, want)
    assert (ops["QuantizeLinear"], ops["DequantizeLinear"], ops["MaxPool"]) == (1, 1, 1)


def test_a_qdq_matmul_of_two_activations_is_an_integer_product_equal_to_onnxruntime(run) -> None:  # type: ignore[no-untyped-def]
    """Attention's Q @ K^T in a quantize_static model: both sides DequantizeLinear'd activations
    (no constant weight to pack) fuse into QLinearMatMul, as onnxruntime's, equal to its integers."""
    consts = {"s": np.array(0.05, np.float32), "z": np.array(128, np.uint8), "sy": np.array(0.2, np.float32)}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["a"]),
        helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
        helper.make_node("QuantizeLinear", ["xt", "s", "z"], ["qt"]),
        helper.make_node("DequantizeLinear", ["qt", "s", "z"], ["b"]),
        helper.make_node("MatMul", ["a", "b"], ["m"]),
        helper.make_node("QuantizeLinear", ["m", "sy", "z"], ["qy"]),
        helper.make_node("DequantizeLinear", ["qy", "sy", "z"], ["y"]),
    ]
    x = (np.random.default_rng(4).standard_normal((5, 8)) * 2).astype(np.float32)
    got, want, ops = _qdq_chain(run, nodes, consts, x, [5, 5])
    assert ops["QLinearMatMul"] == 1 and "MatMul" not in ops
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("s8s8", [False, True], ids=["U8S8", "S8S8"])
def test_static_attention_runs_its_two_activation_products_as_integers(run, tmp_path, s8s8) -> None:  # type: ignore[no-untyped-def]
    """quantize_static's attention: Q·K^T and P·V (both operands quantised activations) become
    QLinearMatMul beside the four weight products, as onnxruntime fuses them; the output stays
    within one quantisation step of onnxruntime's and of aioge's own run without the fusion."""
    path = _quantize(tmp_path, "attn", "qdq", s8s8=s8s8)
    x = _feed("attn")
    got, ops = _aioge(run, path, x)
    assert ops["QLinearMatMul"] == 6 and "MatMul" not in ops
    step = float(numpy_helper.to_array(next(i for i in onnx.load(path).graph.initializer if i.name == "y_scale")))
    np.testing.assert_allclose(got, _ort(path, x), rtol=0, atol=step * 1.001)

    async def unfused() -> np.ndarray:
        await run.session.add_graph(3, aioge.load_onnx(path), {"ge.optimizationSwitch": "QdqFusionPass:off"})
        try:
            return (await run.session.run_graph(3, {"x": x}))["y"]
        finally:
            await run.session.remove_graph(3)

    np.testing.assert_allclose(got, run.portal.call(unfused), rtol=0, atol=step * 1.001)


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_static_resnet_blocks_fuse_every_conv_and_match_onnxruntime(run, tmp_path, per_channel) -> None:  # type: ignore[no-untyped-def]
    """ResNet-50's blocks by quantize_static (QDQ, U8S8, 7-bit weights): every Conv and the Gemm
    run as integer ops, through the C tier's channel transposes, and the residual Adds as
    QdqAdd (DQ -> Add -> Q in one pass), equal to onnxruntime's output (which runs them as
    QLinearAdd, MLAS's fixed point: on other data the two can round a value one step apart)."""
    path = _quantize(tmp_path, "res", "qdq", per_channel=per_channel)
    x = _feed("res")
    got, ops = _aioge(run, path, x)
    assert (ops["QLinearConv"], ops["QGemm"], ops["QdqAdd"]) == (6, 1, 2) and not {"Conv", "Gemm", "Add"} & set(ops)
    np.testing.assert_array_equal(got, _ort(path, x))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_a_qdq_add_equals_the_unfused_nodes_and_onnxruntime_within_a_step(run, dtype) -> None:  # type: ignore[no-untyped-def]
    """DQ(a) + DQ(b) -> Q as one QdqAdd: equal to aioge's own DequantizeLinear, Add and
    QuantizeLinear nodes (QdqFusionPass off), and within one step of onnxruntime's QLinearAdd."""
    tt = T.INT8 if dtype == np.int8 else T.UINT8
    consts = {"sa": np.array(0.05, np.float32), "za": np.array(3, dtype), "sb": np.array(0.15, np.float32)}
    consts.update({"zb": np.array(-5 if dtype == np.int8 else 9, dtype), "sc": np.array(0.1, np.float32)})
    consts["zc"] = np.array(1, dtype)
    nodes = [
        helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["fa"]),
        helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["fb"]),
        helper.make_node("Add", ["fa", "fb"], ["s"]),
        helper.make_node("QuantizeLinear", ["s", "sc", "zc"], ["y"]),
    ]
    shape = [2, 4, 16, 16]
    graph = helper.make_graph(
        nodes,
        "add",
        [helper.make_tensor_value_info(n, tt, shape) for n in "ab"],
        [helper.make_tensor_value_info("y", tt, shape)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(9)
    info = np.iinfo(dtype)
    feeds = {n: rng.integers(info.min, info.max + 1, shape).astype(dtype) for n in "ab"}

    async def go(gid: int, options: dict[str, str]) -> tuple[np.ndarray, set[str]]:
        await run.session.add_graph(gid, aioge.load_onnx(model), options)
        try:
            return (await run.session.run_graph(gid, feeds))["y"], {n.op_type for n in run.session.compiled(gid).graph.nodes}
        finally:
            await run.session.remove_graph(gid)

    got, ops = run.portal.call(go, 4, {})
    unfused, ops_off = run.portal.call(go, 5, {"ge.optimizationSwitch": "QdqFusionPass:off"})
    assert ops == {"QdqAdd"} and "QdqAdd" not in ops_off
    np.testing.assert_array_equal(got, unfused)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert np.abs(got.astype(np.int32) - want).max() <= 1
