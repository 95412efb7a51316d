"""Fusions around Conv, Gemm and MatMul: transposes, MatMul + Add, bias Add, activations.

Equivalence tolerance: rtol 1e-5, atol 1e-5 in float32 (a bias folded into Conv's bias or
Gemm's C adds in a different order; transposed operands go to BLAS as strided views).
"""

from __future__ import annotations

import numpy as np
import pytest

import aioge
from aioge import ops
from tests.passes.switching import ALL_OFF, compare, only, run_switched, without

pytestmark = pytest.mark.anyio

TOL = {"rtol": 1e-5, "atol": 1e-5}


def _mm(a: object, b: object) -> aioge.Value:
    return ops.apply("MatMul", [a, b])[0]


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _f32(*shape: int, seed: int = 0) -> np.ndarray:
    return _rng(seed).standard_normal(shape).astype(np.float32)


# -- TransposeMatMulFusionPass ----------------------------------------------------------


async def test_transposes_fold_into_batched_matmul() -> None:
    g = aioge.Graph("t")
    a = g.input("a", (2, 5, 4), "float32")
    b = g.input("b", (6, 5), "float32")
    g.output(_mm(ops.transpose(a, perm=(0, 2, 1)), ops.transpose(b)), names=["y"])  # (2,4,5) @ (5,6)
    feeds = {"a": _f32(2, 5, 4), "b": _f32(6, 5, seed=1)}
    on, off, out = await compare(g, feeds, only("TransposeMatMulFusionPass"), ALL_OFF, **TOL)
    assert on == {"FusedMatMul": 1} and off == {"MatMul": 1, "Transpose": 2}
    np.testing.assert_allclose(out["y"], np.swapaxes(feeds["a"], 1, 2) @ feeds["b"].T, **TOL)


async def test_tensordot_reshapes_around_matmul_go() -> None:
    # Keras' Dense on (1, 8, 4): Reshape to (8, 4) rows, MatMul, Reshape back to (1, 8, 6) is one
    # MatMul of the batch of rows; a reshape back to another shape stays
    g = aioge.Graph("td")
    x = g.input("x", (1, 8, 4), "float32")
    w = g.input("w", (4, 6), "float32")
    rows = _mm(ops.reshape(x, np.array([8, 4], np.int64)), w)
    g.output(ops.reshape(rows, np.array([1, 8, 6], np.int64)), names=["y"])
    g.output(ops.reshape(_mm(ops.reshape(x, np.array([8, 4], np.int64)), w), np.array([2, 4, 6], np.int64)), names=["z"])
    feeds = {"x": _f32(1, 8, 4), "w": _f32(4, 6, seed=1)}
    on, off, out = await compare(g, feeds, only("TransposeMatMulFusionPass"), ALL_OFF, **TOL)
    assert on == {"MatMul": 2, "Reshape": 2} and off == {"MatMul": 2, "Reshape": 4}
    np.testing.assert_allclose(out["y"], feeds["x"] @ feeds["w"], **TOL)
    np.testing.assert_allclose(out["z"], (feeds["x"] @ feeds["w"]).reshape(2, 4, 6), **TOL)


async def test_transposes_fold_into_gemm_flags() -> None:
    g = aioge.Graph("t2")
    x = g.input("x", (3, 7), "float32")
    w = g.input("w", (3, 5), "float32")
    # Gemm(x^T, (w^T) with transB=1) = 0.5 * x^T @ w: both flags flip.
    g.output(ops.gemm(ops.transpose(x), ops.transpose(w), transB=1, alpha=0.5), names=["y"])
    feeds = {"x": _f32(3, 7), "w": _f32(3, 5, seed=1)}
    on, off, out = await compare(g, feeds, only("TransposeMatMulFusionPass"), ALL_OFF, **TOL)
    assert on == {"Gemm": 1} and off == {"Gemm": 1, "Transpose": 2}
    np.testing.assert_allclose(out["y"], 0.5 * feeds["x"].T @ feeds["w"], **TOL)


async def test_other_permutations_and_shared_transposes_stay() -> None:
    g = aioge.Graph("keep")
    a = g.input("a", (4, 2, 3), "float32")
    b = g.input("b", (5, 3), "float32")
    ta = ops.transpose(a, perm=(1, 0, 2))  # not a last-two-axes swap
    tb = ops.transpose(b)
    g.output(_mm(ta, tb), tb, names=["y", "tb"])  # tb is read twice (the MatMul and an output)
    feeds = {"a": _f32(4, 2, 3), "b": _f32(5, 3, seed=1)}
    on, _, _ = await compare(g, feeds, only("TransposeMatMulFusionPass"), ALL_OFF, **TOL)
    assert on == {"MatMul": 1, "Transpose": 2}


# -- MatMulAddFusionPass ----------------------------------------------------------------


async def test_matmul_add_becomes_gemm() -> None:
    g = aioge.Graph("mma")
    x = g.input("x", (8, 16), "float32")
    r = g.input("r", (8, 4), "float32")
    w1, w2 = g.constant(_f32(16, 4, seed=1)), g.constant(_f32(4, 4, seed=2))
    h = ops.add(_mm(x, w1), g.constant(_f32(4, seed=3)))  # bias row
    h = ops.add(r, _mm(h, w2))  # residual: C may be a run-time value, either side of the Add
    g.output(h, names=["y"])
    feeds = {"x": _f32(8, 16), "r": _f32(8, 4, seed=4)}
    on, off, out = await compare(g, feeds, only("MatMulAddFusionPass"), ALL_OFF, **TOL)
    assert on == {"Gemm": 2} and off == {"MatMul": 2, "Add": 2}
    want = (feeds["x"] @ _f32(16, 4, seed=1) + _f32(4, seed=3)) @ _f32(4, 4, seed=2) + feeds["r"]
    np.testing.assert_allclose(out["y"], want, **TOL)


async def test_matmul_add_that_broadcasts_up_or_varies_along_rows_stays() -> None:
    g = aioge.Graph("stay")
    x = g.input("x", (2, 3, 4), "float32")
    v = g.input("v", (1, 4), "float32")
    w = g.constant(_f32(4, 5))
    per_row = g.constant(_f32(3, 5, seed=3))  # differs along the rows: not a bias of the folded Gemm
    big = g.input("big", (3, 1, 5), "float32")
    g.output(ops.add(_mm(x, w), per_row), ops.add(_mm(v, w), big), names=["batched", "grows"])
    feeds = {"x": _f32(2, 3, 4), "v": _f32(1, 4, seed=1), "big": _f32(3, 1, 5, seed=2)}
    on, _, _ = await compare(g, feeds, only("MatMulAddFusionPass"), ALL_OFF, **TOL)
    assert on == {"MatMul": 2, "Add": 2}


@pytest.mark.parametrize("bias_shape", [(5,), (1, 1, 5), ()])
async def test_batched_matmul_add_of_a_row_bias_becomes_fused_matmul_with_bias(bias_shape) -> None:  # type: ignore[no-untyped-def]
    # a transformer's projection: (batch, seq, d) @ (d, n) + bias, then GELU; every FusedMatMul
    # kernel (the Gemm kernels over the folded rows included) against numpy
    g = aioge.Graph("proj")
    x = g.input("x", (2, 3, 4), "float32")
    w1, w2 = g.constant(_f32(4, 5, seed=1)), g.constant(_f32(4, 5, seed=3))
    bias = g.constant(_f32(*bias_shape, seed=2))
    g.output(ops.gelu(ops.add(_mm(x, w1), bias), approximate="tanh"), ops.add(bias, _mm(x, w2)), names=["act", "lin"])
    feeds = {"x": _f32(2, 3, 4)}
    on, off, out = await compare(g, feeds, without(), ALL_OFF, rtol=1e-5, atol=1e-5)
    assert on == {"FusedMatMul": 2} and off["Add"] == 2
    pre = feeds["x"] @ _f32(4, 5, seed=1) + _f32(*bias_shape, seed=2)
    gelu = 0.5 * pre * (1 + np.tanh(np.sqrt(2 / np.pi) * (pre + 0.044715 * pre**3)))
    np.testing.assert_allclose(out["act"], gelu, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["lin"], feeds["x"] @ _f32(4, 5, seed=3) + _f32(*bias_shape, seed=2), rtol=1e-5, atol=1e-5)


# -- BiasAddFusionPass ------------------------------------------------------------------


async def test_bias_add_folds_into_conv_and_gemm() -> None:
    g = aioge.Graph("bias")
    x = g.input("x", (2, 3, 8, 8), "float32")
    a = g.input("a", (5, 6), "float32")
    y = ops.conv2d(x, g.constant(_f32(4, 3, 3, 3, seed=1)), g.constant(_f32(4, seed=2)), pads=(1, 1, 1, 1))
    y = ops.add(g.constant(_f32(4, 1, 1, seed=3)), y)  # per-channel, on either side
    y = ops.add(ops.conv2d(y, g.constant(_f32(2, 4, 1, 1, seed=4))), g.constant(_f32(1, 2, 1, 1, seed=5)))  # no bias yet
    z = ops.add(ops.gemm(a, g.constant(_f32(6, 3, seed=6))), g.constant(_f32(3, seed=7)))
    z = ops.add(ops.gemm(z, g.constant(_f32(3, 3, seed=8)), g.constant(_f32(3, seed=9))), g.constant(_f32(5, 1, seed=10)))
    g.output(y, z, names=["y", "z"])
    feeds = {"x": _f32(2, 3, 8, 8), "a": _f32(5, 6, seed=11)}
    on, off, _ = await compare(g, feeds, only("BiasAddFusionPass"), ALL_OFF, **TOL)
    assert on == {"Conv": 2, "Gemm": 2}
    assert off == {"Conv": 2, "Gemm": 2, "Add": 4}


async def test_non_channel_adds_stay_beside_conv() -> None:
    g = aioge.Graph("spatial")
    x = g.input("x", (1, 2, 4, 4), "float32")
    y = ops.conv2d(x, g.constant(_f32(3, 2, 1, 1)))
    g.output(ops.add(y, g.constant(_f32(1, 1, 4, 4, seed=1))), names=["y"])  # varies over space
    on, _, _ = await compare(g, {"x": _f32(1, 2, 4, 4)}, only("BiasAddFusionPass"), ALL_OFF, **TOL)
    assert on == {"Conv": 1, "Add": 1}


# -- ActivationFusionPass ---------------------------------------------------------------


@pytest.mark.parametrize(
    "act",
    [
        lambda v: ops.relu(v),
        lambda v: ops.clip(v, -0.5, 0.5),
        lambda v: ops.clip(v, None, 0.25),
        lambda v: ops.sigmoid(v),
        lambda v: ops.gelu(v),
        lambda v: ops.gelu(v, approximate="tanh"),
        lambda v: ops.leaky_relu(v, alpha=0.3),
        lambda v: ops.tanh(v),
        lambda v: ops.hard_sigmoid(v),
        lambda v: ops.hard_swish(v),
    ],
)
async def test_activations_fuse_into_conv_gemm_matmul(act) -> None:  # type: ignore[no-untyped-def]
    g = aioge.Graph("act")
    x = g.input("x", (2, 3, 6, 6), "float32")
    a = g.input("a", (4, 6), "float32")
    b = g.input("b", (3, 4, 6), "float32")
    y1 = act(ops.conv2d(x, g.constant(_f32(4, 3, 3, 3, seed=1)), g.constant(_f32(4, seed=2))))
    y2 = act(ops.gemm(a, g.constant(_f32(6, 5, seed=3)), g.constant(_f32(5, seed=4))))
    y3 = act(_mm(b, g.constant(_f32(6, 2, seed=5))))
    g.output(y1, y2, y3, names=["conv", "gemm", "matmul"])
    feeds = {"x": _f32(2, 3, 6, 6), "a": _f32(4, 6, seed=6), "b": _f32(3, 4, 6, seed=7)}
    on, off, _ = await compare(g, feeds, "", without("ActivationFusionPass"), **TOL)
    assert on == {"FusedConv": 1, "FusedGemm": 1, "FusedMatMul": 1}
    assert sum(off.values()) == 6 and off["FusedConv"] == 0


async def test_activation_with_run_time_bounds_or_shared_input_stays() -> None:
    g = aioge.Graph("stay")
    a = g.input("a", (4, 6), "float32")
    hi = g.input("hi", (), "float32")
    y = ops.gemm(a, g.constant(_f32(6, 5)))
    g.output(ops.clip(y, None, hi), ops.relu(y), names=["clipped", "relu"])  # y has two readers
    feeds = {"a": _f32(4, 6), "hi": np.float32(0.5)}
    on, _, out = await compare(g, feeds, only("ActivationFusionPass"), ALL_OFF, **TOL)
    assert on == {"Gemm": 1, "Clip": 1, "Relu": 1}
    np.testing.assert_allclose(out["clipped"], np.minimum(feeds["a"] @ _f32(6, 5), 0.5), **TOL)


async def test_transpose_matmul_add_relu_end_to_end() -> None:
    """Passes feed each other: Transpose folds into MatMul (FusedMatMul), which with the
    Add becomes a Gemm, which takes the Relu: one FusedGemm."""
    g = aioge.Graph("chain")
    x = g.input("x", (6, 8), "float32")
    w = g.input("w", (5, 8), "float32")
    y = ops.relu(ops.add(_mm(x, ops.transpose(w)), g.constant(_f32(5, seed=1))))
    g.output(y, names=["y"])
    feeds = {"x": _f32(6, 8), "w": _f32(5, 8, seed=2)}
    on, off, out = await compare(g, feeds, "", ALL_OFF, **TOL)
    assert on == {"FusedGemm": 1} and off == {"Transpose": 1, "MatMul": 1, "Add": 1, "Relu": 1}
    np.testing.assert_allclose(out["y"], np.maximum(feeds["x"] @ feeds["w"].T + _f32(5, seed=1), 0), **TOL)


# -- DuplicateFilterPass ----------------------------------------------------------------


def _conv_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """3x3, stride 1, no padding, by explicit windows."""
    n, c, h, wd = x.shape
    out = np.zeros((n, w.shape[0], h - 2, wd - 2), np.float64)
    for i in range(h - 2):
        for j in range(wd - 2):
            out[:, :, i, j] = np.einsum("ncuv,mcuv->nm", x[:, :, i : i + 3, j : j + 3], w)
    return (out + b.reshape(1, -1, 1, 1)).astype(np.float32)


async def test_repeated_filters_are_computed_once_and_come_out_identical() -> None:
    distinct = _f32(3, 4, 3, 3, seed=1)
    order = [0, 1, 0, 2, 1, 0, 0, 2]  # 8 channels, 3 distinct filters
    w = distinct[order]
    b = np.array([0.5, -1.0, 0.5, 2.0, -1.0, 0.5, 0.5, 2.0], np.float32)
    g = aioge.Graph("dup")
    x = g.input("x", (2, 4, 7, 7), "float32")
    g.output(ops.relu(ops.conv2d(x, g.constant(w), g.constant(b))), names=["y"])
    feeds = {"x": _f32(2, 4, 7, 7, seed=2)}
    on, off, out = await compare(g, feeds, "", without("DuplicateFilterPass"), **TOL)
    assert on == {"FusedConv": 1, "Gather": 1} and off == {"FusedConv": 1}
    y = out["y"]
    for i, j in [(0, 2), (0, 5), (0, 6), (1, 4), (3, 7)]:
        np.testing.assert_array_equal(y[:, i], y[:, j])  # bit-identical, not merely close
    np.testing.assert_allclose(y, np.maximum(_conv_ref(feeds["x"], w, b), 0), **TOL)


async def test_filters_equal_but_biases_not_stay_apart_and_distinct_filters_are_left() -> None:
    w = np.repeat(_f32(1, 2, 3, 3, seed=3), 4, axis=0)
    b = np.array([0.0, 1.0, 2.0, 3.0], np.float32)  # same filter, four biases: nothing to share
    g = aioge.Graph("nodup")
    x = g.input("x", (1, 2, 5, 5), "float32")
    y1 = ops.conv2d(x, g.constant(w), g.constant(b))
    y2 = ops.conv2d(x, g.constant(_f32(4, 2, 3, 3, seed=4)))
    g.output(y1, y2, names=["same_w", "distinct"])
    on, _, out = await compare(g, {"x": _f32(1, 2, 5, 5, seed=5)}, only("DuplicateFilterPass"), ALL_OFF, **TOL)
    assert on == {"Conv": 2}
    np.testing.assert_allclose(out["same_w"], _conv_ref(_f32(1, 2, 5, 5, seed=5), w, b), **TOL)


async def test_filters_of_equal_sums_are_compared_by_their_bytes() -> None:
    # Distinct sums rule repeats out at once; equal sums (a permuted filter, -0.0 for 0.0) are
    # compared byte for byte: only the true repeat is shared.
    w0 = np.arange(18, dtype=np.float32).reshape(2, 3, 3)
    zero = np.zeros((2, 3, 3), np.float32)
    w = np.stack([w0, w0[::-1, ::-1, ::-1], w0, zero, -zero])  # sums 153, 153, 153, 0, 0
    g = aioge.Graph("sums")
    x = g.input("x", (1, 2, 5, 5), "float32")
    g.output(ops.conv2d(x, g.constant(w)), names=["y"])
    feeds = {"x": _f32(1, 2, 5, 5, seed=7)}
    m_on, out = await run_switched(g, feeds, only("DuplicateFilterPass"))
    conv = next(n for n in m_on.graph.nodes if n.op_type == "Conv")
    assert conv.inputs[1].desc.shape == (4, 2, 3, 3), "w0 once; its reverse, 0.0 and -0.0 apart"
    np.testing.assert_array_equal(out["y"][:, 0], out["y"][:, 2])
    np.testing.assert_allclose(out["y"], _conv_ref(feeds["x"], w, np.zeros(5, np.float32)), **TOL)


async def test_one_distinct_filter_without_bias_becomes_a_one_channel_conv() -> None:
    w = np.full((6, 3, 3, 3), 0.25, np.float32)  # constant weights, as in the ONNX light/ models
    g = aioge.Graph("splat")
    x = g.input("x", (1, 3, 6, 6), "float32")
    g.output(ops.conv2d(x, g.constant(w)), names=["y"])
    feeds = {"x": _f32(1, 3, 6, 6, seed=6)}
    m_on, out = await run_switched(g, feeds, only("DuplicateFilterPass"))
    conv = next(n for n in m_on.graph.nodes if n.op_type == "Conv")
    assert conv.inputs[1].desc.shape == (1, 3, 3, 3) and conv.outputs[0].desc.shape == (1, 1, 4, 4)
    y = out["y"]
    assert all(np.array_equal(y[:, 0], y[:, k]) for k in range(1, 6))
    np.testing.assert_allclose(y, _conv_ref(feeds["x"], w, np.zeros(6, np.float32)), **TOL)


# -- ResidualAddFusionPass --------------------------------------------------------------


def _residual_graph() -> tuple[aioge.Graph, dict[str, np.ndarray]]:
    g = aioge.Graph("residual")
    x = g.input("x", (2, 8, 9, 7), "float32")
    h = ops.relu(ops.conv2d(x, g.constant(_f32(8, 8, 3, 3, seed=1)), g.constant(_f32(8, seed=2)), pads=(1, 1, 1, 1)))
    y = ops.relu(ops.add(ops.conv2d(h, g.constant(_f32(8, 8, 3, 3, seed=3)), pads=(1, 1, 1, 1)), x))  # ResNet: Add, Relu
    y = ops.add(y, ops.conv2d(y, g.constant(_f32(8, 8, 1, 1, seed=4)), g.constant(_f32(8, seed=5))))  # a projection, Z first
    shared = ops.conv2d(y, g.constant(_f32(8, 8, 1, 1, seed=6)))
    z = ops.add(shared, y)  # the conv's output has another reader: stays
    b = g.input("b", (1, 8, 1, 1), "float32")
    g.output(z, ops.mul(shared, shared), ops.add(ops.conv2d(z, g.constant(_f32(8, 8, 1, 1, seed=7))), b), names=["z", "s", "c"])
    return g, {"x": _f32(2, 8, 9, 7, seed=8), "b": _f32(1, 8, 1, 1, seed=9)}  # a broadcast Add stays


async def test_residual_adds_fold_into_the_conv_and_the_relu_after_them_too() -> None:
    g, feeds = _residual_graph()
    on, off, _ = await compare(g, feeds, only("ResidualAddFusionPass", "ActivationFusionPass"), ALL_OFF, **TOL)
    assert off == {"Conv": 5, "Relu": 2, "Add": 4, "Mul": 1}
    assert on == {"FusedConv": 3, "Conv": 2, "Add": 2, "Mul": 1}  # two residual Adds and a Relu folded


async def test_residual_fusion_without_the_compiled_tier_matches(numpy_kernels) -> None:  # type: ignore[no-untyped-def]
    g, feeds = _residual_graph()
    on, _, _ = await compare(g, feeds, only("ResidualAddFusionPass", "ActivationFusionPass"), ALL_OFF, **TOL)
    assert on["FusedConv"] == 3
