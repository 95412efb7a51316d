"""Neural-network kernels: softmax, matrix products and normalisation.

Each ``build_*`` binds attributes once and returns a run function that writes into the
preallocated output when it is given (``out=`` all the way for softmax, MatMul and Gemm)
and allocates a fresh one otherwise.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from aioge.kernels.contract import RunFn
from aioge.kernels.parallel import matmul_2d, par_matmul, split_matmul

__all__ = [
    "build_batch_norm",
    "build_dropout",
    "build_gemm",
    "gemm_epilogue",
    "build_layer_norm",
    "build_log_softmax",
    "build_lrn",
    "build_matmul",
    "build_softmax",
]

Inputs = Sequence[Any]  # arrays; None where an optional input is absent


def _out(outputs: Sequence[np.ndarray] | None, i: int, shape: Sequence[int], dtype: Any) -> np.ndarray:
    return np.empty(tuple(shape), dtype) if outputs is None else outputs[i]


def build_softmax(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """exp(x - max) / sum, along one axis (opset 13), computed in the output buffer."""
    axis = int(attrs.get("axis", -1))

    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        y = _out(outputs, 0, x.shape, x.dtype)
        if x.size == 0:
            return (y,)
        np.subtract(x, x.max(axis=axis, keepdims=True), out=y)
        np.exp(y, out=y)
        y /= y.sum(axis=axis, keepdims=True)
        return (y,)

    return run


def build_log_softmax(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """x - max - log(sum(exp(x - max))), along one axis (opset 13)."""
    axis = int(attrs.get("axis", -1))

    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        y = _out(outputs, 0, x.shape, x.dtype)
        if x.size == 0:
            return (y,)
        np.subtract(x, x.max(axis=axis, keepdims=True), out=y)
        y -= np.log(np.exp(y).sum(axis=axis, keepdims=True))
        return (y,)

    return run


def build_matmul(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """numpy matmul (batched, 1-D operands promoted and squeezed) straight into the output."""

    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        a, b = inputs[0], inputs[1]
        if a.ndim > 2 and b.ndim == 2 and a.flags.c_contiguous:
            # (..., m, k) @ (k, n) is one (prod(...) * m, k) @ (k, n) GEMM, not a loop of small ones
            y = _out(outputs, 0, (*a.shape[:-1], b.shape[1]), np.result_type(a, b))
            if y.flags.c_contiguous:
                matmul_2d(a.reshape(-1, a.shape[-1]), b, y.reshape(-1, b.shape[1]))
            else:
                np.copyto(y, np.matmul(a.reshape(-1, a.shape[-1]), b).reshape(y.shape))
            return (y,)
        if outputs is None:
            return (np.asarray(np.matmul(a, b)),)
        if outputs[0].ndim == 0:  # vector . vector: numpy cannot write a 0-d out=
            outputs[0][()] = np.matmul(a, b)
        elif a.ndim == b.ndim == outputs[0].ndim == 2:
            matmul_2d(a, b, outputs[0])
        elif a.ndim >= 2 and b.ndim >= 2:
            par_matmul(a, b, outputs[0])
        else:
            np.matmul(a, b, out=outputs[0])
        return outputs

    return run


def build_gemm(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """alpha * A' @ B' + beta * C, with the product written into the output first."""
    alpha = float(attrs.get("alpha", 1.0))
    beta = float(attrs.get("beta", 1.0))
    trans_a = bool(attrs.get("transA", 0))
    trans_b = bool(attrs.get("transB", 0))

    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        a, b = inputs[0], inputs[1]
        c = inputs[2] if len(inputs) > 2 else None
        a = a.T if trans_a else a
        b = b.T if trans_b else b
        y = _out(outputs, 0, (a.shape[0], b.shape[1]), a.dtype)
        split_matmul(a, b, y)
        gemm_epilogue(y, c, alpha, beta)
        return (y,)

    return run


def gemm_epilogue(y: np.ndarray, c: np.ndarray | None, alpha: float, beta: float) -> None:
    """Gemm's ``alpha * AB + beta * C`` applied in place on ``y = AB``; every Gemm kernel shares it."""
    if alpha != 1.0:
        y *= alpha
    if c is not None and beta != 0.0:
        if beta == 1.0:
            y += c
        else:
            y += beta * c


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    return (-1, *([1] * (x.ndim - 2)))


def build_batch_norm(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """Inference BatchNormalization folded to one scale and shift per channel."""
    eps = float(attrs.get("epsilon", 1e-5))

    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, scale, bias, mean, var = inputs[:5]
        a = (scale / np.sqrt(var + np.asarray(eps, var.dtype))).astype(x.dtype, copy=False)
        shift = (bias - mean * a).astype(x.dtype, copy=False)
        y = _out(outputs, 0, x.shape, x.dtype)
        np.multiply(x, a.reshape(_channel_shape(x)), out=y)
        y += shift.reshape(_channel_shape(x))
        return (y,)

    return run


def build_layer_norm(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """LayerNormalization over axes [axis, rank), statistics in float32 (stash_type 1) or
    the input dtype; outputs Y and, when the node has them, Mean and InvStdDev."""
    axis = int(attrs.get("axis", -1))
    eps = float(attrs.get("epsilon", 1e-5))
    stash_f32 = int(attrs.get("stash_type", 1)) == 1
    n_out = max(1, len(outs))

    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, scale = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        first = axis % x.ndim
        axes = tuple(range(first, x.ndim))
        # stash_type 1: statistics in (at least) float32, so float16 inputs stay accurate
        work = x.astype(np.promote_types(x.dtype, np.float32) if stash_f32 else x.dtype, copy=False)
        mean = work.mean(axis=axes, keepdims=True)
        y = _out(outputs, 0, x.shape, x.dtype)
        # centre in the output buffer when it has the working precision: one temporary fewer
        centred = y if y.dtype == work.dtype else np.empty(work.shape, work.dtype)
        np.subtract(work, mean, out=centred)
        sq = np.square(centred)
        var = sq.mean(axis=axes, keepdims=True)
        inv = 1.0 / np.sqrt(var + np.asarray(eps, var.dtype))
        centred *= inv
        centred *= scale
        if bias is not None:
            centred += bias
        if centred is not y:
            np.copyto(y, centred, casting="unsafe")
        stats_dtype = np.float32 if stash_f32 else x.dtype
        results = [y]
        for i, stat in enumerate((mean, inv)[: n_out - 1], start=1):
            o = _out(outputs, i, stat.shape, stats_dtype)
            np.copyto(o, stat, casting="unsafe")
            results.append(o)
        return results

    return run


def build_lrn(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """Local response normalisation across channels: a sum of ``size`` shifted squares."""
    alpha = float(attrs.get("alpha", 1e-4))
    beta = float(attrs.get("beta", 0.75))
    bias = float(attrs.get("bias", 1.0))
    size = int(attrs["size"])
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2

    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        c = x.shape[1]
        sq = np.square(x)
        width = [(0, 0)] * x.ndim
        width[1] = (lo, hi)
        padded = np.pad(sq, width)
        total = np.zeros_like(sq)
        for shift in range(size):
            total += padded[:, shift : shift + c]
        total *= alpha / size
        total += bias
        np.power(total, beta, out=total)
        y = _out(outputs, 0, x.shape, x.dtype)
        np.divide(x, total, out=y)
        return (y,)

    return run


def build_dropout(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """Dropout: in inference a copy of the input (and an all-True mask when the node has one).

    With ``training_mode`` true, each element is kept where a uniform draw in [0, 1) is at
    least ``ratio`` and scaled by 1 / (1 - ratio); the draws come from numpy's
    ``RandomState(seed)``, as onnx.reference draws them, so a seeded node gives the same
    mask every run and an unseeded one a fresh mask each run.
    """
    n_out = max(1, len(outs))
    seed = attrs.get("seed")

    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        ratio = float(np.asarray(inputs[1])) if len(inputs) > 1 and inputs[1] is not None else 0.5
        training = len(inputs) > 2 and inputs[2] is not None and bool(np.asarray(inputs[2]))
        y = _out(outputs, 0, x.shape, x.dtype)
        keep = None
        if training and ratio != 0:
            keep = np.random.RandomState(seed).uniform(0, 1.0, x.shape) >= ratio
            np.multiply(x, keep * (1.0 / (1.0 - ratio)), out=y, casting="unsafe")
        else:
            np.copyto(y, x)
        results = [y]
        if n_out > 1:
            mask = _out(outputs, 1, x.shape, np.bool_)
            if keep is None:
                mask.fill(True)
            else:
                np.copyto(mask, keep)
            results.append(mask)
        return results

    return run
