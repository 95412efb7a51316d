"""Detection kernels: NonMaxSuppression and RoiAlign.

NMS computes every pairwise IoU of a class's candidates at once, then selects greedily: each
step takes the best remaining box and drops those overlapping it, so the loop runs once per
selected box (at most max_output_boxes_per_class), never per candidate pair. RoiAlign
samples each region's bins bilinearly, vectorised over bins, samples and channels.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["non_max_suppression", "roi_align"]


def _corners(boxes: np.ndarray, center_point_box: int) -> tuple[np.ndarray, ...]:
    """(y_min, x_min, y_max, x_max) of (N, 4) boxes in either ONNX box format."""
    b = boxes.astype(np.float64)
    if center_point_box:
        xc, yc, w, h = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    # corners may come in either order
    return np.minimum(b[:, 0], b[:, 2]), np.minimum(b[:, 1], b[:, 3]), np.maximum(b[:, 0], b[:, 2]), np.maximum(b[:, 1], b[:, 3])


def _iou(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """Pairwise IoU of (N, 4) boxes; 0 where boxes do not overlap or have no area."""
    y0, x0, y1, x1 = _corners(boxes, center_point_box)
    ih = np.minimum(y1[:, None], y1[None, :]) - np.maximum(y0[:, None], y0[None, :])
    iw = np.minimum(x1[:, None], x1[None, :]) - np.maximum(x0[:, None], x0[None, :])
    inter = np.where((ih > 0) & (iw > 0), ih * iw, 0.0)
    area = (y1 - y0) * (x1 - x0)
    union = area[:, None] + area[None, :] - inter
    ok = (inter > 0) & (area[:, None] > 0) & (area[None, :] > 0) & (union > 0)
    return np.where(ok, inter / np.where(ok, union, 1.0), 0.0)


def _value(v: np.ndarray | None, default: float) -> float:
    return default if v is None or np.asarray(v).size == 0 else float(np.asarray(v).reshape(-1)[0])


def non_max_suppression(
    boxes: np.ndarray,
    scores: np.ndarray,
    max_output_boxes_per_class: np.ndarray | None = None,
    iou_threshold: np.ndarray | None = None,
    score_threshold: np.ndarray | None = None,
    center_point_box: int = 0,
) -> np.ndarray:
    """(num_selected, 3) int64 rows of [batch, class, box], per batch and class in score order.

    Candidates above score_threshold are taken best first (ties: the lower index); a box
    whose IoU with an already selected one exceeds iou_threshold is dropped.
    """
    limit = int(_value(max_output_boxes_per_class, 0))
    iou_t = _value(iou_threshold, 0.0)
    has_score_t = score_threshold is not None and np.asarray(score_threshold).size > 0
    score_t = _value(score_threshold, 0.0)
    rows: list[np.ndarray] = []
    n_batch, n_class = scores.shape[:2]
    for b in range(n_batch):
        iou = _iou(boxes[b], center_point_box) if limit > 0 else None
        for c in range(n_class):
            s = scores[b, c].astype(np.float64)
            cand = np.flatnonzero(s > score_t) if has_score_t else np.arange(s.size)
            if limit <= 0 or cand.size == 0:
                continue
            order = cand[np.lexsort((cand, -s[cand]))]  # best score first, then lower index
            alive = np.ones(order.size, bool)
            picked: list[int] = []
            while len(picked) < limit and alive.any():
                first = int(np.argmax(alive))
                box = int(order[first])
                picked.append(box)
                alive &= ~(iou[box, order] > iou_t)  # type: ignore[index]
                alive[first] = False
            rows.append(np.stack([np.full(len(picked), b), np.full(len(picked), c), np.asarray(picked)], axis=1))
    if not rows:
        return np.zeros((0, 3), np.int64)
    return np.concatenate(rows).astype(np.int64)


def roi_align(
    x: np.ndarray,
    rois: np.ndarray,
    batch_indices: np.ndarray,
    coordinate_transformation_mode: str = "half_pixel",
    mode: str = "avg",
    output_height: int = 1,
    output_width: int = 1,
    sampling_ratio: int = 0,
    spatial_scale: float = 1.0,
) -> np.ndarray:
    """(num_rois, C, output_height, output_width): each region's bins averaged (or maxed)
    over a grid of bilinear samples, as ONNX (and Detectron) define RoiAlign."""
    n_rois = rois.shape[0]
    _, channels, height, width = x.shape
    out = np.empty((n_rois, channels, output_height, output_width), x.dtype)
    half = coordinate_transformation_mode == "half_pixel"
    offset = 0.5 if half else 0.0
    flat = x.reshape(x.shape[0], channels, height * width).astype(np.float64)
    for r in range(n_rois):  # one vectorised sampling per region
        x0, y0, x1, y1 = (float(v) * spatial_scale - offset for v in rois[r])
        rw, rh = x1 - x0, y1 - y0
        if not half:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / output_height, rw / output_width
        gh = int(sampling_ratio) if sampling_ratio > 0 else int(math.ceil(rh / output_height))
        gw = int(sampling_ratio) if sampling_ratio > 0 else int(math.ceil(rw / output_width))
        ys = y0 + np.arange(output_height)[:, None] * bh + (np.arange(gh)[None, :] + 0.5) * bh / max(gh, 1)  # (oh, gh)
        xs = x0 + np.arange(output_width)[:, None] * bw + (np.arange(gw)[None, :] + 0.5) * bw / max(gw, 1)  # (ow, gw)
        yy = np.broadcast_to(ys[:, None, :, None], (output_height, output_width, gh, gw))
        xx = np.broadcast_to(xs[None, :, None, :], (output_height, output_width, gh, gw))
        outside = (yy < -1.0) | (yy > height) | (xx < -1.0) | (xx > width)
        y = np.maximum(yy, 0)
        xv = np.maximum(xx, 0)
        y_low = np.floor(y).astype(np.int64)
        x_low = np.floor(xv).astype(np.int64)
        y_edge, x_edge = y_low >= height - 1, x_low >= width - 1
        y_low = np.where(y_edge, height - 1, y_low)
        x_low = np.where(x_edge, width - 1, x_low)
        y = np.where(y_edge, y_low, y)
        xv = np.where(x_edge, x_low, xv)
        y_high = np.where(y_edge, y_low, y_low + 1)
        x_high = np.where(x_edge, x_low, x_low + 1)
        ly, lx = y - y_low, xv - x_low
        hy, hx = 1 - ly, 1 - lx
        weights = [hy * hx, hy * lx, ly * hx, ly * lx]
        positions = [y_low * width + x_low, y_low * width + x_high, y_high * width + x_low, y_high * width + x_high]
        data = flat[int(batch_indices[r])]  # (C, H * W)
        terms = [np.where(outside, 0.0, w) * data[:, np.where(outside, 0, p)] for w, p in zip(weights, positions)]
        if mode == "avg":
            out[r] = (sum(terms).sum(axis=(3, 4)) / max(gh * gw, 1)).astype(x.dtype)
        else:
            out[r] = np.max(np.maximum.reduce(terms), axis=(3, 4)).astype(x.dtype)
    return out
