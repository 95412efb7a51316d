"""GeluFusionPass, SwishFusionPass and LayerNormFusionPass: the decomposed forms torch exports
become one op.

Equivalence tolerance: rtol 1e-5, atol 1e-5 in float32 (LayerNormalization multiplies by
1/sqrt where the pattern divides by sqrt; Gelu runs the same erf). The ONNX models below are
laid out node for node as ``torch.onnx.export`` writes ``nn.GELU()`` and ``nn.LayerNorm``
(opset 13, ReduceMean axes as an attribute), and are checked against onnxruntime too.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import aioge
from aioge import ops
from tests.passes.switching import ALL_OFF, compare, only, without

pytestmark = pytest.mark.anyio

TOL = {"rtol": 1e-5, "atol": 1e-5}


def _f32(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- Swish ------------------------------------------------------------------------------


@pytest.mark.parametrize("sigmoid_first", [False, True])
async def test_silu_fuses_into_one_swish(sigmoid_first: bool) -> None:
    g = aioge.Graph("silu")
    x = g.input("x", (4, 16), "float32")
    y = ops.mul(ops.sigmoid(x), x) if sigmoid_first else ops.mul(x, ops.sigmoid(x))
    g.output(y, names=["y"])
    feeds = {"x": _f32(4, 16) * 4}
    on, off, out = await compare(g, feeds, only("SwishFusionPass"), ALL_OFF, **TOL)
    assert on == {"Swish": 1} and off == {"Sigmoid": 1, "Mul": 1}
    x64 = feeds["x"].astype(np.float64)
    np.testing.assert_allclose(out["y"], x64 / (1 + np.exp(-x64)), rtol=1e-6, atol=1e-6)


async def test_a_shared_sigmoid_or_another_factor_stays() -> None:
    g = aioge.Graph("not_silu")
    x = g.input("x", (8,), "float32")
    z = g.input("z", (8,), "float32")
    s = ops.sigmoid(x)
    g.output(ops.mul(x, s), s, ops.mul(z, ops.sigmoid(x)), names=["y", "s", "gated"])
    on, _, _ = await compare(g, {"x": _f32(8), "z": _f32(8, seed=1)}, only("SwishFusionPass"), ALL_OFF, **TOL)
    assert "Swish" not in on


async def test_conv_silu_becomes_one_fused_conv_matching_onnxruntime() -> None:
    """EfficientNet's block as torch exports it: Conv, then x * Sigmoid(x); the Swish folds
    into the conv (ActivationFusionPass)."""
    w, b = _f32(8, 4, 3, 3, seed=2) * 0.3, _f32(8, seed=3)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Mul", ["c", "s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_silu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 9, 9])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    feeds = {"x": _f32(1, 4, 9, 9, seed=4)}
    on, off, out = await compare(aioge.load_onnx(model.SerializeToString()), feeds, "", ALL_OFF, **TOL)
    assert on == {"FusedConv": 1} and off == {"Conv": 1, "Sigmoid": 1, "Mul": 1}
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(out["y"], ref, rtol=1e-4, atol=1e-5)


# -- Gelu -------------------------------------------------------------------------------


def _gelu_graph(form: str) -> aioge.Graph:
    g = aioge.Graph(f"gelu_{form}")
    x = g.input("x", (4, 16), "float32")
    if form == "div":  # torch: x * 0.5 * (1 + erf(x / sqrt 2)) written as ((x * (1 + erf)) * 0.5)
        y = ops.mul(ops.mul(x, ops.add(ops.erf(ops.div(x, math.sqrt(2.0))), 1.0)), 0.5)
    elif form == "half_first":  # (x * 0.5) * (1 + erf(x * 1/sqrt 2))
        y = ops.mul(ops.mul(x, 0.5), ops.add(1.0, ops.erf(ops.mul(x, 1.0 / math.sqrt(2.0)))))
    else:  # ((1 + erf) * 0.5) * x
        y = ops.mul(ops.mul(ops.add(ops.erf(ops.div(x, math.sqrt(2.0))), 1.0), 0.5), x)
    g.output(y, names=["y"])
    return g


@pytest.mark.parametrize("form", ["div", "half_first", "half_last"])
async def test_gelu_forms_fuse(form: str) -> None:
    feeds = {"x": _f32(4, 16) * 3}
    on, off, out = await compare(_gelu_graph(form), feeds, only("GeluFusionPass"), ALL_OFF, **TOL)
    assert on == {"Gelu": 1}
    assert off["Erf"] == 1 and sum(off.values()) == 5
    x = feeds["x"].astype(np.float64)
    want = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    np.testing.assert_allclose(out["y"], want, rtol=1e-5, atol=1e-6)


async def test_gelu_with_a_wrong_constant_or_a_shared_intermediate_stays() -> None:
    g = aioge.Graph("not_gelu")
    x = g.input("x", (8,), "float32")
    e = ops.erf(ops.div(x, 1.5))  # not sqrt 2
    g.output(ops.mul(ops.mul(x, ops.add(e, 1.0)), 0.5), names=["y"])
    on, _, _ = await compare(g, {"x": _f32(8)}, only("GeluFusionPass"), ALL_OFF, **TOL)
    assert "Gelu" not in on
    g2 = aioge.Graph("shared")
    x = g2.input("x", (8,), "float32")
    e = ops.erf(ops.div(x, math.sqrt(2.0)))
    g2.output(ops.mul(ops.mul(x, ops.add(e, 1.0)), 0.5), e, names=["y", "erf"])
    on, _, _ = await compare(g2, {"x": _f32(8)}, only("GeluFusionPass"), ALL_OFF, **TOL)
    assert "Gelu" not in on


def _gelu_tanh_graph(form: str, coef: float = 0.044715, share: bool = False) -> aioge.Graph:
    """GPT-2's NewGELUActivation as torch exports it: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + coef * x**3)))."""
    g = aioge.Graph(f"gelu_tanh_{form}")
    x = g.input("x", (4, 16), "float32")
    cube = ops.pow(x, np.float32(3.0))
    inner = ops.add(x, ops.mul(cube, coef)) if form == "gpt2" else ops.add(ops.mul(coef, cube), x)
    t = ops.tanh(ops.mul(inner, math.sqrt(2.0 / math.pi)))
    y = ops.mul(ops.mul(x, 0.5), ops.add(t, 1.0)) if form == "gpt2" else ops.mul(ops.mul(x, ops.add(1.0, t)), 0.5)
    g.output(y, *([t] if share else []), names=["y", "t"][: 2 if share else 1])
    return g


@pytest.mark.parametrize("form", ["gpt2", "swapped"])
async def test_gelu_tanh_forms_fuse(form: str) -> None:
    feeds = {"x": _f32(4, 16) * 3}
    on, off, out = await compare(_gelu_tanh_graph(form), feeds, only("GeluFusionPass"), ALL_OFF, **TOL)
    assert on == {"Gelu": 1}
    assert off["Tanh"] == 1 and sum(off.values()) == 8
    x = feeds["x"].astype(np.float64)
    want = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(out["y"], want, rtol=1e-5, atol=1e-6)


async def test_gelu_tanh_with_a_wrong_constant_or_a_shared_tanh_stays() -> None:
    for graph in (_gelu_tanh_graph("gpt2", coef=0.05), _gelu_tanh_graph("gpt2", share=True)):
        on, _, _ = await compare(graph, {"x": _f32(4, 16)}, only("GeluFusionPass"), ALL_OFF, **TOL)
        assert "Gelu" not in on


# -- LayerNorm --------------------------------------------------------------------------


def _layer_norm_graph(square: str, affine: str, axes: tuple[int, ...] = (-1,)) -> aioge.Graph:
    g = aioge.Graph("ln")
    x = g.input("x", (2, 5, 12), "float32")
    ax = g.constant(np.array(axes, np.int64))
    m = ops.reduce_mean(x, ax)
    d = ops.sub(x, m)
    sq = ops.pow(d, g.constant(np.float32(2.0))) if square == "pow" else ops.mul(d, d)
    v = ops.reduce_mean(sq, ax)
    y = ops.div(d, ops.sqrt(ops.add(v, g.constant(np.float32(1e-5)))))
    norm_shape = (2, 5, 12)[len((2, 5, 12)) - len(axes) :]
    if affine in ("scale", "both"):
        y = ops.mul(y, g.constant(_f32(*norm_shape, seed=1)))
    if affine in ("bias", "both"):
        y = ops.add(y, g.constant(_f32(*norm_shape, seed=2)))
    g.output(y, names=["y"])
    return g


@pytest.mark.parametrize(
    ("square", "affine", "axes"),
    [("pow", "both", (-1,)), ("mul", "both", (-1,)), ("pow", "none", (-1,)), ("pow", "bias", (-1,)), ("pow", "scale", (1, 2))],
)
async def test_layer_norm_forms_fuse(square: str, affine: str, axes: tuple[int, ...]) -> None:
    feeds = {"x": _f32(2, 5, 12) * 2 + 1}
    on, off, out = await compare(_layer_norm_graph(square, affine, axes), feeds, only("LayerNormFusionPass"), ALL_OFF, **TOL)
    assert on == {"LayerNormalization": 1}
    assert off["ReduceMean"] == 2 and off["Sqrt"] == 1
    x = feeds["x"].astype(np.float64)
    red = tuple(a % 3 for a in axes)
    want = (x - x.mean(axis=red, keepdims=True)) / np.sqrt(x.var(axis=red, keepdims=True) + 1e-5)
    norm_shape = (2, 5, 12)[3 - len(axes) :]
    if affine in ("scale", "both"):
        want = want * _f32(*norm_shape, seed=1)
    if affine in ("bias", "both"):
        want = want + _f32(*norm_shape, seed=2)
    np.testing.assert_allclose(out["y"], want, rtol=1e-4, atol=1e-5)


async def test_layer_norm_over_leading_axes_or_with_a_shared_mean_stays() -> None:
    on, _, _ = await compare(
        _layer_norm_graph("pow", "none", (1,)), {"x": _f32(2, 5, 12)}, only("LayerNormFusionPass"), ALL_OFF, **TOL
    )
    assert "LayerNormalization" not in on  # axis 1 of 3 is not a trailing range
    g = aioge.Graph("shared")
    x = g.input("x", (3, 8), "float32")
    ax = g.constant(np.array([-1], np.int64))
    m = ops.reduce_mean(x, ax)
    d = ops.sub(x, m)
    y = ops.div(d, ops.sqrt(ops.add(ops.reduce_mean(ops.mul(d, d), ax), g.constant(np.float32(1e-5)))))
    g.output(y, m, names=["y", "mean"])
    on, _, _ = await compare(g, {"x": _f32(3, 8)}, only("LayerNormFusionPass"), ALL_OFF, **TOL)
    assert "LayerNormalization" not in on


# -- torch-style ONNX exports, against onnxruntime -------------------------------------


def _torch_block_model() -> onnx.ModelProto:
    """Linear -> LayerNorm -> GELU -> Linear, node for node as torch.onnx.export (opset 13) writes it."""
    rng = np.random.default_rng(0)
    inits = {
        "fc1.weight": rng.standard_normal((16, 32)).astype(np.float32) * 0.2,
        "fc1.bias": rng.standard_normal(32).astype(np.float32) * 0.1,
        "ln.weight": (1 + 0.1 * rng.standard_normal(32)).astype(np.float32),
        "ln.bias": (0.1 * rng.standard_normal(32)).astype(np.float32),
        "fc2.weight": rng.standard_normal((32, 8)).astype(np.float32) * 0.2,
        "two": np.array(2.0, np.float32),
        "eps": np.array(1e-5, np.float32),
        "sqrt2": np.array(1.4142135381698608, np.float32),
        "one": np.array(1.0, np.float32),
        "half": np.array(0.5, np.float32),
    }
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "fc1.weight"], ["mm1"]),
        n("Add", ["fc1.bias", "mm1"], ["h"]),
        n("ReduceMean", ["h"], ["mean"], axes=[-1]),
        n("Sub", ["h", "mean"], ["d"]),
        n("Pow", ["d", "two"], ["sq"]),
        n("ReduceMean", ["sq"], ["var"], axes=[-1]),
        n("Add", ["var", "eps"], ["ve"]),
        n("Sqrt", ["ve"], ["std"]),
        n("Div", ["d", "std"], ["nrm"]),
        n("Mul", ["nrm", "ln.weight"], ["scaled"]),
        n("Add", ["scaled", "ln.bias"], ["ln"]),
        n("Div", ["ln", "sqrt2"], ["g1"]),
        n("Erf", ["g1"], ["g2"]),
        n("Add", ["g2", "one"], ["g3"]),
        n("Mul", ["ln", "g3"], ["g4"]),
        n("Mul", ["g4", "half"], ["gelu"]),
        n("MatMul", ["gelu", "fc2.weight"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "torch_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 8])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


async def test_torch_export_fuses_and_matches_onnxruntime() -> None:
    model = _torch_block_model()
    feeds = {"x": _f32(6, 16, seed=3)}
    graph = aioge.load_onnx(model.SerializeToString())
    on, off, out = await compare(graph, feeds, "", ALL_OFF, **TOL)
    # The lone Gelu runs as FusedElementwise: its blocked kernel beats the op's own.
    assert on == {"Gemm": 1, "LayerNormalization": 1, "FusedElementwise": 1, "MatMul": 1}
    assert sum(off.values()) == 17
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(out["y"], ref, rtol=1e-4, atol=1e-5)
    # each fusion switched off brings its pattern back
    _, without_gelu, _ = await compare(graph, feeds, "", without("GeluFusionPass"), **TOL)
    assert "Gelu" not in without_gelu and without_gelu["FusedElementwise"] >= 1
    _, without_ln, _ = await compare(graph, feeds, "", without("LayerNormFusionPass"), **TOL)
    assert "LayerNormalization" not in without_ln and without_ln["ReduceMean"] == 2
