"""Normalisation kernels: instance, group, mean-variance, Lp and RMS normalisation.

Statistics are computed in float32 at least (float16 inputs would lose the variance), or in
float64 for float64 inputs, and the result is cast back to the input's dtype; with
``stash_type`` other than 1 the input's own precision is used, as ONNX specifies.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = [
    "group_normalization",
    "instance_normalization",
    "lp_normalization",
    "mean_variance_normalization",
    "rms_normalization",
]

# MeanVarianceNormalization's function body adds this to the standard deviation.
_MVN_EPSILON = 1e-9


def _work(x: np.ndarray, stash_type: int = 1) -> np.ndarray:
    if stash_type != 1:
        return x
    return x.astype(np.promote_types(x.dtype, np.float32), copy=False)


def _per_channel(v: np.ndarray, rank: int) -> np.ndarray:
    return v.reshape((-1,) + (1,) * (rank - 2))


def instance_normalization(x: np.ndarray, scale: np.ndarray, b: np.ndarray, epsilon: float = 1e-5) -> np.ndarray:
    """scale * (x - mean) / sqrt(var + epsilon) + B, statistics per sample and channel."""
    xw = _work(x)
    axes = tuple(range(2, x.ndim))
    mean = xw.mean(axis=axes, keepdims=True)
    var = xw.var(axis=axes, keepdims=True)
    y = (xw - mean) / np.sqrt(var + epsilon)
    return (y * _per_channel(scale, x.ndim) + _per_channel(b, x.ndim)).astype(x.dtype)


def group_normalization(
    x: np.ndarray, scale: np.ndarray, bias: np.ndarray, num_groups: int, epsilon: float = 1e-5, stash_type: int = 1
) -> np.ndarray:
    """Normalise each group of C / num_groups channels per sample, then a per-channel affine.

    Raises:
        ValueError: the channels do not divide into num_groups.
    """
    n, c = x.shape[:2]
    if c % num_groups:
        raise ValueError(f"{c} channels do not divide into {num_groups} groups")
    xw = _work(x, stash_type)
    g = xw.reshape(n, num_groups, -1)
    mean = g.mean(axis=2, keepdims=True)
    var = g.var(axis=2, keepdims=True)
    y = ((g - mean) / np.sqrt(var + epsilon)).reshape(x.shape)
    return (y * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)).astype(x.dtype)


def mean_variance_normalization(x: np.ndarray, axes: Sequence[int] = (0, 2, 3)) -> np.ndarray:
    """(x - mean) / (std + 1e-9) over ``axes``."""
    xw = _work(x)
    ax = tuple(a % x.ndim for a in axes)
    mean = xw.mean(axis=ax, keepdims=True)
    std = np.sqrt(np.maximum((xw * xw).mean(axis=ax, keepdims=True) - mean * mean, 0))
    return ((xw - mean) / (std + _MVN_EPSILON)).astype(x.dtype)


def lp_normalization(x: np.ndarray, axis: int = -1, p: int = 2) -> np.ndarray:
    """x divided by its L1 or L2 norm along ``axis``; a zero norm gives 0, not NaN."""
    xw = _work(x)
    if p == 1:
        norm = np.abs(xw).sum(axis=axis, keepdims=True)
    else:
        norm = np.sqrt((xw * xw).sum(axis=axis, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(norm == 0, 0, xw / norm)
    return y.astype(x.dtype)


def rms_normalization(x: np.ndarray, scale: np.ndarray, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1) -> np.ndarray:
    """x / sqrt(mean(x * x) + epsilon) * scale, the mean over the axes from ``axis`` on."""
    xw = _work(x, stash_type)
    axes = tuple(range(axis % x.ndim, x.ndim))
    rms = np.sqrt((xw * xw).mean(axis=axes, keepdims=True) + epsilon)
    return (xw / rms * scale).astype(x.dtype)
