"""A three-layer MLP classifier (784 -> 256 -> 128 -> 10) with softmax output."""

from __future__ import annotations

from typing import Callable

import numpy as np

from aioge import ops
from aioge.ir.graph import Graph

__all__ = ["build_mlp"]


def build_mlp(
    batch: int = 32, seed: int = 0
) -> tuple[Graph, dict[str, np.ndarray], Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]]:
    """The MLP graph, example feeds and a plain-numpy reference."""
    rng = np.random.default_rng(seed)
    sizes = [784, 256, 128, 10]
    weights = [(rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32) for a, b in zip(sizes, sizes[1:])]
    biases = [rng.standard_normal(b).astype(np.float32) * 0.1 for b in sizes[1:]]
    g = Graph("mlp")
    h = g.input("x", (batch, 784), "float32")
    for i, (w, b) in enumerate(zip(weights, biases)):
        h = ops.add(ops.matmul(h, g.constant(w, f"w{i}")), g.constant(b, f"b{i}"))
        if i < len(weights) - 1:
            h = ops.relu(h)
    g.output(ops.softmax(h, axis=-1), names=["probs"])

    def reference(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        h = feeds["x"]
        for i, (w, b) in enumerate(zip(weights, biases)):
            h = h @ w + b
            if i < len(weights) - 1:
                h = np.maximum(h, 0)
        e = np.exp(h - h.max(axis=-1, keepdims=True))
        return {"probs": e / e.sum(axis=-1, keepdims=True)}

    feeds = {"x": rng.standard_normal((batch, 784)).astype(np.float32)}
    return g, feeds, reference
