"""Signal-processing ops: DFT, STFT, HannWindow, HammingWindow, BlackmanWindow and
MelWeightMatrix.

Transforms are vector work on float signals (their length and axis inputs are ints, so
``float_only`` is off); the window and filter generators make small constant-like tensors
on AiCpu. Shapes are static when the length inputs are constants.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from aioge.ir.desc import TensorDesc
from aioge.kernels import signal as k
from aioge.kernels.base import returning
from aioge.kernels.convert import dtype_of_code
from aioge.ops.schema import CPU_ONLY, FLOAT_DTYPES, VECTOR_ENGINES, Attr, InferContext, InferError, OpSchema

__all__ = ["SCHEMAS"]

_FLOATS = FLOAT_DTYPES


def _scalar(ctx: InferContext, i: int) -> int | None:
    v = ctx.value(i) if ctx.has(i) else None
    return None if v is None else int(np.asarray(v).reshape(-1)[0])


def _out_dtype(ctx: InferContext) -> str:
    try:
        return dtype_of_code(ctx.attrs["output_datatype"], "output_datatype")
    except ValueError as exc:
        raise InferError(str(exc)) from None


def _infer_dft(ctx: InferContext) -> list[TensorDesc]:
    dtype = ctx.dtype(0)
    if dtype not in _FLOATS:
        raise InferError(f"input must be a float tensor, got {dtype}")
    shape = ctx.shape(0)
    if shape is None or (ctx.has(1) and ctx.value(1) is None) or (ctx.has(2) and ctx.value(2) is None):
        return [TensorDesc(None, dtype)]
    if len(shape) < 2 or shape[-1] not in (1, 2) and isinstance(shape[-1], int):
        raise InferError(f"input must end in an axis of 1 (real) or 2 (complex) values, got shape {shape}")
    axis = _scalar(ctx, 2)
    axis = axis if axis is not None else ctx.attrs.get("axis", -2)
    if not -len(shape) <= axis < len(shape) or axis % len(shape) == len(shape) - 1:
        raise InferError(f"axis {axis} is not a signal axis of shape {shape}")
    axis %= len(shape)
    inverse, onesided = bool(ctx.attrs["inverse"]), bool(ctx.attrs["onesided"])
    n = _scalar(ctx, 1)
    dim = shape[axis]
    if n is None:
        if not isinstance(dim, int):
            return [TensorDesc(None, dtype)]
        n = 2 * (dim - 1) if inverse and onesided else dim
    out = list(shape)
    out[axis] = k.dft_bins(n, inverse, onesided)
    out[-1] = 1 if inverse and onesided else 2
    return [TensorDesc(tuple(out), dtype)]


def _infer_stft(ctx: InferContext) -> list[TensorDesc]:
    dtype = ctx.dtype(0)
    if dtype not in _FLOATS:
        raise InferError(f"signal must be a float tensor, got {dtype}")
    shape, step = ctx.shape(0), _scalar(ctx, 1)
    length = _scalar(ctx, 3)
    if length is None and ctx.has(2) and ctx.shape(2) is not None:
        length = ctx.shape(2)[0]  # type: ignore[index,assignment]
    if shape is None or step is None or length is None or not isinstance(shape[1], int) or not isinstance(length, int):
        return [TensorDesc(None, dtype)]
    if step <= 0 or length > shape[1]:
        raise InferError(f"frames of {length} samples every {step} do not fit a signal of {shape[1]}")
    frames = 1 + (shape[1] - length) // step
    bins = length // 2 + 1 if ctx.attrs["onesided"] else length
    return [TensorDesc((shape[0], frames, bins, 2), dtype)]


def _infer_window(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(0) not in ("int32", "int64"):
        raise InferError(f"size must be int32 or int64, got {ctx.dtype(0)}")
    n = _scalar(ctx, 0)
    return [TensorDesc(None if n is None else (n,), _out_dtype(ctx))]


def _infer_mel(ctx: InferContext) -> list[TensorDesc]:
    mels, length = _scalar(ctx, 0), _scalar(ctx, 1)
    if mels is None or length is None:
        return [TensorDesc(None, _out_dtype(ctx))]
    return [TensorDesc((length // 2 + 1, mels), _out_dtype(ctx))]


_WINDOW = {"output_datatype": Attr("int", 1), "periodic": Attr("int", 1, (0, 1))}


def _window(name: str, fn: Callable[..., Any], doc: str) -> OpSchema:
    return OpSchema(
        name, _infer_window, (returning("numpy", fn),), CPU_ONLY, dict(_WINDOW), family="signal", doc=doc, float_only=False
    )


SCHEMAS: tuple[OpSchema, ...] = (
    OpSchema(
        "DFT",
        _infer_dft,
        (returning("numpy", k.dft),),
        VECTOR_ENGINES,
        {"inverse": Attr("int", 0, (0, 1)), "onesided": Attr("int", 0, (0, 1)), "axis": Attr("int")},
        (1, 3),
        family="signal",
        float_only=False,
        doc="discrete Fourier transform along one axis (axis from the input, or the opset-17 attribute)",
    ),
    OpSchema(
        "STFT",
        _infer_stft,
        (returning("numpy", k.stft),),
        VECTOR_ENGINES,
        {"onesided": Attr("int", 1, (0, 1))},
        (2, 4),
        family="signal",
        float_only=False,
        doc="windowed DFTs of a signal's frames",
    ),
    _window("HannWindow", k.hann_window, "the Hann window of a length"),
    _window("HammingWindow", k.hamming_window, "the Hamming window of a length"),
    _window("BlackmanWindow", k.blackman_window, "the Blackman window of a length"),
    OpSchema(
        "MelWeightMatrix",
        _infer_mel,
        (returning("numpy", k.mel_weight_matrix),),
        CPU_ONLY,
        {"output_datatype": Attr("int", 1)},
        (5, 5),
        family="signal",
        float_only=False,
        doc="triangular mel filter weights of the linear DFT bins",
    ),
)
