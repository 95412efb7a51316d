"""Comparison and logical ops: broadcasting predicates that produce bool tensors.

The comparisons are numpy ufuncs writing straight into the bool output, so they need no
kernel module of their own. Comparing floats runs on every engine (integer operands go to
AiCpu); the logical ops take bools, which the vector engine handles (``float_only=False``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from aioge.ir.desc import TensorDesc
from aioge.kernels.base import ufunc_impl
from aioge.ops.infer import infer_binary
from aioge.ops.schema import ALL_ENGINES, VECTOR_ENGINES, InferContext, InferError, OpSchema

__all__ = ["SCHEMAS"]


def _infer_compare(ctx: InferContext) -> list[TensorDesc]:
    return infer_binary(ctx, "bool")


def _infer_logical(ctx: InferContext) -> list[TensorDesc]:
    for i in range(len(ctx.inputs)):
        if ctx.dtype(i) != "bool":
            raise InferError(f"input {i} must be bool, got {ctx.dtype(i)}")
    return infer_binary(ctx, "bool")


def _compare(name: str, ufunc: Callable[..., Any], doc: str) -> OpSchema:
    return OpSchema(
        name,
        _infer_compare,
        (ufunc_impl("numpy", ufunc),),
        ALL_ENGINES,
        {},
        (2, 2),
        family="compare",
        elementwise=True,
        doc=doc,
    )


def _logical(name: str, ufunc: Callable[..., Any], doc: str, arity: int = 2) -> OpSchema:
    return OpSchema(
        name,
        _infer_logical,
        (ufunc_impl("numpy", ufunc),),
        VECTOR_ENGINES,
        {},
        (arity, arity),
        family="compare",
        elementwise=True,
        doc=doc,
        float_only=False,
    )


SCHEMAS: tuple[OpSchema, ...] = (
    _compare("Equal", np.equal, "a == b, broadcast (numbers, bools or strings)"),
    _compare("Less", np.less, "a < b, broadcast"),
    _compare("LessOrEqual", np.less_equal, "a <= b, broadcast"),
    _compare("Greater", np.greater, "a > b, broadcast"),
    _compare("GreaterOrEqual", np.greater_equal, "a >= b, broadcast"),
    _logical("And", np.logical_and, "a and b, broadcast"),
    _logical("Or", np.logical_or, "a or b, broadcast"),
    _logical("Xor", np.logical_xor, "a xor b, broadcast"),
    _logical("Not", np.logical_not, "not x", arity=1),
)
