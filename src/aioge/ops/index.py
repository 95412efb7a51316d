"""Index ops: ArgMax/ArgMin, TopK, gathers and scatters by index, OneHot, Tile, Trilu,
Compress, NonZero, Unique, ReverseSequence and TensorScatter.

All of them move or select data by integer index, which is AiCpu work. Output shapes that
depend on run-time values (NonZero, Unique, Compress on a computed condition, TopK with a
computed k) are inferred as unknown; the kernel's result then defines them.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

import numpy as np

from aioge.ir.desc import Dim, TensorDesc
from aioge.kernels import index as k
from aioge.kernels import native
from aioge.kernels.base import one_call, returning
from aioge.kernels.optional_outputs import returning_some
from aioge.ops.infer import infer_like_input, normalise_axis
from aioge.ops.schema import CPU_ONLY, Attr, InferContext, InferError, InferFn, OpSchema

__all__ = ["SCHEMAS"]

_INDEX = ("int32", "int64")
_REDUCTION = {"reduction": Attr("string", "none", ("none", "add", "mul", "max", "min"))}


def _index_dtype(ctx: InferContext, i: int, what: str) -> None:
    if ctx.dtype(i) not in _INDEX:
        raise InferError(f"{what} must be int32 or int64, got {ctx.dtype(i)}")


def _axis(ctx: InferContext, rank: int | None, key: str = "axis") -> int | None:
    if rank is None:
        return None
    return normalise_axis(ctx.attrs[key], rank)


def _infer_arg(ctx: InferContext) -> list[TensorDesc]:
    shape = ctx.shape(0)
    if shape is None:
        return [TensorDesc(None, "int64")]
    axis = normalise_axis(ctx.attrs["axis"], len(shape))
    keep = ctx.attrs["keepdims"]
    out = tuple(1 if i == axis else d for i, d in enumerate(shape) if keep or i != axis)
    return [TensorDesc(out, "int64")]


def _infer_top_k(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(1) != "int64":
        raise InferError(f"K must be int64, got {ctx.dtype(1)}")
    shape, kv = ctx.shape(0), ctx.value(1)
    dtype = ctx.dtype(0)
    if shape is None or kv is None:
        out: tuple[Dim, ...] | None = None
    else:
        axis = normalise_axis(ctx.attrs["axis"], len(shape))
        kk = int(np.asarray(kv).reshape(-1)[0])
        n = shape[axis]
        if kk < 0 or (isinstance(n, int) and kk > n):
            raise InferError(f"K={kk} is out of range for axis {axis} of size {n}")
        out = tuple(kk if i == axis else d for i, d in enumerate(shape))
    return [TensorDesc(out, dtype), TensorDesc(out, "int64")]


def _infer_gather_elements(ctx: InferContext) -> list[TensorDesc]:
    _index_dtype(ctx, 1, "indices")
    data, idx = ctx.shape(0), ctx.shape(1)
    if data is not None and idx is not None:
        if len(data) != len(idx):
            raise InferError(f"data and indices must have one rank, got {data} and {idx}")
        _axis(ctx, len(data))
    return [TensorDesc(idx, ctx.dtype(0))]


def _infer_gather_nd(ctx: InferContext) -> list[TensorDesc]:
    _index_dtype(ctx, 1, "indices")
    data, idx = ctx.shape(0), ctx.shape(1)
    b = ctx.attrs["batch_dims"]
    if data is None or idx is None or not isinstance(idx[-1] if idx else 0, int):
        return [TensorDesc(None, ctx.dtype(0))]
    if not idx:
        raise InferError("indices must have rank >= 1")
    m = int(idx[-1])
    if b >= min(len(data), len(idx)) or b + m > len(data):
        raise InferError(f"indices of shape {idx} with batch_dims={b} do not fit data of shape {data}")
    return [TensorDesc(tuple(idx[:-1]) + tuple(data[b + m :]), ctx.dtype(0))]


def _infer_scatter(ctx: InferContext) -> list[TensorDesc]:
    _index_dtype(ctx, 1, "indices")
    if ctx.dtype(2) != ctx.dtype(0):
        raise InferError(f"updates must have data's dtype {ctx.dtype(0)}, got {ctx.dtype(2)}")
    idx, upd = ctx.shape(1), ctx.shape(2)
    if idx is not None and upd is not None and len(idx) != len(upd):
        raise InferError(f"indices {idx} and updates {upd} must have one rank")
    return infer_like_input(ctx)


def _infer_scatter_nd(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(1) != "int64":
        raise InferError(f"indices must be int64, got {ctx.dtype(1)}")
    if ctx.dtype(2) != ctx.dtype(0):
        raise InferError(f"updates must have data's dtype {ctx.dtype(0)}, got {ctx.dtype(2)}")
    data, idx, upd = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    if data is not None and idx is not None and upd is not None and isinstance(idx[-1], int):
        want = tuple(idx[:-1]) + tuple(data[int(idx[-1]) :])
        if len(want) != len(upd) or any(isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(want, upd)):
            raise InferError(f"updates must have shape {want}, got {upd}")
    return infer_like_input(ctx)


def _infer_one_hot(ctx: InferContext) -> list[TensorDesc]:
    shape, depth, values = ctx.shape(0), ctx.value(1), ctx.shape(2)
    if values is not None and (len(values) != 1 or values[0] not in (2,) and isinstance(values[0], int)):
        raise InferError(f"values must be a 2-element 1-D tensor, got shape {values}")
    dtype = ctx.dtype(2)
    if shape is None:
        return [TensorDesc(None, dtype)]
    axis = normalise_axis(ctx.attrs["axis"], len(shape) + 1)
    if depth is None:
        return [TensorDesc(None, dtype)]
    d = int(np.asarray(depth).reshape(-1)[0])
    if d < 1:
        raise InferError(f"depth must be positive, got {d}")
    out = list(shape)
    out.insert(axis, d)
    return [TensorDesc(tuple(out), dtype)]


def _infer_tile(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(1) != "int64":
        raise InferError(f"repeats must be int64, got {ctx.dtype(1)}")
    shape, reps = ctx.shape(0), ctx.value(1)
    if shape is None or reps is None:
        return [TensorDesc(None, ctx.dtype(0))]
    r = [int(v) for v in np.asarray(reps).reshape(-1)]
    if len(r) != len(shape) or any(v < 0 for v in r):
        raise InferError(f"repeats {r} do not fit an input of rank {len(shape)}")
    out = tuple(d * n if isinstance(d, int) else (d if n == 1 else "?") for d, n in zip(shape, r))
    return [TensorDesc(out, ctx.dtype(0))]


def _infer_trilu(ctx: InferContext) -> list[TensorDesc]:
    shape = ctx.shape(0)
    if shape is not None and len(shape) < 2:
        raise InferError(f"Trilu needs rank >= 2, got shape {shape}")
    if ctx.has(1) and ctx.dtype(1) != "int64":
        raise InferError(f"k must be int64, got {ctx.dtype(1)}")
    return infer_like_input(ctx)


def _infer_compress(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(1) != "bool":
        raise InferError(f"condition must be bool, got {ctx.dtype(1)}")
    shape, cond = ctx.shape(0), ctx.value(1)
    axis = ctx.attrs.get("axis")
    if shape is not None and axis is not None:
        axis = normalise_axis(axis, len(shape))
    if cond is None or shape is None:
        return [TensorDesc(None, ctx.dtype(0))]
    n = int(np.count_nonzero(np.asarray(cond).reshape(-1)))
    if axis is None:
        return [TensorDesc((n,), ctx.dtype(0))]
    return [TensorDesc(tuple(n if i == axis else d for i, d in enumerate(shape)), ctx.dtype(0))]


def _infer_nonzero(ctx: InferContext) -> list[TensorDesc]:
    ctx.dtype(0)
    return [TensorDesc(None, "int64")]


def _infer_unique(ctx: InferContext) -> list[TensorDesc]:
    shape = ctx.shape(0)
    if shape is not None and ctx.attrs.get("axis") is not None:
        normalise_axis(ctx.attrs["axis"], len(shape))
    return [TensorDesc(None, ctx.dtype(0))] + [TensorDesc(None, "int64") for _ in range(3)]


def _infer_reverse_sequence(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(1) != "int64":
        raise InferError(f"sequence_lens must be int64, got {ctx.dtype(1)}")
    shape = ctx.shape(0)
    if shape is not None:
        b = normalise_axis(ctx.attrs["batch_axis"], len(shape), "batch_axis")
        t = normalise_axis(ctx.attrs["time_axis"], len(shape), "time_axis")
        if b == t or len(shape) < 2:
            raise InferError(f"batch_axis and time_axis must differ in a tensor of rank >= 2, got {b} and {t}")
    return infer_like_input(ctx)


def _infer_tensor_scatter(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(1) != ctx.dtype(0):
        raise InferError(f"update must have past_cache's dtype {ctx.dtype(0)}, got {ctx.dtype(1)}")
    past, upd = ctx.shape(0), ctx.shape(1)
    if past is not None and upd is not None:
        axis = normalise_axis(ctx.attrs["axis"], len(past))
        if len(past) != len(upd) or any(
            isinstance(p, int) and isinstance(u, int) and (p < u if i == axis else p != u)
            for i, (p, u) in enumerate(zip(past, upd))
        ):
            raise InferError(f"update of shape {upd} does not fit past_cache of shape {past} along axis {axis}")
    return infer_like_input(ctx)


def _op(
    name: str,
    infer: InferFn,
    fn: Callable[..., Any],
    doc: str,
    attrs: dict[str, Attr] | None = None,
    inputs: tuple[int, int] = (1, 1),
    outputs: tuple[int, int] = (1, 1),
    form: Callable[[Any], Any] | None = None,
) -> OpSchema:
    return OpSchema(
        name,
        infer,
        (returning("numpy", fn, form=form),),
        CPU_ONLY,
        attrs or {},
        inputs,
        outputs,
        family="index",
        doc=doc,
        float_only=False,
    )


_ARG_ATTRS = {"axis": Attr("int", 0), "keepdims": Attr("int", 1, (0, 1)), "select_last_index": Attr("int", 0, (0, 1))}


def _arg(largest: bool) -> Callable[[Any], Any]:  # the native form (CLIP's end-of-text token: an int ids argmax)
    return lambda kw: one_call(
        lambda i, o: native.arg_reduce(i[0], o[0], kw.get("axis", 0), largest, kw.get("select_last_index"))
    )


SCHEMAS: tuple[OpSchema, ...] = (
    *(
        _op(op, _infer_arg, partial(k.arg_reduce, largest=big), f"int64 index of the {m} along axis", _ARG_ATTRS, form=_arg(big))
        for op, big, m in (("ArgMax", True, "maximum"), ("ArgMin", False, "minimum"))
    ),
    _op(
        "TopK",
        _infer_top_k,
        k.top_k,
        "the K largest (or smallest) values along axis and their indices",
        {"axis": Attr("int", -1), "largest": Attr("int", 1, (0, 1)), "sorted": Attr("int", 1, (0, 1))},
        (2, 2),
        (2, 2),
    ),
    _op("NonZero", _infer_nonzero, k.nonzero, "indices of the non-zero elements, one row per dimension"),
    _op(
        "GatherElements",
        _infer_gather_elements,
        k.gather_elements,
        "data picked element by element along axis",
        {"axis": Attr("int", 0)},
        (2, 2),
        form=lambda kw: one_call(lambda i, o: native.gather_elements(i[0], i[1], o[0], kw.get("axis", 0))),
    ),
    _op(
        "GatherND",
        _infer_gather_nd,
        k.gather_nd,
        "slices of data picked by index tuples",
        {"batch_dims": Attr("int", 0)},
        (2, 2),
        form=lambda kw: one_call(
            lambda i, o: None if kw.get("batch_dims", 0) else native.gather(i[0], i[1], o[0], 0, i[1].shape[-1])
        ),
    ),
    _op(
        "ScatterElements",
        _infer_scatter,
        k.scatter_elements,
        "data with elements along axis replaced or reduced",
        {"axis": Attr("int", 0), **_REDUCTION},
        (3, 3),
    ),
    _op(
        "Scatter",
        _infer_scatter,
        k.scatter_elements,
        "ScatterElements without reduction (deprecated form)",
        {"axis": Attr("int", 0)},
        (3, 3),
    ),
    _op(
        "ScatterND",
        _infer_scatter_nd,
        k.scatter_nd,
        "data with slices at index tuples replaced or reduced",
        dict(_REDUCTION),
        (3, 3),
    ),
    _op(
        "OneHot",
        _infer_one_hot,
        k.one_hot,
        "values[1] at each index along a new axis, values[0] elsewhere",
        {"axis": Attr("int", -1)},
        (3, 3),
    ),
    _op("Tile", _infer_tile, k.tile, "the input repeated along each axis", inputs=(2, 2)),
    _op(
        "Trilu",
        _infer_trilu,
        k.trilu,
        "upper or lower triangle of the last two dimensions from diagonal k",
        {"upper": Attr("int", 1, (0, 1))},
        (1, 2),
    ),
    _op("Compress", _infer_compress, k.compress, "slices along axis where condition holds", {"axis": Attr("int")}, (2, 2)),
    OpSchema(
        "Unique",
        _infer_unique,
        (returning_some("numpy", k.unique),),
        CPU_ONLY,
        {"axis": Attr("int"), "sorted": Attr("int", 1, (0, 1))},
        outputs=(1, 4),
        family="index",
        doc="unique values or slices, first indices, inverse indices, counts",
        float_only=False,
    ),
    _op(
        "ReverseSequence",
        _infer_reverse_sequence,
        k.reverse_sequence,
        "each batch entry's leading time steps reversed",
        {"batch_axis": Attr("int", 1), "time_axis": Attr("int", 0)},
        (2, 2),
    ),
    _op(
        "TensorScatter",
        _infer_tensor_scatter,
        k.tensor_scatter,
        "a cache with updates written from per-batch indices",
        {"mode": Attr("string", "linear", ("linear", "circular")), "axis": Attr("int", -2)},
        (2, 3),
    ),
)
