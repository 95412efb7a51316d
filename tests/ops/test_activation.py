"""Activation ops (aioge.ops.activation) against onnxruntime (Swish at opset 24; SwiGLU, which
onnxruntime does not run, against onnx.reference)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import check_op, expect_graph_error, rand
from tests.ops.onnx_reference import at_opset, check_ref

_CASES = [
    ("Elu", {}),
    ("Elu", {"alpha": 0.3}),
    ("Selu", {}),
    ("Selu", {"alpha": 2.0, "gamma": 0.7}),
    ("Celu", {}),
    ("Celu", {"alpha": 2.5}),
    ("Softplus", {}),
    ("Softsign", {}),
    ("ThresholdedRelu", {}),
    ("ThresholdedRelu", {"alpha": 0.25}),
    ("HardSwish", {}),
    ("Mish", {}),
    ("Shrink", {}),
    ("Shrink", {"bias": 1.5, "lambd": 1.0}),
    ("Hardmax", {}),
    ("Hardmax", {"axis": 0}),
    ("Hardmax", {"axis": 1}),
]


@pytest.mark.parametrize(("op", "attrs"), _CASES)
@pytest.mark.parametrize("shape", [(7,), (3, 4, 5)])
def test_activation(rng, op, attrs, shape):
    if attrs.get("axis", -1) >= len(shape):
        shape = (2, *shape)
    check_op(op, [rand(rng, *shape, low=-6, high=6)], attrs, static=True)


def test_activation_extremes():
    # overflow-free forms: no inf/nan for large magnitudes
    x = np.array([-1e4, -50.0, -1.0, 0.0, 1e-3, 30.0, 1e4], np.float32)
    for op in ("Elu", "Selu", "Celu", "Softplus", "Softsign", "HardSwish", "Mish"):
        check_op(op, [x])


def test_activation_float64(rng):
    from tests.ops.conftest import aioge_graph, evaluate

    x = rand(rng, 9, dtype=np.float64, low=-5, high=5)
    want = {
        "Elu": np.where(x >= 0, x, np.expm1(x)),
        "Softplus": np.log1p(np.exp(x)),
        "Softsign": x / (1 + np.abs(x)),
        "Mish": x * np.tanh(np.log1p(np.exp(x))),
    }
    for op, expected in want.items():
        g, feeds = aioge_graph(op, [x])
        (got,) = evaluate(g, feeds)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_hardmax_ties_pick_first():
    x = np.array([[3.0, 1.0, 3.0], [0.0, 0.0, 0.0]], np.float32)
    (got,) = check_op("Hardmax", [x])
    np.testing.assert_array_equal(got, [[1, 0, 0], [1, 0, 0]])


@pytest.mark.parametrize("slope_shape", [(), (1,), (5,), (4, 1), (3, 4, 5)])
def test_prelu_broadcasts_slope(rng, slope_shape):
    check_op("PRelu", [rand(rng, 3, 4, 5, low=-2, high=2), rand(rng, *slope_shape)], static=True)


def test_prelu_rejects_bigger_slope(rng):
    expect_graph_error("PRelu", [rand(rng, 4), rand(rng, 3, 4)], match="does not broadcast")


def test_shrink_int(rng):
    check_op("Shrink", [rand(rng, 10, dtype=np.int32, low=-5, high=5)], {"bias": 1.0, "lambd": 1.5})


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_swish(rng, alpha):
    with at_opset(24):
        check_op("Swish", [rand(rng, 3, 5, low=-8, high=8)], {"alpha": alpha}, static=True)


@pytest.mark.parametrize("alpha", [1.0, 1.7])
def test_swiglu(rng, alpha):
    a, b = rand(rng, 2, 6, low=-5, high=5), rand(rng, 2, 6)
    check_ref("SwiGLU", [a, b], {"alpha": alpha}, opset=28)


def test_activation_errors(rng):
    expect_graph_error("Elu", [rand(rng, 3, dtype=np.int32, low=0, high=3)], match="float")
    expect_graph_error("SwiGLU", [rand(rng, 2, 3), rand(rng, 3)], match="one shape")
    expect_graph_error("Hardmax", [rand(rng, 2, 3)], {"axis": 2}, match="out of range")
