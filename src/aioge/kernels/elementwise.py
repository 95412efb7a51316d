"""Elementwise kernels: arithmetic, activations and the math functions numpy lacks (erf)."""

from __future__ import annotations

import math

import numpy as np

from aioge.kernels.native_rows import unary as _native

__all__ = ["SIGMOID_EXP_BOUND", "clip", "div", "erf", "gelu", "hard_sigmoid", "leaky_relu", "pow_", "relu", "sigmoid", "tanh"]

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def tanh(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Contiguous float32 by the C tanh (within 2 ulp), as a FusedElementwise Tanh and a Gemm's
    Tanh epilogue compute it, so fusing one changes no bit; numpy's otherwise."""
    y = _native("Tanh", x) if out is None else None
    return y if y is not None else np.tanh(x, out=out)


def erf(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The error function, to float64 accuracy: a Maclaurin series below |x| = 3, the
    asymptotic series of erfc above (where erf is 1 to within 2.2e-5). Contiguous float32 runs
    in C (``native_rows``), within 5e-7."""
    y = _native("Erf", x) if out is None else None
    if y is not None:
        return y
    x64 = np.asarray(x, dtype=np.float64)
    a = np.abs(x64)
    small = np.minimum(a, 3.0)
    x2 = small * small
    term = small.copy()
    total = small.copy()
    for n in range(1, 60):
        term *= -x2 / n
        total += term / (2 * n + 1)
    series = total * _TWO_OVER_SQRT_PI
    big = np.maximum(a, 3.0)
    inv2 = 1.0 / (2.0 * big * big)
    tail = 1.0 + inv2 * (-1.0 + inv2 * (3.0 + inv2 * (-15.0 + 105.0 * inv2)))  # Horner: no slow powers
    erfc_big = np.exp(-big * big) / (big * math.sqrt(math.pi)) * tail
    res = np.where(a < 3.0, series, 1.0 - erfc_big) * np.sign(x64)
    if out is None:
        return res.astype(np.asarray(x).dtype, copy=False)
    np.copyto(out, res, casting="unsafe")
    return out


def relu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    return np.maximum(x, np.zeros((), x.dtype), out=out)


def leaky_relu(x: np.ndarray, alpha: float, out: np.ndarray | None = None) -> np.ndarray:
    return np.where(x >= 0, x, x * np.asarray(alpha, x.dtype)).astype(x.dtype, copy=False)


# The largest argument whose exp is finite, per float type: sigmoid's 1 / (1 + exp(-x)) with
# -x capped there never overflows, and its smallest result (6e-39 in float32) is 0 to within
# float32's normal range.
SIGMOID_EXP_BOUND: dict[type, float] = {np.float32: 88.0, np.float64: 709.0}


def sigmoid(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    y = _native("Sigmoid", x)  # contiguous float32: one C pass
    if y is not None:
        return y
    bound = SIGMOID_EXP_BOUND.get(x.dtype.type)
    if bound is not None:  # five passes where the sign split below takes nine (SiLU: EfficientNet)
        e = np.minimum(np.negative(x), bound, out=np.empty(np.shape(x), x.dtype))
        np.exp(e, out=e)
        np.add(e, 1.0, out=e)
        return np.divide(1.0, e, out=e).astype(x.dtype, copy=False)
    # Split by sign so exp never overflows: sigmoid(x) = e^x / (1 + e^x) for x < 0.
    e = np.exp(-np.abs(x))
    pos = 1.0 / (1.0 + e)
    return np.where(x >= 0, pos, e * pos).astype(x.dtype, copy=False)


def hard_sigmoid(x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    y = _native("HardSigmoid", x, (alpha, beta))
    if y is not None:
        return y
    return np.clip(x * np.asarray(alpha, x.dtype) + np.asarray(beta, x.dtype), 0, 1).astype(x.dtype, copy=False)


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    y = _native("Gelu", x, (1 if approximate == "tanh" else 0,))
    if y is not None:
        return y
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))  # x**3 is a slow powf loop in numpy
        return (0.5 * x * (1.0 + np.tanh(inner))).astype(x.dtype, copy=False)
    return (0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))).astype(x.dtype, copy=False)


def clip(x: np.ndarray, lo: np.ndarray | None = None, hi: np.ndarray | None = None) -> np.ndarray:
    out = x
    if lo is not None and lo.size:
        out = np.maximum(out, lo.astype(x.dtype))
    if hi is not None and hi.size:
        out = np.minimum(out, hi.astype(x.dtype))
    return np.array(out, dtype=x.dtype) if out is x else np.asarray(out, dtype=x.dtype)


def div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ONNX Div: true division for floats, truncation toward zero for integers."""
    if a.dtype.kind in "iu":
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.trunc(np.divide(a, b, dtype=np.float64))
        return q.astype(a.dtype)
    return np.divide(a, b)


def pow_(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ONNX Pow: the result has the base's dtype, whatever the exponent's.

    A float base with a one-element exponent of 2, 3 or 0.5 (GELU's ``Pow(x, 3)`` in BERT and
    GPT-2 exports, variances, norms) is computed as products or a square root: numpy's
    ``power`` is a powf loop, about 10x slower than a multiply."""
    if a.dtype.kind in "iu":
        return np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)
    y = pow_by_constant(a, b)
    return y if y is not None else np.power(a, b.astype(a.dtype)).astype(a.dtype, copy=False)


def pow_by_constant(x: np.ndarray, e: np.ndarray, out: np.ndarray | None = None) -> np.ndarray | None:
    """``x ** e`` for a one-element exponent of 2, 3 or 0.5 (into ``out``, which may be ``x``
    itself); None for any other exponent, left to ``np.power``."""
    if e.size != 1 or e.ndim > x.ndim:
        return None
    v = float(e.reshape(-1)[0])
    if v == 2.0:
        return np.multiply(x, x, out=out)
    if v == 3.0:  # x*x into a temporary when the result takes x's own memory
        sq = np.multiply(x, x) if out is None or np.shares_memory(out, x) else np.multiply(x, x, out=out)
        return np.multiply(sq, x, out=sq if out is None else out)
    if v == 0.5:
        return np.sqrt(x, out=out)
    return None
