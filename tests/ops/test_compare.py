"""Comparison and logical ops (aioge.ops.compare) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import aioge_graph, check_op, evaluate, expect_graph_error, rand

_COMPARE = ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]


@pytest.mark.parametrize("op", _COMPARE)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.uint8])
@pytest.mark.parametrize(("sa", "sb"), [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (3,))])
def test_compare(rng, op, dtype, sa, sb):
    lo = 0 if np.dtype(dtype).kind == "u" else -3
    check_op(op, [rand(rng, *sa, dtype=dtype, low=lo, high=3), rand(rng, *sb, dtype=dtype, low=lo, high=3)], static=True)


def test_equal_bool_and_nan():
    check_op("Equal", [np.array([True, False, True]), np.array([True, True, False])])
    x = np.array([np.nan, 1.0, np.inf], np.float32)
    check_op("Equal", [x, x])
    check_op("Less", [x, np.array([0.0, 2.0, np.inf], np.float32)])


def test_equal_strings():
    a = np.array(["a", "bc", ""], dtype=object)
    b = np.array(["a", "b", ""], dtype=object)
    g, feeds = aioge_graph("Equal", [a, b], const=(1,))
    (got,) = evaluate(g, feeds)
    np.testing.assert_array_equal(got, [True, False, True])


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
@pytest.mark.parametrize(("sa", "sb"), [((3, 4), (3, 4)), ((2, 3, 4), (3, 1)), ((), (5,))])
def test_logical(rng, op, sa, sb):
    check_op(op, [np.asarray(rand(rng, *sa, dtype=bool)), np.asarray(rand(rng, *sb, dtype=bool))], static=True)


def test_not(rng):
    check_op("Not", [rand(rng, 4, 5, dtype=bool)], static=True)


def test_errors(rng):
    expect_graph_error("And", [rand(rng, 3), rand(rng, 3)], match="must be bool")
    expect_graph_error("Less", [rand(rng, 3), rand(rng, 3, dtype=np.int32, low=0, high=2)], match="dtype")
    expect_graph_error("Equal", [rand(rng, 3), rand(rng, 4)], match="broadcast")
