"""The C tier's data-movement jobs (issue 41): JOB_ELEMWISE (casts, logical ops, comparisons, Where and
float32 arithmetic over broadcast operands) and JOB_GATHER (Gather along an axis, GatherND over
the leading axes), against numpy over random shapes; an index outside its axis fails the job
with an aioge error, never a crash or a read past the data."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioge.errors import ExecutionError
from aioge.kernels import native
from aioge.kernels.shape import build_concat, build_transpose

pytestmark = pytest.mark.skipif(not native.available(), reason="the compiled tier is not built")

_TYPES = [np.float32, np.int64, np.int32, np.bool_, np.float64]


def _operand(draw: Any, shape: tuple[int, ...], dtype: Any, rng: np.random.Generator) -> np.ndarray:
    """A random array broadcastable to ``shape``: some axes 1, some leading ones dropped."""
    ones = draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
    drop = draw(st.integers(0, len(shape)))
    s = tuple(1 if o else d for o, d in zip(ones, shape))[drop:]
    v = rng.standard_normal(s) * 50
    return np.asarray(v > 0 if dtype == np.bool_ else v).astype(dtype)


@st.composite
def _case(draw: Any, arity: int, types: list[Any]) -> tuple[np.ndarray, list[np.ndarray]]:
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=6)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtypes = [draw(st.sampled_from(t)) if isinstance(t, list) else t for t in types]
    xs = [_operand(draw, shape, dtypes[i + 1], rng) for i in range(arity)]
    return np.empty(shape, dtypes[0]), xs


def _run(call: native.NativeCall | None) -> None:
    assert call is not None
    native.run_calls([call])


@settings(max_examples=60, deadline=None)
@given(_case(1, [_TYPES, _TYPES]))
def test_cast_converts_as_numpy_does(case: tuple[np.ndarray, list[np.ndarray]]) -> None:
    y, (x,) = case
    _run(native.elemwise(native.EW_CAST, y, x))
    assert np.array_equal(y, np.broadcast_to(x, y.shape).astype(y.dtype))


@settings(max_examples=40, deadline=None)
@given(_case(2, [np.bool_, np.bool_, np.bool_]), st.sampled_from(["and", "or", "xor"]))
def test_logical_ops_broadcast_as_numpy_does(case: tuple[np.ndarray, list[np.ndarray]], op: str) -> None:
    y, (a, b) = case
    code = {"and": native.EW_AND, "or": native.EW_OR, "xor": native.EW_XOR}[op]
    _run(native.elemwise(code, y, a, b))
    assert np.array_equal(y, np.broadcast_to(getattr(np, f"logical_{op}")(a, b), y.shape))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(_TYPES).flatmap(lambda t: _case(3, [t, np.bool_, t, t])))
def test_where_selects_as_numpy_does(case: tuple[np.ndarray, list[np.ndarray]]) -> None:
    y, (c, a, b) = case
    _run(native.elemwise(native.EW_WHERE, y, c, a, b))
    assert np.array_equal(y, np.broadcast_to(np.where(c, a, b), y.shape))


@settings(max_examples=40, deadline=None)
@given(_case(2, [np.float32, np.float32, np.float32]), st.sampled_from(["Add", "Sub", "Mul", "Div"]))
def test_arithmetic_rounds_as_the_ufuncs_do(case: tuple[np.ndarray, list[np.ndarray]], op: str) -> None:
    y, (a, b) = case
    _run(native.elemwise(native.EW_ARITH[op], y, a, b))
    want = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op](a, b)
    assert np.array_equal(y, np.broadcast_to(want, y.shape), equal_nan=True)


@settings(max_examples=40, deadline=None)
@given(_case(1, [np.float32, np.float32]), st.sampled_from(["Sqrt", "Reciprocal"]))
def test_sqrt_and_reciprocal_round_as_the_ufuncs_do(case: tuple[np.ndarray, list[np.ndarray]], op: str) -> None:
    # RMSNorm's rsqrt (T5, Llama): NaN for a negative square root, inf for 1 / 0, -0 kept
    y, (a,) = case
    a.reshape(-1)[:3] = [-0.0, 0.0, 4.0][: a.size]
    _run(native.elemwise(native.EW_UNARY[op], y, a))
    with np.errstate(all="ignore"):
        want = {"Sqrt": np.sqrt, "Reciprocal": np.reciprocal}[op](a)
    assert np.array_equal(y.view(np.int32), np.broadcast_to(want, y.shape).view(np.int32)) or np.array_equal(
        y, np.broadcast_to(want, y.shape), equal_nan=True
    )


@settings(max_examples=60, deadline=None)
@given(
    st.tuples(st.sampled_from(_TYPES), st.sampled_from(_TYPES)).flatmap(lambda t: _case(2, [np.bool_, *t])),
    st.sampled_from(sorted(native.EW_COMPARE)),
)
def test_comparisons_promote_as_numpy_does(case: tuple[np.ndarray, list[np.ndarray]], op: str) -> None:
    y, (a, b) = case
    _run(native.elemwise(native.EW_COMPARE[op], y, a, b))
    ufunc = {"Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal, "Greater": np.greater}.get(op, np.greater_equal)
    assert np.array_equal(y, np.broadcast_to(ufunc(a, b), y.shape))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([np.int32, np.int64]).flatmap(lambda t: _case(2, [t, t, t])), st.sampled_from(["Add", "Sub", "Mul"]))
def test_integer_arithmetic_wraps_as_numpy_does(case: tuple[np.ndarray, list[np.ndarray]], op: str) -> None:
    y, (a, b) = case
    big = np.iinfo(y.dtype).max // 3  # past the range: numpy's arrays wrap
    with np.errstate(over="ignore"):
        a, b = np.array(a * big, y.dtype), np.array(b + 1, y.dtype)
    _run(native.elemwise(native.EW_ARITH[op], y, a, b))
    with np.errstate(over="ignore"):
        want = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op](a, b)
    assert np.array_equal(y, np.broadcast_to(want, y.shape))
    assert native.elemwise(native.EW_ARITH["Div"], y, a, b) is None  # integer Div is numpy's (floor, zero)
    assert native.elemwise(native.EW_ARITH[op], y, a.astype(np.float32), b) is None  # mixed dtypes


def test_comparisons_edge_values_and_not() -> None:
    # NaN is unordered (every comparison false); int64s past 2**53 compare exactly, not as doubles
    a = np.array([np.nan, 1.0, -0.0, np.inf], np.float32)
    b = np.array([np.nan, np.nan, 0.0, np.inf], np.float64)
    big = np.array([2**53 + 1, -(2**62)], np.int64)
    for op, ufunc in ((9, np.equal), (10, np.less), (11, np.less_equal), (12, np.greater), (13, np.greater_equal)):
        y = np.empty(4, bool)
        _run(native.elemwise(op, y, a, b))
        assert np.array_equal(y, ufunc(a, b)), op
        y2 = np.empty(2, bool)
        _run(native.elemwise(op, y2, big, np.array(2**53, np.int64)))
        assert np.array_equal(y2, ufunc(big, 2**53)), op
    x = np.array([[True, False, True]])
    y3 = np.empty((2, 3), bool)
    _run(native.elemwise(native.EW_NOT, y3, x))
    assert np.array_equal(y3, np.broadcast_to(~x, (2, 3)))
    assert native.elemwise(native.EW_NOT, y3, x.astype(np.int32)) is None  # Not takes bools
    assert native.elemwise(native.EW_COMPARE["Less"], np.empty(3, np.int32), a[:3], a[:3]) is None  # a bool result


def test_operands_the_job_cannot_take_have_no_call() -> None:
    f, b = np.zeros((2, 3), np.float32), np.zeros((2, 3), bool)
    assert native.elemwise(native.EW_AND, b, f, b) is None  # a float to a logical op
    assert native.elemwise(native.EW_WHERE, f, b, f, np.zeros(3, np.int64)) is None  # a branch of another dtype
    assert native.elemwise(native.EW_CAST, f, np.zeros((4,), np.float32)) is None  # does not broadcast
    assert native.elemwise(native.EW_CAST, f, np.zeros((2, 3), np.float16)) is None  # a dtype it lacks
    assert native.elemwise(native.EW_UNARY["Sqrt"], f, f, f) is None  # one operand
    assert native.elemwise(native.EW_UNARY["Sqrt"], np.zeros((2, 3)), np.zeros((2, 3))) is None  # float32 only
    assert native.gather(f, np.zeros(2, np.int32), np.zeros((2, 3), np.float32)) is None  # int32 indices


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=4),
    st.data(),
    st.sampled_from([np.float32, np.int64, np.bool_]),
)
def test_gather_takes_along_an_axis_as_numpy_does(shape: list[int], data: Any, dtype: Any) -> None:
    axis = data.draw(st.integers(0, len(shape) - 1))
    n = shape[axis]
    idx = np.array(data.draw(st.lists(st.integers(-n, n - 1), max_size=5)), np.int64)
    idx = idx.reshape(data.draw(st.sampled_from([(-1,), (1, -1)]))) if idx.size else idx
    x = (np.random.default_rng(idx.size).standard_normal(shape) * 9).astype(dtype)
    want = np.take(x, idx, axis=axis)
    y = np.empty_like(want)
    if want.size == 0:
        assert native.gather(x, idx, y, axis) is None
        return
    _run(native.gather(x, idx, y, axis))
    assert np.array_equal(y, want)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_gather_nd_picks_index_tuples_as_numpy_does(shape: list[int], data: Any) -> None:
    k = data.draw(st.integers(1, len(shape)))
    tuples = data.draw(st.lists(st.tuples(*[st.integers(-d, d - 1) for d in shape[:k]]), min_size=1, max_size=6))
    idx = np.array(tuples, np.int64)
    x = np.random.default_rng(k).standard_normal(shape).astype(np.float32)
    want = x[tuple(np.moveaxis(idx, -1, 0))]
    y = np.empty_like(want)
    _run(native.gather(x, idx, y, 0, k))
    assert np.array_equal(y, want)


@pytest.mark.parametrize("bad", [3, -4, 2**40, -(2**62)])
def test_an_index_outside_its_axis_is_an_aioge_error(bad: int) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.empty((2, 4), np.float32)
    with pytest.raises(ExecutionError, match="an index outside its axis"):
        _run(native.gather(x, np.array([0, bad], np.int64), y, 0))
    with pytest.raises(ExecutionError, match="an index outside its axis"):
        _run(native.gather(x, np.array([[0, 1], [bad, 1]], np.int64), np.empty(2, np.float32), 0, 2))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data(), st.sampled_from([np.float32, np.int64, np.bool_]))
def test_a_copy_into_a_strided_slice_writes_that_slice_alone(shape: list[int], data: Any, dtype: Any) -> None:
    """Concat's form: each input cast (copied) into its slice of the output."""
    axis = data.draw(st.integers(0, len(shape) - 1))
    parts = [np.asarray(np.random.default_rng(i).standard_normal(shape) * 9).astype(dtype) for i in range(2)]
    y = np.zeros(np.concatenate(parts, axis=axis).shape, dtype)
    for i, x in enumerate(parts):
        view = y[(slice(None),) * axis + (slice(i * shape[axis], (i + 1) * shape[axis]),)]
        _run(native.elemwise(native.EW_CAST, view, x))
    assert np.array_equal(y, np.concatenate(parts, axis=axis))


def test_shufflenets_concat_and_channel_shuffle_copy_runs_as_long_as_the_layouts_allow() -> None:
    """Issue 42: ShuffleNet-v2's Concat (two halves of the channels) and channel shuffle (Reshape,
    Transpose (0, 2, 1, 3, 4), Reshape), as their native forms build them, copy rows as long as
    both layouts allow: a half is one contiguous block of the output, a shuffled plane one row.
    Per element over the 6-D index, the Concats had cost 27x numpy's copy and ShuffleNet ran
    1.6x slower as a program than step by step."""
    rng = np.random.default_rng(42)
    halves = [rng.standard_normal((1, 58, 28, 28)).astype(np.float32) for _ in range(2)]
    y = np.empty((1, 116, 28, 28), np.float32)
    concat = build_concat({"axis": 1}, {}, None, None)
    calls = native.native_form(concat)(halves, [y])  # type: ignore[misc]
    assert calls is not None and [c.args[3:9].tolist() for c in calls] == [[1, 1, 1, 1, 1, 58 * 28 * 28]] * 2
    native.run_calls(calls)
    assert np.array_equal(y, np.concatenate(halves, axis=1))
    out = np.empty((1, 58, 2, 28, 28), np.float32)
    (call,) = native.native_form(build_transpose({"perm": (0, 2, 1, 3, 4)}, {}, None, None))(  # type: ignore[misc]
        [y.reshape(1, 2, 58, 28, 28)], [out]
    )
    assert call.args[3:9].tolist() == [58, 1, 1, 1, 2, 28 * 28]
    native.run_calls([call])
    assert np.array_equal(out, y.reshape(1, 2, 58, 28, 28).transpose(0, 2, 1, 3, 4))
    # broadcast operands merge their axes too: a row of a (1, 1, 28, 28) bias over 58 planes
    s = np.empty((1, 58, 28, 28), np.float32)
    call = native.elemwise(native.EW_ARITH["Add"], s, halves[0], y[:, :1])
    assert call is not None and call.args[3:9].tolist() == [58, 1, 1, 1, 1, 28 * 28]
    native.run_calls([call])
    assert np.array_equal(s, halves[0] + y[:, :1])


def _split(call: native.NativeCall | None) -> None:
    """The call over its whole range, cut between the caller and a helper (par.c's split)."""
    assert call is not None and call.total >= 1
    assert native.par_run()(call.job, call.addr, call.total, 1) >= 0  # type: ignore[misc]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 19), min_size=2, max_size=5), st.data(), st.sampled_from([np.float32, np.int32, np.int64]))
def test_transposes_copy_as_numpy_does_whole_and_split(shape: list[int], data: Any, dtype: Any) -> None:
    """Issue 42: a transpose's strided copy over odd sizes, its range the outermost merged axis,
    run whole and cut between two threads."""
    perm = data.draw(st.permutations(range(len(shape))))
    x = np.arange(np.prod(shape), dtype=np.int64).reshape(shape).astype(dtype)
    want = x.transpose(perm)
    for run in (_run, _split):
        y = np.zeros(want.shape, dtype)
        run(native.strided_copy(want, y))
        assert np.array_equal(y, want), perm


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 70), st.integers(1, 70), st.sampled_from([np.float32, np.int32]))
def test_last_two_axes_transposes_copy_as_numpy_does_whole_and_split(batch: int, rows: int, cols: int, dtype: Any) -> None:
    """The 4-byte transposes' 8 x 8 register blocks (16 rows of the output a pass) and their
    leftover rows and columns: ConvNeXt's (96, 3136) <-> (3136, 96), attention's K^T."""
    x = np.arange(batch * rows * cols, dtype=np.int64).reshape(batch, rows, cols).astype(dtype)
    for want in (x.transpose(0, 2, 1), x[0].T):
        for run in (_run, _split):
            y = np.zeros(want.shape, dtype)
            run(native.strided_copy(want, y))
            assert np.array_equal(y, want)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 5), min_size=0, max_size=4).flatmap(
        lambda s: _case(2, [np.float32] * 3).filter(lambda c: c[0].ndim < 6)
    ),
    st.sampled_from(sorted(native.EW_ARITH)),
    st.integers(1, 70),
    st.lists(st.booleans(), min_size=2, max_size=2),
)
def test_float_arithmetic_rows_round_as_the_ufuncs_do_whole_and_split(case: Any, op: str, width: int, rows: Any) -> None:
    """float32 Add/Sub/Mul/Div with a row or one value a side (the vector loops), long rows
    and odd widths, whole and split: bit-equal to numpy's ufuncs."""
    _, (a, b) = case
    rng = np.random.default_rng(width)
    # a last axis of `width` values (or one, broadcast): the rows the loops run over
    a, b = (x[..., None] * rng.uniform(0.5, 2, width if r else 1).astype(np.float32) for x, r in zip((a, b), rows))
    y = np.empty(np.broadcast_shapes(a.shape, b.shape), np.float32)
    ufunc = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op]
    for run in (_run, _split):
        y[...] = np.nan
        run(native.elemwise(native.EW_ARITH[op], y, a, b))
        assert np.array_equal(y, ufunc(a, b), equal_nan=True)


def test_big_copies_and_arithmetic_split_by_their_outermost_axis() -> None:
    """ConvNeXt's Transposes, layer scale (a (96, 1, 1) Mul) and residual Add ran on one core
    (a range of 1): the outermost merged axis is the range now, one long run cut into rows, and
    from ROWS_SPLIT values the job is worth splitting."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 56, 56, 96)).astype(np.float32)
    t = np.empty((1, 96, 56, 56), np.float32)
    call = native.strided_copy(x.transpose(0, 3, 1, 2), t)
    assert call is not None and call.worth and call.args[3:9].tolist() == [96, 1, 1, 1, 1, 56 * 56]
    _split(call)
    assert np.array_equal(t, x.transpose(0, 3, 1, 2))
    scale = rng.standard_normal((96, 1, 1)).astype(np.float32)
    y = np.empty_like(t)
    call = native.elemwise(native.EW_ARITH["Mul"], y, t, scale)
    assert call is not None and call.worth and call.total == 96
    _split(call)
    assert np.array_equal(y, t * scale)
    call = native.elemwise(native.EW_ARITH["Add"], y, y, t)  # in place, one run of 301,056 values
    assert (
        call is not None and call.worth and call.args[3:9].tolist() == [84, 1, 1, 1, 1, 3584]
    )  # 3584 the largest divisor up to 4096
    _split(call)
    assert np.array_equal(y, t * scale + t)
    n = native.ROWS_SPLIT + 1  # a prime: no rows to cut it into, one run
    long = native.elemwise(native.EW_ARITH["Add"], np.empty(n, np.float32), np.ones(n, np.float32), np.ones(1, np.float32))
    assert long is not None and long.args[3:9].tolist() == [1, 1, 1, 1, 1, n]
    small = native.elemwise(native.EW_ARITH["Add"], np.empty(4099, np.float32), np.ones(4099, np.float32), np.ones(1, np.float32))
    assert small is not None and not small.worth and small.args[3:9].tolist() == [1, 1, 1, 1, 1, 4099]


@settings(max_examples=30, deadline=None)
@given(_case(1, [np.bool_, [np.float32, np.float64]]), st.integers(0, 2**32 - 1))
def test_isnan_marks_what_numpy_marks(case: tuple[np.ndarray, list[np.ndarray]], seed: int) -> None:
    """Issue 42: IsNaN (GPT-2's attention mask check) had no C form, so GPT-2's plan never ran
    as one native program; NaNs, infinities and values of float32 and float64, broadcast."""
    y, (x,) = case
    rng = np.random.default_rng(seed)
    x = np.where(rng.random(x.shape) < 0.3, np.nan, np.where(rng.random(x.shape) < 0.2, -np.inf, x)).astype(x.dtype)
    _run(native.elemwise(native.EW_ISNAN, y, x))
    assert np.array_equal(y, np.isnan(np.broadcast_to(x, y.shape)))
    assert native.elemwise(native.EW_ISNAN, y, np.zeros(x.shape, np.int64)) is None  # numbers of a float dtype only
    assert native.elemwise(native.EW_ISNAN, y.astype(np.float32), x) is None  # into a bool


def test_isnans_kernel_has_a_native_form_and_gives_numpys_result() -> None:
    from aioge.kernels.base import ufunc_impl

    x = np.array([[1.0, np.nan, np.inf], [np.nan, -0.0, 3.0]], np.float32)
    impl = ufunc_impl("numpy", np.isnan)
    assert impl.native
    run = impl.build({}, {}, None, None)
    y = np.zeros(x.shape, bool)
    _run(native.native_form(run)([x], [y])[0])  # type: ignore[misc]
    assert np.array_equal(y, np.isnan(x)) and np.array_equal(run([x], None)[0], np.isnan(x))


def _bits(rng: np.random.Generator, shape: Any, dtype: Any) -> np.ndarray:
    """Random 4-byte values of every bit pattern (NaNs with payloads among the float32 ones)."""
    return rng.integers(0, 2**32, shape, dtype=np.uint32).view(dtype)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 4), st.integers(1, 70), st.sampled_from(["rows", "a one", "b one"]), st.sampled_from([np.float32, np.int32])
)
def test_where_over_long_rows_copies_the_picked_bits_whole_and_split(rows: int, width: int, form: str, dtype: Any) -> None:
    """Issue 42: Where's row loops with a unit condition and each value a row or one value (GPT-2's
    Where(IsNaN(softmax), 0, softmax)) vectorise: odd widths, the values' bits copied unchanged."""
    rng = np.random.default_rng(rows * 100 + width)
    c = rng.random((rows, width)) < 0.5
    a = _bits(rng, (rows, 1) if form == "a one" else (rows, width), dtype)
    b = _bits(rng, (rows, 1) if form == "b one" else (rows, width), dtype)
    y = np.empty((rows, width), dtype)
    for run in (_run, _split):
        y.view(np.uint32)[...] = 7
        run(native.elemwise(native.EW_WHERE, y, c, a, b))
        assert np.array_equal(y.view(np.uint32), np.where(c, a, b).view(np.uint32))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 3), st.integers(1, 70))
def test_isnan_over_long_rows_whole_and_split(rows: int, width: int) -> None:
    rng = np.random.default_rng(width)
    x = _bits(rng, (rows, width), np.float32)  # about 1 in 256 a NaN, with every payload
    x[:, ::3] = np.nan
    y = np.empty(x.shape, bool)
    for run in (_run, _split):
        y[...] = True
        run(native.elemwise(native.EW_ISNAN, y, x))
        assert np.array_equal(y, np.isnan(x))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 40), st.integers(1, 5), st.integers(1, 20), st.sampled_from([np.float32, np.int32]))
def test_attention_head_transposes_copy_bits_whole_and_split(batch: int, seq: int, heads: int, dim: int, dtype: Any) -> None:
    """Issue 42: the heads' K^T ((B, S, H, D) -> (B, H, D, S), the last two axes of the merged
    copy swapped) goes through the blocked transpose: odd sizes, a batch or none, a source that
    is a slice of a wider row (Split's), every bit pattern; the copy back ((B, H, S, D) ->
    (B, S, H, D)) and the plain 2-D one alongside."""
    rng = np.random.default_rng(seq * 1000 + heads * 100 + dim)
    wide = _bits(rng, (batch, seq, heads, 3 * dim), dtype)
    for src in (wide[..., dim : 2 * dim].transpose(0, 2, 3, 1), wide[..., :dim].transpose(0, 2, 1, 3), wide[0, :, 0].T):
        for run in (_run, _split):
            y = np.zeros(src.shape, dtype)
            run(native.strided_copy(src, y))
            assert np.array_equal(y.view(np.uint32), np.ascontiguousarray(src).view(np.uint32))
