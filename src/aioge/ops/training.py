"""Optimiser ops of the ai.onnx.preview.training domain: Adagrad, Momentum and Adam.

Whole-tensor update arithmetic for the vector engine; the step count T is an int64 input,
so ``float_only`` is off. Inputs are R, T, then equal groups (X..., G..., states...); the
outputs are the updated X... and states..., one desc per tensor like its input.
"""

from __future__ import annotations

from typing import Any, Callable

from aioge.ir.desc import TensorDesc
from aioge.kernels import training as k
from aioge.kernels.optional_outputs import returning_some
from aioge.ops.schema import REQUIRED, VECTOR_ENGINES, Attr, InferContext, InferError, InferFn, OpSchema

__all__ = ["SCHEMAS"]

DOMAIN = "ai.onnx.preview.training"


def _infer(groups: int, op: str) -> InferFn:
    def infer(ctx: InferContext) -> list[TensorDesc]:
        for i, name in ((0, "R"), (1, "T")):
            s = ctx.shape(i)
            if s is not None and len(s) not in (0, 1):
                raise InferError(f"{name} must be a scalar, got shape {s}")
        rest = list(range(2, len(ctx.inputs)))
        if not rest or len(rest) % groups:
            raise InferError(f"{op} takes R, T and {groups} equal groups of tensors, got {len(rest)} tensors")
        n = len(rest) // groups
        kept = [g for g in range(groups) if g != 1]  # every group but the gradients comes back
        return [TensorDesc(ctx.shape(2 + g * n + i), ctx.dtype(2 + g * n + i)) for g in kept for i in range(n)]

    return infer


def _op(name: str, fn: Callable[..., Any], groups: int, attrs: dict[str, Attr], doc: str) -> OpSchema:
    return OpSchema(
        name,
        _infer(groups, name),
        (returning_some("numpy", fn),),
        VECTOR_ENGINES,
        attrs,
        (2 + groups, -1),
        (1, -1),
        domain=DOMAIN,
        family="training",
        float_only=False,
        doc=doc,
    )


SCHEMAS: tuple[OpSchema, ...] = (
    _op(
        "Adagrad",
        k.adagrad,
        3,
        {"decay_factor": Attr("float", 0.0), "epsilon": Attr("float", 1e-6), "norm_coefficient": Attr("float", 0.0)},
        "Adagrad updates of tensors X with gradients G and accumulated squares H",
    ),
    _op(
        "Momentum",
        k.momentum,
        3,
        {
            "alpha": Attr("float", REQUIRED),
            "beta": Attr("float", REQUIRED),
            "mode": Attr("string", REQUIRED, ("standard", "nesterov")),
            "norm_coefficient": Attr("float", REQUIRED),
        },
        "momentum (or Nesterov) updates of tensors X with gradients G and velocities V",
    ),
    _op(
        "Adam",
        k.adam,
        4,
        {
            "alpha": Attr("float", 0.9),
            "beta": Attr("float", 0.999),
            "epsilon": Attr("float", 1e-6),
            "norm_coefficient": Attr("float", 0.0),
            "norm_coefficient_post": Attr("float", 0.0),
        },
        "Adam updates of tensors X with gradients G, first moments V and second moments H",
    ),
)
