"""NonMaxSuppression and RoiAlign (aioge.ops.detection) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import check_op, expect_graph_error, rand


def _boxes(rng, batches, n, center=False):
    lo = rng.uniform(0, 8, size=(batches, n, 2))
    size = rng.uniform(0.5, 4, size=(batches, n, 2))
    if center:
        return np.concatenate([lo + size / 2, size], axis=2).astype(np.float32)
    return np.concatenate([lo, lo + size], axis=2).astype(np.float32)


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("limits", [(3, 0.5, None), (10, 0.3, 0.4), (1, 0.0, None), (0, 0.5, None)])
def test_nms(rng, center, limits):
    max_out, iou, score = limits
    boxes, scores = _boxes(rng, 2, 12, bool(center)), rand(rng, 2, 3, 12, low=0, high=1)
    scores[0, 0, :4] = 0.5  # ties keep the lower index first
    args = [boxes, scores, np.array([max_out], np.int64), np.array([iou], np.float32)]
    args += [] if score is None else [np.array([score], np.float32)]
    check_op("NonMaxSuppression", args, {"center_point_box": center})


def test_nms_flipped_corners_and_defaults(rng):
    boxes = _boxes(rng, 1, 6)[:, :, [2, 3, 0, 1]]  # corners given max first
    scores = rand(rng, 1, 1, 6, low=0, high=1)
    check_op("NonMaxSuppression", [boxes, scores, np.array([6], np.int64), np.array([0.2], np.float32)])
    check_op("NonMaxSuppression", [boxes, scores])  # no limit: nothing is selected


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("coord", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align(rng, mode, coord, ratio):
    x = rand(rng, 2, 3, 10, 10)
    rois = np.array([[0, 0, 9, 9], [1.5, 2.2, 6.1, 8.9], [-2, 3, 12, 4], [5, 5, 5.5, 5.2]], np.float32)
    batch = np.array([0, 1, 1, 0], np.int64)
    attrs = {
        "mode": mode,
        "coordinate_transformation_mode": coord,
        "output_height": 3,
        "output_width": 4,
        "sampling_ratio": ratio,
        "spatial_scale": 0.8,
    }
    check_op("RoiAlign", [x, rois, batch], attrs, static=True)


def test_detection_errors(rng):
    expect_graph_error("NonMaxSuppression", [rand(rng, 1, 3, 5), rand(rng, 1, 1, 3)], match="boxes")
    expect_graph_error("RoiAlign", [rand(rng, 1, 2, 4, 4), rand(rng, 2, 4), np.zeros(2, np.int32)], match="int64")
