"""ConvBatchNormFusionPass: BatchNormalization and per-channel Mul folded into Conv/Gemm weights.

Equivalence tolerance: rtol 1e-4, atol 1e-5 in float32 (the folded weights are computed in
float64 and rounded once, where the unfused graph rounds after the conv and after the scale).
"""

from __future__ import annotations

import numpy as np
import pytest

import aioge
from aioge import ops
from tests.passes.switching import ALL_OFF, compare, only, without

pytestmark = pytest.mark.anyio

TOL = {"rtol": 1e-4, "atol": 1e-5}
PASS = "ConvBatchNormFusionPass"


def _f32(*shape: int, seed: int = 0, scale: float = 1.0, shift: float = 0.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale + shift).astype(np.float32)


def _bn(g: aioge.Graph, y: aioge.Value, c: int, seed: int) -> aioge.Value:
    var = np.abs(_f32(c, seed=seed + 3)) + 0.5
    return ops.batch_normalization(y, _f32(c, seed=seed), _f32(c, seed=seed + 1), _f32(c, seed=seed + 2), var, epsilon=1e-3)


async def test_batch_norm_folds_into_conv_with_and_without_bias_and_groups() -> None:
    g = aioge.Graph("convbn")
    x = g.input("x", (2, 4, 9, 9), "float32")
    y = _bn(g, ops.conv2d(x, g.constant(_f32(6, 4, 3, 3, seed=1)), g.constant(_f32(6, seed=2)), pads=(1, 1, 1, 1)), 6, 10)
    y = _bn(g, ops.conv2d(y, g.constant(_f32(6, 3, 3, 3, seed=3)), group=2, strides=(2, 2)), 6, 20)  # no bias, grouped
    g.output(y, names=["y"])
    feeds = {"x": _f32(2, 4, 9, 9, seed=4)}
    on, off, _ = await compare(g, feeds, only(PASS), ALL_OFF, **TOL)
    assert on == {"Conv": 2} and off == {"Conv": 2, "BatchNormalization": 2}


async def test_batch_norm_and_channel_scale_fold_into_gemm() -> None:
    g = aioge.Graph("gemmbn")
    a = g.input("a", (5, 8), "float32")
    y = ops.gemm(a, g.constant(_f32(8, 6, seed=1)), g.constant(_f32(6, seed=2)), beta=0.5)
    y = _bn(g, y, 6, 30)
    y = ops.gemm(y, g.constant(_f32(4, 6, seed=3)), transB=1)
    y = ops.mul(y, g.constant(_f32(1, 4, seed=4)))  # per output column
    g.output(y, names=["y"])
    feeds = {"a": _f32(5, 8, seed=5)}
    on, off, _ = await compare(g, feeds, only(PASS), ALL_OFF, **TOL)
    assert on == {"Gemm": 2} and off == {"Gemm": 2, "BatchNormalization": 1, "Mul": 1}


async def test_inception_style_bn_scale_shift_relu_becomes_one_fused_conv() -> None:
    """light_inception_v2's block: Conv -> BN -> Mul(Unsqueeze(s)) -> Add(Unsqueeze(b)) -> Relu.
    With every pass on it is one FusedConv: the Unsqueezes fold, BN and Mul fold into the
    weights, the Add into the bias and the Relu into the conv."""
    g = aioge.Graph("inception")
    x = g.input("x", (1, 3, 10, 10), "float32")
    y = _bn(g, ops.conv2d(x, g.constant(_f32(8, 3, 3, 3, seed=1)), g.constant(_f32(8, seed=2))), 8, 40)
    axes = g.constant(np.array([1, 2], np.int64))
    y = ops.mul(y, ops.unsqueeze(g.constant(_f32(8, seed=5)), axes))
    y = ops.add(y, ops.unsqueeze(g.constant(_f32(8, seed=6)), axes))
    g.output(ops.relu(y), names=["y"])
    feeds = {"x": _f32(1, 3, 10, 10, seed=7)}
    on, off, out = await compare(g, feeds, "", ALL_OFF, **TOL)
    assert on == {"FusedConv": 1}
    assert off == {"Conv": 1, "BatchNormalization": 1, "Unsqueeze": 2, "Mul": 1, "Add": 1, "Relu": 1}
    assert (out["y"] >= 0).all()


async def test_shared_conv_output_or_runtime_weights_are_not_folded() -> None:
    g = aioge.Graph("keep")
    x = g.input("x", (1, 2, 5, 5), "float32")
    w = g.input("w", (3, 2, 1, 1), "float32")  # weights fed at run time
    y1 = _bn(g, ops.conv2d(x, w), 3, 50)
    c = ops.conv2d(x, g.constant(_f32(3, 2, 1, 1, seed=1)))
    g.output(y1, _bn(g, c, 3, 60), c, names=["y1", "y2", "c"])  # c is also an output
    feeds = {"x": _f32(1, 2, 5, 5), "w": _f32(3, 2, 1, 1, seed=2)}
    on, _, _ = await compare(g, feeds, only(PASS), ALL_OFF, **TOL)
    assert on == {"Conv": 2, "BatchNormalization": 2}


async def test_batch_norm_that_cannot_fold_is_decomposed_for_the_elementwise_fusion() -> None:
    """DenseNet's pre-activation block: BN -> Relu before the conv. The BN becomes a
    per-channel Mul and Add, which fuse with the Relu into one FusedElementwise."""
    g = aioge.Graph("preact")
    x = g.input("x", (2, 6, 5, 5), "float32")
    y = ops.relu(_bn(g, ops.abs(x), 6, 70))
    g.output(ops.conv2d(y, g.constant(_f32(4, 6, 1, 1, seed=1))), names=["y"])
    feeds = {"x": _f32(2, 6, 5, 5, seed=2)}
    on, off, _ = await compare(g, feeds, "", without("BatchNormDecompositionPass"), **TOL)
    assert on == {"FusedElementwise": 1, "Conv": 1}
    assert off == {"Abs": 1, "BatchNormalization": 1, "Relu": 1, "Conv": 1}
    on, _, _ = await compare(g, feeds, only("BatchNormDecompositionPass"), ALL_OFF, **TOL)
    assert on == {"Abs": 1, "Mul": 1, "Add": 1, "Relu": 1, "Conv": 1}
