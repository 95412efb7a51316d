"""More reductions: ReduceProd, ReduceMin, ReduceL1, ReduceL2, ReduceSumSquare,
ReduceLogSum and ReduceLogSumExp (opset 18 form: the axes are an optional int64 input).

Reductions run on the vector engine or AiCpu; integer data goes to AiCpu.
"""

from __future__ import annotations

from typing import Callable

from aioge.ir.desc import TensorDesc
from aioge.kernels import reduce_extra as k
from aioge.ops.reduce import REDUCE_ATTRS, infer_reduce, infer_reduce_or_bool
from aioge.ops.schema import VECTOR_ENGINES, InferContext, KernelImpl, OpSchema

__all__ = ["SCHEMAS"]


def _reduce(name: str, kind: str, doc: str, infer: Callable[[InferContext], list[TensorDesc]] = infer_reduce) -> OpSchema:
    return OpSchema(
        name,
        infer,
        (KernelImpl("numpy", k.build_reduction(kind)),),
        VECTOR_ENGINES,
        REDUCE_ATTRS,
        (1, 2),
        family="reduce",
        doc=doc,
    )


SCHEMAS: tuple[OpSchema, ...] = (
    _reduce("ReduceProd", "prod", "product over the axes"),
    _reduce("ReduceMin", "min", "minimum over the axes", infer_reduce_or_bool),
    _reduce("ReduceL1", "l1", "sum of |x| over the axes"),
    _reduce("ReduceL2", "l2", "sqrt of the sum of x * x over the axes"),
    _reduce("ReduceSumSquare", "sum_square", "sum of x * x over the axes"),
    _reduce("ReduceLogSum", "log_sum", "log of the sum over the axes"),
    _reduce("ReduceLogSumExp", "log_sum_exp", "log of the sum of e^x over the axes, overflow-free"),
)
