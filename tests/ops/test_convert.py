"""CastLike and linear quantisation (aioge.ops.convert) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import aioge_graph, check_op, evaluate, expect_graph_error, rand


@pytest.mark.parametrize(("src", "dst"), [(np.float32, np.float16), (np.float16, np.float64), (np.float64, np.int32),
                                          (np.int64, np.float32), (np.int32, np.bool_), (np.bool_, np.float32)])
def test_cast_like(rng, src, dst):
    x = np.asarray(rand(rng, 3, 4, dtype=src, low=-5, high=5))
    check_op("CastLike", [x, np.zeros(1, dst)], const=(1,), static=True)


@pytest.mark.parametrize("zero", [None, "uint8", "int8", "uint16", "int16"])
def test_quantize_per_tensor(rng, zero):
    x = rand(rng, 3, 4, low=-300, high=300)
    x[0, :4] = [0.5, 1.5, 2.5, -2.5]  # halves round to even
    inputs = [x, np.array(2.0, np.float32)] + ([] if zero is None else [np.array(3, zero)])
    check_op("QuantizeLinear", inputs, static=True)


def test_quantize_per_axis_and_blocked(rng):
    x = rand(rng, 2, 4, 3, low=-50, high=50)
    check_op("QuantizeLinear", [x, rand(rng, 4, low=0.5, high=2), np.array([0, 10, 128, 255], np.uint8)], {"axis": 1})
    scale = rand(rng, 2, 2, 3, low=0.5, high=2)  # blocks of 2 along axis 1
    zero = np.asarray(rng.integers(-5, 5, size=(2, 2, 3)), np.int8)
    check_op("QuantizeLinear", [x, scale, zero], {"axis": 1, "block_size": 2})


def test_quantize_output_dtype_attr(rng):
    x = rand(rng, 5, low=-40000, high=40000)
    g, feeds = aioge_graph("QuantizeLinear", [x, np.array(2.0, np.float32)], {"output_dtype": 5})  # ONNX INT16
    (got,) = evaluate(g, feeds)
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, np.clip(np.rint(x / 2), -32768, 32767).astype(np.int16))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32])
def test_dequantize(rng, dtype):
    lo = 0 if np.dtype(dtype).kind == "u" else -100
    x = rand(rng, 2, 3, dtype=dtype, low=lo, high=100)
    zero = [] if dtype == np.int32 else [np.array(7, dtype)]
    check_op("DequantizeLinear", [x, np.array(0.25, np.float32), *zero], static=True)
    check_op("DequantizeLinear", [x, rand(rng, 3, low=0.1, high=1)], {"axis": 1})


def test_dequantize_blocked(rng):
    x = rand(rng, 4, 3, dtype=np.uint8, low=0, high=255)
    scale = rand(rng, 2, 3, low=0.1, high=1)
    zero = np.asarray(rng.integers(0, 255, size=(2, 3)), np.uint8)
    check_op("DequantizeLinear", [x, scale, zero], {"axis": 0, "block_size": 2})


@pytest.mark.parametrize("case", ["mixed", "positive", "negative", "zeros"])
def test_dynamic_quantize(rng, case):
    x = {"mixed": rand(rng, 3, 4, low=-3, high=5), "positive": rand(rng, 6, low=1, high=9),
         "negative": rand(rng, 2, 2, low=-9, high=-1), "zeros": np.zeros((3,), np.float32)}[case]
    check_op("DynamicQuantizeLinear", [x], num_outputs=3, static=True)


def test_convert_errors(rng):
    expect_graph_error("QuantizeLinear", [rand(rng, 3), np.array(1.0, np.float32)], {"output_dtype": 17}, match="not supported")
    expect_graph_error("DequantizeLinear", [rand(rng, 3), np.array(1.0, np.float32)], match="not supported")
    expect_graph_error("QuantizeLinear", [rand(rng, 3), np.array(1.0, np.float32), np.array(0, np.int8)], {"output_dtype": 2},
                       match="disagrees")


@pytest.mark.parametrize(("src", "dst"), [(np.float32, np.int32), (np.int64, np.float64), (np.int8, np.uint8),
                                          (np.uint16, np.int16), (np.bool_, np.uint8), (np.float16, np.int16)])
def test_bit_cast(rng, src, dst):
    from tests.ops.onnx_reference import check_ref

    x = np.asarray(rand(rng, 3, 2, dtype=src, low=-100, high=100))
    code = {np.int32: 6, np.float64: 11, np.uint8: 2, np.int16: 5}[dst]
    check_ref("BitCast", [x], {"to": code}, opset=26)
    g, feeds = aioge_graph("BitCast", [x], {"to": np.dtype(dst).name})  # a dtype name works too
    (got,) = evaluate(g, feeds)
    np.testing.assert_array_equal(got, x.view(dst))


def test_bit_cast_width_mismatch(rng):
    expect_graph_error("BitCast", [rand(rng, 3)], {"to": "float64"}, match="one width")
