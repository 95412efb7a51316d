"""Index ops (aioge.ops.index) against onnxruntime, plus data-dependent shapes through a real
Session (outputs whose size only the kernel knows)."""

from __future__ import annotations

import numpy as np
import pytest

import aioge
from tests.ops.conftest import aioge_graph, check_op, expect_graph_error, rand
from tests.ops.onnx_reference import at_opset, run_session

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reduce(rng, op, axis, keepdims, last):
    x = rand(rng, 3, 4, 5, dtype=np.int32, low=0, high=3).astype(np.float32)  # many ties
    check_op(op, [x], {"axis": axis, "keepdims": keepdims, "select_last_index": last}, static=True)


def test_arg_reduce_int_input(rng):
    check_op("ArgMax", [rand(rng, 4, 3, dtype=np.int64, low=-5, high=5)], {"axis": 1})


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize(("shape", "axis", "k"), [((3, 5), -1, 2), ((4, 3, 2), 0, 4), ((6,), 0, 0), ((2, 7), 1, 7)])
def test_top_k(rng, largest, shape, axis, k):
    x = rand(rng, *shape, dtype=np.int32, low=0, high=4).astype(np.float32)  # ties keep the lower index first
    check_op("TopK", [x, np.array([k], np.int64)], {"axis": axis, "largest": largest}, const=(1,), num_outputs=2, static=True)


def test_top_k_int_and_runtime_k(rng):
    x = rand(rng, 4, 6, dtype=np.int64, low=-9, high=9)
    check_op("TopK", [x, np.array([3], np.int64)], num_outputs=2)  # k is a graph input: shapes unknown
    g, _ = aioge_graph("TopK", [x, np.array([3], np.int64)], num_outputs=2)
    assert all(v.desc.shape is None for v in g.outputs)
    expect_graph_error("TopK", [x, np.array([7], np.int64)], const=(1,), num_outputs=2, match="out of range")


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4)])
def test_nonzero(rng, shape):
    check_op("NonZero", [rand(rng, *shape, dtype=np.int32, low=0, high=1)])
    check_op("NonZero", [np.asarray(rand(rng, *shape, dtype=bool))])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(rng, axis):
    data = rand(rng, 3, 4)
    n = data.shape[axis]
    idx = rng.integers(-n, n, size=(3, 4) if axis else (5, 4)).astype(np.int64)
    if axis == 1:
        idx = idx[:, :2]
    check_op("GatherElements", [data, idx], {"axis": axis}, static=True)


@pytest.mark.parametrize(
    ("data_shape", "idx", "batch_dims"),
    [
        ((2, 2), [[0, 0], [1, 1]], 0),
        ((2, 2), [[1], [0]], 0),
        ((2, 2, 2), [[0, 1], [1, 0]], 0),
        ((2, 2, 2), [[[0, 1]], [[1, 0]]], 0),
        ((2, 3, 4), [[-1, -3], [1, 2]], 0),  # negative indices count from the end (batch_dims 0: numpy's indexing)
        ((3, 4), [[[-3, 0]], [[2, -4]]], 0),
        ((2, 2, 2), [[1], [0]], 1),
        ((2, 3, 4), [[[-1, 2], [0, 0]], [[1, -4], [2, 3]]], 1),
        ((2, 3, 4, 2), [[[1], [2], [0]], [[3], [0], [-1]]], 2),
    ],
)
def test_gather_nd(rng, data_shape, idx, batch_dims):
    check_op("GatherND", [rand(rng, *data_shape), np.array(idx, np.int64)], {"batch_dims": batch_dims}, static=True)


@pytest.mark.parametrize("batch_dims", [0, 1])
@pytest.mark.parametrize("bad", [3, -4])
def test_gather_nd_index_out_of_range_is_an_index_error(batch_dims, bad):
    from aioge.kernels.index import gather_nd

    with pytest.raises(IndexError, match="GatherND/ScatterND index out of range"):
        if batch_dims == 0:
            gather_nd(np.zeros((3, 3)), np.array([[0, 1], [bad, 0]], np.int64))
        else:
            gather_nd(np.zeros((2, 3)), np.array([[1], [bad]], np.int64), 1)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_elements(rng, reduction, axis):
    data = rand(rng, 3, 4)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int64) if axis == 0 else np.array([[1, -1, 1], [0, 2, 0]], np.int64)
    if reduction == "none":  # duplicates are undefined without a reduction
        idx = np.array([[1, 0, 2], [0, 2, 1]], np.int64) if axis == 0 else np.array([[1, 3, 0], [0, 2, 1]], np.int64)
    check_op("ScatterElements", [data, idx, rand(rng, *idx.shape)], {"axis": axis, "reduction": reduction}, static=True)


def test_scatter_deprecated_form(rng):
    data, idx = rand(rng, 3, 3), np.array([[1, 0, 2], [0, 2, 1]], np.int64)
    with at_opset(10):
        check_op("Scatter", [data, idx, rand(rng, 2, 3)], {"axis": 0})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize(
    ("data_shape", "idx", "upd_shape"),
    [((8,), [[4], [3], [1], [7]], (4,)), ((4, 4, 4), [[0], [2]], (2, 4, 4)), ((3, 4), [[0, 1], [2, 3], [-1, 0]], (3,))],
)
def test_scatter_nd(rng, reduction, data_shape, idx, upd_shape):
    args = [rand(rng, *data_shape), np.array(idx, np.int64), rand(rng, *upd_shape)]
    check_op("ScatterND", args, {"reduction": reduction}, static=True)


def test_scatter_nd_duplicates_accumulate(rng):
    data = rand(rng, 5)
    idx = np.array([[1], [1], [3], [1]], np.int64)
    upd = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    (got,) = check_op("ScatterND", [data, idx, upd], {"reduction": "add"})
    np.testing.assert_allclose(got[1], data[1] + 7.0, rtol=1e-6)


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("idx_dtype", [np.int64, np.float32])
def test_one_hot(rng, axis, idx_dtype):
    indices = np.array([[0, -1, 3], [2, 5, -4]], idx_dtype)  # -1 counts from the end; 5 and -5 are off
    values = np.array([-2.0, 7.0], np.float32)
    depth = np.array([4], np.float32 if idx_dtype == np.float32 else np.int64)  # onnxruntime's type combinations
    check_op("OneHot", [indices, depth, values], {"axis": axis}, const=(1,), static=True)


def test_one_hot_runtime_depth():
    check_op("OneHot", [np.array([1, 0, 2], np.int64), np.array([3], np.int64), np.array([0, 1], np.int64)])


@pytest.mark.parametrize(("shape", "reps"), [((3,), [2]), ((2, 3), [1, 2]), ((2, 1, 3), [3, 2, 1]), ((2, 2), [0, 1])])
def test_tile(rng, shape, reps):
    check_op("Tile", [rand(rng, *shape), np.array(reps, np.int64)], const=(1,), static=True)
    check_op("Tile", [rand(rng, *shape, dtype=np.int32, low=0, high=9), np.array(reps, np.int64)])


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 1, -2, 5])
def test_trilu(rng, upper, k):
    inputs = [rand(rng, 2, 4, 5)] + ([] if k is None else [np.array(k, np.int64)])
    check_op("Trilu", inputs, {"upper": upper}, static=True)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress(rng, axis):
    x = rand(rng, 3, 4)
    n = x.size if axis is None else x.shape[axis]
    cond = np.asarray(rand(rng, n - 1, dtype=bool))  # a shorter condition selects among the first entries
    attrs = {} if axis is None else {"axis": axis}
    check_op("Compress", [x, cond], attrs)
    check_op("Compress", [x, cond], attrs, const=(1,), static=True)


@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_unique(rng, sorted_, axis):
    x = np.array([[1, 3, 1], [2, 3, 1], [1, 3, 1], [0, 0, 5]], np.float32)
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    check_op("Unique", [x], attrs, num_outputs=4)
    check_op("Unique", [x.reshape(-1)], {"sorted": sorted_}, num_outputs=1)


@pytest.mark.parametrize(("batch_axis", "time_axis"), [(1, 0), (0, 1)])
def test_reverse_sequence(rng, batch_axis, time_axis):
    shape = (4, 3, 2) if time_axis == 0 else (3, 4, 2)
    lens = np.array([4, 1, 3], np.int64)
    check_op("ReverseSequence", [rand(rng, *shape), lens], {"batch_axis": batch_axis, "time_axis": time_axis}, static=True)


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("with_indices", [False, True])
def test_tensor_scatter(rng, mode, with_indices):
    past, upd = rand(rng, 2, 3, 6, 4), rand(rng, 2, 3, 2, 4)
    inputs = [past, upd] + ([np.array([1, 5 if mode == "circular" else 4], np.int64)] if with_indices else [])
    with at_opset(24):
        check_op("TensorScatter", inputs, {"mode": mode}, static=True)


def test_index_errors(rng):
    expect_graph_error("GatherElements", [rand(rng, 3, 4), np.zeros((3,), np.int64)], match="one rank")
    expect_graph_error("GatherND", [rand(rng, 2, 2), np.zeros((2, 3), np.int64)], match="do not fit")
    expect_graph_error(
        "ScatterND", [rand(rng, 4, 4), np.zeros((2, 1), np.int64), rand(rng, 3, 4)], match="updates must have shape"
    )
    expect_graph_error("Tile", [rand(rng, 2, 2), np.array([1], np.int64)], const=(1,), match="repeats")
    expect_graph_error("Trilu", [rand(rng, 3)], match="rank >= 2")
    expect_graph_error("ArgMax", [rand(rng, 3)], {"axis": 1}, match="out of range")


# -- data-dependent shapes through the compiler, memory planner and executor --------------------


@pytest.mark.anyio
async def test_nonzero_then_gather_nd_in_session(rng):
    x = np.array([[0, 2, 0], [3, 0, 4]], np.float32)
    g = aioge.Graph("dyn")
    xi = g.input("x", (2, 3), "float32")
    (idx,) = aioge.ops.apply("NonZero", [xi])
    (perm,) = aioge.ops.apply("Transpose", [idx], {"perm": (1, 0)})
    (picked,) = aioge.ops.apply("GatherND", [xi, perm])
    (top, where) = aioge.ops.apply("TopK", [picked, np.array([2], np.int64)], {"largest": 1}, num_outputs=2)
    g.output(top, where, names=["top", "where"])
    out = await run_session(g, {"x": x})
    np.testing.assert_array_equal(out["top"], [4.0, 3.0])
    np.testing.assert_array_equal(out["where"], [2, 1])


@pytest.mark.anyio
async def test_unique_counts_in_session():
    g = aioge.Graph("uniq")
    xi = g.input("x", ("N",), "int64")
    y, first, inverse, counts = aioge.ops.apply("Unique", [xi], {"sorted": 0}, num_outputs=4)
    g.output(y, counts, names=["y", "counts"])
    out = await run_session(g, {"x": np.array([2, 1, 1, 3, 4, 3], np.int64)})
    np.testing.assert_array_equal(out["y"], [2, 1, 3, 4])
    np.testing.assert_array_equal(out["counts"], [1, 2, 2, 1])
