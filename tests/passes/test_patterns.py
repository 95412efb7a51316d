"""GeluFusionPass, SwishFusionPass and LayerNormFusionPass: the decomposed forms torch exports
become one op.

Equivalence tolerance: rtol 1e-5, atol 1e-5 in float32 (LayerNormalization multiplies by
1/sqrt where the pattern divides by sqrt; Gelu runs the same erf). The ONNX models below are
laid out node for node as ``torch.onnx.export`` writes ``nn.GELU()`` and ``nn.LayerNorm``
(opset 13, ReduceMean axes as an attribute), and are checked against onnxruntime too.
"""

from __future__ import annotations

import math

import anyio
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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


# -- squeeze-and-excitation ------------------------------------------------------------------

SE_ACTS = {
    "mobilenet": (("Relu", []), ("HardSigmoid", [1 / 6, 0.5])),
    "efficientnet": (("Swish", []), ("Sigmoid", [])),
    "plain": (("", []), ("", [])),
}


def _se_model(acts: str, n: int = 2, c: int = 24, c1: int = 8, hw: int = 7, bias: bool = True) -> onnx.ModelProto:
    """An SE block as torchvision exports MobileNetV3's and EfficientNet's: GlobalAveragePool,
    a 1x1 Conv and its activation, a 1x1 Conv and its gate, the Mul of x by the gate."""
    (a1, p1), (a2, p2) = SE_ACTS[acts]
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["m"])]
    nodes.append(helper.make_node("Conv", ["m", "w1", *(["b1"] if bias else [])], ["h0"]))
    for src, act, params, dst in (("h0", a1, p1, "h"), ("s0", a2, p2, "s")):
        if dst == "s":
            nodes.append(helper.make_node("Conv", ["h", "w2", *(["b2"] if bias else [])], ["s0"]))
        if act == "Swish":  # x * Sigmoid(x), as torch writes SiLU
            nodes += [helper.make_node("Sigmoid", [src], [src + "_sig"]), helper.make_node("Mul", [src, src + "_sig"], [dst])]
        elif act == "HardSigmoid":
            nodes.append(helper.make_node(act, [src], [dst], alpha=params[0], beta=params[1]))
        elif act:
            nodes.append(helper.make_node(act, [src], [dst]))
        else:
            nodes.append(helper.make_node("Identity", [src], [dst]))
    nodes.append(helper.make_node("Mul", ["x", "s"], ["y"]))
    inits = [
        numpy_helper.from_array(_f32(c1, c, 1, 1, seed=1) * 0.3, "w1"),
        numpy_helper.from_array(_f32(c, c1, 1, 1, seed=3) * 0.3, "w2"),
    ]
    if bias:
        inits += [numpy_helper.from_array(_f32(c1, seed=2), "b1"), numpy_helper.from_array(_f32(c, seed=4), "b2")]
    graph = helper.make_graph(
        nodes,
        "se",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, c, hw, hw])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("acts", list(SE_ACTS))
@pytest.mark.parametrize("bias", [True, False])
async def test_a_squeeze_excite_block_becomes_one_node_matching_onnxruntime(acts: str, bias: bool) -> None:
    model = _se_model(acts, bias=bias)
    feeds = {"x": _f32(2, 24, 7, 7, seed=5) * 2}
    on, off, out = await compare(aioge.load_onnx(model.SerializeToString()), feeds, "", without("SqueezeExciteFusionPass"), **TOL)
    assert on == {"SqueezeExcite": 1}
    assert off["GlobalAveragePool"] == 1 and off["Mul"] == 1 and sum(off.values()) == 4
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(out["y"], ref, rtol=1e-4, atol=1e-5)


async def test_an_se_lookalike_stays() -> None:
    """The pattern's intermediates must be private to it, its convs 1x1 over the pooled x with
    constant weights, its Mul's other factor the pooled x itself."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((4, 8, 1, 1)).astype(np.float32)
    w2 = rng.standard_normal((8, 4, 1, 1)).astype(np.float32)
    w3 = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    feeds = {"x": _f32(1, 8, 5, 5), "z": _f32(1, 8, 5, 5, seed=1), "wv": w2}
    g = aioge.Graph("lookalikes")
    x, z = g.input("x", (1, 8, 5, 5), "float32"), g.input("z", (1, 8, 5, 5), "float32")
    wv = g.input("wv", (8, 4, 1, 1), "float32")

    def gate(src: aioge.ir.graph.Value, second: object, pads: tuple[int, ...] = (0, 0, 0, 0)) -> aioge.ir.graph.Value:
        h = ops.relu(ops.conv2d(ops.global_average_pool(src), g.constant(w1)))
        return ops.sigmoid(ops.conv2d(h, second, pads=pads))  # type: ignore[arg-type]

    shared = ops.global_average_pool(x)
    s_shared = ops.sigmoid(ops.conv2d(ops.relu(ops.conv2d(shared, g.constant(w1))), g.constant(w2)))
    g.output(
        ops.mul(z, gate(x, g.constant(w2))),  # the gate scales another tensor
        ops.mul(x, gate(x, wv)),  # a weight fed at run time
        ops.mul(x, gate(x, g.constant(w3), pads=(1, 1, 1, 1))),  # a 3x3 conv: the gate is not (1, C, 1, 1)
        ops.mul(x, s_shared),
        shared,  # the pooled x is an output too
        ops.mul(gate(z, g.constant(w2 * 2)), z),  # the control: a real one (the Mul's factors either way round)
        names=["other", "fed", "wide", "shared", "pooled", "control"],
    )
    on, _, _ = await compare(g, feeds, only("ActivationFusionPass", "SqueezeExciteFusionPass"), ALL_OFF, **TOL)
    assert on["SqueezeExcite"] == 1


@pytest.mark.parametrize("impl", ["numpy", "squeeze_excite_native"])
@pytest.mark.parametrize(("n", "c", "c1", "hw"), [(1, 16, 8, 56), (3, 96, 24, 7), (2, 40, 10, 1)])
def test_squeeze_excite_kernels_agree_with_numpy(impl: str, n: int, c: int, c1: int, hw: int) -> None:
    from aioge.ir.desc import TensorDesc
    from aioge.ops.registry import get_schema

    schema = get_schema("SqueezeExcite", "aioge")
    kernel = next(i for i in schema.impls if i.name == impl)
    rng = np.random.default_rng(c)
    args = [
        rng.standard_normal((n, c, hw, hw)).astype(np.float32),
        rng.standard_normal((c1, c, 1, 1)).astype(np.float32) * 0.3,
        rng.standard_normal(c1).astype(np.float32),
        rng.standard_normal((c, c1, 1, 1)).astype(np.float32) * 0.3,
        rng.standard_normal(c).astype(np.float32),
    ]
    for a in args[1:]:
        a.setflags(write=False)  # constants, as a graph's are
    attrs = schema.normalise_attrs({"activation1": "Relu", "activation2": "HardSigmoid", "activation2_params": [1 / 6, 0.5]})
    descs = [TensorDesc.of(a.shape, "float32") for a in args]
    run = kernel.build(attrs, {}, descs, [descs[0]])

    def want(x: np.ndarray) -> np.ndarray:
        m = x.astype(np.float64).mean(axis=(2, 3))
        h = np.maximum(m @ args[1].reshape(c1, c).T + args[2], 0)
        s = np.clip((h @ args[3].reshape(c, c1).T + args[4]) / 6 + 0.5, 0, 1)
        return x * s[:, :, None, None]

    y = np.empty_like(args[0])
    for step in range(3):  # again on the same arrays (the native kernel's prepared call), then new data in x
        if step == 2:
            args[0][...] = rng.standard_normal(args[0].shape)
        (got,) = run(args, [y])
        assert got is y
        np.testing.assert_allclose(y, want(args[0]), rtol=1e-5, atol=1e-5)


def test_the_native_squeeze_excite_falls_back_to_numpy_without_the_tier(numpy_kernels) -> None:
    from aioge.ir.desc import TensorDesc
    from aioge.kernels.fused import build_squeeze_excite_native

    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((1, 8, 4, 4), (2, 8, 1, 1), (2,), (8, 2, 1, 1), (8,))]
    descs = [TensorDesc.of(a.shape, "float32") for a in args]
    (got,) = build_squeeze_excite_native({}, {}, descs, [descs[0]])(args, None)
    s = (args[0].mean(axis=(2, 3)) @ args[1].reshape(2, 8).T + args[2]) @ args[3].reshape(8, 2).T + args[4]
    np.testing.assert_allclose(got, args[0] * s[:, :, None, None], rtol=1e-5, atol=1e-5)


# -- HardSigmoid / HardSwish (Keras' MobileNetV3) ------------------------------------------


async def test_keras_hard_sigmoid_and_hard_swish_fuse() -> None:
    """``relu6(x + 3) / 6`` (and ``* (1/6)``, and any ``clip(x + b, 0, h) / h``) is HardSigmoid,
    ``x`` times it HardSwish; a divisor other than the clip's top, or a clip from 1, stays."""
    g = aioge.Graph("hard")
    x = g.input("x", (2, 8, 5, 5), "float32")

    def c(v: float) -> aioge.Value:
        return g.constant(np.float32(v))

    swish = ops.mul(x, ops.div(ops.clip(ops.add(x, c(3)), c(0), c(6)), c(6)))
    sigmoid = ops.mul(ops.clip(ops.add(c(3), x), c(0), c(6)), c(1 / 6))
    other = ops.div(ops.clip(ops.add(x, c(2)), c(0), c(4)), c(4))
    wrong = ops.div(ops.clip(ops.add(x, c(3)), c(0), c(6)), c(5))
    from_one = ops.div(ops.clip(ops.add(x, c(3)), c(1), c(6)), c(6))
    g.output(swish, sigmoid, other, wrong, from_one, names=["swish", "sigmoid", "other", "wrong", "from_one"])
    feeds = {"x": _f32(2, 8, 5, 5) * 4}
    on, _, out = await compare(g, feeds, only("HardSigmoidFusionPass"), ALL_OFF, rtol=1e-6, atol=1e-6)
    assert on["HardSwish"] == 1 and on["HardSigmoid"] == 2 and on["Clip"] == 2, on
    x64 = feeds["x"].astype(np.float64)
    np.testing.assert_allclose(out["swish"], x64 * np.clip(x64 + 3, 0, 6) / 6, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out["other"], np.clip(x64 + 2, 0, 4) / 4, rtol=1e-6, atol=1e-6)


async def test_an_se_block_over_reduce_mean_of_h_and_w_becomes_one_node() -> None:
    """Keras' SE blocks pool with ReduceMean over H and W (keepdims): SqueezeExcite as over
    GlobalAveragePool; over W alone the block stays."""
    rng = np.random.default_rng(1)
    w1, w2 = rng.standard_normal((4, 12, 1, 1)).astype(np.float32), rng.standard_normal((12, 4, 1, 1)).astype(np.float32)
    g = aioge.Graph("se_mean")
    x = g.input("x", (1, 12, 6, 6), "float32")
    outs = []
    for axes in ([2, 3], [-1, -2], [3]):  # over W alone: a gate per row, no SE
        m = ops.reduce_mean(x, g.constant(np.array(axes, np.int64)), keepdims=1)
        h = ops.relu(ops.conv(m, g.constant(w1)))
        outs.append(ops.mul(x, ops.sigmoid(ops.conv(h, g.constant(w2)))))
    g.output(*outs, names=["a", "b", "c"])
    feeds = {"x": _f32(1, 12, 6, 6, seed=2)}
    on, _, out = await compare(g, feeds, "", without("SqueezeExciteFusionPass"), **TOL)
    assert on["SqueezeExcite"] == 2 and on["ReduceMean"] == 1, on
    s = feeds["x"].astype(np.float64).mean(axis=(2, 3))  # (1, 12)
    gate = 1 / (1 + np.exp(-(np.maximum(s @ w1[:, :, 0, 0].T, 0) @ w2[:, :, 0, 0].T)))
    np.testing.assert_allclose(out["a"], feeds["x"] * gate[:, :, None, None], rtol=1e-4, atol=1e-5)


# -- channel shuffle ----------------------------------------------------------------------


def _shuffle_model(chans: list[int], n: int, group: int, rest: list[int], concat: bool, cut: int) -> onnx.ModelProto:
    """ShuffleNet's shuffle as torch exports it (Reshape, Transpose of the group axes, Reshape
    back), after a channel Concat of the inputs, then Slices at channel ``cut`` (none at 0; the
    bounds as torch writes them: an end counted from the back, the last one past it) and a Relu
    of each part."""
    c = sum(chans)
    parts = [(0, cut), (cut, c)] if cut else [(0, c)]
    names = [f"x{i}" for i in range(len(chans))]
    nodes = [helper.make_node("Concat", names, ["t"], axis=1)] if concat else []
    src = "t" if concat else names[0]
    nodes += [
        helper.make_node("Reshape", [src, "s1"], ["r1"]),
        helper.make_node("Transpose", ["r1"], ["tr"], perm=[0, 2, 1, *range(3, 3 + len(rest))]),
        helper.make_node("Reshape", ["tr", "s2"], ["r2"]),
    ]
    consts = {"s1": np.array([n, group, c // group, *rest], np.int64), "s2": np.array([n, c, *rest], np.int64)}
    for k, (a, b) in enumerate(parts):
        consts |= {
            f"a{k}": np.array([a], np.int64),
            f"b{k}": np.array([np.iinfo(np.int64).max if k else b - c], np.int64),
            "ax": np.array([1], np.int64),
        }
        nodes += [
            helper.make_node("Slice", ["r2", f"a{k}", f"b{k}", "ax"], [f"p{k}"])
            if cut
            else helper.make_node("Identity", ["r2"], ["p0"])
        ]
        nodes += [helper.make_node("Relu", [f"p{k}"], [f"y{k}"])]
    graph = helper.make_graph(
        nodes,
        "shuffle",
        [helper.make_tensor_value_info(nm, TensorProto.FLOAT, [n, ch, *rest]) for nm, ch in zip(names, chans)],
        [helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, [n, b - a, *rest]) for k, (a, b) in enumerate(parts)],
        [numpy_helper.from_array(a, k) for k, a in consts.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(1, 2),
    chans=st.lists(st.integers(1, 9), min_size=1, max_size=3),
    group=st.integers(2, 4),
    rest=st.lists(st.integers(1, 7), min_size=1, max_size=2),
    cut=st.integers(0, 30),
)
def test_a_channel_shuffle_after_a_concat_is_one_node_equal_to_onnxruntime(
    anyio_backend: str, n: int, chans: list[int], group: int, rest: list[int], cut: int
) -> None:
    chans[-1] += -sum(chans) % group
    concat, cut = len(chans) > 1, cut % sum(chans)
    model = _shuffle_model(chans, n, group, rest, concat, cut)
    rng = np.random.default_rng(sum(chans) + 10 * n)
    feeds = {f"x{i}": rng.standard_normal((n, ch, *rest)).astype(np.float32) for i, ch in enumerate(chans)}
    graph = aioge.load_onnx(model.SerializeToString())
    on, off, out = anyio.run(
        lambda: compare(graph, feeds, "", without("ChannelShuffleFusionPass"), rtol=0, atol=0), backend=anyio_backend
    )
    assert on["ChannelShuffle"] == 1 and not {"Transpose", "Reshape", "Concat", "Slice"} & set(on), on
    assert off["Transpose"] == 1 and off["Reshape"] == 2 and off.get("Concat", 0) == int(concat), off
    assert off.get("Slice", 0) == 2 * bool(cut), off
    refs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for k, ref in enumerate(refs):
        np.testing.assert_array_equal(out[f"y{k}"], ref)


async def test_a_shuffle_whose_join_is_read_elsewhere_keeps_its_concat(numpy_kernels) -> None:
    # the Concat's output is read by another node too: the shuffle fuses alone (and runs on the
    # numpy path without the compiled tier)
    g = aioge.Graph("shared")
    a, b = g.input("a", (1, 3, 5), "float32"), g.input("b", (1, 3, 5), "float32")
    i64 = lambda *v: g.constant(np.array(v, np.int64))  # noqa: E731
    t = ops.concat(a, b, axis=1)
    y = ops.reshape(ops.transpose(ops.reshape(t, i64(1, 2, 3, 5)), perm=(0, 2, 1, 3)), i64(1, 6, 5))
    g.output(y, ops.relu(t), names=["y", "t"])
    feeds = {"a": _f32(1, 3, 5), "b": _f32(1, 3, 5, seed=1)}
    on, _, out = await compare(g, feeds, only("ChannelShuffleFusionPass"), ALL_OFF, rtol=0, atol=0)
    assert on == {"Concat": 1, "ChannelShuffle": 1, "Relu": 1}, on
    want = np.concatenate([feeds["a"], feeds["b"]], 1).reshape(1, 2, 3, 5).transpose(0, 2, 1, 3).reshape(1, 6, 5)
    np.testing.assert_array_equal(out["y"], want)


async def test_a_transpose_of_other_axes_is_no_channel_shuffle() -> None:
    g = aioge.Graph("not_shuffle")
    x = g.input("x", (2, 6, 4), "float32")
    i64 = lambda *v: g.constant(np.array(v, np.int64))  # noqa: E731
    y = ops.reshape(ops.transpose(ops.reshape(x, i64(2, 2, 3, 4)), perm=(0, 1, 3, 2)), i64(2, 6, 4))
    g.output(y, names=["y"])
    on, _, _ = await compare(g, {"x": _f32(2, 6, 4)}, only("ChannelShuffleFusionPass"), ALL_OFF, rtol=0, atol=0)
    assert "ChannelShuffle" not in on and on["Transpose"] == 1, on


async def test_slices_that_do_not_split_the_shuffled_channels_stay() -> None:
    # overlapping Slices, and a shuffle read whole beside its Slices: one output, Slices after it
    g = aioge.Graph("slices")
    x = g.input("x", (1, 8, 3), "float32")
    i64 = lambda *v: g.constant(np.array(v, np.int64))  # noqa: E731
    y = ops.reshape(ops.transpose(ops.reshape(x, i64(1, 2, 4, 3)), perm=(0, 2, 1, 3)), i64(1, 8, 3))
    z = ops.reshape(ops.transpose(ops.reshape(ops.relu(x), i64(1, 2, 4, 3)), perm=(0, 2, 1, 3)), i64(1, 8, 3))
    parts = [ops.slice(y, i64(0), i64(5), i64(1)), ops.slice(y, i64(4), i64(8), i64(1)), ops.slice(z, i64(0), i64(4), i64(1))]
    g.output(*parts, z, names=["a", "b", "c", "z"])
    feeds = {"x": _f32(1, 8, 3)}
    on, _, out = await compare(g, feeds, only("ChannelShuffleFusionPass"), ALL_OFF, rtol=0, atol=0)
    assert on == {"ChannelShuffle": 2, "Slice": 3, "Relu": 1}, on
    want = feeds["x"].reshape(1, 2, 4, 3).transpose(0, 2, 1, 3).reshape(1, 8, 3)
    np.testing.assert_array_equal(out["b"], want[:, 4:])
