"""Attention kernels: scaled dot-product Attention (opset 23-25) and RotaryEmbedding.

Attention works on (batch, heads, seq, head_size) tensors (3-D inputs are split into heads
first): past keys and values are concatenated, a bias is built from the mask, the causal
frontier (offset-aligned), sliding windows and padding lengths, grouped-query heads are
repeated, and softmax(Q K^T * scale + bias) V is two batched matmuls. Fully masked rows
give zeros, not NaN.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aioge.ir.desc import numpy_dtype
from aioge.kernels.convert import dtype_of_code

__all__ = ["attention", "flex_attention", "rotary_embedding"]


def _heads(x: np.ndarray, num_heads: int | None, what: str) -> np.ndarray:
    """(batch, seq, hidden) -> (batch, heads, seq, head_size)."""
    if not num_heads:
        raise ValueError(f"3-D {what} needs the number of heads (q_num_heads / kv_num_heads)")
    b, s, h = x.shape
    return x.reshape(b, s, num_heads, h // num_heads).transpose(0, 2, 1, 3)


def _frontier(q: int, kv: int, offset: np.ndarray | int) -> np.ndarray:
    """(q - j) + offset per (batch?, query, key): a query at i sits at absolute i + offset."""
    i = np.arange(q).reshape(q, 1)
    j = np.arange(kv).reshape(1, kv)
    if np.ndim(offset):
        return (i + np.reshape(offset, (-1, 1, 1))) - j  # (batch, q, kv)
    return (i + int(offset)) - j


def _as_bias(allowed: np.ndarray, dtype: np.dtype) -> np.ndarray:
    bias = np.where(allowed, dtype.type(0), dtype.type(-np.inf))
    return bias.reshape(bias.shape[0], 1, *bias.shape[1:]) if bias.ndim == 3 else bias


def _softmax(x: np.ndarray) -> np.ndarray:
    top = x.max(axis=-1, keepdims=True)
    top = np.where(np.isneginf(top), 0, top)
    e = np.exp(x - top)
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total == 0, 1, total)


def attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None = None,
    past_key: np.ndarray | None = None,
    past_value: np.ndarray | None = None,
    nonpad_kv_seqlen: np.ndarray | None = None,
    **attrs: Any,
) -> tuple[np.ndarray, ...]:
    """Y, present_key, present_value and the requested QK debug output of ONNX Attention.

    Raises:
        ValueError: inconsistent ranks, past key without past value, a cache combined with
            nonpad_kv_seqlen, or heads that do not divide.
    """
    if q.ndim != k.ndim or q.ndim != v.ndim or q.ndim not in (3, 4):
        raise ValueError(f"Q, K and V must all be 3-D or all 4-D, got ranks {q.ndim}, {k.ndim}, {v.ndim}")
    if (past_key is None) != (past_value is None):
        raise ValueError("past_key and past_value must be given together")
    if nonpad_kv_seqlen is not None and past_key is not None:
        raise ValueError("nonpad_kv_seqlen cannot be combined with past_key / past_value")
    rank3 = q.ndim == 3
    q_heads, kv_heads = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
    if rank3:
        q, k, v = _heads(q, q_heads, "Q"), _heads(k, kv_heads, "K"), _heads(v, kv_heads, "V")
    dtype = q.dtype
    scale = attrs.get("scale")
    scale = 1 / np.sqrt(q.shape[3]) if scale is None else scale
    root = dtype.type(np.sqrt(scale))  # applied to both Q and K, as the reference does
    if past_key is not None and past_value is not None:  # both or neither, checked above
        k = np.concatenate((past_key, k), axis=2)
        v = np.concatenate((past_value, v), axis=2)
    # present_* are outputs: never views of the K and V inputs
    present_k = k if past_key is not None else k.copy()
    present_v = v if past_key is not None else v.copy()
    sq, skv = q.shape[2], k.shape[2]
    left, right = int(attrs.get("left_window_size", -1)), int(attrs.get("right_window_size", -1))
    if nonpad_kv_seqlen is not None:
        offset: Any = nonpad_kv_seqlen.reshape(-1).astype(np.int64) - sq
    else:
        offset = past_key.shape[2] if past_key is not None else 0
    bias: np.ndarray = np.zeros((sq, skv), dtype)
    if attn_mask is not None:
        pad = skv - attn_mask.shape[-1]
        if pad > 0:  # a mask shorter than the keys leaves the extra keys masked out
            fill = False if attn_mask.dtype == np.bool_ else -np.inf
            attn_mask = np.pad(attn_mask, [(0, 0)] * (attn_mask.ndim - 1) + [(0, pad)], constant_values=fill)
        mask = _as_bias(attn_mask, dtype) if attn_mask.dtype == np.bool_ else attn_mask.astype(dtype)
        bias = bias + mask
    if attrs.get("is_causal"):
        bias = bias + _as_bias(_frontier(sq, skv, offset) >= 0, dtype)
    if left >= 0 or right >= 0:
        diff = _frontier(sq, skv, offset)
        allowed = np.ones(diff.shape, bool)
        if left >= 0:
            allowed &= diff <= left
        if right >= 0:
            allowed &= -diff <= right
        bias = bias + _as_bias(allowed, dtype)
    if nonpad_kv_seqlen is not None:
        valid = np.arange(skv) < nonpad_kv_seqlen.reshape(-1, 1)
        bias = bias + _as_bias(valid, dtype).reshape(-1, 1, 1, skv)
    nq, nk = q.shape[1], k.shape[1]
    if nq != nk:
        if nq % nk:
            raise ValueError(f"{nq} query heads do not divide into {nk} key/value heads")
        k = np.repeat(k, nq // nk, axis=1)
        v = np.repeat(v, nq // nk, axis=1)
    qk = np.matmul(q * root, np.swapaxes(k, 2, 3) * root)
    softcap = float(attrs.get("softcap", 0.0) or 0.0)
    if softcap > 0:
        qk = np.tanh(qk / dtype.type(softcap)) * dtype.type(softcap)
    mode = int(attrs.get("qk_matmul_output_mode", 0))
    scores = qk + bias
    debug = scores if mode == 2 else qk
    precision = attrs.get("softmax_precision")
    if precision:
        scores = scores.astype(numpy_dtype(dtype_of_code(precision, "softmax_precision")))
    probs = _softmax(scores)
    masked_rows = np.isneginf(np.max(np.broadcast_to(bias, scores.shape), axis=-1, keepdims=True))
    probs = np.where(masked_rows, 0, probs).astype(dtype)
    if mode == 3:
        debug = probs
    y = np.matmul(probs, v)
    if rank3:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    return y, present_k, present_v, np.asarray(debug, dtype=dtype)


def flex_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float | None = None, softmax_precision: int | None = None
) -> np.ndarray:
    """softmax(Q K^T * scale) V over rank-4 inputs (grouped-query heads shared in order), the
    softmax in float32 (float64 for float64 inputs) unless softmax_precision names a type.

    Raises:
        ValueError: inputs that are not rank 4, or query heads that do not divide.
    """
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"FlexAttention takes rank-4 Q, K and V, got ranks {q.ndim}, {k.ndim}, {v.ndim}")
    nq, nk = q.shape[1], k.shape[1]
    if nq % nk:
        raise ValueError(f"{nq} query heads do not divide into {nk} key/value heads")
    if precision_code := softmax_precision:
        work = numpy_dtype(dtype_of_code(precision_code, "softmax_precision"))
    else:
        work = np.dtype(np.float64 if q.dtype == np.float64 else np.float32)
    s = 1 / np.sqrt(q.shape[3]) if scale is None else scale
    kk, vv = np.repeat(k, nq // nk, axis=1), np.repeat(v, nq // nk, axis=1)
    scores = np.matmul(q.astype(work), np.swapaxes(kk, 2, 3).astype(work)) * work.type(s)
    probs = _softmax(scores)
    return np.matmul(probs, vv.astype(work)).astype(q.dtype)


def rotary_embedding(
    x: np.ndarray,
    cos_cache: np.ndarray,
    sin_cache: np.ndarray,
    position_ids: np.ndarray | None = None,
    interleaved: int = 0,
    num_heads: int | None = None,
    rotary_embedding_dim: int = 0,
) -> np.ndarray:
    """Rotate (pairs of) the first rotary_embedding_dim features of every head by position.

    x is (batch, heads, seq, head) or (batch, seq, heads * head); the caches are
    (max_positions, dim / 2) indexed by position_ids, or (batch, seq, dim / 2) without them.

    Raises:
        ValueError: 3-D input without num_heads, or caches of the wrong width.
    """
    shape = x.shape
    if x.ndim == 4:
        t = x.transpose(0, 2, 1, 3)  # (batch, seq, heads, head)
    else:
        if not num_heads:
            raise ValueError("3-D input needs num_heads")
        t = x.reshape(shape[0], shape[1], num_heads, shape[2] // num_heads)
    dim = rotary_embedding_dim or t.shape[3]
    half = dim // 2
    if position_ids is not None:
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    if cos_cache.shape[-1] != half or sin_cache.shape[-1] != half:
        raise ValueError(f"cos/sin caches must have {half} values per position, got {cos_cache.shape[-1]}")
    cos, sin = cos_cache[:, :, None, :], sin_cache[:, :, None, :]
    rot = t[..., :dim]
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot[..., :half], rot[..., half:]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if interleaved:
        rotated = np.stack((real, imag), axis=-1).reshape(rot.shape)
    else:
        rotated = np.concatenate((real, imag), axis=-1)
    out = np.concatenate((rotated, t[..., dim:]), axis=-1).astype(x.dtype)
    return out.transpose(0, 2, 1, 3) if x.ndim == 4 else out.reshape(shape)
