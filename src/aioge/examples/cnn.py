"""A small CNN (conv-bn-relu x2, max pool, global average pool, linear) on 3x32x32 images."""

from __future__ import annotations

from typing import Callable

import numpy as np

from aioge import ops
from aioge.ir.graph import Graph

__all__ = ["build_cnn"]


def _conv_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray, pad: int) -> np.ndarray:
    """Direct convolution, stride 1: the plain numpy way (sliding windows + tensordot)."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))  # N C H W kh kw
    return np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2) + b[None, :, None, None]


def build_cnn(
    batch: int = 8, seed: int = 0
) -> tuple[Graph, dict[str, np.ndarray], Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]]:
    """The CNN graph, example feeds and a plain-numpy reference."""
    rng = np.random.default_rng(seed)
    chans = [3, 16, 32]
    convs = []
    for cin, cout in zip(chans, chans[1:]):
        w = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        bn = [
            (1 + 0.1 * rng.standard_normal(cout)).astype(np.float32),  # scale
            (0.1 * rng.standard_normal(cout)).astype(np.float32),  # bias
            (0.1 * rng.standard_normal(cout)).astype(np.float32),  # mean
            (1 + 0.1 * rng.random(cout)).astype(np.float32),  # var
        ]
        convs.append((w, b, bn))
    fc_w = (rng.standard_normal((32, 10)) / np.sqrt(32)).astype(np.float32)
    fc_b = np.zeros(10, np.float32)

    g = Graph("cnn")
    h = g.input("image", (batch, 3, 32, 32), "float32")
    for i, (w, b, (s, bb, m, v)) in enumerate(convs):
        h = ops.conv2d(h, g.constant(w, f"conv{i}.w"), g.constant(b, f"conv{i}.b"), pads=(1, 1, 1, 1))
        h = ops.batch_normalization(h, s, bb, m, v, epsilon=1e-5)
        h = ops.relu(h)
        if i == 0:
            h = ops.max_pool(h, kernel_shape=(2, 2), strides=(2, 2))
    h = ops.flatten(ops.global_average_pool(h), axis=1)
    g.output(ops.gemm(h, g.constant(fc_w, "fc.w"), g.constant(fc_b, "fc.b")), names=["logits"])

    def reference(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        h = feeds["image"]
        for i, (w, b, (s, bb, m, v)) in enumerate(convs):
            h = _conv_ref(h, w, b, 1)
            h = (h - m[None, :, None, None]) / np.sqrt(v[None, :, None, None] + 1e-5) * s[None, :, None, None] + bb[
                None, :, None, None
            ]
            h = np.maximum(h, 0)
            if i == 0:
                n, c, hh, ww = h.shape
                h = h.reshape(n, c, hh // 2, 2, ww // 2, 2).max(axis=(3, 5))
        h = h.mean(axis=(2, 3))
        return {"logits": h @ fc_w + fc_b}

    feeds = {"image": rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)}
    return g, feeds, reference
