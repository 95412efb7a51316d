"""ReduceSum / ReduceMean / ReduceMax (opset 18: axes as an optional input) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioge.ir.graph import Graph
from aioge.ops import apply
from tests.ops.conftest import check_op, expect_graph_error, rand

FAST = settings(max_examples=25, deadline=None)
OPS = ["ReduceSum", "ReduceMean", "ReduceMax"]


@given(
    op=st.sampled_from(OPS),
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    keepdims=st.integers(0, 1),
    noop=st.integers(0, 1),
    constant=st.booleans(),
    data=st.data(),
)
@FAST
def test_reduce(op, shape, keepdims, noop, constant, data):
    rng = np.random.default_rng(len(shape))
    rank = len(shape)
    axes = data.draw(st.one_of(st.none(), st.lists(st.integers(-rank, rank - 1), max_size=rank, unique_by=lambda a: a % rank)))
    x = rand(rng, *shape, low=-5, high=5)
    inputs = [x] + ([] if axes is None else [np.array(axes, dtype=np.int64)])
    attrs = {"keepdims": keepdims, "noop_with_empty_axes": noop}
    check_op(op, inputs, attrs, const=(1,) if constant else (), static=constant or axes is None)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_reduce_other_dtypes(rng, op, dtype):
    x = rand(rng, 3, 4, 5, dtype=dtype, low=-50, high=50)
    check_op(op, [x, np.array([0, 2], np.int64)], {"keepdims": 0}, const=(1,))


def test_reduce_mean_int_truncates_like_onnxruntime():
    x = np.array([[1, 2], [-1, -2]], np.int32)
    (got,) = check_op("ReduceMean", [x, np.array([1], np.int64)], const=(1,))
    np.testing.assert_array_equal(got.reshape(-1), [1, -1])


def test_reduce_scalar_and_empty_axes(rng):
    check_op("ReduceSum", [np.array(3.5, np.float32)])
    check_op("ReduceSum", [rand(rng, 2, 3), np.array([], np.int64)], {"noop_with_empty_axes": 1}, const=(1,))
    check_op("ReduceMax", [rand(rng, 2, 3), np.array([], np.int64)], {"keepdims": 0}, const=(1,))


def test_reduce_symbolic_dims_kept():
    g = Graph()
    (y,) = apply("ReduceMean", [g.input("x", ("N", 4, 5)), np.array([-1], np.int64)], {"keepdims": 1})
    assert y.shape == ("N", 4, 1)


def test_reduce_errors(rng):
    x = rand(rng, 2, 3)
    expect_graph_error("ReduceSum", [x, np.array([2], np.int64)], const=(1,), match="out of range")
    expect_graph_error("ReduceSum", [x, np.array([1, -1], np.int64)], const=(1,), match="repeat")
    expect_graph_error("ReduceSum", [x, np.array([0], np.int32)], const=(1,), match="int64")
    expect_graph_error("ReduceMax", [x], {"keepdims": 2}, match="keepdims")
    expect_graph_error("ReduceMean", [x], {"axes": (0,)}, match="unknown attribute")


@pytest.mark.parametrize("shape, axes", [((1, 1), [1]), ((2, 3, 4), [-2, -1]), ((3, 5), [-1])])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_mean_over_fed_trailing_axes_has_the_shape_they_ask_for(shape, axes, keepdims) -> None:
    # reduce_mean_native's C job computes (leading, 1, 1); the output takes the shape the fed
    # axes and keepdims give, as every other ReduceMean kernel's does
    x = rand(np.random.default_rng(0), *shape, low=-5, high=5)
    check_op("ReduceMean", [x, np.array(axes, dtype=np.int64)], {"keepdims": keepdims}, static=False)


@pytest.mark.parametrize("shape, axes", [((2, 3, 4), (-2, -1)), ((3, 5), (-1,)), ((2, 3, 4), (0, 2))])
def test_reduce_mean_native_chosen_where_the_tier_was_runs_numpy_where_it_is_not(numpy_kernels, shape, axes) -> None:
    # a kernel cache entry naming reduce_mean_native, read by a process without the compiled tier
    from aioge.ir.desc import TensorDesc
    from aioge.kernels.pool_algos import build_reduce_mean_native

    x = rand(np.random.default_rng(0), *shape)
    for keep in (0, 1):
        fed = np.array(axes, np.int64)
        descs = [TensorDesc(shape, "float32"), TensorDesc(fed.shape, "int64")]
        (got,) = build_reduce_mean_native({"keepdims": keep}, {}, descs, None)([x, fed], None)
        np.testing.assert_allclose(got, x.mean(axis=axes, keepdims=bool(keep)), rtol=1e-6, atol=1e-6)
