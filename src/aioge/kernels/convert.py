"""Conversion kernels: CastLike and linear (de)quantisation.

Quantisation divides in the input's precision and rounds half to even, then saturates to
the target integer type, as ONNX specifies. Scales and zero points are per tensor (scalars),
per axis (1-D along ``axis``) or blocked (the input's rank, ``block_size`` elements per
scale along ``axis``).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from aioge.ir.desc import numpy_dtype

__all__ = [
    "ONNX_DTYPES",
    "bit_cast",
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
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "str",
    9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 14: "complex64", 15: "complex128",
}


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
    if x.dtype.kind in "OU":
        return np.array([float(v) for v in x.reshape(-1)], dtype=np.float64).reshape(x.shape).astype(target.dtype)
    return x.astype(target.dtype)


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
    info = np.iinfo(dtype)
    return np.clip(v, info.min, info.max).astype(dtype)


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

    Raises:
        ValueError: a non-integer target type, or scales that do not fit x.
    """
    if y_zero_point is not None:
        target = y_zero_point.dtype
    else:
        target = numpy_dtype(dtype_of_code(output_dtype, "output_dtype") if output_dtype else "uint8")
    if target.kind not in "iu":
        raise ValueError(f"QuantizeLinear to {target} is not supported (integer targets only)")
    scale = expand_scale(y_scale, x.shape, axis, block_size)
    work = np.promote_types(x.dtype, scale.dtype)
    q = np.rint(x.astype(work) / scale.astype(work)).astype(np.float64)
    if y_zero_point is not None:
        q = q + expand_scale(y_zero_point, x.shape, axis, block_size).astype(np.float64)
    return _saturate(q, target)


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
    scale = expand_scale(x_scale, x.shape, axis, block_size).astype(np.float64)
    v = x.astype(np.float64)
    if x_zero_point is not None:
        v = v - expand_scale(x_zero_point, x.shape, axis, block_size).astype(np.float64)
    return (v * scale).astype(out)


def dynamic_quantize_linear(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """uint8 quantisation with a scale and zero point chosen from x's range (which includes 0)."""
    lo = min(float(x.min()) if x.size else 0.0, 0.0)
    hi = max(float(x.max()) if x.size else 0.0, 0.0)
    scale = np.float32((hi - lo) / 255.0)
    if scale == 0:
        # an all-zero input: onnxruntime reports scale 1 (any scale quantises 0 to 0)
        return np.zeros(x.shape, np.uint8), np.asarray(1.0, dtype=x.dtype), np.asarray(0, dtype=np.uint8)
    zero = _saturate(np.rint(np.float32(0.0) - np.float32(lo) / scale), np.dtype(np.uint8))
    y = _saturate(np.rint(x.astype(np.float32) / scale) + float(zero), np.dtype(np.uint8))
    return y, np.asarray(scale, dtype=x.dtype), np.asarray(zero, dtype=np.uint8)
