"""Reduction kernels (opset-18 form: the axes come as an optional input).

``reduce_axes`` turns the axes input and the attributes into the axes to reduce; shape
inference (``aioge.ops.reduce``) uses the same function.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aioge.kernels.contract import RunFn

__all__ = ["REDUCERS", "build_reduce", "reduce_axes"]


def reduce_axes(rank: int, axes: Sequence[int] | None, noop_with_empty_axes: bool) -> tuple[int, ...] | None:
    """The axes to reduce, non-negative and sorted; None means none at all (a no-op).

    Raises:
        ValueError: an axis out of range or repeated.
    """
    if axes is None or len(axes) == 0:
        return None if noop_with_empty_axes else tuple(range(rank))
    out = []
    for a in axes:
        if not -rank <= a < max(rank, 1):
            raise ValueError(f"axis {a} is out of range for rank {rank}")
        out.append(a % rank if rank else 0)
    if len(set(out)) != len(out):
        raise ValueError(f"axes {list(axes)} repeat an axis")
    return tuple(sorted(out))


def _identity_fill(dtype: np.dtype, reducer: str) -> Any:
    """What a reduction over zero elements gives (ONNX: the reduction's identity)."""
    if dtype.kind == "b" and reducer in ("max", "min"):
        return reducer == "min"  # max is any() (False over nothing), min is all() (True)
    if reducer == "max":
        return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min
    if reducer == "min":
        return np.inf if dtype.kind == "f" else np.iinfo(dtype).max
    if reducer == "prod":
        return 1
    if reducer == "mean" and dtype.kind == "f":
        return np.nan  # 0 / 0
    return 0


# name -> numpy reduction taking (x, axis=, keepdims=, out=)
REDUCERS: Mapping[str, Callable[..., Any]] = {
    "sum": np.sum,
    "mean": np.mean,
    "max": np.max,
    "min": np.min,
    "prod": np.prod,
}


def build_reduce(reducer: str) -> Any:
    """A reduction kernel for one of ``REDUCERS``; writes into the output with ``out=``."""
    fn = REDUCERS[reducer]

    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
        keepdims = bool(attrs.get("keepdims", 1))
        noop = bool(attrs.get("noop_with_empty_axes", 0))

        def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            x = inputs[0]
            given = inputs[1] if len(inputs) > 1 else None
            axes = reduce_axes(x.ndim, None if given is None else [int(a) for a in np.asarray(given).reshape(-1)], noop)
            if axes is None:
                if outputs is None:
                    return (x.copy(),)
                np.copyto(outputs[0], x)
                return outputs
            out = None if outputs is None else outputs[0]
            if x.size == 0 or any(x.shape[a] == 0 for a in axes):
                shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keepdims or i not in axes)
                y = np.empty(shape, x.dtype) if out is None else out
                y.fill(_identity_fill(x.dtype, reducer))
                return (y,)
            if out is None:
                y = fn(x, axis=axes, keepdims=keepdims)
                return (np.asarray(y).astype(x.dtype, copy=False),)
            fn(x, axis=axes, keepdims=keepdims, out=out)
            return (out,)

        return run

    return build
