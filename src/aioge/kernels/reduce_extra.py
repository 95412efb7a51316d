"""More reductions: product, minimum, L1 and L2 norms, sum of squares, log-sum and
log-sum-exp.

Each is one numpy reduction over a transformed input (|x|, x * x, ...) and a finish
(sqrt, log). A reduction over no axes at all (empty axes with noop_with_empty_axes) is the
transform alone, as in onnxruntime and the ONNX reference: |x| for L1, x * x for
SumSquare, x for Prod, Min and LogSumExp. Axes come as the optional second input
(opset 18 form); ``aioge.kernels.reduce.reduce_axes`` resolves them, as inference does.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from aioge.kernels.contract import RunFn
from aioge.kernels.reduce import reduce_axes

__all__ = ["KINDS", "build_reduction"]

# The reductions this module computes, by ONNX op name suffix.
KINDS = ("prod", "min", "l1", "l2", "sum_square", "log_sum", "log_sum_exp")


def _reduce(kind: str, x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    if kind == "prod":
        return np.prod(x, axis=axes, keepdims=keepdims, dtype=x.dtype)
    if kind == "min":
        if x.size == 0 and axes:
            # The minimum over nothing is the identity of min: the type's largest value.
            top = np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).max
            return np.full(_reduced_shape(x.shape, axes, keepdims), top, x.dtype)
        return np.min(x, axis=axes, keepdims=keepdims)
    if kind == "l1":
        return np.sum(np.abs(x), axis=axes, keepdims=keepdims)
    if kind == "l2":
        return np.sqrt(np.sum(np.square(x), axis=axes, keepdims=keepdims))
    if kind == "sum_square":
        return np.sum(np.square(x), axis=axes, keepdims=keepdims)
    if kind == "log_sum":
        with np.errstate(divide="ignore"):
            return np.log(np.sum(x, axis=axes, keepdims=keepdims))
    # log-sum-exp, shifted by the maximum so exp never overflows.
    if x.size == 0:
        with np.errstate(divide="ignore"):  # log(0) = -inf, the log-sum-exp of nothing
            return np.log(np.sum(np.exp(x), axis=axes, keepdims=keepdims))
    m = np.max(x, axis=axes, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    s = np.sum(np.exp(x - m), axis=axes, keepdims=True)
    with np.errstate(divide="ignore"):
        res = np.log(s) + m
    return res if keepdims else np.squeeze(res, axis=axes)


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes)


def build_reduction(kind: str) -> Any:
    """A reduction kernel for one of ``KINDS``, honouring keepdims and noop_with_empty_axes."""
    if kind not in KINDS:
        raise ValueError(f"unknown reduction {kind!r}; known: {KINDS}")

    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
        keepdims = bool(attrs.get("keepdims", 1))
        noop = bool(attrs.get("noop_with_empty_axes", 0))

        def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            x = inputs[0]
            given = inputs[1] if len(inputs) > 1 else None
            axes = reduce_axes(x.ndim, None if given is None else [int(a) for a in np.asarray(given).reshape(-1)], noop)
            res = _reduce(kind, x, () if axes is None else axes, keepdims)
            if outputs is None:
                return (np.array(res, dtype=x.dtype, copy=True),)
            np.copyto(outputs[0], res, casting="unsafe")
            return outputs

        return run

    return build
