"""Elementwise ops (aioge.ops.elementwise) against onnxruntime, broadcasting drawn by hypothesis."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

from tests.ops.conftest import check_op, expect_graph_error, rand

FAST = settings(max_examples=25, deadline=None)


@given(
    op=st.sampled_from(["Add", "Sub", "Mul", "Div"]),
    shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4),
    dtype=st.sampled_from([np.float32, np.float64, np.int32, np.int64]),
    seed=st.integers(0, 2**16),
)
@FAST
def test_binary_broadcast(op, shapes, dtype, seed):
    rng = np.random.default_rng(seed)
    a, b = (rand(rng, *s, dtype=dtype, low=-9, high=9) for s in shapes.input_shapes)
    if op == "Div":
        b = np.where(b == 0, 3, b).astype(dtype)  # integer division by zero is undefined
        if np.dtype(dtype).kind == "f":
            b = np.where(np.abs(b) < 0.1, 0.5, b).astype(dtype)
    check_op(op, [a, b], static=True)


def test_integer_div_truncates_toward_zero():
    a = np.array([7, -7, 7, -7], np.int32)
    b = np.array([2, 2, -2, -2], np.int32)
    (got,) = check_op("Div", [a, b])
    np.testing.assert_array_equal(got, [3, -3, -3, 3])


@pytest.mark.parametrize(
    ("base", "exp"),
    [(np.float32, np.float32), (np.float32, np.int64), (np.int64, np.int64), (np.float64, np.float32)],
)
def test_pow(rng, base, exp):
    a = rand(rng, 3, 4, dtype=base, low=1, high=3)
    b = rand(rng, 4, dtype=exp, low=0, high=3)
    check_op("Pow", [a, b], static=True)


UNARY = {
    "Sqrt": (0.0, 4.0),
    "Exp": (-5.0, 5.0),
    "Log": (0.01, 10.0),
    "Neg": (-3.0, 3.0),
    "Abs": (-3.0, 3.0),
    "Reciprocal": (0.5, 3.0),
    "Tanh": (-4.0, 4.0),
    "Relu": (-3.0, 3.0),
    "Sigmoid": (-30.0, 30.0),
    "Erf": (-4.0, 4.0),
    "Identity": (-3.0, 3.0),
}


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("shape", [(), (7,), (2, 3, 4)])
def test_unary(rng, op, shape):
    low, high = UNARY[op]
    check_op(op, [rand(rng, *shape, low=low, high=high)], static=True)


@pytest.mark.parametrize("op", ["Neg", "Abs", "Relu", "Identity"])
def test_unary_int(rng, op):
    check_op(op, [rand(rng, 3, 4, dtype=np.int32, low=-9, high=9)])


@pytest.mark.parametrize("alpha", [0.01, 0.2, -1.5])
def test_leaky_relu(rng, alpha):
    check_op("LeakyRelu", [rand(rng, 5, 6)], {"alpha": alpha})


@pytest.mark.parametrize(("alpha", "beta"), [(0.2, 0.5), (1.0, 0.0), (0.5, -0.25)])
def test_hard_sigmoid(rng, alpha, beta):
    check_op("HardSigmoid", [rand(rng, 4, 5, low=-5, high=5)], {"alpha": alpha, "beta": beta})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(rng, approximate):
    check_op("Gelu", [rand(rng, 3, 7, low=-6, high=6)], {"approximate": approximate})


def test_gelu_bad_attribute(rng):
    expect_graph_error("Gelu", [rand(rng, 3)], {"approximate": "fast"}, match="approximate")


@pytest.mark.parametrize("bounds", ["none", "min", "max", "both", "max_only"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_clip(rng, bounds, dtype):
    x = rand(rng, 4, 5, dtype=dtype, low=-10, high=10)
    lo, hi = np.array(-3, dtype), np.array(4, dtype)
    inputs = {"none": [x], "min": [x, lo], "max": [x, None, hi], "both": [x, lo, hi], "max_only": [x, None, hi]}[bounds]
    check_op("Clip", inputs)


def test_clip_dtype_mismatch(rng):
    expect_graph_error("Clip", [rand(rng, 3), np.array(0.0, np.float64)], const=(1,), match="dtype")


@given(shapes=mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3), seed=st.integers(0, 2**16))
@FAST
def test_where(shapes, seed):
    rng = np.random.default_rng(seed)
    c, x, y = shapes.input_shapes
    check_op("Where", [rand(rng, *c, dtype=bool), rand(rng, *x), rand(rng, *y)], static=True)


def test_where_errors(rng):
    expect_graph_error("Where", [rand(rng, 3), rand(rng, 3), rand(rng, 3)], match="bool")
    expect_graph_error("Where", [rand(rng, 3, dtype=bool), rand(rng, 3), rand(rng, 3, dtype=np.float64)], match="dtype")


@given(
    shapes=mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3), n=st.integers(1, 3), seed=st.integers(0, 2**16)
)
@FAST
def test_sum_variadic(shapes, n, seed):
    rng = np.random.default_rng(seed)
    check_op("Sum", [rand(rng, *s) for s in shapes.input_shapes[:n]], static=True)


def test_binary_shape_mismatch(rng):
    expect_graph_error("Add", [rand(rng, 2, 3), rand(rng, 4)], match="broadcast")
    expect_graph_error("Mul", [rand(rng, 2, 3), rand(rng, 2, 3, dtype=np.float64)], match="dtype")


@pytest.mark.parametrize(
    ("src", "to"),
    [
        (np.float32, np.int32),
        (np.float32, np.float64),
        (np.float64, np.float16),
        (np.int64, np.float32),
        (np.int32, np.bool_),
        (np.bool_, np.float32),
        (np.uint8, np.int64),
    ],
)
def test_cast(rng, src, to):
    x = rand(rng, 3, 4, dtype=src, low=-100 if np.dtype(src).kind != "u" else 0, high=100)
    from onnx import helper

    # aioge's Cast takes a dtype; the ONNX frontend maps ONNX's type codes to it
    check_op(
        "Cast", [x], {"to": np.dtype(to).name}, onnx_attrs={"to": helper.np_dtype_to_tensor_dtype(np.dtype(to))}, static=True
    )
