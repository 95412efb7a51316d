"""Tensor-algebra kernels: Einsum, determinants, cumulative sums/products, Range, Size and
EyeLike.

``einsum_shape`` and ``range_length`` are shared with shape inference
(``aioge.ops.algebra``) so that a kernel always produces the shape inference promised.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from aioge.ir.desc import Dim, numpy_dtype
from aioge.kernels import native
from aioge.kernels.contract import RunFn, is_constant

__all__ = [
    "build_cumulative",
    "build_einsum",
    "det",
    "einsum_shape",
    "eye_like",
    "parse_einsum",
    "range_",
    "range_length",
    "size",
]

_ELLIPSIS = "."  # '...' is rewritten to this one character while parsing


def parse_einsum(equation: str, ranks: Sequence[int | None]) -> tuple[list[str], str]:
    """Split an einsum equation into per-input label strings and the output labels.

    '...' becomes a single '.' in each term; an implicit output (no '->') is the ellipsis
    (if any input has one) followed by the labels seen exactly once, in alphabetical order.

    Raises:
        ValueError: the equation names a different number of inputs, a term has more labels
            than its input has dimensions, or an output label appears in no input.
    """
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = [t.replace("...", _ELLIPSIS) for t in lhs.split(",")]
    if len(terms) != len(ranks):
        raise ValueError(f"equation {equation!r} names {len(terms)} inputs, {len(ranks)} given")
    for term, rank in zip(terms, ranks):
        labels = term.replace(_ELLIPSIS, "")
        if not all(c.isalpha() for c in labels) or term.count(_ELLIPSIS) > 1:
            raise ValueError(f"bad einsum term {term!r} in {equation!r}")
        if rank is not None and (len(labels) > rank or (_ELLIPSIS not in term and len(labels) != rank)):
            raise ValueError(f"einsum term {term!r} does not match an input of rank {rank}")
    if arrow:
        out = rhs.replace("...", _ELLIPSIS)
    else:
        seen = "".join(terms).replace(_ELLIPSIS, "")
        once = sorted(c for c in set(seen) if seen.count(c) == 1)
        out = (_ELLIPSIS if any(_ELLIPSIS in t for t in terms) else "") + "".join(once)
    known = set("".join(terms))
    missing = [c for c in out if c not in known]
    if missing:
        raise ValueError(f"output labels {missing} of {equation!r} appear in no input")
    return terms, out


def einsum_shape(equation: str, shapes: Sequence[Sequence[Dim]]) -> tuple[Dim, ...]:
    """The output shape of an einsum over inputs of these shapes.

    Raises:
        ValueError: the equation does not fit the inputs, or one label has two sizes.
    """
    terms, out = parse_einsum(equation, [len(s) for s in shapes])
    sizes: dict[str, Dim] = {}
    ellipses: list[tuple[Dim, ...]] = []
    for term, shape in zip(terms, shapes):
        n_ell = len(shape) - len(term.replace(_ELLIPSIS, ""))
        dims = list(shape)
        for c in term:
            if c == _ELLIPSIS:
                ellipses.append(tuple(dims[:n_ell]))
                dims = dims[n_ell:]
                continue
            d = dims.pop(0)
            have = sizes.get(c)
            if have is None or have == 1:
                sizes[c] = d
            elif d != 1 and d != have and isinstance(d, int) and isinstance(have, int):
                raise ValueError(f"label {c!r} of {equation!r} has sizes {have} and {d}")
    ell: tuple[Dim, ...] = ()
    if ellipses:
        ell = tuple(np.broadcast_shapes(*[tuple(1 if isinstance(d, str) else d for d in e) for e in ellipses]))
    out_shape: list[Dim] = []
    for c in out:
        if c == _ELLIPSIS:
            out_shape.extend(ell)
        else:
            out_shape.append(sizes[c])
    return tuple(out_shape)


def build_einsum(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """np.einsum with a contraction order chosen once, on the first call's shapes."""
    equation = str(attrs["equation"]).replace(" ", "")
    path: list[Any] = []

    def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        xs = [x for x in inputs if x is not None]
        if not path:
            # Shapes are fixed per compiled model, so the optimal path is searched once.
            path.extend(np.einsum_path(equation, *xs, optimize="optimal")[0])
        res = np.einsum(equation, *xs, optimize=path if len(xs) > 1 else False)
        res = np.asarray(res, dtype=xs[0].dtype)
        if outputs is None:
            # A one-operand einsum (a transpose, a diagonal) may be a view of its input.
            return (res.copy() if any(np.may_share_memory(res, x) for x in xs) else res,)
        np.copyto(outputs[0], res)
        return outputs

    return run


def det(x: np.ndarray) -> np.ndarray:
    """Determinants of the square matrices in the last two dimensions."""
    return np.asarray(np.linalg.det(x), dtype=x.dtype)


def build_cumulative(kind: str) -> Any:
    """CumSum or CumProd along an axis given as an input, with ``exclusive`` and ``reverse``."""
    fn = np.cumsum if kind == "sum" else np.cumprod
    identity = 0 if kind == "sum" else 1

    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
        exclusive = bool(attrs.get("exclusive", 0))
        reverse = bool(attrs.get("reverse", 0))

        def run(inputs: Sequence[Any], outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            x, axis_t = inputs[0], inputs[1]
            axis = int(np.asarray(axis_t).reshape(-1)[0])
            if not -x.ndim <= axis < x.ndim:
                raise ValueError(f"axis {axis} is out of range for rank {x.ndim}")
            axis %= x.ndim
            y = np.empty(x.shape, x.dtype) if outputs is None else outputs[0]
            src = np.flip(x, axis) if reverse else x
            dst = np.flip(y, axis) if reverse else y  # a view: writing it fills y reversed
            if exclusive:
                head = [slice(None)] * x.ndim
                head[axis] = slice(0, 1)
                rest = list(head)
                rest[axis] = slice(1, None)
                body = list(head)
                body[axis] = slice(0, -1)
                dst[tuple(head)] = identity
                if x.shape[axis] > 1:
                    fn(src[tuple(body)], axis=axis, dtype=x.dtype, out=dst[tuple(rest)])
            else:
                fn(src, axis=axis, dtype=x.dtype, out=dst)
            return (y,)

        def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
            # RoBERTa's position ids (a cumsum of the mask); a constant axis, which a program binds for good
            x, ax = inputs
            ok = native.available() and isinstance(ax, np.ndarray) and ax.size == 1 and is_constant(ax)
            call = ok and native.cumulative(x, outputs[0], int(ax.reshape(-1)[0]), exclusive, reverse, kind == "prod")
            return [call] if call else None

        return native.with_native(run, form)

    return build


def range_length(start: float, limit: float, delta: float) -> int:
    """ONNX Range's element count: max(ceil((limit - start) / delta), 0).

    Raises:
        ValueError: delta is zero.
    """
    if delta == 0:
        raise ValueError("Range delta must not be 0")
    return max(int(math.ceil((limit - start) / delta)), 0)


def range_(start: np.ndarray, limit: np.ndarray, delta: np.ndarray, stash_type: int = 1) -> np.ndarray:
    """start + i * delta for i in [0, count), in start's dtype (float16 accumulated in float32)."""
    dtype = np.asarray(start).dtype
    s, lim, d = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    if dtype.kind in "iu":
        n = range_length(int(s), int(lim), int(d))
        return (int(s) + np.arange(n, dtype=np.int64) * int(d)).astype(dtype)
    n = range_length(float(s), float(lim), float(d))
    work = np.float32 if dtype == np.float16 and stash_type == 1 else dtype
    return (np.asarray(s, work) + np.arange(n, dtype=work) * np.asarray(d, work)).astype(dtype)


def size(x: np.ndarray) -> np.ndarray:
    """The number of elements, as an int64 scalar."""
    return np.asarray(x.size, dtype=np.int64)


def eye_like(x: np.ndarray, dtype: str | None = None, k: int = 0) -> np.ndarray:
    """Ones on the k-th diagonal of a 2-D tensor shaped like x, in ``dtype`` or x's dtype."""
    want = numpy_dtype(dtype) if dtype is not None else x.dtype
    return np.eye(x.shape[0], x.shape[1], k=k, dtype=want)
