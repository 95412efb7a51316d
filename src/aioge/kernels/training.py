"""Optimiser kernels of the ai.onnx.preview.training domain: Adagrad, Momentum and Adam.

Each takes a learning rate R, a step count T and then, per optimised tensor, groups of
inputs (X..., G..., then the optimiser's state tensors...) and returns the updated tensors
and states in the same grouping. Every update is a few whole-tensor numpy expressions.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["adagrad", "adam", "momentum", "split_groups"]


def split_groups(inputs: Sequence[np.ndarray], groups: int, op: str) -> list[list[np.ndarray]]:
    """The tensor inputs after R and T, split into ``groups`` equal runs (X, G, states...).

    Raises:
        ValueError: the count does not divide into the groups.
    """
    rest = list(inputs[2:])
    if not rest or len(rest) % groups:
        raise ValueError(f"{op} takes R, T and {groups} equal groups of tensors, got {len(rest)} tensors")
    n = len(rest) // groups
    return [rest[i * n : (i + 1) * n] for i in range(groups)]


def _scalar(v: np.ndarray) -> float:
    return float(np.asarray(v).reshape(-1)[0])


def adagrad(
    *inputs: np.ndarray, decay_factor: float = 0.0, epsilon: float = 1e-6, norm_coefficient: float = 0.0
) -> tuple[np.ndarray, ...]:
    """X_new = X - r * G' / (sqrt(H + G'^2) + eps), r = R / (1 + T * decay_factor), G' = G + norm * X."""
    xs, gs, hs = split_groups(inputs, 3, "Adagrad")
    r = _scalar(inputs[0]) / (1 + _scalar(inputs[1]) * decay_factor)
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        reg = norm_coefficient * x + g
        h2 = h + reg * reg
        new_x.append((x - r * reg / (np.sqrt(h2) + epsilon)).astype(x.dtype))
        new_h.append(h2.astype(h.dtype))
    return (*new_x, *new_h)


def momentum(*inputs: np.ndarray, alpha: float, beta: float, mode: str, norm_coefficient: float) -> tuple[np.ndarray, ...]:
    """V_new = alpha * V + beta' * G' (beta' = 1 on the first step); X moves by R * V_new (or Nesterov)."""
    xs, gs, vs = split_groups(inputs, 3, "Momentum")
    r, t = _scalar(inputs[0]), _scalar(inputs[1])
    b = beta if t > 0 else 1.0
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs):
        reg = norm_coefficient * x + g
        v2 = alpha * v + b * reg
        step = v2 if mode == "standard" else reg + alpha * v2
        new_x.append((x - r * step).astype(x.dtype))
        new_v.append(v2.astype(v.dtype))
    return (*new_x, *new_v)


def adam(
    *inputs: np.ndarray,
    alpha: float = 0.9,
    beta: float = 0.999,
    epsilon: float = 1e-6,
    norm_coefficient: float = 0.0,
    norm_coefficient_post: float = 0.0,
) -> tuple[np.ndarray, ...]:
    """Adam with bias-corrected rate (after the first step) and optional decoupled weight decay."""
    xs, gs, vs, hs = split_groups(inputs, 4, "Adam")
    r, t = _scalar(inputs[0]), _scalar(inputs[1])
    rate = r * np.sqrt(1 - beta**t) / (1 - alpha**t) if t > 0 else r
    out_x, out_v, out_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        reg = norm_coefficient * x + g
        v2 = alpha * v + (1 - alpha) * reg
        h2 = beta * h + (1 - beta) * reg * reg
        x2 = (1 - norm_coefficient_post) * (x - rate * (v2 / (np.sqrt(h2) + epsilon)))
        out_x.append(x2.astype(x.dtype))
        out_v.append(v2.astype(v.dtype))
        out_h.append(h2.astype(h.dtype))
    return (*out_x, *out_v, *out_h)
