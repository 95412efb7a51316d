"""Attention ops: scaled dot-product Attention (MHA, GQA, MQA; masks, causal, windows,
KV cache) and RotaryEmbedding.

Attention is two batched matrix products around a softmax, so every engine takes it
(float inputs); the optional int64 sequence lengths and bool masks are legitimate inputs,
so ``float_only`` is off and Q's dtype decides. RotaryEmbedding is vector work.
"""

from __future__ import annotations

from aioge.ir.desc import Dim, TensorDesc
from aioge.kernels import attention as k
from aioge.kernels.base import returning
from aioge.kernels.optional_outputs import returning_some
from aioge.ops.schema import ALL_ENGINES, FLOAT_DTYPES, VECTOR_ENGINES, Attr, InferContext, InferError, OpSchema

__all__ = ["SCHEMAS"]

_FLOATS = FLOAT_DTYPES


def _known(shape: tuple[Dim, ...] | None) -> tuple[int, ...] | None:
    return None if shape is None or not all(isinstance(d, int) for d in shape) else tuple(int(d) for d in shape)


def _infer_attention(ctx: InferContext) -> list[TensorDesc]:
    dtype = ctx.dtype(0)
    if dtype not in _FLOATS:
        raise InferError(f"Q must be a float tensor, got {dtype}")
    for i, name in ((1, "K"), (2, "V"), (4, "past_key"), (5, "past_value")):
        if ctx.has(i) and ctx.dtype(i) != dtype:
            raise InferError(f"{name} must have Q's dtype {dtype}, got {ctx.dtype(i)}")
    q, kk, v = (_known(ctx.shape(i)) for i in range(3))
    past = _known(ctx.shape(4)) if ctx.has(4) else ()
    unknown = [TensorDesc(None, dtype) for _ in range(4)]
    if q is None or kk is None or v is None or past is None:
        return unknown
    if not len(q) == len(kk) == len(v) or len(q) not in (3, 4):
        raise InferError(f"Q, K and V must all be 3-D or all 4-D, got shapes {q}, {kk}, {v}")
    a = ctx.attrs
    if len(q) == 3:
        hq, hkv = a.get("q_num_heads"), a.get("kv_num_heads")
        if not hq or not hkv or q[2] % hq or kk[2] % hkv or v[2] % hkv:
            raise InferError(f"3-D inputs need q_num_heads and kv_num_heads dividing the hidden sizes, got {hq}, {hkv}")
        batch, sq, dk, dv = q[0], q[1], kk[2] // hkv, v[2] // hkv
        skv = kk[1]
    else:
        batch, hq, sq = q[0], q[1], q[2]
        hkv, skv, dk, dv = kk[1], kk[2], kk[3], v[3]
    if hq % hkv:
        raise InferError(f"{hq} query heads do not divide into {hkv} key/value heads")
    total = skv + (past[2] if past else 0)
    y = (batch, sq, hq * dv) if len(q) == 3 else (batch, hq, sq, dv)
    return [
        TensorDesc(y, dtype),
        TensorDesc((batch, hkv, total, dk), dtype),
        TensorDesc((batch, hkv, total, dv), dtype),
        TensorDesc((batch, hq, sq, total), dtype),
    ]


def _infer_flex(ctx: InferContext) -> list[TensorDesc]:
    dtype = ctx.dtype(0)
    if dtype not in _FLOATS or ctx.dtype(1) != dtype or ctx.dtype(2) != dtype:
        raise InferError(f"Q, K and V must be float tensors of one dtype, got {[ctx.dtype(i) for i in range(3)]}")
    q, kk, v = (ctx.shape(i) for i in range(3))
    if q is None or kk is None or v is None:
        return [TensorDesc(None, dtype)]
    if len(q) != 4 or len(kk) != 4 or len(v) != 4:
        raise InferError(f"Q, K and V must be rank 4, got shapes {q}, {kk}, {v}")
    if isinstance(q[1], int) and isinstance(kk[1], int) and q[1] % kk[1]:
        raise InferError(f"{q[1]} query heads do not divide into {kk[1]} key/value heads")
    return [TensorDesc((q[0], q[1], q[2], v[3]), dtype)]


def _infer_rotary(ctx: InferContext) -> list[TensorDesc]:
    if ctx.dtype(0) not in _FLOATS:
        raise InferError(f"X must be a float tensor, got {ctx.dtype(0)}")
    shape = ctx.shape(0)
    if shape is not None and len(shape) not in (3, 4):
        raise InferError(f"X must be 3-D or 4-D, got shape {shape}")
    if shape is not None and len(shape) == 3 and not ctx.attrs.get("num_heads"):
        raise InferError("3-D X needs the num_heads attribute")
    return [TensorDesc(shape, ctx.dtype(0))]


SCHEMAS: tuple[OpSchema, ...] = (
    OpSchema(
        "Attention",
        _infer_attention,
        (returning_some("numpy", k.attention),),
        ALL_ENGINES,
        {
            "is_causal": Attr("int", 0, (0, 1)),
            "kv_num_heads": Attr("int"),
            "q_num_heads": Attr("int"),
            "qk_matmul_output_mode": Attr("int", 0, (0, 1, 2, 3)),
            "scale": Attr("float"),
            "softcap": Attr("float", 0.0),
            "softmax_precision": Attr("int"),
            "left_window_size": Attr("int", -1),
            "right_window_size": Attr("int", -1),
        },
        (3, 7),
        (1, 4),
        family="attention",
        float_only=False,
        doc="softmax(Q K^T * scale + bias) V with masks, causal frontier, windows, GQA and a KV cache",
    ),
    OpSchema(
        # the score_mod / prob_mod subgraph attributes are not supported (no graph attributes)
        "FlexAttention",
        _infer_flex,
        (returning("numpy", k.flex_attention),),
        ALL_ENGINES,
        {"scale": Attr("float"), "softmax_precision": Attr("int")},
        (3, 3),
        domain="ai.onnx.preview",
        family="attention",
        doc="softmax(Q K^T * scale) V with grouped-query heads (no modifier subgraphs)",
    ),
    OpSchema(
        "RotaryEmbedding",
        _infer_rotary,
        (returning("numpy", k.rotary_embedding),),
        VECTOR_ENGINES,
        {"interleaved": Attr("int", 0, (0, 1)), "num_heads": Attr("int"), "rotary_embedding_dim": Attr("int", 0)},
        (3, 4),
        family="attention",
        float_only=False,
        doc="rotate the leading features of every head by position-dependent angles",
    ),
)
