"""Ops of the ai.onnx.ml domain: Binarizer, ArrayFeatureExtractor, LabelEncoder and TreeEnsemble.

Classic-ML preprocessing and trees are AiCpu work (table lookups, branching).
"""

from __future__ import annotations

from typing import Mapping

from aioge.ir.desc import TensorDesc
from aioge.kernels import ml as k
from aioge.kernels.base import returning
from aioge.ops.schema import CPU_ONLY, REQUIRED, Attr, InferContext, InferError, InferFn, KernelImpl, OpSchema

__all__ = ["SCHEMAS"]

DOMAIN = "ai.onnx.ml"


def _infer_binarizer(ctx: InferContext) -> list[TensorDesc]:
    return [TensorDesc(ctx.shape(0), ctx.dtype(0))]


def _infer_feature_extractor(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(1) not in ("int64", "int32"):
        raise InferError(f"Y must be int64, got {ctx.dtype(1)}")
    x, y = ctx.shape(0), ctx.shape(1)
    if x is None or y is None or not all(isinstance(d, int) for d in y):
        return [TensorDesc(None, ctx.dtype(0))]
    n = 1
    for d in y:
        n *= int(d)
    return [TensorDesc((1, n) if len(x) == 1 else (*x[:-1], n), ctx.dtype(0))]


def _infer_label_encoder(ctx: InferContext) -> list[TensorDesc]:
    try:
        _, _, _, dtype = k.label_encoder_table(ctx.attrs)
    except ValueError as exc:
        raise InferError(str(exc)) from None
    return [TensorDesc(ctx.shape(0), dtype)]


def _infer_tree_ensemble(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.shape(0)
    if ctx.dtype(0) not in ("float16", "float32", "float64"):
        raise InferError(f"X must be a float tensor, got {ctx.dtype(0)}")
    if x is not None and len(x) != 2:
        raise InferError(f"X must be (samples, features), got shape {x}")
    return [TensorDesc(None if x is None else (x[0], ctx.attrs["n_targets"]), ctx.dtype(0))]


_LABEL_ATTRS = {
    name: Attr(kind)
    for name, kind in (
        ("default_float", "float"),
        ("default_int64", "int"),
        ("default_string", "string"),
        ("default_tensor", "tensor"),
        ("keys_floats", "floats"),
        ("keys_int64s", "ints"),
        ("keys_strings", "strings"),
        ("keys_tensor", "tensor"),
        ("values_floats", "floats"),
        ("values_int64s", "ints"),
        ("values_strings", "strings"),
        ("values_tensor", "tensor"),
    )
}
_TREE_ATTRS = {
    "aggregate_function": Attr("int", 1, (0, 1, 2, 3)),
    "leaf_targetids": Attr("ints", REQUIRED),
    "leaf_weights": Attr("tensor", REQUIRED),
    "membership_values": Attr("tensor"),
    "n_targets": Attr("int", REQUIRED),
    "nodes_falseleafs": Attr("ints", REQUIRED),
    "nodes_falsenodeids": Attr("ints", REQUIRED),
    "nodes_featureids": Attr("ints", REQUIRED),
    "nodes_hitrates": Attr("tensor"),
    "nodes_missing_value_tracks_true": Attr("ints"),
    "nodes_modes": Attr("tensor", REQUIRED),
    "nodes_splits": Attr("tensor", REQUIRED),
    "nodes_trueleafs": Attr("ints", REQUIRED),
    "nodes_truenodeids": Attr("ints", REQUIRED),
    "post_transform": Attr("int", 0, (0, 1, 2, 3, 4)),
    "tree_roots": Attr("ints", REQUIRED),
}


def _op(
    name: str, infer: InferFn, impl: KernelImpl, attrs: Mapping[str, Attr], doc: str, inputs: tuple[int, int] = (1, 1)
) -> OpSchema:
    return OpSchema(name, infer, (impl,), CPU_ONLY, attrs, inputs, domain=DOMAIN, family="ml", doc=doc, float_only=False)


SCHEMAS: tuple[OpSchema, ...] = (
    _op(
        "Binarizer",
        _infer_binarizer,
        returning("numpy", k.binarizer),
        {"threshold": Attr("float", 0.0)},
        "1 where x > threshold, else 0",
    ),
    _op(
        "ArrayFeatureExtractor",
        _infer_feature_extractor,
        returning("numpy", k.array_feature_extractor),
        {},
        "the last axis at the given indices",
        (2, 2),
    ),
    _op(
        "LabelEncoder",
        _infer_label_encoder,
        KernelImpl("numpy", k.build_label_encoder),
        _LABEL_ATTRS,
        "map every element through a key -> value table",
    ),
    _op(
        "TreeEnsemble",
        _infer_tree_ensemble,
        KernelImpl("numpy", k.build_tree_ensemble),
        _TREE_ATTRS,
        "evaluate a tree ensemble (branch modes incl. set membership) and aggregate the leaves",
    ),
)
