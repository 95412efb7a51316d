"""Math ops (aioge.ops.math) against onnxruntime: rounding, trigonometry, predicates,
variadic Min/Max/Mean, Mod and the bitwise ops."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import aioge_graph, check_op, evaluate, expect_graph_error, rand
from tests.ops.onnx_reference import at_opset

_UNARY = {
    "Floor": (-5, 5),
    "Ceil": (-5, 5),
    "Sign": (-3, 3),
    "Sin": (-4, 4),
    "Cos": (-4, 4),
    "Tan": (-1.2, 1.2),
    "Asin": (-0.99, 0.99),
    "Acos": (-0.99, 0.99),
    "Atan": (-9, 9),
    "Sinh": (-3, 3),
    "Cosh": (-3, 3),
    "Asinh": (-9, 9),
    "Acosh": (1.01, 9),
    "Atanh": (-0.99, 0.99),
}


_NUMPY = {
    "Floor": np.floor,
    "Ceil": np.ceil,
    "Sign": np.sign,
    "Sin": np.sin,
    "Cos": np.cos,
    "Tan": np.tan,
    "Asin": np.arcsin,
    "Acos": np.arccos,
    "Atan": np.arctan,
    "Sinh": np.sinh,
    "Cosh": np.cosh,
    "Asinh": np.arcsinh,
    "Acosh": np.arccosh,
    "Atanh": np.arctanh,
}


@pytest.mark.parametrize("op", sorted(_UNARY))
def test_unary(rng, op):
    lo, hi = _UNARY[op]
    check_op(op, [rand(rng, 3, 4, low=lo, high=hi)], static=True)


@pytest.mark.parametrize("op", sorted(_UNARY))
def test_unary_float64_and_float16(rng, op):
    # onnxruntime lacks most float64 kernels of these; numpy is the yardstick
    lo, hi = _UNARY[op]
    for dtype in (np.float64, np.float16):
        x = rand(rng, 5, dtype=dtype, low=lo, high=hi)
        g, feeds = aioge_graph(op, [x])
        (got,) = evaluate(g, feeds)
        assert got.dtype == dtype
        np.testing.assert_allclose(got, _NUMPY[op](x), rtol=1e-3 if dtype == np.float16 else 1e-12)


def test_round_halves_to_even(rng):
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -3.7, 4.2], np.float32)
    (got,) = check_op("Round", [x], static=True)
    np.testing.assert_array_equal(got, [-2, -2, -0, 0, 2, 2, 0, -4, 4])


def test_sign_int(rng):
    check_op("Sign", [rand(rng, 5, dtype=np.int32, low=-4, high=4)])


def test_is_nan_is_inf():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -1.5, 3.0], np.float32)
    check_op("IsNaN", [x], static=True)
    for neg in (0, 1):
        for pos in (0, 1):
            check_op("IsInf", [x], {"detect_negative": neg, "detect_positive": pos}, static=True)


@pytest.mark.parametrize("op", ["Min", "Max", "Mean"])
@pytest.mark.parametrize("shapes", [[(3, 4)], [(3, 4), (3, 4)], [(2, 1, 4), (3, 1), (4,)], [(), (2, 3), (1, 3)]])
def test_variadic(rng, op, shapes):
    check_op(op, [rand(rng, *s) for s in shapes], static=True)


@pytest.mark.parametrize("op", ["Min", "Max"])
def test_min_max_ints_and_nan(rng, op):
    check_op(op, [rand(rng, 4, 3, dtype=np.int64, low=-9, high=9), rand(rng, 3, dtype=np.int64, low=-9, high=9)])
    a = np.array([1.0, np.nan, 3.0], np.float32)
    check_op(op, [a, np.array([2.0, 0.0, np.nan], np.float32)])


def test_variadic_errors(rng):
    expect_graph_error("Mean", [rand(rng, 3, dtype=np.int32, low=0, high=3)], match="float")
    expect_graph_error("Max", [rand(rng, 3), rand(rng, 3, dtype=np.float64)], match="dtype")
    expect_graph_error("Min", [rand(rng, 3), rand(rng, 4)], match="broadcast")


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_ints(rng, dtype, fmod):
    lo = 0 if np.dtype(dtype).kind == "u" else -20
    a = rand(rng, 3, 5, dtype=dtype, low=lo, high=20)
    b = rand(rng, 5, dtype=dtype, low=1, high=7)
    if lo:
        b = b * np.where(np.arange(5) % 2, 1, -1).astype(dtype)
    check_op("Mod", [a, b], {"fmod": fmod}, static=True)


def test_mod_float():
    a = np.array([-4.3, 7.2, 5.0, -4.3, 7.2, 5.0], np.float32)
    b = np.array([2.1, -3.4, 5.0, -2.1, 3.4, -2.0], np.float32)
    check_op("Mod", [a, b], {"fmod": 1})


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_bit_shift_unsigned(rng, direction, dtype):
    x = rand(rng, 4, 3, dtype=dtype, low=0, high=200)
    y = rand(rng, 3, dtype=dtype, low=0, high=7)
    check_op("BitShift", [x, y], {"direction": direction}, static=True)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bit_shift_signed_and_overwide(direction):
    # opset 28 defines signed shifts (arithmetic right shift) and shifts of the full width or more
    x = np.array([-8, 3, -128, 127, -1, 5, -5], np.int8)
    y = np.array([1, 9, 7, 1, 8, -1, 3], np.int8)
    with at_opset(28):
        check_op("BitShift", [x, y], {"direction": direction})
    xu = np.array([255, 1, 128], np.uint8)
    yu = np.array([8, 7, 200], np.uint8)
    check_op("BitShift", [xu, yu], {"direction": direction})


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint16, np.uint64])
def test_bitwise(rng, op, dtype):
    lo = 0 if np.dtype(dtype).kind == "u" else -100
    check_op(op, [rand(rng, 2, 3, dtype=dtype, low=lo, high=100), rand(rng, 3, dtype=dtype, low=lo, high=100)], static=True)


@pytest.mark.parametrize("dtype", [np.int16, np.uint8, np.int64])
def test_bitwise_not(rng, dtype):
    lo = 0 if np.dtype(dtype).kind == "u" else -100
    check_op("BitwiseNot", [rand(rng, 3, 3, dtype=dtype, low=lo, high=100)], static=True)


def test_type_errors(rng):
    expect_graph_error("BitwiseAnd", [rand(rng, 3), rand(rng, 3)], match="integer")
    expect_graph_error("Floor", [rand(rng, 3, dtype=np.int32, low=0, high=3)], match="float")
    expect_graph_error("IsNaN", [rand(rng, 3, dtype=np.int32, low=0, high=3)], match="float")
    expect_graph_error("BitShift", [rand(rng, 3, dtype=np.uint8, low=0, high=3)] * 2, {"direction": "UP"}, match="direction")


def test_engines_follow_dtype(rng):
    from aioge.engines import Engine
    from aioge.ops.registry import get_schema

    g, _ = aioge_graph("Sin", [rand(rng, 3)])
    descs = [v.desc for v in g.nodes[0].inputs]
    assert Engine.AICORE in get_schema("Sin").engines_for(descs)
    g, _ = aioge_graph("Mod", [rand(rng, 3, dtype=np.int32, low=1, high=3)] * 2)
    assert get_schema("Mod").engines_for([v.desc for v in g.nodes[0].inputs]) == {Engine.AICPU}
    g, _ = aioge_graph("BitwiseAnd", [rand(rng, 3, dtype=np.int32, low=1, high=3)] * 2)
    assert Engine.AIVEC in get_schema("BitwiseAnd").engines_for([v.desc for v in g.nodes[0].inputs])


def test_evaluate_writes_broadcast_output(rng):
    # Max over three inputs of different shapes folds into the broadcast output buffer
    a, b, c = rand(rng, 2, 1, 3), rand(rng, 4, 1), rand(rng, 3)
    g, feeds = aioge_graph("Max", [a, b, c])
    (got,) = evaluate(g, feeds)
    np.testing.assert_array_equal(got, np.maximum(np.maximum(a, b), c))
