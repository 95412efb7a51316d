"""Normalisation ops: InstanceNormalization, GroupNormalization, MeanVarianceNormalization,
LpNormalization and RMSNormalization (BatchNormalization and LayerNormalization are in
``aioge.ops.nn``).

Normalisation is vector-engine work (or AiCpu); all of these take float tensors only.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from aioge.ir.desc import TensorDesc
from aioge.kernels import norm as k
from aioge.kernels.base import returning
from aioge.ops.infer import infer_like_input, normalise_axis
from aioge.ops.schema import FLOAT_DTYPES, REQUIRED, VECTOR_ENGINES, Attr, InferContext, InferError, InferFn, OpSchema

__all__ = ["SCHEMAS"]

_FLOATS = FLOAT_DTYPES
_EPS = {"epsilon": Attr("float", 1e-5)}
_STASH = {"stash_type": Attr("int", 1)}


def _check_float(ctx: InferContext) -> None:
    if ctx.dtype(0) not in _FLOATS:
        raise InferError(f"input must be a float tensor, got {ctx.dtype(0)}")


def _channels(ctx: InferContext, names: tuple[str, ...]) -> list[TensorDesc]:
    """Inputs after the first are per-channel vectors of length C."""
    _check_float(ctx)
    shape = ctx.shape(0)
    if shape is not None and len(shape) < 2:
        raise InferError(f"input must have rank >= 2 (N, C, ...), got shape {shape}")
    for i, name in enumerate(names, start=1):
        s = ctx.shape(i)
        if s is None or shape is None:
            continue
        c = shape[1]
        if len(s) != 1 or (isinstance(s[0], int) and isinstance(c, int) and s[0] != c):
            raise InferError(f"{name} must have shape ({c},), got {s}")
    return infer_like_input(ctx)


def _infer_instance(ctx: InferContext) -> list[TensorDesc]:
    return _channels(ctx, ("scale", "B"))


def _infer_group(ctx: InferContext) -> list[TensorDesc]:
    shape = ctx.shape(0)
    g = ctx.attrs["num_groups"]
    if shape is not None and len(shape) >= 2 and isinstance(shape[1], int) and (g <= 0 or shape[1] % g):
        raise InferError(f"{shape[1]} channels do not divide into num_groups={g}")
    return _channels(ctx, ("scale", "bias"))


def _infer_mvn(ctx: InferContext) -> list[TensorDesc]:
    _check_float(ctx)
    shape = ctx.shape(0)
    if shape is not None:
        for a in ctx.attrs["axes"]:
            normalise_axis(a, len(shape))
    return infer_like_input(ctx)


def _infer_lp(ctx: InferContext) -> list[TensorDesc]:
    _check_float(ctx)
    shape = ctx.shape(0)
    if shape is not None:
        normalise_axis(ctx.attrs["axis"], len(shape))
    return infer_like_input(ctx)


def _infer_rms(ctx: InferContext) -> list[TensorDesc]:
    _check_float(ctx)
    shape = ctx.shape(0)
    if shape is not None:
        normalise_axis(ctx.attrs["axis"], len(shape))
    return infer_like_input(ctx)


def _norm(
    name: str, infer: InferFn, fn: Callable[..., Any], doc: str, attrs: Mapping[str, Attr], inputs: tuple[int, int]
) -> OpSchema:
    return OpSchema(name, infer, (returning("numpy", fn),), VECTOR_ENGINES, attrs, inputs, family="norm", doc=doc)


SCHEMAS: tuple[OpSchema, ...] = (
    _norm(
        "InstanceNormalization",
        _infer_instance,
        k.instance_normalization,
        "per-sample, per-channel normalisation with a per-channel affine",
        dict(_EPS),
        (3, 3),
    ),
    _norm(
        "GroupNormalization",
        _infer_group,
        k.group_normalization,
        "per-sample normalisation over channel groups with a per-channel affine",
        {"num_groups": Attr("int", REQUIRED), **_EPS, **_STASH},
        (3, 3),
    ),
    _norm(
        "MeanVarianceNormalization",
        _infer_mvn,
        k.mean_variance_normalization,
        "(x - mean) / std over the axes",
        {"axes": Attr("ints", (0, 2, 3))},
        (1, 1),
    ),
    _norm(
        "LpNormalization",
        _infer_lp,
        k.lp_normalization,
        "x over its L1 or L2 norm along axis",
        {"axis": Attr("int", -1), "p": Attr("int", 2, (1, 2))},
        (1, 1),
    ),
    _norm(
        "RMSNormalization",
        _infer_rms,
        k.rms_normalization,
        "x / sqrt(mean(x * x) + epsilon) * scale over the axes from axis on",
        {"axis": Attr("int", -1), **_EPS, **_STASH},
        (2, 2),
    ),
)
