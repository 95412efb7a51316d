"""String and text ops: StringConcat, StringNormalizer, StringSplit, RegexFullMatch and
TfIdfVectorizer (AiCpu only: no NPU engine handles strings or n-gram tables)."""

from __future__ import annotations

import re
from typing import Mapping

from aioge.ir.desc import TensorDesc
from aioge.kernels import strings as k
from aioge.kernels.base import returning
from aioge.kernels.optional_outputs import returning_some
from aioge.ops.infer import broadcast_shapes
from aioge.ops.schema import CPU_ONLY, REQUIRED, Attr, InferContext, InferError, InferFn, KernelImpl, OpSchema

__all__ = ["SCHEMAS"]


def _strings(ctx: InferContext, *indices: int) -> None:
    for i in indices:
        if ctx.dtype(i) != "str":
            raise InferError(f"input {i} must be a string tensor, got {ctx.dtype(i)}")


def _infer_concat(ctx: InferContext) -> list[TensorDesc]:
    _strings(ctx, 0, 1)
    return [TensorDesc(broadcast_shapes(ctx.shape(0), ctx.shape(1)), "str")]


def _infer_normalizer(ctx: InferContext) -> list[TensorDesc]:
    _strings(ctx, 0)
    shape = ctx.shape(0)
    if shape is not None and (len(shape) not in (1, 2) or len(shape) == 2 and shape[0] not in (1, "?")):
        raise InferError(f"StringNormalizer takes a (C,) or (1, C) tensor, got shape {shape}")
    return [TensorDesc(None, "str")]  # how many words survive is only known at run time


def _infer_split(ctx: InferContext) -> list[TensorDesc]:
    _strings(ctx, 0)
    m = ctx.attrs.get("maxsplit")
    if m is not None and m < 0:
        raise InferError(f"maxsplit must be >= 0, got {m}")
    return [TensorDesc(None, "str"), TensorDesc(ctx.shape(0), "int64")]


def _pattern(p: str) -> str | None:
    try:
        re.compile(p)
    except re.error as exc:
        return f"not a valid regular expression: {exc}"
    return None


def _infer_regex(ctx: InferContext) -> list[TensorDesc]:
    _strings(ctx, 0)
    return [TensorDesc(ctx.shape(0), "bool")]


def _infer_tfidf(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(0) not in ("str", "int32", "int64"):
        raise InferError(f"X must be strings, int32 or int64, got {ctx.dtype(0)}")
    a = ctx.attrs
    if (a.get("pool_int64s") is None) == (a.get("pool_strings") is None):
        raise InferError("exactly one of pool_int64s and pool_strings must be given")
    if not 0 < a["min_gram_length"] <= a["max_gram_length"]:
        raise InferError(f"gram lengths must satisfy 0 < min ({a['min_gram_length']}) <= max ({a['max_gram_length']})")
    size = max(a["ngram_indexes"]) + 1 if a["ngram_indexes"] else 0
    shape = ctx.shape(0)
    if shape is not None and len(shape) not in (1, 2):
        raise InferError(f"X must be (C,) or (B, C), got shape {shape}")
    out = None if shape is None else ((size,) if len(shape) == 1 else (shape[0], size))
    return [TensorDesc(out, "float32")]


def _op(
    name: str,
    infer: InferFn,
    impl: KernelImpl,
    doc: str,
    attrs: Mapping[str, Attr] | None = None,
    outputs: tuple[int, int] = (1, 1),
    inputs: tuple[int, int] = (1, 1),
) -> OpSchema:
    return OpSchema(name, infer, (impl,), CPU_ONLY, attrs or {}, inputs, outputs, family="strings", doc=doc, float_only=False)


SCHEMAS: tuple[OpSchema, ...] = (
    _op("StringConcat", _infer_concat, returning("numpy", k.string_concat), "x + y for strings, broadcast", inputs=(2, 2)),
    _op(
        "StringNormalizer",
        _infer_normalizer,
        returning("numpy", k.string_normalizer),
        "drop stopwords and change case",
        {
            "case_change_action": Attr("string", "NONE", ("NONE", "LOWER", "UPPER")),
            "is_case_sensitive": Attr("int", 0),
            "locale": Attr("string"),
            "stopwords": Attr("strings"),
        },
    ),
    _op(
        "StringSplit",
        _infer_split,
        returning_some("numpy", k.string_split),
        "split strings into padded pieces and their counts",
        {"delimiter": Attr("string"), "maxsplit": Attr("int")},
        outputs=(2, 2),
    ),
    _op(
        "TfIdfVectorizer",
        _infer_tfidf,
        returning("numpy", k.tfidf_vectorizer),
        "n-gram (with skips) counts against a pool, weighted TF, IDF or TF-IDF",
        {
            "max_gram_length": Attr("int", REQUIRED),
            "max_skip_count": Attr("int", REQUIRED),
            "min_gram_length": Attr("int", REQUIRED),
            "mode": Attr("string", REQUIRED, ("TF", "IDF", "TFIDF")),
            "ngram_counts": Attr("ints", REQUIRED),
            "ngram_indexes": Attr("ints", REQUIRED),
            "pool_int64s": Attr("ints"),
            "pool_strings": Attr("strings"),
            "weights": Attr("floats"),
        },
    ),
    _op(
        "RegexFullMatch",
        _infer_regex,
        returning("numpy", k.regex_full_match),
        "whether each string fully matches",
        {"pattern": Attr("string", REQUIRED, check=_pattern)},
    ),
)
