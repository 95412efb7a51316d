"""Shape kernels: reshapes, transposes, slicing, splitting, gathering and broadcasting.

The functions that turn ONNX's shape-determining inputs (``shape``, ``axes``, ``starts``,
``split``, ...) into concrete shapes live here and are shared with shape inference
(``aioge.ops.shape``), so a kernel always produces what inference promised. They take
dimensions that may be symbols (str) and raise ValueError for inputs the spec rejects.

Every kernel returns fresh arrays when no outputs are given, never views of its inputs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Sequence

import numpy as np

from aioge.ir.desc import Dim
from aioge.kernels import native
from aioge.kernels.contract import RunFn, is_constant

__all__ = [
    "build_concat",
    "build_constant_of_shape",
    "build_expand",
    "build_gather",
    "build_reshape_like",
    "build_shape",
    "build_slice",
    "build_split",
    "build_transpose",
    "flatten_shape",
    "product",
    "reshape_shape",
    "shape_range",
    "slice_plan",
    "split_sizes",
    "squeeze_shape",
    "unsqueeze_shape",
]

Inputs = Sequence[Any]  # arrays; None where an optional input is absent
INT64_MAX = np.iinfo(np.int64).max


# -- shape arithmetic shared with inference --------------------------------------------------


def product(dims: Sequence[Dim]) -> Dim | None:
    """The product of dims: an int, a lone symbol (times ones), or None when unknowable."""
    ints = [d for d in dims if isinstance(d, int)]
    syms = [d for d in dims if not isinstance(d, int)]
    n = int(np.prod(ints, dtype=np.int64)) if ints else 1
    if not syms:
        return n
    if n == 0:
        return 0
    if len(syms) == 1 and n == 1:
        return syms[0]
    return None


def reshape_shape(in_shape: Sequence[Dim], target: Sequence[int], allowzero: bool) -> tuple[Dim, ...] | None:
    """The output shape of ONNX Reshape; None when a -1 depends on unknown symbols.

    Raises:
        ValueError: more than one -1, a value below -1, a 0 past the input rank, 0 with -1
            under allowzero, or element counts that cannot match.
    """
    out: list[Dim] = []
    infer_at: int | None = None
    for i, t in enumerate(target):
        if t == -1:
            if infer_at is not None:
                raise ValueError(f"shape {list(target)} has more than one -1")
            infer_at = i
            out.append(-1)
        elif t < -1:
            raise ValueError(f"shape {list(target)} has an invalid value {t}")
        elif t == 0 and not allowzero:
            if i >= len(in_shape):
                raise ValueError(f"shape {list(target)} copies dimension {i} (0) but the input has rank {len(in_shape)}")
            out.append(in_shape[i])
        else:
            out.append(int(t))
    if allowzero and infer_at is not None and 0 in target:
        raise ValueError(f"shape {list(target)} has both 0 and -1 with allowzero=1")
    known = [d for j, d in enumerate(out) if j != infer_at]
    in_syms = Counter(d for d in in_shape if not isinstance(d, int))
    out_syms = Counter(d for d in known if not isinstance(d, int))
    common = in_syms & out_syms
    in_left, out_left = in_syms - common, out_syms - common
    in_size = int(np.prod([d for d in in_shape if isinstance(d, int)], dtype=np.int64))
    out_size = int(np.prod([d for d in known if isinstance(d, int)], dtype=np.int64))
    if in_left or out_left:
        return None if infer_at is not None else tuple(out)
    if infer_at is not None:
        if out_size == 0:
            raise ValueError(f"cannot reshape {tuple(in_shape)} into {list(target)}: -1 is ambiguous next to a 0 dimension")
        if in_size % out_size:
            raise ValueError(f"cannot reshape {tuple(in_shape)} ({in_size} elements) into {list(target)}")
        else:
            out[infer_at] = in_size // out_size
    elif in_size != out_size:
        raise ValueError(f"cannot reshape {tuple(in_shape)} ({in_size} elements) into {list(target)} ({out_size} elements)")
    return tuple(out)


def flatten_shape(in_shape: Sequence[Dim], axis: int) -> tuple[Dim, ...] | None:
    """(prod(dims before axis), prod(dims from axis)); axis already in [0, rank]."""
    outer, inner = product(in_shape[:axis]), product(in_shape[axis:])
    return None if outer is None or inner is None else (outer, inner)


def _axes(axes: Sequence[int], rank: int) -> list[int]:
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise ValueError(f"axis {a} is out of range for rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise ValueError(f"axes {list(axes)} repeat an axis")
    return out


def squeeze_shape(in_shape: Sequence[Dim], axes: Sequence[int] | None) -> tuple[Dim, ...] | None:
    """ONNX Squeeze; without axes every size-1 dim goes (None if a symbol might be 1).

    Raises:
        ValueError: an axis out of range, repeated, or of a size other than 1.
    """
    if axes is None or len(axes) == 0:
        if any(not isinstance(d, int) for d in in_shape):
            return None
        return tuple(d for d in in_shape if d != 1)
    drop = _axes(axes, len(in_shape))
    for a in drop:
        if isinstance(in_shape[a], int) and in_shape[a] != 1:
            raise ValueError(f"cannot squeeze axis {a} of size {in_shape[a]} (shape {tuple(in_shape)})")
    return tuple(d for i, d in enumerate(in_shape) if i not in drop)


def unsqueeze_shape(in_shape: Sequence[Dim], axes: Sequence[int]) -> tuple[Dim, ...]:
    """ONNX Unsqueeze: axes index the output, whose rank is rank + len(axes).

    Raises:
        ValueError: no axes, an axis out of range, or a repeated axis.
    """
    if len(axes) == 0:
        raise ValueError("Unsqueeze needs at least one axis")
    rank = len(in_shape) + len(axes)
    new = set(_axes(axes, rank))
    rest = iter(in_shape)
    return tuple(1 if i in new else next(rest) for i in range(rank))


def split_sizes(dim: int, split: Sequence[int] | None, num_outputs: int | None, n_out: int | None) -> list[int]:
    """The sizes of ONNX Split's outputs along the split axis.

    ``split`` is the split input, ``num_outputs`` the attribute (the last chunk is smaller
    when the dim does not divide), ``n_out`` the number of outputs the node has.

    Raises:
        ValueError: sizes that are negative or do not add up to the dim, a count that does not
            match the node's outputs, or nothing to decide the split from.
    """
    if split is not None:
        if num_outputs is not None:
            raise ValueError("give either the split input or the num_outputs attribute, not both")
        if any(s < 0 for s in split):
            raise ValueError(f"split {list(split)} has a negative size")
        if sum(split) != dim:
            raise ValueError(f"split {list(split)} adds up to {sum(split)}, not the axis size {dim}")
        if n_out and len(split) != n_out:
            raise ValueError(f"split {list(split)} has {len(split)} parts but the node has {n_out} outputs")
        return list(split)
    if num_outputs is not None:
        if n_out and n_out != num_outputs:
            raise ValueError(f"num_outputs={num_outputs} but the node has {n_out} outputs")
        chunk = -(-dim // num_outputs)
        last = dim - chunk * (num_outputs - 1)
        if last < 0:
            raise ValueError(f"cannot split an axis of size {dim} into {num_outputs} outputs")
        return [chunk] * (num_outputs - 1) + [last]
    if not n_out:
        raise ValueError("Split needs the split input, the num_outputs attribute or a number of outputs")
    if dim % n_out:
        raise ValueError(f"an axis of size {dim} does not split evenly into {n_out} outputs")
    return [dim // n_out] * n_out


def slice_plan(
    shape: Sequence[Dim], starts: Sequence[int], ends: Sequence[int], axes: Sequence[int] | None, steps: Sequence[int] | None
) -> tuple[tuple[slice, ...], tuple[Dim, ...] | None]:
    """numpy slices and the output shape of ONNX Slice (out-of-range values clamped per spec);
    the shape is None when a sliced axis has a symbolic size.

    Raises:
        ValueError: lengths that differ, an axis out of range or repeated, or a zero step.
    """
    rank = len(shape)
    if len(starts) != len(ends):
        raise ValueError(f"starts {list(starts)} and ends {list(ends)} differ in length")
    axes = list(range(len(starts))) if axes is None else list(axes)
    steps = [1] * len(starts) if steps is None else list(steps)
    if len(axes) != len(starts) or len(steps) != len(starts):
        raise ValueError(f"starts, ends, axes and steps differ in length ({len(starts)}, {len(ends)}, {len(axes)}, {len(steps)})")
    index: list[slice] = [slice(None)] * rank
    out: list[Dim] = list(shape)
    known = True
    for a, start, end, step in zip(_axes(axes, rank), starts, ends, steps):
        if step == 0:
            raise ValueError("Slice steps must not be 0")
        dim = shape[a]
        if not isinstance(dim, int):
            known = False
            index[a] = slice(None)  # never used: kernels see static shapes
            continue
        start, end = _clamp(start, dim, step, True), _clamp(end, dim, step, False)
        index[a] = slice(start, end if end >= 0 else None, step)
        out[a] = max(0, -(-(end - start) // step)) if step > 0 else max(0, -(-(start - end) // -step))
    return tuple(index), (tuple(out) if known else None)


def _clamp(v: int, dim: int, step: int, is_start: bool) -> int:
    v = int(v)
    if v < 0:
        v += dim
    if step > 0:
        return min(max(v, 0), dim)
    return min(max(v, 0 if is_start else -1), dim - 1)


def shape_range(rank: int, start: int, end: int | None) -> tuple[int, int]:
    """The [start, end) dims that ONNX Shape returns, negative values from the back, clamped."""
    s, e = slice(start, end).indices(rank)[:2]
    return s, max(s, e)


# -- kernels --------------------------------------------------------------------------------


def _fill(outputs: Sequence[np.ndarray] | None, results: Sequence[np.ndarray]) -> Sequence[np.ndarray]:
    """Copy results (views of inputs) into the outputs, or into fresh arrays."""
    if outputs is None:
        return [np.array(r, copy=True, order="C") for r in results]
    for o, r in zip(outputs, results):
        np.copyto(o, r)
    return outputs


def _ints(a: Any) -> list[int] | None:
    return None if a is None else [int(v) for v in np.asarray(a).reshape(-1)]


def build_transpose(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    perm = attrs.get("perm")

    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        return _fill(outputs, [x.transpose(perm if perm is not None else tuple(reversed(range(x.ndim))))])

    def form(inputs: Inputs, outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        x = inputs[0]
        if not isinstance(x, np.ndarray):
            return None
        return _copies([x.transpose(perm if perm is not None else tuple(reversed(range(x.ndim))))], outputs)

    return native.with_native(run, form)


def _copies(views: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
    """A native form's copies of ``views`` into ``outputs``, or None if one cannot be."""
    calls = [native.strided_copy(v, o) for v, o in zip(views, outputs, strict=True)]
    return None if any(c is None for c in calls) else calls  # type: ignore[return-value]


def build_reshape_like(op: str) -> Any:
    """Reshape, Flatten, Squeeze and Unsqueeze: the data unchanged under a new shape."""

    def build(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
        allowzero = bool(attrs.get("allowzero", 0))
        axis = int(attrs.get("axis", 1))

        def target(x: np.ndarray, second: Any) -> tuple[Any, ...] | None:
            if op == "Reshape":
                return reshape_shape(x.shape, _ints(second) or [], allowzero)
            if op == "Flatten":
                return flatten_shape(x.shape, axis + x.ndim if axis < 0 else axis)
            if op == "Squeeze":
                return squeeze_shape(x.shape, _ints(second))
            return unsqueeze_shape(x.shape, _ints(second) or [])

        def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            x = inputs[0]
            shape = target(x, inputs[1] if len(inputs) > 1 else None)
            return _fill(outputs, [x.reshape(shape)])

        out = outs[0] if outs else None
        if out is None or not out.static or not ins or ins[0] is None or not ins[0].static:
            return run
        # Static shapes (the usual case): the target is the output's shape; the run is one copy
        # into the planned output (the shape input, checked at compile time, is not read again).
        static = tuple(int(d) for d in out.shape)

        def run_static(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
            if outputs is None:
                return [np.array(inputs[0].reshape(static), copy=True, order="C")]
            np.copyto(outputs[0], inputs[0].reshape(static))
            return outputs

        def form(inputs: Inputs, outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
            x, y = inputs[0], outputs[0]
            if not (isinstance(x, np.ndarray) and x.flags.c_contiguous and y.flags.c_contiguous and x.dtype == y.dtype):
                return None
            if x.dtype.hasobject or x.nbytes != y.nbytes:
                return None
            if x.size == 0 or native.ptr(x) == native.ptr(y):  # nothing to copy, or the plan put the output on its input
                return []
            return _copies([x.reshape(-1)], [y.reshape(-1)])  # one block: a strided copy of one row

        return native.with_native(run_static, form)

    return build


def build_concat(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    axis = int(attrs["axis"])

    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        if outputs is None:
            return (np.concatenate(inputs, axis=axis),)
        np.concatenate(inputs, axis=axis, out=outputs[0])
        return outputs

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        y, calls, at = outputs[0], [], 0  # each input copied into its slice of y (GPT-2's present keys)
        a = axis % max(y.ndim, 1)
        for x in inputs:
            if not isinstance(x, np.ndarray) or x.dtype != y.dtype or x.ndim != y.ndim:
                return None
            dst = y[(slice(None),) * a + (slice(at, at + x.shape[a]),)]
            same = x.size and native.ptr(x) == native.ptr(dst) and x.shape == dst.shape and x.strides == dst.strides
            call = native.elemwise(native.EW_CAST, dst, x) if x.size and not same else None  # not x written in place
            if x.size and not same and call is None:
                return None
            calls += [call] if call else []
            at += x.shape[a]
        return calls if (calls or y.size) and at == y.shape[a] else None

    return native.with_native(run, form)


def build_split(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    axis = int(attrs.get("axis", 0))
    num_outputs = attrs.get("num_outputs")
    n_out = len(outs)

    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        a = axis % x.ndim
        sizes = split_sizes(x.shape[a], _ints(inputs[1] if len(inputs) > 1 else None), num_outputs, n_out)
        bounds = np.cumsum([0, *sizes])
        head = (slice(None),) * a
        return _fill(outputs, [x[(*head, slice(int(lo), int(hi)))] for lo, hi in zip(bounds[:-1], bounds[1:])])

    if not ins or ins[0] is None or not ins[0].static or not ins[0].shape or not all(o is not None and o.static for o in outs):
        return run
    # Static shapes: the pieces' index tuples once, from the outputs' sizes along the axis (the
    # split input, checked at compile time, is not read again): the builder transformer's Q/K/V
    # split 20 -> 5 us.
    a = axis % len(ins[0].shape)
    ends = np.cumsum([int(o.shape[a]) for o in outs]).tolist()
    pieces = [(*(slice(None),) * a, slice(lo, hi)) for lo, hi in zip([0, *ends[:-1]], ends)]

    def form(inputs: Inputs, outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        x = inputs[0]
        return _copies([x[p] for p in pieces], outputs) if isinstance(x, np.ndarray) else None

    return native.with_native(lambda inputs, outputs: _fill(outputs, [inputs[0][p] for p in pieces]), form)


def build_slice(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    def view(inputs: Inputs) -> np.ndarray:
        x = inputs[0]
        extra = [_ints(inputs[i]) if len(inputs) > i else None for i in (3, 4)]
        index, _ = slice_plan(x.shape, _ints(inputs[1]) or [], _ints(inputs[2]) or [], extra[0], extra[1])
        return x[index]

    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        return _fill(outputs, [view(inputs)])

    def form(inputs: Inputs, outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        # constant starts, ends, axes and steps: the view once, copied per run
        if not isinstance(inputs[0], np.ndarray) or not all(is_constant(a) for a in inputs[1:] if a is not None):
            return None
        v = view(inputs)
        return None if min(v.strides, default=0) < 0 else _copies([v], outputs)

    return native.with_native(run, form)


def build_gather(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """np.take (negative indices count from the end; out-of-range ones raise IndexError)."""
    axis = int(attrs.get("axis", 0))

    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x, idx = inputs[0], inputs[1]
        if outputs is None:
            return (np.take(x, idx, axis=axis),)
        np.take(x, idx, axis=axis, out=outputs[0])
        return outputs

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        x, idx = inputs[0], inputs[1]
        if not (isinstance(x, np.ndarray) and isinstance(idx, np.ndarray) and native.available()):
            return None
        calls = []
        if idx.dtype == np.int32:  # int32 indices (Keras's embeddings) widened into an int64 buffer of the program's
            wide = np.empty(idx.shape, np.int64)
            calls.append(native.elemwise(native.EW_CAST, wide, idx) if idx.size else None)
            idx = wide
        calls.append(native.gather(x, idx, outputs[0], axis % max(x.ndim, 1)))
        return None if None in calls else calls  # type: ignore[return-value]

    return native.with_native(run, form)


def build_expand(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        shape = np.broadcast_shapes(x.shape, tuple(_ints(inputs[1]) or []))
        return _fill(outputs, [np.broadcast_to(x, shape)])

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        x, y = inputs[0], outputs[0]
        try:
            call = native.strided_copy(np.broadcast_to(x, y.shape), y) if isinstance(x, np.ndarray) else None
        except ValueError:
            return None
        return None if call is None else [call]

    return native.with_native(run, form)


def build_shape(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    start = int(attrs.get("start", 0))
    end = attrs.get("end")

    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        x = inputs[0]
        s, e = shape_range(x.ndim, start, end)
        return _fill(outputs, [np.array(x.shape[s:e], dtype=np.int64)])

    return run


def build_constant_of_shape(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    value = attrs.get("value")
    fill = np.zeros((), np.float32) if value is None else np.asarray(value).reshape(())

    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        if outputs is None:
            return (np.full(tuple(_ints(inputs[0]) or []), fill, dtype=fill.dtype),)
        outputs[0].fill(fill)
        return outputs

    return run


def build_channel_shuffle(attrs: Mapping[str, Any], params: Mapping[str, Any], ins: Any, outs: Any) -> RunFn:
    """ChannelShuffle (``ops.fused``); the native form copies each input's run of channels in a
    group block and an output straight to its strided place there (one ``JOB_ELEMWISE`` each)."""
    g, splits = int(attrs["group"]), [int(v) for v in attrs.get("splits") or ()]

    def run(inputs: Inputs, outputs: Sequence[np.ndarray] | None) -> Sequence[np.ndarray]:
        t = inputs[0] if len(inputs) == 1 else np.concatenate(inputs, axis=1)
        y = t.reshape(t.shape[0], g, t.shape[1] // g, -1).transpose(0, 2, 1, 3).reshape(t.shape)
        return _fill(outputs, np.split(y, np.cumsum(splits)[:-1], axis=1) if splits else [y])

    def form(inputs: Inputs, outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        if not all(isinstance(x, np.ndarray) and x.dtype == outputs[0].dtype for x in inputs):
            return None
        calls: list[Any] = []
        n, block, at = outputs[0].shape[0], sum(x.shape[1] for x in inputs) // g, 0
        firsts = np.cumsum([0] + [y.shape[1] for y in outputs])
        for x in inputs:  # join channel j * block + i (x's at + ch) -> channel i * g + j
            for j in range(at // block, -(-(at + x.shape[1]) // block) if x.size else 0):
                lo, hi = max(j * block, at), min(j * block + block, at + x.shape[1])  # in the join
                for k, y in enumerate(outputs):  # rows i of block j whose channel i * g + j is in output k
                    i0, i1 = max(lo - j * block, -(-(firsts[k] - j) // g)), min(hi - j * block, -(-(firsts[k + 1] - j) // g))
                    if i0 < i1:
                        dst = y.reshape(n, y.shape[1], -1)[:, i0 * g + j - firsts[k] :: g][:, : i1 - i0]
                        src = x.reshape(n, x.shape[1], -1)[:, j * block + i0 - at : j * block + i1 - at]
                        calls.append(native.elemwise(native.EW_CAST, dst, src))
            at += x.shape[1]
        return None if None in calls else calls

    return native.with_native(run, form)
