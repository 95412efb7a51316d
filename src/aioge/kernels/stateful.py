"""Stateful sequence kernels: LinearAttention (linear, gated, delta and gated-delta rules) and
CausalConvWithState (a depthwise causal 1-D convolution carrying its tail).

LinearAttention runs its recurrence token by token (the rules are sequential by definition),
each step batched over batch and heads in float32; the convolution is one multiply-add per
kernel tap over the whole (batch, channel, length) block.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["causal_conv_with_state", "linear_attention"]


def _heads(x: np.ndarray, heads: int, what: str) -> np.ndarray:
    """(B, T, H * D) -> (B, H, T, D) in float32."""
    b, t, hd = x.shape
    if hd % heads:
        raise ValueError(f"{what}: last dimension {hd} is not divisible by {heads} heads")
    return x.reshape(b, t, heads, hd // heads).transpose(0, 2, 1, 3).astype(np.float32)


def linear_attention(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    past_state: np.ndarray | None = None,
    decay: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    **attrs: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """The output (B, T, Hq * Dv) and the final state (B, Hkv, Dk, Dv) of ONNX LinearAttention.

    Raises:
        ValueError: inputs that do not fit the heads, the rule's required inputs missing, or
            a past state of the wrong shape.
    """
    hq, hkv = int(attrs["q_num_heads"]), int(attrs["kv_num_heads"])
    rule = attrs.get("update_rule", "gated_delta")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (decay is not None) or delta != (beta is not None):
        raise ValueError(f"update_rule {rule!r} takes decay={gating} and beta={delta}")
    b, t, _ = query.shape
    q, kk, v = _heads(query, hq, "query"), _heads(key, hkv, "key"), _heads(value, hkv, "value")
    dk, dv = q.shape[3], v.shape[3]
    if decay is not None:
        g = decay.reshape(b, t, hkv, 1).transpose(0, 2, 1, 3) if decay.shape[-1] == hkv else _heads(decay, hkv, "decay")
        g = np.exp(g.astype(np.float32))  # (B, Hkv, T, 1 or Dk)
    if beta is not None:
        rate = beta.reshape(b, t, beta.shape[-1], 1).transpose(0, 2, 1, 3).astype(np.float32)
    if past_state is not None:
        if past_state.shape != (b, hkv, dk, dv):
            raise ValueError(f"past_state has shape {past_state.shape}, expected {(b, hkv, dk, dv)}")
        state, state_dtype = past_state.astype(np.float32), past_state.dtype
    else:
        state, state_dtype = np.zeros((b, hkv, dk, dv), np.float32), query.dtype
    scale = float(attrs.get("scale") or 0.0) or 1.0 / np.sqrt(dk)
    group = hq // hkv
    out = np.empty((b, hq, t, dv), np.float32)
    for i in range(t):
        k_t, v_t = kk[:, :, i], v[:, :, i]
        if gating:
            state = state * g[:, :, i][..., None]
        if delta:
            v_t = rate[:, :, i] * (v_t - np.einsum("bhdm,bhd->bhm", state, k_t))
        state = state + k_t[..., :, None] * v_t[..., None, :]
        read = state if group == 1 else np.repeat(state, group, axis=1)
        out[:, :, i] = scale * np.einsum("bhd,bhdm->bhm", q[:, :, i], read)
    y = out.transpose(0, 2, 1, 3).reshape(b, t, hq * dv).astype(query.dtype)
    return y, state.astype(state_dtype)


def causal_conv_with_state(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    past_state: np.ndarray | None = None,
    activation: str = "none",
) -> tuple[np.ndarray, np.ndarray]:
    """y[b, c, t] = sum_j w[c, 0, j] * padded[b, c, t + j] (+ bias, SiLU), and the last k - 1 inputs.

    Raises:
        ValueError: a weight that is not (C, 1, k) or a past state of the wrong shape.
    """
    batch, channels, length = x.shape
    if weight.shape[:2] != (channels, 1):
        raise ValueError(f"weight must be ({channels}, 1, k), got {weight.shape}")
    k = weight.shape[2]
    pad = np.zeros((batch, channels, k - 1), x.dtype) if past_state is None else past_state
    if pad.shape != (batch, channels, k - 1):
        raise ValueError(f"past_state must be {(batch, channels, k - 1)}, got {pad.shape}")
    padded = np.concatenate([pad, x], axis=2)
    work = np.promote_types(x.dtype, np.float32)
    acc = np.zeros((batch, channels, length), work)
    for j in range(k):
        acc += weight[:, 0, j].astype(work)[None, :, None] * padded[:, :, j : j + length]
    if bias is not None:
        acc += bias.astype(work)[None, :, None]
    if activation in ("silu", "swish"):
        acc = acc / (1 + np.exp(-acc))
    return acc.astype(x.dtype), padded[:, :, padded.shape[2] - (k - 1) :].copy()
