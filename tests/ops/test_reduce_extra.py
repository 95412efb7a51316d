"""ReduceProd, ReduceMin, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum and ReduceLogSumExp
(aioge.ops.reduce_extra) against onnxruntime (opset 18 form: axes as an input)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import aioge_graph, check_op, expect_graph_error, rand

OPS = ["ReduceProd", "ReduceMin", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes", [None, [0], [1, -1], [0, 1, 2]])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce(rng, op, axes, keepdims):
    x = rand(rng, 3, 4, 2, low=0.2, high=1.5)  # positive: LogSum is defined
    inputs = [x] + ([] if axes is None else [np.array(axes, np.int64)])
    check_op(op, inputs, {"keepdims": keepdims}, const=(1,), static=True)


@pytest.mark.parametrize("op", OPS)
def test_reduce_runtime_axes_and_noop(rng, op):
    x = rand(rng, 2, 3, low=0.5, high=2.0)
    check_op(op, [x, np.array([1], np.int64)])  # axes as a graph input: the shape is inferred unknown
    g, _ = aioge_graph(op, [x, np.array([1], np.int64)])
    assert g.outputs[0].desc.shape is None
    # no axes with noop_with_empty_axes: the reduction over nothing (the elementwise transform)
    check_op(op, [x, np.zeros(0, np.int64)], {"noop_with_empty_axes": 1}, const=(1,), static=True)


@pytest.mark.parametrize("op", OPS)
def test_reduce_empty_set(op):
    x = np.zeros((2, 0, 4), np.float32)
    check_op(op, [x, np.array([1], np.int64)], {"keepdims": 1}, const=(1,), static=True)


def test_reduce_large_values_log_sum_exp():
    x = np.array([[1000.0, 1000.0], [-1000.0, -np.inf]], np.float32)
    check_op("ReduceLogSumExp", [x, np.array([1], np.int64)], const=(1,))


@pytest.mark.parametrize("op", ["ReduceProd", "ReduceMin", "ReduceL1", "ReduceSumSquare"])
def test_reduce_ints(rng, op):
    check_op(op, [rand(rng, 3, 4, dtype=np.int32, low=-3, high=3), np.array([0], np.int64)], const=(1,))


def test_reduce_errors(rng):
    expect_graph_error("ReduceL2", [rand(rng, 2, 3), np.array([2], np.int64)], const=(1,), match="out of range")
    expect_graph_error("ReduceMin", [rand(rng, 2, 3), np.array([1, 1], np.int64)], const=(1,), match="repeat")
    expect_graph_error("ReduceProd", [rand(rng, 2, 3), np.array([1], np.int32)], const=(1,), match="int64")
