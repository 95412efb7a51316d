"""Elementwise ops: numpy broadcasting arithmetic, math functions and activations."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from aioge.ir.desc import TensorDesc
from aioge.kernels import elementwise as k
from aioge.kernels import native
from aioge.kernels.base import one_call, returning, ufunc_impl
from aioge.ops.infer import infer_binary, infer_broadcast_same_dtype, infer_like_input
from aioge.ops.schema import ALL_ENGINES, CPU_ONLY, REQUIRED, Attr, InferContext, InferError, KernelImpl, OpSchema

__all__ = ["SCHEMAS"]


def _unary(name: str, impl: KernelImpl, doc: str, attrs: dict[str, Attr] | None = None, engines=ALL_ENGINES) -> OpSchema:
    return OpSchema(name, infer_like_input, (impl,), engines, attrs or {}, family="elementwise", elementwise=True, doc=doc)


def _binary(name: str, impl: KernelImpl, doc: str) -> OpSchema:
    return OpSchema(name, infer_binary, (impl,), ALL_ENGINES, {}, (2, 2), family="elementwise", elementwise=True, doc=doc)


def _fn(name: str, fn: Callable[..., Any]) -> KernelImpl:
    return returning(name, fn)


def _activation(name: str) -> Any:
    """The native form of Relu or Tanh on its own (T5's Relu after a bias-free MatMul, BERT's
    pooler Tanh) as the C activation job: what the op's own run computes, to the bit."""

    def call(ins: Any, outs: Any) -> native.NativeCall | None:
        from aioge.kernels import native_rows

        return native_rows.activation_call(name, ins[0], outs[0])

    return lambda kw: one_call(call)


def _infer_pow(ctx: InferContext) -> list[TensorDesc]:
    from aioge.ops.infer import broadcast_shapes

    return [TensorDesc(broadcast_shapes(ctx.shape(0), ctx.shape(1)), ctx.dtype(0))]


def _infer_where(ctx: InferContext) -> list[TensorDesc]:
    from aioge.ops.infer import broadcast_shapes

    if ctx.dtype(0) != "bool":
        raise InferError(f"condition must be bool, got {ctx.dtype(0)}")
    if ctx.dtype(1) != ctx.dtype(2):
        raise InferError(f"X and Y must share a dtype, got {ctx.dtype(1)} and {ctx.dtype(2)}")
    return [TensorDesc(broadcast_shapes(ctx.shape(0), ctx.shape(1), ctx.shape(2)), ctx.dtype(1))]


def _infer_clip(ctx: InferContext) -> list[TensorDesc]:
    for i in (1, 2):
        if ctx.has(i) and ctx.dtype(i) != ctx.dtype(0):
            raise InferError(f"input {i} must have dtype {ctx.dtype(0)}, got {ctx.dtype(i)}")
    return infer_like_input(ctx)


def _infer_cast(ctx: InferContext) -> list[TensorDesc]:
    from aioge.ir.desc import canonical_dtype

    return [TensorDesc(ctx.shape(0), canonical_dtype(ctx.attrs["to"]))]


def _cast(x: np.ndarray, to: str, saturate: int = 1, round_mode: str = "up") -> np.ndarray:
    from aioge.kernels.convert import cast

    if to == "str":
        return np.vectorize(_to_str, otypes=[object])(x) if x.size else x.astype(object)
    return cast(x, to, saturate, round_mode)


def _to_str(v: Any) -> str:
    if isinstance(v, (float, np.floating)):
        return repr(float(v)) if not float(v).is_integer() else str(float(v))
    return str(v)


_ALPHA = {"alpha": Attr("float", 0.01)}

SCHEMAS: tuple[OpSchema, ...] = (
    _binary("Add", ufunc_impl("numpy", np.add), "a + b with numpy broadcasting"),
    _binary("Sub", ufunc_impl("numpy", np.subtract), "a - b with numpy broadcasting"),
    _binary("Mul", ufunc_impl("numpy", np.multiply), "a * b with numpy broadcasting"),
    _binary("Div", _fn("numpy", k.div), "a / b; integer division truncates toward zero"),
    OpSchema(
        "Pow",
        _infer_pow,
        (_fn("numpy", k.pow_),),
        ALL_ENGINES,
        {},
        (2, 2),
        family="elementwise",
        elementwise=True,
        doc="a ** b; the result has a's dtype",
    ),
    _unary("Sqrt", ufunc_impl("numpy", np.sqrt), "square root"),
    _unary("Exp", ufunc_impl("numpy", np.exp), "e ** x"),
    _unary("Log", ufunc_impl("numpy", np.log), "natural logarithm"),
    _unary("Neg", ufunc_impl("numpy", np.negative), "-x"),
    _unary("Abs", ufunc_impl("numpy", np.absolute), "|x|"),
    _unary("Reciprocal", ufunc_impl("numpy", np.reciprocal), "1 / x"),
    _unary("Tanh", returning("numpy", k.tanh, form=_activation("Tanh")), "hyperbolic tangent"),
    _unary("Relu", returning("numpy", k.relu, form=_activation("Relu")), "max(x, 0)"),
    _unary("LeakyRelu", _fn("numpy", k.leaky_relu), "x if x >= 0 else alpha * x", _ALPHA),
    _unary("Sigmoid", _fn("numpy", k.sigmoid), "1 / (1 + e ** -x), overflow-free"),
    _unary("Erf", _fn("numpy", k.erf), "the error function"),
    _unary(
        "Gelu",
        _fn("numpy", k.gelu),
        "x * Phi(x), exact (erf) or tanh-approximated",
        {"approximate": Attr("string", "none", ("none", "tanh"))},
    ),
    _unary(
        "HardSigmoid",
        _fn("numpy", k.hard_sigmoid),
        "max(0, min(1, alpha * x + beta))",
        {"alpha": Attr("float", 0.2), "beta": Attr("float", 0.5)},
    ),
    OpSchema(
        "Clip",
        _infer_clip,
        (_fn("numpy", k.clip),),
        ALL_ENGINES,
        {},
        (1, 3),
        family="elementwise",
        elementwise=True,
        doc="min(max(x, lo), hi); lo and hi are optional inputs",
    ),
    OpSchema(
        "Where",
        _infer_where,
        (returning("numpy", np.where, form=lambda kw: one_call(lambda i, o: native.elemwise(native.EW_WHERE, o[0], *i))),),
        ALL_ENGINES,
        {},
        (3, 3),
        family="elementwise",
        elementwise=True,
        doc="condition ? x : y with broadcasting",
        float_only=False,
    ),
    OpSchema(
        "Sum",
        infer_broadcast_same_dtype,
        (_fn("numpy", lambda *xs: np.sum(np.broadcast_arrays(*xs), axis=0).astype(xs[0].dtype)),),
        ALL_ENGINES,
        {},
        (1, -1),
        family="elementwise",
        elementwise=True,
        doc="elementwise sum of all inputs",
    ),
    OpSchema(
        "Cast",
        _infer_cast,
        (returning("numpy", _cast, form=lambda kw: one_call(lambda i, o: native.elemwise(native.EW_CAST, o[0], i[0]))),),
        CPU_ONLY,
        {
            "to": Attr("dtype", REQUIRED),
            "saturate": Attr("int", 1),
            "round_mode": Attr("string", "up", ("up", "down", "nearest")),
        },
        family="elementwise",
        elementwise=True,
        doc="convert to another dtype (saturate, round_mode: for float8 and float4 targets)",
        float_only=False,
    ),
    _unary("Identity", _fn("numpy", np.copy), "a copy of x", engines=ALL_ENGINES),
)
