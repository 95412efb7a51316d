"""Activation ops beyond the basics: the ELU family, soft/hard variants, PRelu, Shrink,
Swish, SwiGLU and Hardmax.

Activations run on the vector engine (or AiCpu); integer inputs, where a spec allows them
(PRelu, Shrink), go to AiCpu.
"""

from __future__ import annotations

from typing import Any, Callable

from aioge.ir.desc import TensorDesc
from aioge.kernels import activation as k
from aioge.kernels.base import returning
from aioge.ops.infer import broadcast_shapes, infer_like_input, normalise_axis
from aioge.ops.schema import FLOAT_DTYPES, VECTOR_ENGINES, Attr, InferContext, InferError, KernelImpl, OpSchema

__all__ = ["SCHEMAS"]

_FLOATS = FLOAT_DTYPES


def _infer_float(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(0) not in _FLOATS:
        raise InferError(f"input must be a float tensor, got {ctx.dtype(0)}")
    return infer_like_input(ctx)


def _infer_prelu(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(1) != ctx.dtype(0):
        raise InferError(f"slope must have X's dtype {ctx.dtype(0)}, got {ctx.dtype(1)}")
    x, slope = ctx.shape(0), ctx.shape(1)
    if x is not None and slope is not None and broadcast_shapes(x, slope) != tuple(x):
        raise InferError(f"slope of shape {slope} does not broadcast to X's shape {x}")
    return infer_like_input(ctx)


def _infer_swiglu(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(0) not in _FLOATS or ctx.dtype(1) != ctx.dtype(0):
        raise InferError(f"A and B must be float tensors of one dtype, got {ctx.dtype(0)} and {ctx.dtype(1)}")
    a, b = ctx.shape(0), ctx.shape(1)
    if a is not None and b is not None and tuple(a) != tuple(b):
        raise InferError(f"A and B must have one shape (no broadcasting), got {a} and {b}")
    return infer_like_input(ctx)


def _infer_hardmax(ctx: InferContext) -> list[TensorDesc]:
    shape = ctx.shape(0)
    if shape is not None:
        normalise_axis(ctx.attrs["axis"], len(shape))
    return _infer_float(ctx)


def _act(name: str, fn: Callable[..., Any], doc: str, attrs: dict[str, Attr] | None = None) -> OpSchema:
    return OpSchema(
        name,
        _infer_float,
        (returning("numpy", fn),),
        VECTOR_ENGINES,
        attrs or {},
        family="activation",
        elementwise=True,
        doc=doc,
    )


def _alpha(default: float) -> dict[str, Attr]:
    return {"alpha": Attr("float", default)}


SCHEMAS: tuple[OpSchema, ...] = (
    _act("Elu", k.elu, "x for x >= 0, alpha * (e^x - 1) below", _alpha(1.0)),
    _act(
        "Selu",
        k.selu,
        "gamma * (x for x > 0, alpha * (e^x - 1) otherwise)",
        {"alpha": Attr("float", 1.67326319217681884765625), "gamma": Attr("float", 1.05070102214813232421875)},
    ),
    _act("Celu", k.celu, "max(0, x) + min(0, alpha * (e^(x / alpha) - 1))", _alpha(1.0)),
    _act("Softplus", k.softplus, "log(1 + e^x)"),
    _act("Softsign", k.softsign, "x / (1 + |x|)"),
    _act("ThresholdedRelu", k.thresholded_relu, "x where x > alpha, else 0", _alpha(1.0)),
    _act("HardSwish", k.hard_swish, "x * max(0, min(1, x / 6 + 1 / 2))"),
    _act("Mish", k.mish, "x * tanh(softplus(x))"),
    _act("Swish", k.swish, "x * sigmoid(alpha * x)", _alpha(1.0)),
    OpSchema(
        "PRelu",
        _infer_prelu,
        (returning("numpy", k.prelu),),
        VECTOR_ENGINES,
        {},
        (2, 2),
        family="activation",
        elementwise=True,
        doc="x where x >= 0, slope * x below (slope broadcasts to x)",
    ),
    OpSchema(
        "Shrink",
        infer_like_input,
        (returning("numpy", k.shrink),),
        VECTOR_ENGINES,
        {"bias": Attr("float", 0.0), "lambd": Attr("float", 0.5)},
        family="activation",
        elementwise=True,
        doc="x + bias below -lambd, x - bias above lambd, else 0",
    ),
    OpSchema(
        "SwiGLU",
        _infer_swiglu,
        (returning("numpy", k.swiglu),),
        VECTOR_ENGINES,
        _alpha(1.0),
        (2, 2),
        family="activation",
        elementwise=True,
        doc="swish(A, alpha) * B for A and B of one shape",
    ),
    OpSchema(
        "Hardmax",
        _infer_hardmax,
        (KernelImpl("numpy", k.build_hardmax),),
        VECTOR_ENGINES,
        {"axis": Attr("int", -1)},
        family="activation",
        doc="1 at the first maximum along axis, else 0",
    ),
)
