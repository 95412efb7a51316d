"""Math kernels: variadic Min/Max/Mean, Mod, bit shifts and the predicates numpy spells
differently from ONNX (IsInf with its sign switches).

Each ``build_*`` binds attributes once and returns a run function that writes into the
preallocated output when one is given (``out=`` straight into the arena) and allocates a
fresh array otherwise.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from aioge.kernels.contract import RunFn

__all__ = ["bit_shift", "build_mean", "build_variadic", "is_inf", "mod"]

Inputs = Sequence[Any]  # arrays; None where an optional input is absent


def _present(inputs: Inputs) -> list[np.ndarray]:
    return [x for x in inputs if x is not None]


def _target(outputs: Sequence[np.ndarray] | None, xs: Sequence[np.ndarray], dtype: Any) -> np.ndarray:
    if outputs is not None:
        return outputs[0]
    return np.empty(np.broadcast_shapes(*(x.shape for x in xs)), dtype)


def build_variadic(ufunc: Callable[..., Any]) -> Callable[..., RunFn]:
    """A kernel folding a binary ufunc over any number of broadcast inputs (Min, Max)."""

    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
        def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            xs = _present(inputs)
            y = _target(outputs, xs, xs[0].dtype)
            if len(xs) == 1:
                np.copyto(y, xs[0])
                return (y,)
            # The output is the broadcast of every input, so each step may broadcast into it.
            ufunc(xs[0], xs[1], out=y)
            for x in xs[2:]:
                ufunc(y, x, out=y)
            return (y,)

        return run

    return build


def build_mean(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """The elementwise mean of any number of broadcast inputs, summed in the output buffer."""

    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        xs = _present(inputs)
        y = _target(outputs, xs, xs[0].dtype)
        if len(xs) == 1:
            np.copyto(y, xs[0])
            return (y,)
        np.add(xs[0], xs[1], out=y)
        for x in xs[2:]:
            np.add(y, x, out=y)
        np.divide(y, np.asarray(len(xs), y.dtype), out=y)
        return (y,)

    return run


def mod(a: np.ndarray, b: np.ndarray, fmod: int = 0) -> np.ndarray:
    """ONNX Mod: the sign of the divisor (Python ``%``) by default, of the dividend with fmod=1.

    A zero integer divisor gives 0 rather than an error, as numpy (and onnxruntime) do.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        if fmod:
            return np.fmod(a, b)
        return np.mod(a, b)


def bit_shift(x: np.ndarray, y: np.ndarray, direction: str) -> np.ndarray:
    """ONNX BitShift: logical shifts of unsigned integers, arithmetic right shifts of signed ones.

    A shift that is negative or at least the bit width gives what sign extension alone
    gives: -1 for a right shift of a negative value, 0 otherwise.
    """
    width = x.dtype.itemsize * 8
    valid = (y >= 0) & (y < width)
    shift = np.where(valid, y, 0).astype(x.dtype, copy=False)
    fn = np.left_shift if direction == "LEFT" else np.right_shift
    res = fn(x, shift)
    # numpy, like C, leaves over-wide shifts undefined; ONNX defines them.
    if direction == "RIGHT" and x.dtype.kind == "i":
        fill = np.where(x < 0, np.asarray(-1, x.dtype), np.zeros((), x.dtype))
    else:
        fill = np.zeros((), x.dtype)
    return np.where(valid, res, fill).astype(x.dtype, copy=False)


def is_inf(x: np.ndarray, detect_negative: int = 1, detect_positive: int = 1) -> np.ndarray:
    """ONNX IsInf: which infinities count is chosen by the two switches."""
    if detect_negative and detect_positive:
        return np.isinf(x)
    if detect_negative:
        return np.isneginf(x)
    if detect_positive:
        return np.isposinf(x)
    return np.zeros(x.shape, bool)
