"""Loss kernels: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Both pick, for every sample (and every extra spatial position), the input at the target
class along axis 1 with one ``take_along_axis``; targets equal to ``ignore_index`` count
neither in the loss nor in the weight of a mean.
"""

from __future__ import annotations

import numpy as np

__all__ = ["negative_log_likelihood_loss", "softmax_cross_entropy_loss"]


def negative_log_likelihood_loss(
    x: np.ndarray,
    target: np.ndarray,
    weight: np.ndarray | None = None,
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> np.ndarray:
    """-x[n, target[n, ...], ...] * weight[target], reduced by none, sum or a weighted mean.

    Raises:
        IndexError: a target outside [0, C) that is not ``ignore_index``.
    """
    classes = x.shape[1]
    t = target.astype(np.int64)
    keep = np.ones(t.shape, bool) if ignore_index is None else t != ignore_index
    if np.any(keep & ((t < 0) | (t >= classes))):
        raise IndexError(f"a target is outside the {classes} classes")
    safe = np.where(keep, t, 0)
    work = x.astype(np.promote_types(x.dtype, np.float32), copy=False)
    picked = np.take_along_axis(work, safe[:, None], axis=1)[:, 0]
    w = np.ones(t.shape, work.dtype) if weight is None else weight.astype(work.dtype)[safe]
    w = np.where(keep, w, 0)
    loss = -picked * w
    if reduction == "none":
        return loss.astype(x.dtype)
    if reduction == "sum":
        return np.asarray(loss.sum(), dtype=x.dtype)
    with np.errstate(invalid="ignore", divide="ignore"):  # every target ignored: 0 / 0 = NaN, as ONNX's function body
        return np.asarray(loss.sum() / w.sum(), dtype=x.dtype)


def softmax_cross_entropy_loss(
    scores: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray | None = None,
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> tuple[np.ndarray, np.ndarray]:
    """The NLL loss of log_softmax(scores) over axis 1, and that log-probability tensor."""
    work = scores.astype(np.promote_types(scores.dtype, np.float32), copy=False)
    shifted = work - work.max(axis=1, keepdims=True)
    log_prob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = negative_log_likelihood_loss(log_prob, labels, weights, ignore_index, reduction)
    return loss.astype(scores.dtype), log_prob.astype(scores.dtype)
