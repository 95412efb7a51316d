"""A transformer encoder (pre-norm, multi-head self-attention + GELU feed-forward) with the builder.

Defaults are the benchmark's: 2 layers, d_model 128, 4 heads, sequence 32, batch 2.
Only ONNX ops with opset-18 attributes are used, so the graph exports to ONNX unchanged.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from aioge import ops
from aioge.ir.graph import Graph, Value

__all__ = ["build_transformer"]

_EPS = 1e-5


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.float32(np.sqrt(2.0 / np.pi)) * (x + np.float32(0.044715) * x**3)))


def _layer_norm_ref(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + _EPS) * gamma + beta


def build_transformer(
    batch: int = 2,
    seq: int = 32,
    d_model: int = 128,
    heads: int = 4,
    layers: int = 2,
    d_ff: int | None = None,
    seed: int = 0,
) -> tuple[Graph, dict[str, np.ndarray], Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]]:
    """The encoder graph (input ``x`` [batch, seq, d_model], output ``y`` of the same shape),
    example feeds and a plain-numpy reference."""
    if d_model % heads:
        raise ValueError(f"d_model {d_model} is not a multiple of heads {heads}")
    d_ff = d_ff or 4 * d_model
    dh = d_model // heads
    rng = np.random.default_rng(seed)

    def param(*shape: int, scale: float | None = None) -> np.ndarray:
        s = (1.0 / np.sqrt(shape[0])) if scale is None else scale
        return (rng.standard_normal(shape) * s).astype(np.float32)

    params = [
        {
            "ln1_g": 1 + param(d_model, scale=0.1),
            "ln1_b": param(d_model, scale=0.1),
            "wqkv": param(d_model, 3 * d_model),
            "bqkv": param(3 * d_model, scale=0.1),
            "wo": param(d_model, d_model),
            "bo": param(d_model, scale=0.1),
            "ln2_g": 1 + param(d_model, scale=0.1),
            "ln2_b": param(d_model, scale=0.1),
            "w1": param(d_model, d_ff),
            "b1": param(d_ff, scale=0.1),
            "w2": param(d_ff, d_model),
            "b2": param(d_model, scale=0.1),
        }
        for _ in range(layers)
    ]
    scale = np.float32(1.0 / np.sqrt(dh))

    g = Graph("transformer")
    h: Value = g.input("x", (batch, seq, d_model), "float32")
    # 0 copies the input's dim (ONNX Reshape): the batch is not baked in, so gears can vary it
    heads_shape = g.constant(np.array([0, seq, 3, heads, dh], np.int64), "qkv_shape")
    merged_shape = g.constant(np.array([0, seq, d_model], np.int64), "merged_shape")
    thirds = g.constant(np.array([1, 1, 1], np.int64), "qkv_split")
    for i, p in enumerate(params):
        c = {k: g.constant(v, f"l{i}_{k}") for k, v in p.items()}
        a = ops.layer_normalization(h, c["ln1_g"], c["ln1_b"], axis=-1, epsilon=_EPS)
        qkv = ops.add(ops.matmul(a, c["wqkv"]), c["bqkv"])  # B S 3D
        qkv = ops.transpose(ops.reshape(qkv, heads_shape), perm=(2, 0, 3, 1, 4))  # 3 B H S dh
        q, k, v = ops.split(qkv, thirds, axis=0, num_outputs=3)
        q, k, v = (ops.squeeze(t, g.constant(np.array([0], np.int64))) for t in (q, k, v))
        scores = ops.mul(ops.matmul(q, ops.transpose(k, perm=(0, 1, 3, 2))), g.constant(scale))
        ctx = ops.matmul(ops.softmax(scores, axis=-1), v)  # B H S dh
        ctx = ops.reshape(ops.transpose(ctx, perm=(0, 2, 1, 3)), merged_shape)
        h = ops.add(h, ops.add(ops.matmul(ctx, c["wo"]), c["bo"]))
        f = ops.layer_normalization(h, c["ln2_g"], c["ln2_b"], axis=-1, epsilon=_EPS)
        f = ops.gelu(ops.add(ops.matmul(f, c["w1"]), c["b1"]), approximate="tanh")
        h = ops.add(h, ops.add(ops.matmul(f, c["w2"]), c["b2"]))
    g.output(h, names=["y"])

    def reference(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        h = feeds["x"]
        for p in params:
            a = _layer_norm_ref(h, p["ln1_g"], p["ln1_b"])
            qkv = (a @ p["wqkv"] + p["bqkv"]).reshape(batch, seq, 3, heads, dh).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            s = q @ k.transpose(0, 1, 3, 2) * scale
            e = np.exp(s - s.max(axis=-1, keepdims=True))
            ctx = (e / e.sum(axis=-1, keepdims=True)) @ v
            h = h + ctx.transpose(0, 2, 1, 3).reshape(batch, seq, d_model) @ p["wo"] + p["bo"]
            f = _gelu_tanh(_layer_norm_ref(h, p["ln2_g"], p["ln2_b"]) @ p["w1"] + p["b1"])
            h = h + f @ p["w2"] + p["b2"]
        return {"y": h}

    feeds = {"x": rng.standard_normal((batch, seq, d_model)).astype(np.float32)}
    return g, feeds, reference
