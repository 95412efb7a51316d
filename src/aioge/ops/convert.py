"""Conversion ops: BitCast, CastLike and linear quantisation (QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear).

Casting follows Cast (AiCpu). Quantisation is elementwise scale-and-round work for the
vector engine; its inputs mix float data with integer zero points, so ``float_only`` is off.
The quantised types are the integers (uint8, int8, uint16, int16, ...), the narrow integers
(int4, uint4, int2, uint2) and the float8/float4 types, as ONNX lists them.
"""

from __future__ import annotations

from aioge.ir.desc import TensorDesc
from aioge.kernels import convert as k
from aioge.kernels.base import returning
from aioge.ops.infer import normalise_axis
from aioge.ops.schema import CPU_ONLY, FLOAT_DTYPES, REQUIRED, VECTOR_ENGINES, Attr, InferContext, InferError, OpSchema

__all__ = ["SCHEMAS"]

_FLOATS = FLOAT_DTYPES
_QUANT = (
    "uint8",
    "int8",
    "uint16",
    "int16",
    "uint32",
    "int32",
    "int4",
    "uint4",
    "int2",
    "uint2",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float4_e2m1fn",
)


def _infer_bit_cast(ctx: InferContext) -> list[TensorDesc]:
    from aioge.ir.desc import numpy_dtype

    try:
        want = k.target_dtype(ctx.attrs["to"])
    except ValueError as exc:
        raise InferError(str(exc)) from None
    have = ctx.dtype(0)
    if "str" in (want, have) or numpy_dtype(want).itemsize != numpy_dtype(have).itemsize:
        raise InferError(f"BitCast needs two non-string types of one width, got {have} and {want}")
    return [TensorDesc(ctx.shape(0), want)]


def _infer_cast_like(ctx: InferContext) -> list[TensorDesc]:
    return [TensorDesc(ctx.shape(0), ctx.dtype(1))]


def _check_axis(ctx: InferContext) -> None:
    shape = ctx.shape(0)
    scale = ctx.shape(1)
    if shape is not None and len(shape) and scale is not None and (len(scale) > 1 or ctx.attrs["block_size"]):
        normalise_axis(ctx.attrs["axis"], len(shape))


def _code(ctx: InferContext) -> str | None:
    code = ctx.attrs["output_dtype"]
    if not code:
        return None
    try:
        return k.dtype_of_code(code, "output_dtype")
    except ValueError as exc:
        raise InferError(str(exc)) from None


def _infer_quantize(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(0) not in _FLOATS + ("bfloat16", "int32"):
        raise InferError(f"x must be float or int32, got {ctx.dtype(0)}")
    _check_axis(ctx)
    target = ctx.dtype(2) if ctx.has(2) else (_code(ctx) or "uint8")
    if ctx.has(2) and _code(ctx) not in (None, target):
        raise InferError(f"output_dtype {_code(ctx)} disagrees with the zero point's dtype {target}")
    if target not in _QUANT:
        raise InferError(f"quantising to {target} is not supported; supported: {', '.join(_QUANT)}")
    return [TensorDesc(ctx.shape(0), target)]


def _infer_dequantize(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(0) not in _QUANT:
        raise InferError(f"dequantising {ctx.dtype(0)} is not supported; supported: {', '.join(_QUANT)}")
    if ctx.has(2) and ctx.dtype(2) != ctx.dtype(0):
        raise InferError(f"x_zero_point must have x's dtype {ctx.dtype(0)}, got {ctx.dtype(2)}")
    _check_axis(ctx)
    return [TensorDesc(ctx.shape(0), _code(ctx) or ctx.dtype(1))]


def _infer_dynamic(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(0) not in _FLOATS:
        raise InferError(f"x must be float, got {ctx.dtype(0)}")
    return [TensorDesc(ctx.shape(0), "uint8"), TensorDesc((), ctx.dtype(0)), TensorDesc((), "uint8")]


_Q_ATTRS = {"axis": Attr("int", 1), "block_size": Attr("int", 0), "output_dtype": Attr("int", 0)}

SCHEMAS: tuple[OpSchema, ...] = (
    OpSchema(
        "BitCast",
        _infer_bit_cast,
        (returning("numpy", k.bit_cast),),
        CPU_ONLY,
        {"to": Attr("any", REQUIRED)},
        family="convert",
        elementwise=True,
        float_only=False,
        doc="reinterpret the bytes as another type of the same width (to: a dtype or an ONNX type code)",
    ),
    OpSchema(
        "CastLike",
        _infer_cast_like,
        (returning("numpy", k.cast_like),),
        CPU_ONLY,
        {"saturate": Attr("int", 1), "round_mode": Attr("string", "up")},
        (2, 2),
        family="convert",
        elementwise=True,
        doc="convert to the dtype of a second tensor",
        float_only=False,
    ),
    OpSchema(
        "QuantizeLinear",
        _infer_quantize,
        (returning("numpy", k.quantize_linear),),
        VECTOR_ENGINES,
        {**_Q_ATTRS, "saturate": Attr("int", 1), "precision": Attr("int", 0)},
        (2, 3),
        family="convert",
        doc="saturate(round(x / scale) + zero_point), per tensor, axis or block",
        float_only=False,
    ),
    OpSchema(
        "DequantizeLinear",
        _infer_dequantize,
        (returning("numpy", k.dequantize_linear),),
        VECTOR_ENGINES,
        dict(_Q_ATTRS),
        (2, 3),
        family="convert",
        doc="(x - zero_point) * scale, per tensor, axis or block",
        float_only=False,
    ),
    OpSchema(
        "DynamicQuantizeLinear",
        _infer_dynamic,
        (returning("numpy", k.dynamic_quantize_linear),),
        VECTOR_ENGINES,
        outputs=(3, 3),
        family="convert",
        doc="uint8 quantisation with scale and zero point from x's range",
    ),
)
