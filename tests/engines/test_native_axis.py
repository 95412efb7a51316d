"""The C tier's jobs along one axis (issue 41: RoBERTa's position ids, CLIP's end-of-text token):
JOB_CUMULATIVE (CumSum, CumProd), JOB_ARG_REDUCE (ArgMax, ArgMin) and JOB_GATHER_ELEMENTS, each
bit-equal to the numpy kernel a step runs and equal to onnxruntime's op over random shapes (odd
sizes, negative axes, ties, NaNs where numpy's rule applies); an index outside its axis and a
geometry past its buffers fail the job with an aioge error; without the compiled tier the kernels
have no form and compute the same with numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioge.errors import ExecutionError
from aioge.kernels import native
from aioge.kernels.algebra import build_cumulative
from aioge.kernels.index import arg_reduce, gather_elements
from aioge.ops.registry import get_schema
from tests.ops.conftest import ort_run

needs_tier = pytest.mark.skipif(not native.available(), reason="the compiled tier is not built")


@st.composite
def _shape_axis(draw: Any) -> tuple[tuple[int, ...], int]:
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=1, max_size=4)))
    return shape, draw(st.integers(-len(shape), len(shape) - 1))


def _run(call: native.NativeCall | None) -> None:
    assert call is not None
    native.run_calls([call])


def _constant(v: Any) -> np.ndarray:
    a = np.array(v, np.int64)
    a.flags.writeable = False  # a graph constant: a program may bind its value for good
    return a


def _scan_form(kind: str, exclusive: bool, reverse: bool) -> Any:
    return build_cumulative(kind)({"exclusive": int(exclusive), "reverse": int(reverse)}, {}, None, None)


@needs_tier
@settings(max_examples=60, deadline=None)
@given(
    _shape_axis(),
    st.sampled_from([np.float32, np.float64, np.int64, np.int32]),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["sum", "prod"]),
    st.integers(0, 2**32 - 1),
)
def test_cumulative_is_the_numpy_kernels_and_onnxruntimes(
    sa: tuple[tuple[int, ...], int], dtype: Any, exclusive: bool, reverse: bool, kind: str, seed: int
) -> None:
    shape, axis = sa
    x = (np.random.default_rng(seed).standard_normal(shape) * 4).astype(dtype)
    run = _scan_form(kind, exclusive, reverse)
    y = np.full(shape, 7, dtype)
    calls = native.native_form(run)([x, _constant(axis)], [y])  # type: ignore[misc]
    assert calls is not None and [c.job for c in calls] == [native.JOB_CUMULATIVE]
    native.run_calls(calls)
    want = run([x, np.array(axis)], None)[0]
    assert y.tobytes() == want.tobytes(), "the program's scan and the step's differ"
    if kind == "sum":
        (ref,) = ort_run("CumSum", [x, np.array(axis)], {"exclusive": int(exclusive), "reverse": int(reverse)})
        np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)


@needs_tier
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("exclusive", [False, True])
def test_a_wide_scan_in_place_wraps_its_integers_and_keeps_the_first_value(reverse: bool, exclusive: bool) -> None:
    # 150 columns: past the job's stack block of 64; x is y (a scan may overwrite its input)
    x = np.random.default_rng(5).integers(2**30, 2**31 - 1, (3, 5, 150)).astype(np.int32)
    want = np.flip(np.cumsum(np.flip(x, 1) if reverse else x, 1, dtype=np.int32), 1 if reverse else ())
    if exclusive:
        want = want - x  # the sum before x[i] (wrapping as the inclusive sum does)
    assert np.array_equal(want, _scan_form("sum", exclusive, reverse)([x, np.array(1)], None)[0])
    y = x.copy()
    _run(native.cumulative(y, y, -2, exclusive, reverse))
    assert np.array_equal(y, want)
    z = np.array([[-0.0, 1.0, -0.0]], np.float32)  # numpy's cumsum starts from x[0]: -0.0 stays -0.0
    out = np.empty_like(z)
    _run(native.cumulative(z, out, 1, False, False))
    assert np.signbit(out[0, 0]) and out.tolist() == [[0.0, 1.0, 1.0]]


@needs_tier
def test_cumsum_over_an_axis_a_run_may_change_has_no_form() -> None:
    x, y = np.ones((2, 3), np.float32), np.empty((2, 3), np.float32)
    assert native.native_form(_scan_form("sum", False, False))([x, np.array(1)], [y]) is None  # type: ignore[misc]
    assert native.cumulative(x.astype(bool), y.astype(bool), 1, False, False) is None  # no bool scan
    assert native.cumulative(x, y.astype(np.float64), 1, False, False) is None  # one dtype
    assert native.cumulative(x, y, 2, False, False) is None  # an axis outside the rank


@needs_tier
@settings(max_examples=80, deadline=None)
@given(
    _shape_axis(),
    st.sampled_from([np.float32, np.float64, np.int64, np.int32, np.bool_]),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_arg_reduce_is_the_numpy_kernels_and_onnxruntimes(
    sa: tuple[tuple[int, ...], int], dtype: Any, largest: bool, last: bool, keepdims: bool, nans: bool, seed: int
) -> None:
    shape, axis = sa
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, shape).astype(dtype)  # few values: ties, first or last index
    nans = nans and x.dtype.kind == "f"
    if nans:
        x[rng.random(shape) < 0.3] = np.nan  # numpy's rule: the first (or last) NaN is the extreme
    want = arg_reduce(x, axis, int(keepdims), int(last), largest=largest)
    y = np.full(want.shape, -5, np.int64)
    _run(native.arg_reduce(x, y, axis, largest, last))
    assert np.array_equal(y, want)
    if not nans and x.dtype != np.bool_:
        attrs = {"axis": axis, "keepdims": int(keepdims), "select_last_index": int(last)}
        (ref,) = ort_run("ArgMax" if largest else "ArgMin", [x], attrs)
        assert np.array_equal(y, ref)


@needs_tier
@settings(max_examples=60, deadline=None)
@given(
    _shape_axis(),
    st.sampled_from([np.float32, np.int64, np.bool_, np.float16, np.int8]),
    st.sampled_from([np.int64, np.int32]),
    st.integers(1, 6),
    st.integers(0, 2**32 - 1),
)
def test_gather_elements_is_the_numpy_kernels_and_onnxruntimes(
    sa: tuple[tuple[int, ...], int], dtype: Any, itype: Any, m: int, seed: int
) -> None:
    shape, axis = sa
    rng = np.random.default_rng(seed)
    data = (rng.standard_normal(shape) * 9).astype(dtype)
    n = shape[axis]
    ishape = list(shape)
    ishape[axis] = m
    idx = rng.integers(-n, n, ishape).astype(itype)  # negative ones count from the axis's end
    want = gather_elements(data, idx, axis)
    y = np.zeros_like(want)
    _run(native.gather_elements(data, idx, y, axis))
    assert y.tobytes() == want.tobytes()
    (ref,) = ort_run("GatherElements", [data, idx], {"axis": axis})
    assert np.array_equal(y, ref)


@needs_tier
@pytest.mark.parametrize("itype", [np.int64, np.int32])
@pytest.mark.parametrize("bad", [4, -5, 2**31 - 1])
def test_an_index_outside_its_axis_fails_gather_elements(itype: Any, bad: int) -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[0, 1], [bad, 2], [3, -4]], itype)
    with pytest.raises(ExecutionError, match="an index outside its axis"):
        _run(native.gather_elements(data, idx, np.empty((3, 2), np.float32), 1))
    with pytest.raises(IndexError):  # the step's error: the same kind
        gather_elements(data, idx, 1)
    f = np.zeros((3, 4), np.float32)
    assert native.gather_elements(f, np.zeros((2, 4), np.int64), np.zeros((2, 4), np.float32), 1) is None  # other rows
    assert native.gather_elements(f, np.zeros((3, 2), np.float32), np.zeros((3, 2), np.float32), 1) is None  # float indices
    assert native.arg_reduce(f, np.empty(3, np.int32), 1, True) is None  # int64 indices only
    assert native.arg_reduce(f.astype(np.float16), np.empty(3, np.int64), 1, True) is None  # no float16


@needs_tier
def test_a_geometry_past_its_buffers_writes_nothing_and_fails() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    ys = [np.full_like(x, 7), np.full((2, 4), 7, np.int64), np.full_like(x, 7)]
    calls = [
        (native.cumulative(x, ys[0], 1, False, False), 9),  # the elements of x
        (native.arg_reduce(x, ys[1], 1, True), 9),  # of y
        (native.gather_elements(x, np.zeros((2, 3, 4), np.int64), ys[2], 1), 10),  # of the indices
    ]
    for (call, slot), y in zip(calls, ys):
        assert call is not None
        call.args[slot] -= 1
        with pytest.raises(ExecutionError, match="a geometry that does not fit"):
            native.run_calls([call])
        assert (y == 7).all()
    call = native.arg_reduce(x, ys[1], 1, True)
    assert call is not None
    call.args[4] = 0  # an empty axis has no extreme
    with pytest.raises(ExecutionError, match="a geometry"):
        native.run_calls([call])
    assert (ys[1] == 7).all()


def test_without_the_tier_the_kernels_compute_the_same_in_numpy(numpy_kernels: None) -> None:
    assert not native.available()
    x = np.array([[3, 1, 3, 0], [2, 2, 5, 5]], np.int32)
    run = _scan_form("sum", True, True)
    y = np.empty_like(x)
    assert native.native_form(run)([x, _constant(1)], [y]) is None  # type: ignore[misc]
    run([x, np.array(1)], [y])
    assert y.tolist() == [[4, 3, 0, 0], [12, 10, 5, 0]]
    for op, want in (("ArgMax", [[2], [3]]), ("ArgMin", [[3], [1]])):
        fn = get_schema(op).impls[0].build({"axis": -1, "keepdims": 1, "select_last_index": 1}, {}, None, None)
        assert native.native_form(fn)([x], [np.empty((2, 1), np.int64)]) is None  # type: ignore[misc]
        assert fn([x], None)[0].tolist() == want
    ge = get_schema("GatherElements").impls[0].build({"axis": 1}, {}, None, None)
    idx = np.array([[-1, 0], [1, 2]], np.int32)
    assert native.native_form(ge)([x, idx], [np.empty((2, 2), np.int32)]) is None  # type: ignore[misc]
    assert ge([x, idx], None)[0].tolist() == [[0, 3], [2, 5]]
