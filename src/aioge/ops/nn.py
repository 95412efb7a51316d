"""Neural-network ops: softmax, matrix products, normalisation and Dropout.

Conv and pooling live in ``aioge.ops.conv``.
"""

from __future__ import annotations

from aioge.ir.desc import Dim, TensorDesc
from aioge.kernels import nn as k
from aioge.kernels.lowp import LOWP_GEMM
from aioge.kernels.matmul_algos import GEMM_ALGOS, MATMUL_ALGOS, NATIVE_GEMM_ALGOS, NATIVE_MATMUL_ALGOS
from aioge.kernels.norm_algos import BATCHNORM_ALGOS, LAYERNORM_ALGOS, LOGSOFTMAX_ALGOS, SOFTMAX_ALGOS
from aioge.ops.infer import broadcast_shapes, normalise_axis
from aioge.ops.schema import (
    ALL_ENGINES,
    FLOAT_DTYPES,
    REQUIRED,
    VECTOR_ENGINES,
    Attr,
    InferContext,
    InferError,
    KernelImpl,
    OpSchema,
    low_precision,
)

__all__ = ["SCHEMAS"]

_FLOATS = FLOAT_DTYPES
_NUMBERS = (*_FLOATS, "int32", "int64", "uint32", "uint64")


def _float_input(ctx: InferContext, i: int = 0, what: str = "X") -> TensorDesc:
    d = ctx.inputs[i] if i < len(ctx.inputs) else None
    if d is None:
        raise InferError(f"input {what} is required")
    if d.dtype not in _FLOATS:
        raise InferError(f"{what} must be a float tensor, got {d.dtype}")
    return d


def _same_dtype(ctx: InferContext, dtype: str, names: dict[int, str]) -> None:
    for i, name in names.items():
        if ctx.has(i) and ctx.dtype(i) != dtype:
            raise InferError(f"{name} must have dtype {dtype}, got {ctx.dtype(i)}")


def _infer_softmax(ctx: InferContext) -> list[TensorDesc]:
    x = _float_input(ctx, what="input")
    if x.shape is not None:
        normalise_axis(ctx.attrs["axis"], len(x.shape))
    return [TensorDesc(x.shape, x.dtype)]


def _infer_matmul(ctx: InferContext) -> list[TensorDesc]:
    a, b = ctx.inputs[0], ctx.inputs[1]
    if a is None or b is None:
        raise InferError("MatMul needs inputs A and B")
    if a.dtype != b.dtype:
        raise InferError(f"A and B must share a dtype, got {a.dtype} and {b.dtype}")
    if a.dtype not in _NUMBERS:
        raise InferError(f"MatMul does not take {a.dtype} tensors")
    if a.shape is None or b.shape is None:
        return [TensorDesc(None, a.dtype)]
    if len(a.shape) == 0 or len(b.shape) == 0:
        raise InferError(f"MatMul operands must have rank >= 1, got shapes {a.shape} and {b.shape}")
    sa = (1, *a.shape) if len(a.shape) == 1 else a.shape
    sb = (*b.shape, 1) if len(b.shape) == 1 else b.shape
    ka, kb = sa[-1], sb[-2]
    if isinstance(ka, int) and isinstance(kb, int) and ka != kb:
        raise InferError(f"inner dimensions differ: A {a.shape} has {ka} columns, B {b.shape} has {kb} rows")
    try:
        batch = broadcast_shapes(sa[:-2], sb[:-2])
    except InferError:
        raise InferError(f"batch dimensions of A {a.shape} and B {b.shape} do not broadcast") from None
    out: list[Dim] = list(batch or ())
    if len(a.shape) > 1:
        out.append(sa[-2])
    if len(b.shape) > 1:
        out.append(sb[-1])
    return [TensorDesc(tuple(out), a.dtype)]


def _infer_gemm(ctx: InferContext) -> list[TensorDesc]:
    a, b = ctx.inputs[0], ctx.inputs[1]
    if a is None or b is None:
        raise InferError("Gemm needs inputs A and B")
    if a.dtype != b.dtype:
        raise InferError(f"A and B must share a dtype, got {a.dtype} and {b.dtype}")
    if a.dtype not in _NUMBERS:
        raise InferError(f"Gemm does not take {a.dtype} tensors")
    _same_dtype(ctx, a.dtype, {2: "C"})
    if a.shape is None or b.shape is None:
        return [TensorDesc(None, a.dtype)]
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise InferError(f"Gemm operands must be matrices, got shapes {a.shape} and {b.shape}")
    m, ka = (a.shape[1], a.shape[0]) if ctx.attrs["transA"] else a.shape
    kb, n = (b.shape[1], b.shape[0]) if ctx.attrs["transB"] else b.shape
    if isinstance(ka, int) and isinstance(kb, int) and ka != kb:
        raise InferError(
            f"inner dimensions differ: A' is {m}x{ka}, B' is {kb}x{n} "
            f"(transA={ctx.attrs['transA']}, transB={ctx.attrs['transB']})"
        )
    c = ctx.shape(2) if ctx.has(2) else None
    if c is not None:
        if len(c) > 2:
            raise InferError(f"C must broadcast to ({m}, {n}), got shape {c}")
        joined = broadcast_shapes(c, (m, n))
        if joined != (m, n):
            raise InferError(f"C of shape {c} does not broadcast to ({m}, {n})")
    return [TensorDesc((m, n), a.dtype)]


def _check_vector(ctx: InferContext, i: int, name: str, size: Dim) -> None:
    s = ctx.shape(i)
    if s is None:
        return
    if len(s) != 1 or (isinstance(size, int) and isinstance(s[0], int) and s[0] != size):
        raise InferError(f"{name} must have shape ({size},), got {s}")


def _infer_batch_norm(ctx: InferContext) -> list[TensorDesc]:
    x = _float_input(ctx)
    if ctx.attrs["training_mode"]:
        raise InferError("training_mode=1 is not supported (inference only)")
    for i, name in enumerate(("scale", "B", "input_mean", "input_var"), start=1):
        if not ctx.has(i):
            raise InferError(f"input {name} is required")
        if ctx.dtype(i) not in _FLOATS:
            raise InferError(f"{name} must be a float tensor, got {ctx.dtype(i)}")
    if x.shape is None:
        return [TensorDesc(None, x.dtype)]
    if len(x.shape) < 2:
        raise InferError(f"X must be N x C x ... (rank >= 2), got shape {x.shape}")
    for i, name in enumerate(("scale", "B", "input_mean", "input_var"), start=1):
        _check_vector(ctx, i, name, x.shape[1])
    return [TensorDesc(x.shape, x.dtype)]


def _unidirectional(shape: tuple[Dim, ...], target: tuple[Dim, ...], name: str) -> None:
    if len(shape) > len(target):
        raise InferError(f"{name} of shape {shape} does not broadcast to {target}")
    for d, t in zip(reversed(shape), reversed(target)):
        if isinstance(d, int) and isinstance(t, int) and d not in (1, t):
            raise InferError(f"{name} of shape {shape} does not broadcast to {target}")


def _infer_layer_norm(ctx: InferContext) -> list[TensorDesc]:
    x = _float_input(ctx)
    if not ctx.has(1):
        raise InferError("input Scale is required")
    _same_dtype(ctx, x.dtype, {1: "Scale", 2: "B"})
    stats_dtype = "float32" if ctx.attrs["stash_type"] == 1 else x.dtype
    n = max(ctx.num_outputs, 1)
    if x.shape is None:
        return [TensorDesc(None, x.dtype), *(TensorDesc(None, stats_dtype) for _ in range(n - 1))]
    rank = len(x.shape)
    if rank == 0:
        raise InferError("X must have rank >= 1")
    axis = normalise_axis(ctx.attrs["axis"], rank)
    normalised = tuple(x.shape[axis:])
    for i, name in ((1, "Scale"), (2, "B")):
        s = ctx.shape(i) if ctx.has(i) else None
        if s is not None:
            _unidirectional(s, normalised, name)
    stats = TensorDesc((*x.shape[:axis], *([1] * (rank - axis))), stats_dtype)
    return [TensorDesc(x.shape, x.dtype), stats, stats][:n]


def _infer_lrn(ctx: InferContext) -> list[TensorDesc]:
    x = _float_input(ctx)
    if x.shape is not None and len(x.shape) < 3:
        raise InferError(f"X must be N x C x D1 x ... (rank >= 3), got shape {x.shape}")
    return [TensorDesc(x.shape, x.dtype)]


def _infer_dropout(ctx: InferContext) -> list[TensorDesc]:
    x = _float_input(ctx, what="data")
    if ctx.has(1) and ctx.dtype(1) not in _FLOATS:
        raise InferError(f"ratio must be a float scalar, got {ctx.dtype(1)}")
    if ctx.has(2):
        if ctx.dtype(2) != "bool":
            raise InferError(f"training_mode must be a bool scalar, got {ctx.dtype(2)}")
    out = [TensorDesc(x.shape, x.dtype)]
    if ctx.num_outputs > 1:
        out.append(TensorDesc(x.shape, "bool"))
    return out


def _positive_int(name: str) -> Attr:
    return Attr("int", REQUIRED, check=lambda v: None if v >= 1 else f"{name} must be >= 1, got {v}")


_AXIS_LAST = {"axis": Attr("int", -1)}
_FLAG = (0, 1)

SCHEMAS: tuple[OpSchema, ...] = (
    OpSchema(
        "Softmax",
        _infer_softmax,
        (KernelImpl("numpy", k.build_softmax), *SOFTMAX_ALGOS),
        VECTOR_ENGINES,
        _AXIS_LAST,
        family="nn",
        doc="exp(x) / sum(exp(x)) along one axis (opset 13)",
    ),
    OpSchema(
        "LogSoftmax",
        _infer_softmax,
        (KernelImpl("numpy", k.build_log_softmax), *LOGSOFTMAX_ALGOS),
        VECTOR_ENGINES,
        _AXIS_LAST,
        family="nn",
        doc="log of Softmax along one axis, computed stably (opset 13)",
    ),
    low_precision(
        OpSchema(
            "MatMul",
            _infer_matmul,
            (KernelImpl("numpy", k.build_matmul), *NATIVE_MATMUL_ALGOS, *MATMUL_ALGOS),
            ALL_ENGINES,
            {},
            (2, 2),
            family="nn",
            builder="matmul",
            cost="matmul",
            doc="numpy matmul: batched, broadcasting, 1-D operands promoted and squeezed",
        )
    ),
    low_precision(
        OpSchema(
            "Gemm",
            _infer_gemm,
            (KernelImpl("numpy", k.build_gemm), *NATIVE_GEMM_ALGOS, *GEMM_ALGOS),
            ALL_ENGINES,
            {
                "alpha": Attr("float", 1.0),
                "beta": Attr("float", 1.0),
                "transA": Attr("int", 0, _FLAG),
                "transB": Attr("int", 0, _FLAG),
            },
            (2, 3),
            family="nn",
            cost="matmul",
            doc="alpha * A' @ B' + beta * C, C optional and broadcast",
        ),
        LOWP_GEMM,
    ),
    OpSchema(
        "BatchNormalization",
        _infer_batch_norm,
        (KernelImpl("numpy", k.build_batch_norm), *BATCHNORM_ALGOS),
        VECTOR_ENGINES,
        {"epsilon": Attr("float", 1e-5), "momentum": Attr("float", 0.9), "training_mode": Attr("int", 0, _FLAG)},
        (5, 5),
        family="nn",
        doc="inference batch normalisation with running mean and variance",
    ),
    OpSchema(
        "LayerNormalization",
        _infer_layer_norm,
        (KernelImpl("numpy", k.build_layer_norm), *LAYERNORM_ALGOS),
        VECTOR_ENGINES,
        {"axis": Attr("int", -1), "epsilon": Attr("float", 1e-5), "stash_type": Attr("int", 1, _FLAG)},
        (2, 3),
        (1, 3),
        family="nn",
        doc="normalise over axes [axis, rank), then scale and shift; optional Mean and InvStdDev outputs",
    ),
    OpSchema(
        "LRN",
        _infer_lrn,
        (KernelImpl("numpy", k.build_lrn),),
        VECTOR_ENGINES,
        {
            "alpha": Attr("float", 1e-4),
            "beta": Attr("float", 0.75),
            "bias": Attr("float", 1.0),
            "size": _positive_int("size"),
        },
        family="nn",
        builder="lrn",
        doc="local response normalisation across channels",
    ),
    OpSchema(
        "Dropout",
        _infer_dropout,
        (KernelImpl("numpy", k.build_dropout),),
        ALL_ENGINES,
        {"seed": Attr("int", None)},
        (1, 3),
        (1, 2),
        family="nn",
        doc="Dropout: a copy in inference; in training (training_mode input) a seeded random mask, scaled by 1/(1-ratio)",
        float_only=False,
        random=True,  # random in training mode (ONNX); never evaluated ahead of a run
    ),
)
