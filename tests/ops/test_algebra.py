"""Tensor-algebra ops (aioge.ops.algebra) against onnxruntime: Einsum, Det, CumSum, CumProd,
Range, Size and EyeLike."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import aioge_graph, check_op, evaluate, expect_graph_error, rand
from tests.ops.onnx_reference import at_opset

_EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("ij", [(3, 4)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("i,j->ij", [(3,), (5,)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (2, 5, 4, 2)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    (" ij , jk ", [(3, 4), (4, 2)]),
    ("i->", [(6,)]),
]


@pytest.mark.parametrize(("equation", "shapes"), _EINSUM)
def test_einsum(rng, equation, shapes):
    check_op("Einsum", [rand(rng, *s) for s in shapes], {"equation": equation}, static=True)


def test_einsum_float64_and_int(rng):
    check_op("Einsum", [rand(rng, 3, 4, dtype=np.float64), rand(rng, 4, dtype=np.float64)], {"equation": "ij,j->i"})
    ints = [rand(rng, 2, 3, dtype=np.int64, low=-5, high=5), rand(rng, 3, 2, dtype=np.int64, low=-5, high=5)]
    check_op("Einsum", ints, {"equation": "ij,jk->ik"})


def test_einsum_errors(rng):
    expect_graph_error("Einsum", [rand(rng, 3, 4)], {"equation": "ij,jk->ik"}, match="names 2 inputs")
    expect_graph_error("Einsum", [rand(rng, 3, 4), rand(rng, 5, 2)], {"equation": "ij,jk->ik"}, match="sizes 4 and 5")
    expect_graph_error("Einsum", [rand(rng, 3, 4)], {"equation": "ijk->i"}, match="rank 2")
    expect_graph_error("Einsum", [rand(rng, 3, 4)], {"equation": "ij->iz"}, match="appear in no input")


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 1, 2, 2)])
def test_det(rng, shape):
    check_op("Det", [rand(rng, *shape, low=-2, high=2)], static=True)


def test_det_errors(rng):
    expect_graph_error("Det", [rand(rng, 3, 4)], match="square")
    expect_graph_error("Det", [rand(rng, 3)], match="rank >= 2")


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumulative(rng, op, exclusive, reverse, axis):
    x = rand(rng, 3, 4, 2, low=0.5, high=1.5)
    with at_opset(26 if op == "CumProd" else 21):
        check_op(op, [x, np.array(axis, np.int64)], {"exclusive": exclusive, "reverse": reverse}, static=True)


def test_cumsum_int_and_axis_input(rng):
    x = rand(rng, 5, 3, dtype=np.int32, low=-9, high=9)
    check_op("CumSum", [x, np.array([1], np.int32)], {"exclusive": 1})
    check_op("CumSum", [x, np.array(0, np.int64)], const=(1,), static=True)
    expect_graph_error("CumSum", [x, np.array(2, np.int64)], const=(1,), match="out of range")


@pytest.mark.parametrize(
    ("start", "limit", "delta", "dtype"),
    [(3, 9, 3, np.int32), (10, 4, -2, np.int64), (0.5, 3.2, 0.4, np.float32), (1.0, -1.0, -0.3, np.float64), (5, 5, 1, np.int64)],
)
def test_range(start, limit, delta, dtype):
    args = [np.array(v, dtype) for v in (start, limit, delta)]
    check_op("Range", args, const=(0, 1, 2), static=True)  # constants: the length is inferred
    g, _ = aioge_graph("Range", args)  # inputs: the length is only known at run time
    assert g.outputs[0].desc.shape is None
    check_op("Range", args)


def test_range_errors():
    one = np.array(1, np.int64)
    expect_graph_error("Range", [one, np.array(5, np.int64), np.array(0, np.int64)], const=(0, 1, 2), match="delta")
    expect_graph_error("Range", [one, np.array(5, np.int32), one], match="dtype")


@pytest.mark.parametrize("shape", [(), (0,), (3, 4), (2, 0, 5)])
def test_size(rng, shape):
    check_op("Size", [np.asarray(rand(rng, *shape))], static=True)


@pytest.mark.parametrize(("shape", "k"), [((3, 3), 0), ((3, 5), 1), ((4, 2), -1), ((2, 3), 7)])
def test_eye_like(rng, shape, k):
    check_op("EyeLike", [rand(rng, *shape)], {"k": k}, static=True)
    check_op("EyeLike", [rand(rng, *shape, dtype=np.int32, low=0, high=3)], {"k": k})


def test_eye_like_dtype_attr(rng):
    g, feeds = aioge_graph("EyeLike", [rand(rng, 2, 3)], {"dtype": "float64"})
    (got,) = evaluate(g, feeds)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, np.eye(2, 3))
