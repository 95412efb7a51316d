"""Conversion kernels: CastLike and linear (de)quantisation.

Quantisation divides in the input's precision and rounds half to even, then saturates to
the target integer type, as ONNX specifies; to a float8 or float4 type it rounds (to nearest
even) and saturates as Cast does. Casts to the ml_dtypes types (bfloat16, float8, float4,
int4, int2) go through ml_dtypes' conversions, which round to nearest even; ``saturate``
clamps to the type's finite range first, and float8_e8m0fnu (a bare exponent) rounds by
``round_mode``. Scales and zero points are per tensor (scalars),
per axis (1-D along ``axis``) or blocked (the input's rank, ``block_size`` elements per
scale along ``axis``).
"""

from __future__ import annotations

from typing import Any, Mapping

import ml_dtypes
import numpy as np

from aioge.ir.desc import ML_DTYPES, numpy_dtype

__all__ = [
    "ONNX_DTYPES",
    "bit_cast",
    "cast",
    "cast_like",
    "dequantize_linear",
    "dtype_of_code",
    "dynamic_quantize_linear",
    "expand_scale",
    "quantize_linear",
]

# ONNX TensorProto element-type codes of the dtypes aioge supports (attributes such as
# output_dtype and softmax_precision carry these codes).
ONNX_DTYPES: Mapping[int, str] = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    8: "str",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    14: "complex64",
    15: "complex128",
    16: "bfloat16",
    17: "float8_e4m3fn",
    18: "float8_e4m3fnuz",
    19: "float8_e5m2",
    20: "float8_e5m2fnuz",
    21: "uint4",
    22: "int4",
    23: "float4_e2m1fn",
    24: "float8_e8m0fnu",
    25: "uint2",
    26: "int2",
}

# The float types whose cast honours ``saturate`` (clamping to the finite range, infinities
# included). Casts to the narrow integer types convert as ml_dtypes does.
_SATURATING = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn"})
_NARROW_INTS = frozenset({"int4", "uint4", "int2", "uint2"})


def dtype_of_code(code: int, what: str) -> str:
    """The dtype name of an ONNX element-type code.

    Raises:
        ValueError: a code of a type aioge does not support (bfloat16, float8, int4, ...).
    """
    try:
        return ONNX_DTYPES[int(code)]
    except KeyError:
        raise ValueError(f"{what}: ONNX element type {code} is not supported; supported: {dict(ONNX_DTYPES)}") from None


def target_dtype(to: object, what: str = "to") -> str:
    """A dtype name from an ONNX element-type code or anything numpy reads as a dtype.

    Raises:
        ValueError: an unsupported type.
    """
    from aioge.ir.desc import canonical_dtype

    if isinstance(to, (int, np.integer)) and not isinstance(to, bool):
        return dtype_of_code(int(to), what)
    return canonical_dtype(to)


def bit_cast(x: np.ndarray, to: object) -> np.ndarray:
    """x's bytes read as another type of the same width (little endian), in x's shape.

    Raises:
        ValueError: the widths differ, or either type is a string.
    """
    want = numpy_dtype(target_dtype(to))
    if want.kind == "O" or x.dtype.kind in "OU" or want.itemsize != x.dtype.itemsize:
        raise ValueError(f"BitCast needs two non-string types of one width, got {x.dtype} and {want}")
    little = np.asarray(x, dtype=x.dtype.newbyteorder("<"), order="C")  # (ascontiguousarray would make 0-d 1-d)
    return little.view(want.newbyteorder("<")).astype(want)


def cast_like(x: np.ndarray, target: np.ndarray, saturate: int = 1, round_mode: str = "up") -> np.ndarray:
    """x converted to target's dtype (saturate and round_mode only matter for float8 types)."""
    if target.dtype.kind in "OU":
        return np.vectorize(str, otypes=[object])(x) if x.size else x.astype(object)
    return cast(x, target.dtype.name, saturate, round_mode)


def cast(x: np.ndarray, to: str, saturate: int = 1, round_mode: str = "up") -> np.ndarray:
    """x converted to dtype ``to`` with ONNX's Cast rules for the narrow types.

    Strings parse as float64 first. ``saturate`` (float8 and float4 targets) clamps to the
    type's finite range, infinities included, before rounding to nearest even; without it an
    out-of-range value becomes inf or NaN as the type allows. float8_e8m0fnu rounds the
    exponent by ``round_mode`` ("up", "down" or "nearest").

    Raises:
        ValueError: an unknown round_mode.
    """
    target = numpy_dtype(to)
    if x.dtype.kind in "OU":
        x = np.array([float(v) for v in x.reshape(-1)], dtype=np.float64).reshape(x.shape)
    if to == "float8_e8m0fnu":
        return _to_e8m0(x, bool(saturate), round_mode)
    if x.dtype.name in ML_DTYPES and x.dtype.name not in _NARROW_INTS:
        x = x.astype(np.float32)  # numpy lacks some direct conversions between the ml_dtypes floats
    if to in _SATURATING and saturate and x.dtype.kind == "f":
        fi = ml_dtypes.finfo(target)
        return np.clip(x, float(fi.min), float(fi.max)).astype(target)
    return x.astype(target)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """float8_e8m0fnu: the float32 exponent, rounded by the mantissa; inf and NaN become NaN (0xFF).

    The type shares float32's exponent bias (127), so the biased exponent byte is the result
    before rounding: "down" keeps it, "up" adds one for any mantissa, "nearest" adds one for a
    mantissa above one half (at exactly one half, for normal numbers only). Saturation keeps
    the largest finite exponent (254) from rounding into the NaN code.
    """
    if round_mode not in ("up", "down", "nearest"):
        raise ValueError(f"round_mode must be 'up', 'down' or 'nearest', got {round_mode!r}")
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.uint16)
    mant = bits & 0x7FFFFF
    special = exp == 0xFF
    if round_mode == "up":
        bump = mant > 0
    elif round_mode == "nearest":
        bump = (mant > 0x400000) | ((mant == 0x400000) & (exp > 0))
    else:
        bump = np.zeros(exp.shape, dtype=bool)
    if saturate:
        bump &= exp != 0xFE
    out = np.where(special, 0xFF, np.minimum(exp + bump, 0xFF)).astype(np.uint8)
    return out.view(ml_dtypes.float8_e8m0fnu)


def expand_scale(scale: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int) -> np.ndarray:
    """A scale or zero point broadcast against an input of ``shape``.

    Raises:
        ValueError: a per-axis scale of the wrong length, or a blocked scale that does not
            cover the input.
    """
    rank = len(shape)
    if scale.ndim == 0 or scale.size == 1 and block_size == 0:
        return scale.reshape(())
    axis %= rank
    if block_size == 0:
        if scale.ndim != 1 or scale.shape[0] != shape[axis]:
            raise ValueError(f"a per-axis scale of shape {scale.shape} does not fit axis {axis} of {shape}")
        return scale.reshape((-1,) + (1,) * (rank - axis - 1))
    if scale.ndim != rank or -(-shape[axis] // block_size) != scale.shape[axis]:
        raise ValueError(f"a blocked scale of shape {scale.shape} does not cover {shape} in blocks of {block_size}")
    return np.repeat(scale, block_size, axis=axis).take(np.arange(shape[axis]), axis=axis)


def _saturate(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = ml_dtypes.iinfo(dtype) if dtype.name in _NARROW_INTS else np.iinfo(dtype)
    return np.clip(v, info.min, info.max).astype(dtype)


def _is_int(dtype: np.dtype) -> bool:
    return dtype.kind in "iu" or dtype.name in _NARROW_INTS


def quantize_linear(
    x: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray | None = None,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
    saturate: int = 1,
    precision: int = 0,
) -> np.ndarray:
    """saturate(round_half_even(x / scale) + zero_point) in the zero point's type (default uint8).

    To a float8 or float4 type: cast(x / scale + zero_point) with ``saturate``, rounding to
    nearest even. bfloat16 and float16 inputs divide in float32, as ONNX specifies.

    Raises:
        ValueError: a target type that is not a quantised type, or scales that do not fit x.
    """
    if y_zero_point is not None:
        target = y_zero_point.dtype
    else:
        target = numpy_dtype(dtype_of_code(output_dtype, "output_dtype") if output_dtype else "uint8")
    if not _is_int(target) and target.name not in _SATURATING:
        raise ValueError(f"QuantizeLinear to {target} is not supported")
    if x.dtype == y_scale.dtype == np.float32 and y_scale.size == 1 and target in _INT8 and not block_size:
        return _quantize_8bit(x, y_scale, y_zero_point, target)
    scale = expand_scale(y_scale, x.shape, axis, block_size)
    work = np.promote_types(_compute_dtype(x.dtype), _compute_dtype(scale.dtype))
    q = x.astype(work) / scale.astype(work)
    if _is_int(target):
        q = np.rint(q).astype(np.float64)
    if y_zero_point is not None:
        q = q + expand_scale(y_zero_point, x.shape, axis, block_size).astype(q.dtype)
    if _is_int(target):
        return _saturate(q, target)
    return cast(q, target.name, saturate)


_INT8 = (np.dtype(np.uint8), np.dtype(np.int8))


def _quantize_8bit(x: np.ndarray, y_scale: np.ndarray, y_zero_point: np.ndarray | None, target: np.dtype) -> np.ndarray:
    """QuantizeLinear's common case (float32, one scale, to 8 bits) in float32 steps: by the C
    tier's pass where it is built (the same division, rounding and saturation)."""
    from aioge.kernels import native

    scale = np.float32(y_scale.reshape(-1)[0])
    zero = 0 if y_zero_point is None else int(y_zero_point.reshape(-1)[0])
    fn = native.function("aioge_qgemm_quantize")
    if fn is None or not scale > 0:
        q = np.rint(x / scale)
        q += np.float32(zero)
        return _saturate(q, target)
    xc = np.ascontiguousarray(x)
    y = np.empty(x.shape, target)
    native.check(fn(native.ptr(xc), xc.size, float(scale), float(zero), int(target == np.int8), native.ptr(y)), "QuantizeLinear")
    return y


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """float32 for the narrow float types (ONNX computes those in float32), else ``dtype``."""
    return np.dtype(np.float32) if dtype.name in ML_DTYPES or dtype == np.float16 else dtype


def dequantize_linear(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray | None = None,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
) -> np.ndarray:
    """(x - zero_point) * scale, in the scale's dtype (or output_dtype)."""
    out = numpy_dtype(dtype_of_code(output_dtype, "output_dtype")) if output_dtype else x_scale.dtype
    if out == x_scale.dtype == np.float32 and x.dtype in _INT8 and x_scale.size == 1 and not block_size:
        # one scale, from 8 bits: float32 is exact for x - zero, and rounds the product as float64 then float32 would
        from aioge.kernels import native

        z, sc = np.float32(0 if x_zero_point is None else x_zero_point.reshape(-1)[0]), np.float32(x_scale.reshape(-1)[0])
        fn = native.function("aioge_qgemm_dequantize")
        if fn is None:
            y = np.subtract(x, z, dtype=np.float32)
            y *= sc
            return y
        xc, y = np.ascontiguousarray(x), np.empty(x.shape, np.float32)
        native.check(fn(native.ptr(xc), int(x.dtype == np.int8), xc.size, float(sc), float(z), native.ptr(y)), "DequantizeLinear")
        return y
    scale = expand_scale(x_scale, x.shape, axis, block_size).astype(np.float64)
    v = x.astype(np.float64)
    if x_zero_point is not None:
        v = v - expand_scale(x_zero_point, x.shape, axis, block_size).astype(np.float64)
    return _narrow(v * scale, out)


def _narrow(v: np.ndarray, out: np.dtype) -> Any:
    # ml_dtypes' float types round from float32 (its float64 paths go through float32 anyway)
    return (v.astype(np.float32) if out.name in ML_DTYPES else v).astype(out)


def dynamic_quantize_params(lo: float, hi: float) -> tuple[np.float32, np.ndarray] | None:
    """DynamicQuantizeLinear's float32 scale and uint8 zero point for x's range [lo, hi] (0
    in it), or None for a scale of 0 (an all-zero x)."""
    scale = np.float32((hi - lo) / 255.0)
    if scale == 0:
        return None
    return scale, _saturate(np.rint(np.float32(0.0) - np.float32(lo) / scale), np.dtype(np.uint8))


def dynamic_quantize_linear(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """uint8 quantisation with a scale and zero point chosen from x's range (which includes 0)."""
    lo = min(float(x.min()) if x.size else 0.0, 0.0)
    hi = max(float(x.max()) if x.size else 0.0, 0.0)
    params = dynamic_quantize_params(lo, hi)
    if params is None:
        # an all-zero input: onnxruntime reports scale 1 (any scale quantises 0 to 0)
        return np.zeros(x.shape, np.uint8), np.asarray(1.0, dtype=x.dtype), np.asarray(0, dtype=np.uint8)
    scale, zero = params
    y = _saturate(np.rint(x.astype(np.float32) / scale) + float(zero), np.dtype(np.uint8))
    return y, np.asarray(scale, dtype=x.dtype), np.asarray(zero, dtype=np.uint8)
