"""Shape ops: Transpose, Reshape, Flatten, Squeeze, Unsqueeze, Concat, Split, Slice, Gather,
Expand, Shape and ConstantOfShape (newest-opset forms: shapes and axes are inputs).

Output shapes are exact when the data shape is static and the shape-determining inputs are
constants; otherwise they are None and the runtime allocates per run. The shape arithmetic
is the kernels' own (``aioge.kernels.shape``).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from aioge.ir.desc import Dim, TensorDesc
from aioge.kernels import shape as k
from aioge.ops.infer import normalise_axis
from aioge.ops.schema import CPU_ONLY, REQUIRED, Attr, InferContext, InferError, KernelImpl, OpSchema

__all__ = ["SCHEMAS"]

_INDEX = ("int32", "int64")
_UNKNOWN = object()  # an optional shape-determining input that is present but not constant


def _data(ctx: InferContext, what: str = "data") -> TensorDesc:
    d = ctx.inputs[0] if ctx.inputs else None
    if d is None:
        raise InferError(f"input {what} is required")
    return d


def _ints_input(ctx: InferContext, i: int, what: str, required: bool = True) -> Any:
    """The values of an int input: a list, None when absent, or _UNKNOWN when not constant.

    Raises:
        InferError: a required input is missing or the dtype is not int32/int64.
    """
    if not ctx.has(i):
        if required:
            raise InferError(f"input {what} is required")
        return None
    if ctx.dtype(i) not in _INDEX:
        raise InferError(f"{what} must be int32 or int64, got {ctx.dtype(i)}")
    shape = ctx.shape(i)
    if shape is not None and len(shape) > 1:
        raise InferError(f"{what} must be a 1-D tensor, got shape {shape}")
    v = ctx.value(i)
    if v is None:
        return _UNKNOWN
    return [int(x) for x in np.asarray(v).reshape(-1)]


def _guard(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except ValueError as exc:
        raise InferError(str(exc)) from None


def _infer_transpose(ctx: InferContext) -> list[TensorDesc]:
    x = _data(ctx)
    perm = ctx.attrs.get("perm")
    if x.shape is None:
        return [TensorDesc(None, x.dtype)]
    rank = len(x.shape)
    if perm is None:
        perm = tuple(reversed(range(rank)))
    if sorted(perm) != list(range(rank)):
        raise InferError(f"perm {list(perm)} is not a permutation of the {rank} axes of shape {x.shape}")
    return [TensorDesc(tuple(x.shape[p] for p in perm), x.dtype)]


def _infer_reshape(ctx: InferContext) -> list[TensorDesc]:
    x = _data(ctx)
    target = _ints_input(ctx, 1, "shape")
    if x.shape is None or target is _UNKNOWN:
        return [TensorDesc(None, x.dtype)]
    return [TensorDesc(_guard(k.reshape_shape, x.shape, target, bool(ctx.attrs["allowzero"])), x.dtype)]


def _infer_flatten(ctx: InferContext) -> list[TensorDesc]:
    x = _data(ctx, "input")
    if x.shape is None:
        return [TensorDesc(None, x.dtype)]
    rank = len(x.shape)
    axis = ctx.attrs["axis"]
    if not -rank <= axis <= rank:
        raise InferError(f"axis {axis} is out of range [-{rank}, {rank}] for shape {x.shape}")
    return [TensorDesc(k.flatten_shape(x.shape, axis + rank if axis < 0 else axis), x.dtype)]


def _infer_squeeze(ctx: InferContext) -> list[TensorDesc]:
    x = _data(ctx)
    axes = _ints_input(ctx, 1, "axes", required=False)
    if x.shape is None or axes is _UNKNOWN:
        return [TensorDesc(None, x.dtype)]
    return [TensorDesc(_guard(k.squeeze_shape, x.shape, axes), x.dtype)]


def _infer_unsqueeze(ctx: InferContext) -> list[TensorDesc]:
    x = _data(ctx)
    axes = _ints_input(ctx, 1, "axes")
    if x.shape is None or axes is _UNKNOWN:
        return [TensorDesc(None, x.dtype)]
    return [TensorDesc(_guard(k.unsqueeze_shape, x.shape, axes), x.dtype)]


def _infer_concat(ctx: InferContext) -> list[TensorDesc]:
    descs = list(ctx.inputs)
    if any(d is None for d in descs):
        raise InferError("Concat inputs must all be present")
    dtypes = {d.dtype for d in descs if d is not None}
    if len(dtypes) > 1:
        raise InferError(f"inputs must share one dtype, got {[d.dtype for d in descs if d is not None]}")
    dtype = dtypes.pop()
    shapes = [d.shape for d in descs if d is not None]
    if any(s is None for s in shapes):
        return [TensorDesc(None, dtype)]
    ranks = {len(s) for s in shapes if s is not None}
    if len(ranks) > 1:
        raise InferError(f"inputs must share one rank, got shapes {shapes}")
    rank = ranks.pop()
    axis = normalise_axis(ctx.attrs["axis"], rank)
    out: list[Dim] = []
    for a in range(rank):
        dims = [s[a] for s in shapes if s is not None]
        if a == axis:
            ints = [d for d in dims if isinstance(d, int)]
            total = sum(ints) if len(ints) == len(dims) else (dims[0] if len(dims) == 1 else None)
            if total is None:
                return [TensorDesc(None, dtype)]
            out.append(total)
            continue
        sizes = {d for d in dims if isinstance(d, int)}
        if len(sizes) > 1:
            raise InferError(f"inputs differ on axis {a} (not the concat axis {axis}): shapes {shapes}")
        syms = [d for d in dims if not isinstance(d, int)]
        out.append(sizes.pop() if sizes else syms[0])
    return [TensorDesc(tuple(out), dtype)]


def _infer_split(ctx: InferContext) -> list[TensorDesc]:
    x = _data(ctx, "input")
    split = _ints_input(ctx, 1, "split", required=False)
    num_outputs = ctx.attrs.get("num_outputs")
    n_out = ctx.num_outputs or None
    if split is _UNKNOWN:
        shape = ctx.shape(1)
        n = n_out or (shape[0] if shape is not None and len(shape) == 1 and isinstance(shape[0], int) else None)
        if n is None:
            raise InferError("the number of outputs is unknown: give num_outputs or a constant split input")
        return [TensorDesc(None, x.dtype) for _ in range(n)]
    if split is None and num_outputs is None and n_out is None:
        raise InferError("Split needs the split input, the num_outputs attribute or a number of outputs")
    if x.shape is None:
        n = len(split) if split is not None else (num_outputs or n_out or 0)
        return [TensorDesc(None, x.dtype) for _ in range(n)]
    axis = normalise_axis(ctx.attrs["axis"], len(x.shape))
    dim = x.shape[axis]
    if not isinstance(dim, int):
        n = len(split) if split is not None else (num_outputs or n_out or 0)
        if split is not None:
            return [TensorDesc((*x.shape[:axis], s, *x.shape[axis + 1 :]), x.dtype) for s in split]
        return [TensorDesc(None, x.dtype) for _ in range(n)]
    sizes = _guard(k.split_sizes, dim, split, num_outputs, n_out)
    return [TensorDesc((*x.shape[:axis], s, *x.shape[axis + 1 :]), x.dtype) for s in sizes]


def _infer_slice(ctx: InferContext) -> list[TensorDesc]:
    x = _data(ctx)
    parts = [_ints_input(ctx, i, name, required=i < 3) for i, name in ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps"))]
    if ctx.has(1) and ctx.has(2) and ctx.dtype(1) != ctx.dtype(2):
        raise InferError(f"starts and ends must share a dtype, got {ctx.dtype(1)} and {ctx.dtype(2)}")
    if x.shape is None or any(p is _UNKNOWN for p in parts):
        return [TensorDesc(None, x.dtype)]
    _, shape = _guard(k.slice_plan, x.shape, *parts)
    return [TensorDesc(shape, x.dtype)]


def _infer_gather(ctx: InferContext) -> list[TensorDesc]:
    x = _data(ctx)
    if not ctx.has(1):
        raise InferError("input indices is required")
    if ctx.dtype(1) not in _INDEX:
        raise InferError(f"indices must be int32 or int64, got {ctx.dtype(1)}")
    idx = ctx.shape(1)
    if x.shape is None or idx is None:
        return [TensorDesc(None, x.dtype)]
    if len(x.shape) == 0:
        raise InferError("data must have rank >= 1")
    axis = normalise_axis(ctx.attrs["axis"], len(x.shape))
    dim = x.shape[axis]
    values = ctx.value(1)
    if values is not None and isinstance(dim, int) and values.size:
        lo, hi = int(values.min()), int(values.max())
        if lo < -dim or hi >= dim:
            raise InferError(f"indices must be in [{-dim}, {dim - 1}] for axis {axis} of shape {x.shape}, got {lo}..{hi}")
    return [TensorDesc((*x.shape[:axis], *idx, *x.shape[axis + 1 :]), x.dtype)]


def _expand_shape(shape: Sequence[Dim], target: Sequence[int]) -> tuple[Dim, ...]:
    rank = max(len(shape), len(target))
    a = [1] * (rank - len(shape)) + list(shape)
    b = [1] * (rank - len(target)) + list(target)
    out: list[Dim] = []
    for da, db in zip(a, b):
        if db == 1:
            out.append(da)
        elif da == 1 or not isinstance(da, int) or da == db:
            out.append(db)  # a symbol here must be 1 or db for the expand to be valid
        else:
            raise InferError(f"cannot expand shape {tuple(shape)} to {list(target)}")
    return tuple(out)


def _infer_expand(ctx: InferContext) -> list[TensorDesc]:
    x = _data(ctx, "input")
    target = _ints_input(ctx, 1, "shape")
    if x.shape is None or target is _UNKNOWN:
        return [TensorDesc(None, x.dtype)]
    if any(t < 0 for t in target):
        raise InferError(f"shape {target} has a negative dimension")
    return [TensorDesc(_expand_shape(x.shape, target), x.dtype)]


def _infer_shape(ctx: InferContext) -> list[TensorDesc]:
    x = _data(ctx)
    if x.shape is None:
        return [TensorDesc(None, "int64")]
    s, e = k.shape_range(len(x.shape), ctx.attrs["start"], ctx.attrs.get("end"))
    return [TensorDesc((e - s,), "int64")]


def _infer_constant_of_shape(ctx: InferContext) -> list[TensorDesc]:
    value = ctx.attrs.get("value")
    dtype = "float32" if value is None else TensorDesc.of((), value.dtype).dtype
    target = _ints_input(ctx, 0, "input")
    if ctx.dtype(0) != "int64":
        raise InferError(f"input must be int64, got {ctx.dtype(0)}")
    if target is _UNKNOWN:
        return [TensorDesc(None, dtype)]
    if any(t < 0 for t in target):
        raise InferError(f"shape {target} has a negative dimension")
    return [TensorDesc(tuple(target), dtype)]


def _one_value(v: np.ndarray) -> str | None:
    return None if v.size == 1 else f"value must hold exactly one element, got shape {v.shape}"


# The shape ops whose kernels carry native forms (strided copies: kernels.native.strided_copy).
_NATIVE = frozenset({"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Split", "Gather", "Expand", "Concat", "Slice"})


def _shape_op(
    name: str,
    infer: Any,
    build: Any,
    attrs: dict[str, Attr] | None = None,
    inputs: tuple[int, int] = (1, 1),
    outputs: tuple[int, int] = (1, 1),
    doc: str = "",
    shape_only: bool = False,
) -> OpSchema:
    return OpSchema(
        name,
        infer,
        (KernelImpl("numpy", build, native=name in _NATIVE),),
        CPU_ONLY,
        attrs or {},
        inputs,
        outputs,
        family="shape",
        doc=doc,
        float_only=False,
        shape_only=shape_only,
    )


SCHEMAS: tuple[OpSchema, ...] = (
    _shape_op(
        "Transpose",
        _infer_transpose,
        k.build_transpose,
        {"perm": Attr("ints", None)},
        doc="permute the axes (default: reverse them)",
    ),
    _shape_op(
        "Reshape",
        _infer_reshape,
        k.build_reshape_like("Reshape"),
        {"allowzero": Attr("int", 0, (0, 1))},
        (2, 2),
        doc="new shape from the shape input; 0 copies a dim (unless allowzero), -1 is inferred",
    ),
    _shape_op(
        "Flatten",
        _infer_flatten,
        k.build_reshape_like("Flatten"),
        {"axis": Attr("int", 1)},
        doc="2-D: the dims before axis times the dims from it",
    ),
    _shape_op(
        "Squeeze",
        _infer_squeeze,
        k.build_reshape_like("Squeeze"),
        {},
        (1, 2),
        doc="drop size-1 axes (all of them without the axes input)",
    ),
    _shape_op(
        "Unsqueeze",
        _infer_unsqueeze,
        k.build_reshape_like("Unsqueeze"),
        {},
        (2, 2),
        doc="insert size-1 axes at the given output positions",
    ),
    _shape_op(
        "Concat", _infer_concat, k.build_concat, {"axis": Attr("int", REQUIRED)}, (1, -1), doc="join tensors along an axis"
    ),
    _shape_op(
        "Split",
        _infer_split,
        k.build_split,
        {
            "axis": Attr("int", 0),
            "num_outputs": Attr("int", None, check=lambda n: None if n >= 1 else f"num_outputs must be >= 1, got {n}"),
        },
        (1, 2),
        (1, -1),
        doc="split along an axis by the split input, num_outputs, or evenly",
    ),
    _shape_op(
        "Slice",
        _infer_slice,
        k.build_slice,
        {},
        (3, 5),
        doc="strided slice by starts, ends, axes and steps inputs, clamped per the ONNX spec",
    ),
    _shape_op(
        "Gather",
        _infer_gather,
        k.build_gather,
        {"axis": Attr("int", 0)},
        (2, 2),
        doc="take entries along an axis; negative indices count from the end",
    ),
    _shape_op("Expand", _infer_expand, k.build_expand, {}, (2, 2), doc="broadcast to a shape (bidirectionally, as numpy does)"),
    _shape_op(
        "Shape",
        _infer_shape,
        k.build_shape,
        {"start": Attr("int", 0), "end": Attr("int", None)},
        doc="the input's shape as int64, optionally the dims [start, end)",
        shape_only=True,
    ),
    _shape_op(
        "ConstantOfShape",
        _infer_constant_of_shape,
        k.build_constant_of_shape,
        {"value": Attr("tensor", None, check=_one_value)},
        doc="a tensor of the given shape filled with value (default float32 0)",
    ),
)
