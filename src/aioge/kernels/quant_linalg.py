"""Integer matrix products and convolutions: MatMulInteger, QLinearMatMul, ConvInteger and
QLinearConv.

Zero points are subtracted in int32, the product or convolution accumulates in int32 (the
convolution through ``kernels.conv``'s im2col kernel), and the QLinear forms requantise with
round-half-to-even and saturation, as the ONNX reference does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aioge.kernels.conv import build_conv_im2col

__all__ = ["conv_integer", "matmul_integer", "qlinear_conv", "qlinear_matmul"]


def _centred(x: np.ndarray, zero: np.ndarray | None, per_axis: int | None = None) -> np.ndarray:
    """x - zero in int32; a 1-D zero point of more than one value applies along ``per_axis``."""
    v = x.astype(np.int32)
    if zero is None:
        return v
    z = np.asarray(zero).astype(np.int32)
    if z.size == 1:
        return v - z.reshape(())
    if per_axis is None:
        return v - z
    shape = [1] * v.ndim
    shape[per_axis] = -1
    return v - z.reshape(shape)


def _requantise(acc: np.ndarray, multiplier: np.ndarray, zero: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(np.rint(acc * multiplier + np.asarray(zero, np.float64)), info.min, info.max).astype(dtype)


def _row_scale(scale: np.ndarray) -> np.ndarray:
    """An A-side scale: a scalar, or one value per row (the second-to-last axis)."""
    s = np.asarray(scale, np.float64)
    return s.reshape(()) if s.size == 1 else s.reshape((-1, 1))


def matmul_integer(
    a: np.ndarray, b: np.ndarray, a_zero_point: np.ndarray | None = None, b_zero_point: np.ndarray | None = None
) -> np.ndarray:
    """(A - a_zero_point) @ (B - b_zero_point) in int32 (zero points per tensor, per row of A, per column of B)."""
    a32 = _centred(a, a_zero_point, a.ndim - 2 if a.ndim >= 2 else None)
    b32 = _centred(b, b_zero_point, b.ndim - 1)
    return np.matmul(a32, b32).astype(np.int32)


def qlinear_matmul(
    a: np.ndarray,
    a_scale: np.ndarray,
    a_zero_point: np.ndarray,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero_point: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
) -> np.ndarray:
    """Quantised matmul: requantise (A - za)(B - zb) by a_scale * b_scale / y_scale, add zy."""
    acc = matmul_integer(a, b, a_zero_point, b_zero_point).astype(np.float64)
    bs = np.asarray(b_scale, np.float64)
    bs = bs.reshape(()) if bs.size == 1 else bs.reshape(-1)  # per column of B
    mult = _row_scale(a_scale) * bs / np.asarray(y_scale, np.float64).reshape(())
    zero = np.asarray(y_zero_point)
    return _requantise(acc, mult, zero.reshape(()) if zero.size == 1 else zero, y_zero_point.dtype)


def _conv(x32: np.ndarray, w32: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    run = build_conv_im2col(attrs, {}, None, None)
    return np.asarray(run([x32, w32], None)[0])


def conv_integer(
    x: np.ndarray, w: np.ndarray, x_zero_point: np.ndarray | None = None, w_zero_point: np.ndarray | None = None, **attrs: Any
) -> np.ndarray:
    """Conv of (x - x_zero_point) with (w - w_zero_point) in int32 (w's zero point per output channel)."""
    return _conv(_centred(x, x_zero_point), _centred(w, w_zero_point, 0), attrs).astype(np.int32)


def qlinear_conv(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray,
    w: np.ndarray,
    w_scale: np.ndarray,
    w_zero_point: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
    b: np.ndarray | None = None,
    **attrs: Any,
) -> np.ndarray:
    """Quantised conv: int32 accumulation (+ int32 bias), requantised per output channel."""
    acc = _conv(_centred(x, x_zero_point), _centred(w, w_zero_point, 0), attrs).astype(np.float64)
    if b is not None:
        acc = acc + b.astype(np.float64).reshape((-1,) + (1,) * (acc.ndim - 2))
    ws = np.asarray(w_scale, np.float64)
    ws = ws.reshape(()) if ws.size == 1 else ws.reshape((-1,) + (1,) * (acc.ndim - 2))
    mult = np.asarray(x_scale, np.float64).reshape(()) * ws / np.asarray(y_scale, np.float64).reshape(())
    return _requantise(acc, mult, np.asarray(y_zero_point).reshape(()), y_zero_point.dtype)
