"""Loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Both gather by class index and reduce, which is vector-engine work; their integer targets
are legitimate inputs, so ``float_only`` is off.
"""

from __future__ import annotations

from aioge.ir.desc import TensorDesc
from aioge.kernels import loss as k
from aioge.kernels.base import returning
from aioge.kernels.optional_outputs import returning_some
from aioge.ops.schema import FLOAT_DTYPES, VECTOR_ENGINES, Attr, InferContext, InferError, OpSchema

__all__ = ["SCHEMAS"]

_FLOATS = FLOAT_DTYPES
_ATTRS = {"ignore_index": Attr("int"), "reduction": Attr("string", "mean", ("none", "sum", "mean"))}


def _loss_desc(ctx: InferContext) -> TensorDesc:
    if ctx.dtype(0) not in _FLOATS:
        raise InferError(f"input must be a float tensor, got {ctx.dtype(0)}")
    if ctx.dtype(1) not in ("int32", "int64"):
        raise InferError(f"target must be int32 or int64, got {ctx.dtype(1)}")
    x, t = ctx.shape(0), ctx.shape(1)
    if x is not None and t is not None:
        if len(x) < 2 or len(t) != len(x) - 1:
            raise InferError(f"target of shape {t} does not fit input of shape {x} (N, C, d1, ...)")
    if ctx.has(2):
        if ctx.dtype(2) != ctx.dtype(0):
            raise InferError(f"weight must have the input's dtype {ctx.dtype(0)}, got {ctx.dtype(2)}")
    if ctx.attrs["reduction"] == "none":
        return TensorDesc(t, ctx.dtype(0))
    return TensorDesc((), ctx.dtype(0))


def _infer_nll(ctx: InferContext) -> list[TensorDesc]:
    return [_loss_desc(ctx)]


def _infer_sce(ctx: InferContext) -> list[TensorDesc]:
    return [_loss_desc(ctx), TensorDesc(ctx.shape(0), ctx.dtype(0))]


SCHEMAS: tuple[OpSchema, ...] = (
    OpSchema(
        "NegativeLogLikelihoodLoss",
        _infer_nll,
        (returning("numpy", k.negative_log_likelihood_loss),),
        VECTOR_ENGINES,
        _ATTRS,
        (2, 3),
        family="loss",
        float_only=False,
        doc="-input[n, target[n]] * weight[target[n]], reduced by none, sum or a weighted mean",
    ),
    OpSchema(
        "SoftmaxCrossEntropyLoss",
        _infer_sce,
        (returning_some("numpy", k.softmax_cross_entropy_loss),),
        VECTOR_ENGINES,
        _ATTRS,
        (2, 3),
        (1, 2),
        family="loss",
        float_only=False,
        doc="the NLL loss of log_softmax(scores) over the classes, and optionally the log-probabilities",
    ),
)
