"""Optional ops over tensors: OptionalHasElement and OptionalGetElement.

aioge has no optional or sequence values; an optional tensor is a tensor input that is
either given or absent, which is all these two ops need. AiCpu only (no data is computed).
"""

from __future__ import annotations

from aioge.ir.desc import TensorDesc
from aioge.kernels import optional as k
from aioge.kernels.base import returning
from aioge.ops.schema import CPU_ONLY, InferContext, InferError, OpSchema

__all__ = ["SCHEMAS"]


def _infer_has(ctx: InferContext) -> list[TensorDesc]:
    return [TensorDesc((), "bool")]


def _infer_get(ctx: InferContext) -> list[TensorDesc]:
    if not ctx.has(0):
        raise InferError("OptionalGetElement needs a value (the optional input is absent)")
    return [TensorDesc(ctx.shape(0), ctx.dtype(0))]


SCHEMAS: tuple[OpSchema, ...] = (
    OpSchema(
        "OptionalHasElement",
        _infer_has,
        (returning("numpy", k.optional_has_element),),
        CPU_ONLY,
        {},
        (0, 1),
        family="optional",
        doc="whether the optional input is given",
        float_only=False,
    ),
    OpSchema(
        "OptionalGetElement",
        _infer_get,
        (returning("numpy", k.optional_get_element),),
        CPU_ONLY,
        {},
        (1, 1),
        family="optional",
        doc="the value of a given optional tensor",
        float_only=False,
    ),
)
