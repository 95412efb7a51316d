"""Math ops: rounding, trigonometry, predicates, variadic Min/Max/Mean, Mod and bitwise ops.

Float math runs on every engine; integer inputs go to AiCpu (``float_only``). The bitwise
ops are integer by nature, so the vector engine takes them too (``float_only=False``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from aioge.ir.desc import TensorDesc
from aioge.kernels import math as k
from aioge.kernels.base import returning, ufunc_impl
from aioge.ops.infer import infer_binary, infer_broadcast_same_dtype, infer_like_input
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
)

__all__ = ["SCHEMAS"]

_FLOATS = FLOAT_DTYPES
_INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _infer_float(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(0) not in _FLOATS:
        raise InferError(f"input must be a float tensor, got {ctx.dtype(0)}")
    return infer_like_input(ctx)


def _infer_predicate(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(0) not in _FLOATS:
        raise InferError(f"input must be a float tensor, got {ctx.dtype(0)}")
    return [TensorDesc(ctx.shape(0), "bool")]


def _infer_bitwise(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(0) not in _INTS:
        raise InferError(f"inputs must be integer tensors, got {ctx.dtype(0)}")
    return infer_binary(ctx)


def _infer_bit_not(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(0) not in _INTS:
        raise InferError(f"input must be an integer tensor, got {ctx.dtype(0)}")
    return infer_like_input(ctx)


def _infer_mean(ctx: InferContext) -> list[TensorDesc]:
    (desc,) = infer_broadcast_same_dtype(ctx)
    if desc.dtype not in _FLOATS:
        raise InferError(f"Mean takes float tensors, got {desc.dtype}")
    return [desc]


def _unary_float(name: str, ufunc: Callable[..., Any], doc: str) -> OpSchema:
    return OpSchema(
        name,
        _infer_float,
        (ufunc_impl("numpy", ufunc),),
        ALL_ENGINES,
        {},
        family="math",
        elementwise=True,
        doc=doc,
    )


def _variadic(name: str, impl: KernelImpl, doc: str, infer: Callable[[InferContext], list[TensorDesc]]) -> OpSchema:
    return OpSchema(name, infer, (impl,), ALL_ENGINES, {}, (1, -1), family="math", elementwise=True, doc=doc)


def _bitwise(name: str, ufunc: Callable[..., Any], doc: str) -> OpSchema:
    return OpSchema(
        name,
        _infer_bitwise,
        (ufunc_impl("numpy", ufunc),),
        VECTOR_ENGINES,
        {},
        (2, 2),
        family="math",
        elementwise=True,
        doc=doc,
        float_only=False,
    )


_TRIG: tuple[tuple[str, Callable[..., Any], str], ...] = (
    ("Sin", np.sin, "sine"),
    ("Cos", np.cos, "cosine"),
    ("Tan", np.tan, "tangent"),
    ("Asin", np.arcsin, "inverse sine"),
    ("Acos", np.arccos, "inverse cosine"),
    ("Atan", np.arctan, "inverse tangent"),
    ("Sinh", np.sinh, "hyperbolic sine"),
    ("Cosh", np.cosh, "hyperbolic cosine"),
    ("Asinh", np.arcsinh, "inverse hyperbolic sine"),
    ("Acosh", np.arccosh, "inverse hyperbolic cosine"),
    ("Atanh", np.arctanh, "inverse hyperbolic tangent"),
)

SCHEMAS: tuple[OpSchema, ...] = (
    _unary_float("Floor", np.floor, "round toward -inf"),
    _unary_float("Ceil", np.ceil, "round toward +inf"),
    _unary_float("Round", np.rint, "round to nearest, halves to even"),
    OpSchema(
        "Sign",
        infer_like_input,
        (ufunc_impl("numpy", np.sign),),
        ALL_ENGINES,
        {},
        family="math",
        elementwise=True,
        doc="-1, 0 or 1 by the sign of x (any numeric type)",
    ),
    *(_unary_float(name, fn, doc) for name, fn, doc in _TRIG),
    OpSchema(
        "IsNaN",
        _infer_predicate,
        (ufunc_impl("numpy", np.isnan),),
        ALL_ENGINES,
        {},
        family="math",
        elementwise=True,
        doc="True where x is NaN",
    ),
    OpSchema(
        "IsInf",
        _infer_predicate,
        (returning("numpy", k.is_inf),),
        ALL_ENGINES,
        {"detect_negative": Attr("int", 1, (0, 1)), "detect_positive": Attr("int", 1, (0, 1))},
        family="math",
        elementwise=True,
        doc="True where x is an infinity of a detected sign",
    ),
    _variadic(
        "Min",
        KernelImpl("numpy", k.build_variadic(np.minimum)),
        "elementwise minimum of all inputs, broadcast",
        infer_broadcast_same_dtype,
    ),
    _variadic(
        "Max",
        KernelImpl("numpy", k.build_variadic(np.maximum)),
        "elementwise maximum of all inputs, broadcast",
        infer_broadcast_same_dtype,
    ),
    _variadic("Mean", KernelImpl("numpy", k.build_mean), "elementwise mean of all inputs, broadcast", _infer_mean),
    OpSchema(
        "Mod",
        infer_binary,
        (returning("numpy", k.mod),),
        ALL_ENGINES,
        {"fmod": Attr("int", 0, (0, 1))},
        (2, 2),
        family="math",
        elementwise=True,
        doc="remainder: the divisor's sign (fmod=0) or the dividend's (fmod=1)",
    ),
    OpSchema(
        "BitShift",
        _infer_bitwise,
        (returning("numpy", k.bit_shift),),
        VECTOR_ENGINES,
        {"direction": Attr("string", REQUIRED, ("LEFT", "RIGHT"))},
        (2, 2),
        family="math",
        elementwise=True,
        doc="x << y or x >> y on integers (arithmetic right shift when signed)",
        float_only=False,
    ),
    _bitwise("BitwiseAnd", np.bitwise_and, "a & b"),
    _bitwise("BitwiseOr", np.bitwise_or, "a | b"),
    _bitwise("BitwiseXor", np.bitwise_xor, "a ^ b"),
    OpSchema(
        "BitwiseNot",
        _infer_bit_not,
        (ufunc_impl("numpy", np.invert),),
        VECTOR_ENGINES,
        {},
        family="math",
        elementwise=True,
        doc="~x",
        float_only=False,
    ),
)
