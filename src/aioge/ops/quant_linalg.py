"""Integer matrix products and convolutions: MatMulInteger, QLinearMatMul, ConvInteger and
QLinearConv, and the quantised ops onnxruntime's quantizer writes in its own domain
(com.microsoft: QGemm, DynamicQuantizeMatMul, QLinearAdd, QLinearGlobalAveragePool).

Integer products are what the AiCore's cube unit is built for, so every engine takes them
(``float_only`` is off: their inputs are integers by definition).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from aioge.ir.desc import Dim, TensorDesc
from aioge.kernels import quant_linalg as k
from aioge.kernels.base import returning
from aioge.kernels.contract import KernelImpl
from aioge.kernels.conv import window_geometry
from aioge.ops.schema import ALL_ENGINES, Attr, InferContext, InferError, InferFn, OpSchema

__all__ = ["SCHEMAS"]

_INT8 = ("int8", "uint8")
_CONV_ATTRS = {
    "auto_pad": Attr("string", "NOTSET", ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")),
    "dilations": Attr("ints"),
    "group": Attr("int", 1),
    "kernel_shape": Attr("ints"),
    "pads": Attr("ints"),
    "strides": Attr("ints"),
}


def _matmul_shape(a: tuple[Dim, ...] | None, b: tuple[Dim, ...] | None) -> tuple[Dim, ...] | None:
    if a is None or b is None:
        return None
    if len(a) < 1 or len(b) < 1:
        raise InferError(f"matrix products need rank >= 1, got shapes {a} and {b}")
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    if isinstance(a2[-1], int) and isinstance(b2[-2], int) and a2[-1] != b2[-2]:
        raise InferError(f"inner dimensions differ: {a} @ {b}")
    from aioge.ops.infer import broadcast_shapes

    batch = broadcast_shapes(a2[:-2], b2[:-2])
    assert batch is not None
    out = (*batch, a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _check_int8(ctx: InferContext, *indices: int) -> None:
    for i in indices:
        if ctx.has(i) and ctx.dtype(i) not in _INT8:
            raise InferError(f"input {i} must be int8 or uint8, got {ctx.dtype(i)}")


def _infer_matmul_integer(ctx: InferContext) -> list[TensorDesc]:
    _check_int8(ctx, 0, 1, 2, 3)
    return [TensorDesc(_matmul_shape(ctx.shape(0), ctx.shape(1)), "int32")]


def _infer_qlinear_matmul(ctx: InferContext) -> list[TensorDesc]:
    _check_int8(ctx, 0, 2, 3, 5, 7)
    return [TensorDesc(_matmul_shape(ctx.shape(0), ctx.shape(3)), ctx.dtype(7))]


def _conv_shape(ctx: InferContext, xi: int, wi: int) -> tuple[Dim, ...] | None:
    x, w = ctx.shape(xi), ctx.shape(wi)
    if x is None or w is None or not all(isinstance(d, int) for d in (*x[2:], *w)):
        return None
    nd = len(x) - 2
    a = ctx.attrs
    kernel = list(a.get("kernel_shape") or w[2:])
    try:
        _, _, out = window_geometry(
            [int(d) for d in x[2:]],
            kernel,
            list(a.get("strides") or [1] * nd),
            list(a.get("dilations") or [1] * nd),
            list(a.get("pads") or [0] * (2 * nd)),
            a["auto_pad"],
        )
    except ValueError as exc:
        raise InferError(str(exc)) from None
    return (x[0], w[0], *out)


def _infer_conv_integer(ctx: InferContext) -> list[TensorDesc]:
    _check_int8(ctx, 0, 1, 2, 3)
    return [TensorDesc(_conv_shape(ctx, 0, 1), "int32")]


def _infer_qlinear_conv(ctx: InferContext) -> list[TensorDesc]:
    _check_int8(ctx, 0, 2, 3, 5, 7)
    if ctx.has(8) and ctx.dtype(8) != "int32":
        raise InferError(f"B must be int32, got {ctx.dtype(8)}")
    return [TensorDesc(_conv_shape(ctx, 0, 3), ctx.dtype(7))]


def _infer_qgemm(ctx: InferContext) -> list[TensorDesc]:
    _check_int8(ctx, 0, 2, 3, 5, 8)
    a, b = ctx.shape(0), ctx.shape(3)
    if a is not None and b is not None:
        if len(a) != 2 or len(b) != 2:
            raise InferError(f"QGemm takes matrices, got shapes {a} and {b}")
        a = a[::-1] if ctx.attrs["transA"] else a
        b = b[::-1] if ctx.attrs["transB"] else b
    shape = _matmul_shape(a, b)
    return [TensorDesc(shape, ctx.dtype(8) if ctx.has(8) else ("float32" if not ctx.has(7) else "uint8"))]


def _infer_dynamic_matmul(ctx: InferContext) -> list[TensorDesc]:
    _check_int8(ctx, 1, 3)
    if ctx.has(0) and ctx.dtype(0) != "float32":
        raise InferError(f"A must be float32, got {ctx.dtype(0)}")
    return [TensorDesc(_matmul_shape(ctx.shape(0), ctx.shape(1)), "float32")]


def _infer_qlinear_add(ctx: InferContext) -> list[TensorDesc]:
    _check_int8(ctx, 0, 3)
    if ctx.has(0) and ctx.has(3) and ctx.dtype(0) != ctx.dtype(3):
        raise InferError(f"A and B must have one dtype, got {ctx.dtype(0)} and {ctx.dtype(3)}")
    from aioge.ops.infer import broadcast_shapes

    return [TensorDesc(broadcast_shapes(ctx.shape(0), ctx.shape(3)), ctx.dtype(0))]


def _infer_qlinear_gap(ctx: InferContext) -> list[TensorDesc]:
    _check_int8(ctx, 0)
    x = ctx.shape(0)
    if x is None:
        return [TensorDesc(None, ctx.dtype(0))]
    if len(x) < 3:
        raise InferError(f"X needs rank >= 3, got shape {x}")
    out = (x[0], *([1] * (len(x) - 2)), x[-1]) if ctx.attrs["channels_last"] else (x[0], x[1], *([1] * (len(x) - 2)))
    return [TensorDesc(out, ctx.dtype(0))]


def _op(
    name: str,
    infer: InferFn,
    fn: Callable[..., Any] | None,
    inputs: tuple[int, int],
    doc: str,
    attrs: Mapping[str, Attr] | None = None,
    domain: str = "",
) -> OpSchema:
    impl = returning("numpy", fn) if fn is not None else KernelImpl("numpy", k.build_qlinear(name))
    return OpSchema(
        name,
        infer,
        (impl,),
        ALL_ENGINES,
        attrs or {},
        inputs,
        domain=domain,
        family="quant_linalg",
        float_only=False,
        doc=doc,
        version=2,
    )


_MS = "com.microsoft"
SCHEMAS: tuple[OpSchema, ...] = (
    _op("MatMulInteger", _infer_matmul_integer, None, (2, 4), "int32 (A - za) @ (B - zb)"),
    _op("QLinearMatMul", _infer_qlinear_matmul, None, (8, 8), "quantised matmul with requantisation"),
    _op("ConvInteger", _infer_conv_integer, None, (2, 4), "int32 convolution of zero-point-shifted inputs", _CONV_ATTRS),
    _op("QLinearConv", _infer_qlinear_conv, None, (8, 9), "quantised convolution with requantisation", _CONV_ATTRS),
    _op(
        "QGemm",
        _infer_qgemm,
        None,
        (6, 9),
        "onnxruntime's quantised Gemm: alpha (A - za)(B - zb) + C (int32), requantised, or float without y_scale",
        {"alpha": Attr("float", 1.0), "transA": Attr("int", 0), "transB": Attr("int", 0)},
        _MS,
    ),
    _op(
        "DynamicQuantizeMatMul",
        _infer_dynamic_matmul,
        None,
        (3, 5),
        "onnxruntime's float matmul through int8: A quantised as DynamicQuantizeLinear, times B - zb, scaled, plus bias",
        None,
        _MS,
    ),
    _op("QLinearAdd", _infer_qlinear_add, k.qlinear_add, (7, 8), "onnxruntime's quantised Add", None, _MS),
    _op("QdqAdd", _infer_qlinear_add, k.qdq_add, (8, 8), "DQ(a) + DQ(b) -> Q as the three round, one pass", None, "aioge"),
    _op(
        "QLinearGlobalAveragePool",
        _infer_qlinear_gap,
        k.qlinear_global_average_pool,
        (4, 5),
        "onnxruntime's quantised GlobalAveragePool",
        {"channels_last": Attr("int", 0)},
        _MS,
    ),
)
