"""MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv (aioge.ops.quant_linalg) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import aioge_graph, check_op, evaluate, expect_graph_error


def _q(rng, *shape, dtype=np.uint8):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dtype)


@pytest.mark.parametrize(("sa", "sb"), [((4, 3), (3, 2)), ((2, 4, 3), (3, 5)), ((2, 1, 4, 3), (3, 3, 2))])
@pytest.mark.parametrize("zero", [False, True])
def test_matmul_integer(rng, sa, sb, zero):
    a, b = _q(rng, *sa), _q(rng, *sb)
    args = [a, b] + ([np.array(12, np.uint8), np.array(130, np.uint8)] if zero else [])
    check_op("MatMulInteger", args, static=True)


def test_matmul_integer_per_row_and_column_zero_points(rng):
    # onnxruntime takes only per-tensor zero points; the spec's per-row (A) / per-column (B) ones against numpy
    a, b = _q(rng, 4, 3), _q(rng, 3, 2)
    za, zb = _q(rng, 4), _q(rng, 2)
    g, feeds = aioge_graph("MatMulInteger", [a, b, za, zb])
    (got,) = evaluate(g, feeds)
    want = (a.astype(np.int32) - za.astype(np.int32)[:, None]) @ (b.astype(np.int32) - zb.astype(np.int32))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize(("sa", "sb"), [((2, 4), (4, 3)), ((2, 2, 4), (2, 4, 3))])
def test_qlinear_matmul(rng, dtype, sa, sb):
    args = [
        _q(rng, *sa, dtype=dtype),
        np.array(0.05, np.float32),
        np.array(3, dtype),
        _q(rng, *sb, dtype=dtype),
        np.array(0.02, np.float32),
        np.array(-2 if dtype == np.int8 else 9, dtype),
        np.array(0.7, np.float32),
        np.array(5, dtype),
    ]
    check_op("QLinearMatMul", args, static=True)


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 1, 1, 1]}, {"strides": [2, 1], "dilations": [1, 2]}, {"group": 2}])
def test_conv_integer(rng, attrs):
    x = _q(rng, 1, 2, 5, 5)
    w = _q(rng, 4, 2 // attrs.get("group", 1), 2, 2)
    check_op("ConvInteger", [x, w, np.array(10, np.uint8), np.array(3, np.uint8)], attrs, static=True)


def test_conv_integer_per_channel_zero_point(rng):
    # onnxruntime takes only a per-tensor weight zero point; per output channel against a float conv
    from tests.ops.conftest import ort_run

    x, w, zw = _q(rng, 1, 2, 4, 4), _q(rng, 3, 2, 2, 2), _q(rng, 3)
    g, feeds = aioge_graph("ConvInteger", [x, w, np.array(10, np.uint8), zw])
    (got,) = evaluate(g, feeds)
    xf = (x.astype(np.float64) - 10).astype(np.float32)  # exact: small integers
    wf = (w.astype(np.float64) - zw.astype(np.float64)[:, None, None, None]).astype(np.float32)
    (want,) = ort_run("Conv", [xf, wf])
    np.testing.assert_array_equal(got, want.astype(np.int32))


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_qlinear_conv(rng, per_channel, bias):
    x, w = _q(rng, 1, 2, 5, 5), _q(rng, 3, 2, 3, 3)
    w_scale = np.array([0.01, 0.02, 0.03], np.float32) if per_channel else np.array(0.02, np.float32)
    w_zero = np.zeros(3, np.uint8) if per_channel else np.array(7, np.uint8)
    args = [
        x,
        np.array(0.05, np.float32),
        np.array(100, np.uint8),
        w,
        w_scale,
        w_zero,
        np.array(0.9, np.float32),
        np.array(20, np.uint8),
    ] + ([np.array([5, -300, 1000], np.int32)] if bias else [])
    check_op("QLinearConv", args, {"pads": [1, 1, 1, 1]}, static=True)


def test_quant_linalg_errors(rng):
    expect_graph_error("MatMulInteger", [np.zeros((2, 3), np.float32), _q(rng, 3, 2)], match="int8 or uint8")
    expect_graph_error("MatMulInteger", [_q(rng, 2, 3), _q(rng, 4, 2)], match="inner dimensions")
