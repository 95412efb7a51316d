"""Image and layout ops (aioge.ops.image) against onnxruntime: Pad, Resize, Upsample,
DepthToSpace, SpaceToDepth, Col2Im, GridSample and AffineGrid (CenterCropPad, which
onnxruntime does not run, against onnx.reference)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.conftest import aioge_graph, check_op, expect_graph_error, rand
from tests.ops.onnx_reference import at_opset, check_ref


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[0, 1, 2, 1], [1, 0, 0, 2], [0, 0, 0, 0]])
def test_pad_modes(rng, mode, pads):
    x = rand(rng, 3, 4)
    check_op("Pad", [x, np.array(pads, np.int64)], {"mode": mode}, const=(1,), static=True)


def test_pad_constant_value_axes_and_crop(rng):
    x = rand(rng, 2, 3, 4)
    check_op("Pad", [x, np.array([1, 2, 0, 3], np.int64), np.array(1.5, np.float32), np.array([0, 2], np.int64)], const=(1, 3))
    check_op("Pad", [x, np.array([0, -1, 1, 0, 0, -2], np.int64)], const=(1,), static=True)  # negative pads crop
    check_op("Pad", [x, np.array([1, 1, 1, 1], np.int64), None, np.array([-1, 1], np.int64)], {"mode": "edge"})
    ints = rand(rng, 3, 3, dtype=np.int32, low=-5, high=5)
    check_op("Pad", [ints, np.array([1, 1, 1, 1], np.int64), np.array(7, np.int32)], {"mode": "constant"})
    g, _ = aioge_graph("Pad", [x, np.array([1, 0, 0, 0, 0, 0], np.int64)])  # pads computed at run time
    assert g.outputs[0].desc.shape is None


def test_pad_errors(rng):
    expect_graph_error("Pad", [rand(rng, 2, 3), np.array([1, 1, 1], np.int64)], const=(1,), match="2 per axis")
    expect_graph_error("Pad", [rand(rng, 2, 3), np.array([0, -4, 0, 0], np.int64)], const=(1,), match="crop more")


_COORDS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric"]


@pytest.mark.parametrize("coord", _COORDS)
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 1.5], [1, 1, 0.6, 0.8], [1, 1, 1.7, 0.5]])
def test_resize_scales(rng, coord, mode, scales):
    x = rand(rng, 1, 2, 5, 4)
    attrs = {"mode": mode, "coordinate_transformation_mode": coord}
    args = [x, None, np.array(scales, np.float32)]
    fractional = any(not float(np.float32(s) * n).is_integer() for s, n in zip(scales, x.shape))
    if coord == "align_corners" and fractional:
        # align_corners divides by the real-valued output length, as the ONNX reference (and
        # the node suite) do; onnxruntime divides by the rounded length and fails those cases
        check_ref("Resize", args, attrs, opset=19, const=(2,))
    else:
        check_op("Resize", args, attrs, const=(2,), static=True)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("sizes", [[1, 1, 7, 3], [1, 1, 3, 8]])
def test_resize_nearest_modes(rng, nearest_mode, sizes):
    x = rand(rng, 1, 1, 4, 5)
    attrs = {"mode": "nearest", "nearest_mode": nearest_mode, "coordinate_transformation_mode": "asymmetric"}
    check_op("Resize", [x, None, None, np.array(sizes, np.int64)], attrs, const=(3,), static=True)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("sizes", [[1, 1, 3, 2], [1, 1, 9, 7]])
def test_resize_antialias_and_exclude_outside(rng, mode, sizes):
    x = rand(rng, 1, 1, 6, 5)
    extra = {"exclude_outside": 1, "cubic_coeff_a": -0.5} if mode == "cubic" else {"exclude_outside": 1, "antialias": 1}
    for attrs in ({"antialias": 1}, extra):
        check_op("Resize", [x, None, None, np.array(sizes, np.int64)], {"mode": mode, **attrs}, const=(3,), static=True)


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_resize_keep_aspect_ratio_with_axes(rng, policy):
    x = rand(rng, 1, 2, 4, 6)
    attrs = {"mode": "linear", "keep_aspect_ratio_policy": policy, "axes": [2, 3]}
    check_op("Resize", [x, None, None, np.array([7, 8], np.int64)], attrs, const=(3,), static=True)


def test_resize_tf_crop_and_resize(rng):
    x = rand(rng, 1, 1, 4, 4)
    roi = np.array([0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7], np.float32)
    for mode in ("linear", "nearest"):
        attrs = {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 10.0}
        check_op("Resize", [x, roi, None, np.array([1, 1, 3, 3], np.int64)], attrs, const=(1, 3), static=True)


def test_resize_runtime_scales_and_uint8(rng):
    from tests.ops.conftest import evaluate, ort_run

    x = rand(rng, 1, 3, 4, 4, dtype=np.uint8, low=0, high=255)
    args = [x, None, np.array([1, 1, 0.5, 1.5], np.float32)]
    (want,) = ort_run("Resize", args, {"mode": "linear"})
    g, feeds = aioge_graph("Resize", args, {"mode": "linear"})
    (got,) = evaluate(g, feeds)
    # aioge rounds the float result half to even (as the ONNX reference); onnxruntime's uint8
    # path may land one below
    assert got.dtype == np.uint8 and got.shape == want.shape
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    check_op("Resize", [rand(rng, 2, 3, 4), None, np.array([1, 2, 0.5], np.float32)], {"mode": "nearest"})


def test_resize_errors(rng):
    x = rand(rng, 1, 1, 2, 2)
    both = [x, None, np.array([1, 1, 2, 2], np.float32), np.array([1, 1, 4, 4], np.int64)]
    expect_graph_error("Resize", both, const=(2, 3), match="exactly one")
    expect_graph_error("Resize", [x, None, np.array([1, 2], np.float32)], const=(2,), match="do not fit")
    expect_graph_error("Resize", [x, None, np.array([1, 1, 2, 2], np.float32)], {"mode": "area"}, match="mode")


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(rng, mode):
    x = rand(rng, 1, 2, 3, 3)
    with at_opset(9):
        check_op("Upsample", [x, np.array([1, 1, 2, 3], np.float32)], {"mode": mode}, const=(1,), static=True)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("blocksize", [1, 2, 3])
def test_depth_to_space(rng, mode, blocksize):
    x = rand(rng, 2, 2 * blocksize * blocksize, 3, 2)
    check_op("DepthToSpace", [x], {"blocksize": blocksize, "mode": mode}, static=True)


@pytest.mark.parametrize("blocksize", [1, 2])
def test_space_to_depth(rng, blocksize):
    check_op("SpaceToDepth", [rand(rng, 2, 3, 4, 6)], {"blocksize": blocksize}, static=True)


def test_space_to_depth_crd_inverts_depth_to_space(rng):
    from tests.ops.conftest import evaluate

    x = rand(rng, 1, 8, 2, 3)
    g, feeds = aioge_graph("DepthToSpace", [x], {"blocksize": 2, "mode": "CRD"})
    (y,) = evaluate(g, feeds)
    g, feeds = aioge_graph("SpaceToDepth", [y], {"blocksize": 2, "mode": "CRD"})
    (back,) = evaluate(g, feeds)
    np.testing.assert_array_equal(back, x)


def test_layout_errors(rng):
    expect_graph_error("DepthToSpace", [rand(rng, 1, 6, 2, 2)], {"blocksize": 2}, match="divisible")
    expect_graph_error("SpaceToDepth", [rand(rng, 1, 2, 3, 4)], {"blocksize": 2}, match="divisible")
    expect_graph_error("DepthToSpace", [rand(rng, 4, 2, 2)], {"blocksize": 2}, match="4-D")


@pytest.mark.parametrize(
    ("shape", "target", "axes"), [((4, 5), [2, 7], None), ((3, 4, 5), [6, 1], [0, -1]), ((2, 3), [2, 3], None)]
)
def test_center_crop_pad(rng, shape, target, axes):
    attrs = {} if axes is None else {"axes": axes}
    check_ref("CenterCropPad", [rand(rng, *shape), np.array(target, np.int64)], attrs, opset=18, const=(1,))


@pytest.mark.parametrize(
    ("image", "block", "attrs"),
    [([5, 5], [1, 5], {}), ([4, 5], [2, 2], {"strides": [1, 2]}), ([5, 5], [3, 3], {"pads": [1, 1, 1, 1], "dilations": [1, 2]})],
)
def test_col2im(rng, image, block, attrs):
    from aioge.kernels.image import col2im_positions

    nd = len(image)
    positions = col2im_positions(
        image, block, attrs.get("dilations", [1] * nd), attrs.get("pads", [0] * 2 * nd), attrs.get("strides", [1] * nd)
    )
    x = rand(rng, 2, 3 * int(np.prod(block)), int(np.prod(positions)))
    check_op("Col2Im", [x, np.array(image, np.int64), np.array(block, np.int64)], attrs, const=(1, 2), static=True)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_2d(rng, mode, padding_mode, align_corners):
    x = rand(rng, 2, 3, 4, 5)
    grid = rand(rng, 2, 3, 6, 2, low=-1.3, high=1.3)  # some points fall outside
    attrs = {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners}
    if (mode, padding_mode) == ("cubic", "border"):
        # the ONNX reference clamps the source coordinate before taking cubic taps;
        # onnxruntime (like PyTorch) clamps each tap instead
        check_ref("GridSample", [x, grid], attrs, opset=22)
        return
    with at_opset(22):
        check_op("GridSample", [x, grid], attrs, static=True)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_grid_sample_3d(rng, mode):
    with at_opset(22):
        check_op("GridSample", [rand(rng, 1, 2, 3, 4, 5), rand(rng, 1, 2, 3, 2, 3, low=-1.2, high=1.2)], {"mode": mode})


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 1, 2, 3, 4]])
def test_affine_grid(rng, align_corners, size):
    d = len(size) - 2
    theta = rand(rng, size[0], d, d + 1)
    with at_opset(20):
        check_op("AffineGrid", [theta, np.array(size, np.int64)], {"align_corners": align_corners}, const=(1,), static=True)
