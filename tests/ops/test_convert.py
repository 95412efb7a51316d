"""CastLike and linear quantisation (aioge.ops.convert) against onnxruntime."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

from tests.ops.conftest import aioge_graph, check_op, evaluate, expect_graph_error, rand


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (np.float32, np.float16),
        (np.float16, np.float64),
        (np.float64, np.int32),
        (np.int64, np.float32),
        (np.int32, np.bool_),
        (np.bool_, np.float32),
    ],
)
def test_cast_like(rng, src, dst):
    x = np.asarray(rand(rng, 3, 4, dtype=src, low=-5, high=5))
    check_op("CastLike", [x, np.zeros(1, dst)], const=(1,), static=True)


@pytest.mark.parametrize("zero", [None, "uint8", "int8", "uint16", "int16"])
def test_quantize_per_tensor(rng, zero):
    x = rand(rng, 3, 4, low=-300, high=300)
    x[0, :4] = [0.5, 1.5, 2.5, -2.5]  # halves round to even
    inputs = [x, np.array(2.0, np.float32)] + ([] if zero is None else [np.array(3, zero)])
    check_op("QuantizeLinear", inputs, static=True)


@pytest.mark.parametrize("zero", ["uint8", "int8"])
@pytest.mark.parametrize("tier", ["c", "numpy"])
def test_quantize_and_dequantize_8bit_per_tensor_fast_paths(rng, zero, tier, monkeypatch):
    """The float32 per-tensor 8-bit cases (the C pass, or numpy in float32 without the build):
    ties to even, both saturations, and a tail past the 8-lane vectors."""
    if tier == "numpy":
        from aioge.kernels import native

        monkeypatch.setattr(native, "function", lambda *a, **k: None)
    x = rand(rng, 5, 37, low=-400, high=400)
    x[0, :6] = [0.5, 1.5, 2.5, -2.5, -0.5, 3.5]
    check_op("QuantizeLinear", [x, np.array(2.0, np.float32), np.array(3, zero)], static=True)
    q = np.asarray(rng.integers(np.iinfo(zero).min, np.iinfo(zero).max + 1, (5, 37)), zero)
    check_op("DequantizeLinear", [q, np.array(0.37, np.float32), np.array(-3 if zero == "int8" else 200, zero)], static=True)


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
    x = {
        "mixed": rand(rng, 3, 4, low=-3, high=5),
        "positive": rand(rng, 6, low=1, high=9),
        "negative": rand(rng, 2, 2, low=-9, high=-1),
        "zeros": np.zeros((3,), np.float32),
    }[case]
    check_op("DynamicQuantizeLinear", [x], num_outputs=3, static=True)


def test_convert_errors(rng):
    expect_graph_error("QuantizeLinear", [rand(rng, 3), np.array(1.0, np.float32)], {"output_dtype": 1}, match="not supported")
    expect_graph_error("DequantizeLinear", [rand(rng, 3), np.array(1.0, np.float32)], match="not supported")
    expect_graph_error(
        "QuantizeLinear", [rand(rng, 3), np.array(1.0, np.float32), np.array(0, np.int8)], {"output_dtype": 2}, match="disagrees"
    )


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (np.float32, np.int32),
        (np.int64, np.float64),
        (np.int8, np.uint8),
        (np.uint16, np.int16),
        (np.bool_, np.uint8),
        (np.float16, np.int16),
    ],
)
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


# -- the ml_dtypes types (bfloat16, float8, float4, int4, int2) against onnx.reference ------------

_NARROW = {
    "bfloat16": TensorProto.BFLOAT16,
    "float8_e4m3fn": TensorProto.FLOAT8E4M3FN,
    "float8_e4m3fnuz": TensorProto.FLOAT8E4M3FNUZ,
    "float8_e5m2": TensorProto.FLOAT8E5M2,
    "float8_e5m2fnuz": TensorProto.FLOAT8E5M2FNUZ,
    "float4_e2m1fn": TensorProto.FLOAT4E2M1,
    "float8_e8m0fnu": TensorProto.FLOAT8E8M0,
    "int4": TensorProto.INT4,
    "uint4": TensorProto.UINT4,
    "int2": TensorProto.INT2,
    "uint2": TensorProto.UINT2,
}


def _edgy(rng) -> np.ndarray:
    """Values that exercise rounding and saturation: ties, out-of-range, inf, NaN, signed zero, tiny."""
    x = np.concatenate(
        [
            rand(rng, 40, low=-600, high=600),
            rand(rng, 20, low=-3, high=3),
            [0.0, -0.0, np.inf, -np.inf, np.nan, 1e6, -1e6, 1.0625, 1.125, 2.5, -3.5, 1e-9, 0.3],
        ]
    )
    return x.astype(np.float32)


def _reference_cast(x: np.ndarray, to: int, **attrs) -> np.ndarray:
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("Cast", ["x"], ["y"], to=to, **attrs)
    graph = helper.make_graph(
        [node],
        "cast",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", to, x.shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)], ir_version=11)
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


def _same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    g, w = got.astype(np.float32), want.astype(np.float32)
    same = (g == w) | (np.isnan(g) & np.isnan(w))
    assert same.all(), f"{what}: {x_show(g, w, same)}"


def x_show(g: np.ndarray, w: np.ndarray, same: np.ndarray) -> str:
    return f"got {g[~same][:5]}, expected {w[~same][:5]}"


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("to", sorted(_NARROW))
def test_cast_to_ml_dtypes(rng, to, saturate):
    """Cast float32 -> each narrow type: onnx.reference's rounding (nearest even) and saturation, bit for bit."""
    x = _edgy(rng)
    if to in ("int4", "uint4", "int2", "uint2"):
        info = ml_dtypes.iinfo(getattr(ml_dtypes, to))  # integer casts out of range (NaN, inf) are undefined
        x = rand(rng, 60, low=info.min, high=info.max + 0.99)
    g, feeds = aioge_graph("Cast", [x], {"to": to, "saturate": saturate})
    (got,) = evaluate(g, feeds)
    _same_bits(got, _reference_cast(x, _NARROW[to], saturate=saturate), f"Cast to {to}")


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
def test_cast_to_e8m0_round_mode(rng, mode):
    x = np.abs(_edgy(rng))
    g, feeds = aioge_graph("Cast", [x], {"to": "float8_e8m0fnu", "round_mode": mode})
    (got,) = evaluate(g, feeds)
    _same_bits(got, _reference_cast(x, TensorProto.FLOAT8E8M0, round_mode=mode), f"Cast to e8m0 ({mode})")


@pytest.mark.parametrize("src", ["bfloat16", "float8_e4m3fn", "float8_e5m2fnuz", "float4_e2m1fn", "int4", "uint2"])
def test_cast_from_ml_dtypes_is_exact(rng, src):
    dtype = np.dtype(getattr(ml_dtypes, src))
    if src[0] in "iu":
        x = np.arange(ml_dtypes.iinfo(dtype).min, ml_dtypes.iinfo(dtype).max + 1).astype(dtype)
    else:
        x = rand(rng, 30, low=-6, high=6).astype(dtype)
    for to in ("float32", "float16", "float64", "bfloat16"):
        g, feeds = aioge_graph("Cast", [x], {"to": to})
        (got,) = evaluate(g, feeds)
        assert got.dtype == np.dtype(ml_dtypes.bfloat16 if to == "bfloat16" else to)
        np.testing.assert_array_equal(got.astype(np.float64), x.astype(np.float64))


@pytest.mark.parametrize("zero", ["int4", "uint4", "int2", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn"])
def test_quantize_dequantize_narrow_types(rng, zero):
    """QuantizeLinear to / DequantizeLinear from the narrow types, per axis, against onnx.reference."""
    from tests.ops.onnx_reference import check_ref

    x = rand(rng, 3, 4, low=-12, high=12)
    x[0, :4] = [0.5, 1.5, 2.5, -2.5]  # halves round to even
    scale = rand(rng, 4, low=0.5, high=1.5)
    zp = np.zeros(4, getattr(ml_dtypes, zero))
    if zero in ("int4", "uint4", "int2"):
        zp = np.asarray([0, 1, -1 if zero != "uint4" else 2, 1]).astype(zp.dtype)
    (q,) = check_ref("QuantizeLinear", [x, scale, zp], {"axis": 1}, opset=25)
    assert q.dtype == zp.dtype
    (back,) = check_ref("DequantizeLinear", [q, scale, zp], {"axis": 1}, opset=25)
    assert back.dtype == np.float32


def test_quantize_bfloat16_input_computes_in_float32(rng):
    x = rand(rng, 50, low=-100, high=100).astype(ml_dtypes.bfloat16)
    scale = np.array(0.37, ml_dtypes.bfloat16)
    g, feeds = aioge_graph("QuantizeLinear", [x, scale, np.array(3, np.int8)])
    (got,) = evaluate(g, feeds)
    want = np.clip(np.rint(x.astype(np.float32) / scale.astype(np.float32)) + 3, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(got, want)
