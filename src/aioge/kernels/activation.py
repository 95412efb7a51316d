"""Activation kernels beyond the basics in ``kernels.elementwise``.

Every function keeps its input's dtype (the constants are cast to it first, so float16
stays float16) and uses the overflow-free form where the naive one overflows (softplus
through ``logaddexp``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from aioge.kernels.contract import RunFn
from aioge.kernels.native_rows import unary as _native

__all__ = [
    "build_hardmax",
    "celu",
    "elu",
    "hard_swish",
    "mish",
    "prelu",
    "selu",
    "shrink",
    "softplus",
    "softsign",
    "swiglu",
    "swish",
    "thresholded_relu",
]


def _c(value: float, x: np.ndarray) -> np.ndarray:
    return np.asarray(value, x.dtype)


def elu(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """x for x >= 0, alpha * (e^x - 1) below."""
    return np.where(x >= 0, x, _c(alpha, x) * np.expm1(np.minimum(x, 0))).astype(x.dtype, copy=False)


def selu(x: np.ndarray, alpha: float, gamma: float) -> np.ndarray:
    """gamma * x for x > 0, gamma * alpha * (e^x - 1) otherwise."""
    neg = _c(alpha, x) * np.expm1(np.minimum(x, 0))
    return (_c(gamma, x) * np.where(x > 0, x, neg)).astype(x.dtype, copy=False)


def celu(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """max(0, x) + min(0, alpha * (e^(x / alpha) - 1))."""
    a = _c(alpha, x)
    return (np.maximum(x, 0) + np.minimum(0, a * np.expm1(np.minimum(x, 0) / a))).astype(x.dtype, copy=False)


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + e^x), without overflow for large x."""
    return np.logaddexp(_c(0.0, x), x).astype(x.dtype, copy=False)


def softsign(x: np.ndarray) -> np.ndarray:
    """x / (1 + |x|)."""
    return (x / (1 + np.abs(x))).astype(x.dtype, copy=False)


def thresholded_relu(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """x where x > alpha, else 0."""
    return np.where(x > _c(alpha, x), x, _c(0.0, x))


def prelu(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    """x where x >= 0, slope * x below; slope broadcasts to x (unidirectionally)."""
    return np.where(x >= 0, x, x * slope.astype(x.dtype, copy=False)).astype(x.dtype, copy=False)


def shrink(x: np.ndarray, bias: float = 0.0, lambd: float = 0.5) -> np.ndarray:
    """x + bias below -lambd, x - bias above lambd, 0 between (the comparisons in float)."""
    xf = x.astype(np.float64, copy=False)
    res = np.where(xf < -lambd, xf + bias, np.where(xf > lambd, xf - bias, 0.0))
    return res.astype(x.dtype)


def hard_swish(x: np.ndarray) -> np.ndarray:
    """x * max(0, min(1, x / 6 + 1 / 2))."""
    y = _native("HardSwish", x)
    if y is not None:
        return y
    return (x * np.clip(x * _c(1 / 6, x) + _c(0.5, x), 0, 1)).astype(x.dtype, copy=False)


def mish(x: np.ndarray) -> np.ndarray:
    """x * tanh(softplus(x))."""
    return (x * np.tanh(softplus(x))).astype(x.dtype, copy=False)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    pos = 1.0 / (1.0 + e)
    return np.where(x >= 0, pos, e * pos)


def swish(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """x * sigmoid(alpha * x)."""
    y = _native("Swish", x, (alpha,))
    if y is not None:
        return y
    return (x * _sigmoid(x * _c(alpha, x))).astype(x.dtype, copy=False)


def swiglu(a: np.ndarray, b: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """swish(a, alpha) * b (a and b of one shape)."""
    return (swish(a, alpha) * b).astype(a.dtype, copy=False)


def build_hardmax(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """1 at the first maximum along ``axis``, 0 elsewhere, written into the output buffer."""
    axis = int(attrs.get("axis", -1))

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        y = np.empty(x.shape, x.dtype) if outputs is None else outputs[0]
        y.fill(0)
        if x.size:
            idx = np.expand_dims(np.argmax(x, axis=axis), axis)
            np.put_along_axis(y, idx, 1, axis=axis)
        return (y,)

    return run
