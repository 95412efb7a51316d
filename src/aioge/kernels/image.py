"""Image and tensor-layout kernels: Pad, DepthToSpace, SpaceToDepth, CenterCropPad and Col2Im.

``pad_widths`` and ``col2im_positions`` are shared with shape inference (``aioge.ops.image``)
so a kernel always produces the shape inference promised.
"""

from __future__ import annotations

import itertools
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from aioge.kernels import native
from aioge.kernels.contract import is_constant

__all__ = [
    "center_crop_pad",
    "col2im",
    "col2im_positions",
    "decode_image",
    "depth_to_space",
    "pad",
    "pad_form",
    "pad_widths",
    "space_to_depth",
]


def pad_widths(rank: int, pads: Sequence[int], axes: Sequence[int] | None) -> list[tuple[int, int]]:
    """(begin, end) padding of every axis from ONNX's [begins..., ends...] over ``axes``.

    Raises:
        ValueError: pads is not twice as long as the axes, or an axis is out of range.
    """
    ax = list(range(rank)) if axes is None else list(axes)
    if len(pads) != 2 * len(ax):
        raise ValueError(f"pads has {len(pads)} values for {len(ax)} axes (2 per axis expected)")
    widths = [(0, 0)] * rank
    for i, a in enumerate(ax):
        if not -rank <= a < rank:
            raise ValueError(f"axis {a} is out of range for rank {rank}")
        widths[a % rank] = (int(pads[i]), int(pads[len(ax) + i]))
    return widths


def pad(
    data: np.ndarray,
    pads: np.ndarray,
    constant_value: np.ndarray | None = None,
    axes: np.ndarray | None = None,
    mode: Literal["constant", "reflect", "edge", "wrap"] = "constant",
) -> np.ndarray:
    """ONNX Pad: constant, reflect, edge or wrap padding; negative pads crop first.

    Raises:
        ValueError: bad pads or axes, or reflect/wrap/edge padding of an empty axis.
    """
    ax = None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    widths = pad_widths(data.ndim, [int(p) for p in np.asarray(pads).reshape(-1)], ax)
    # Negative pads remove elements: crop those first, then pad by what is left.
    crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for (b, e), d in zip(widths, data.shape))
    x = data[crop]
    grow = [(max(b, 0), max(e, 0)) for b, e in widths]
    if mode == "constant":
        value = 0 if constant_value is None or np.asarray(constant_value).size == 0 else np.asarray(constant_value).reshape(-1)[0]
        return np.pad(x, grow, mode="constant", constant_values=value)
    if any(g != (0, 0) and d == 0 for g, d in zip(grow, x.shape)):
        raise ValueError(f"cannot {mode}-pad an empty axis of shape {x.shape}")
    return np.pad(x, grow, mode=mode)


def pad_form(attrs: Mapping[str, Any]) -> native.NativeForm:
    """A constant Pad over constant pads as C jobs: the value's fill, then the (cropped) input into
    the interior by JOB_ELEMWISE's cast to its dtype. NASNet's pads had kept it off native programs."""

    def form(inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> list[native.NativeCall] | None:
        x, y = inputs[0], outputs[0]
        fixed = [a for i, a in enumerate(inputs) if i in (1, 3) and a is not None]  # the value is read as the jobs run
        if attrs.get("mode", "constant") != "constant" or not native.available() or not all(map(is_constant, fixed)):
            return None
        ax = None if len(inputs) < 4 or inputs[3] is None else [int(a) for a in np.asarray(inputs[3]).reshape(-1)]
        widths = pad_widths(x.ndim, [int(p) for p in np.asarray(inputs[1]).reshape(-1)], ax)
        value = inputs[2] if len(inputs) > 2 and inputs[2] is not None and np.asarray(inputs[2]).size else np.zeros((), y.dtype)
        src = x[tuple(slice(max(-b, 0), d - max(-e, 0)) for (b, e), d in zip(widths, x.shape))]
        dst = y[tuple(slice(max(b, 0), max(b, 0) + n) for (b, _), n in zip(widths, src.shape))]
        fill = native.elemwise(native.EW_CAST, y, np.asarray(value).reshape(-1)[:1].reshape(()))
        calls = [fill, native.elemwise(native.EW_CAST, dst, src)] if src.size else [fill]
        return None if None in calls or src.shape != dst.shape else calls  # type: ignore[return-value]

    return form


def depth_to_space(x: np.ndarray, blocksize: int, mode: str = "DCR") -> np.ndarray:
    """Move blocks of channels into the spatial dimensions (DCR or CRD channel order)."""
    n, c, h, w = x.shape
    b = blocksize
    if mode == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return _fresh(t.reshape(n, c // (b * b), h * b, w * b), x)


def space_to_depth(x: np.ndarray, blocksize: int, mode: str = "DCR") -> np.ndarray:
    """Move blocks of the spatial dimensions into channels (the inverse of DepthToSpace)."""
    n, c, h, w = x.shape
    b = blocksize
    t = x.reshape(n, c, h // b, b, w // b, b)
    t = t.transpose(0, 3, 5, 1, 2, 4) if mode == "DCR" else t.transpose(0, 1, 3, 5, 2, 4)
    return _fresh(t.reshape(n, c * b * b, h // b, w // b), x)


def _fresh(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """y, copied when it is still a view of x (blocksize 1 moves nothing)."""
    return y.copy() if np.may_share_memory(y, x) else y


def center_crop_pad(x: np.ndarray, shape: np.ndarray, axes: Sequence[int] | None = None) -> np.ndarray:
    """Crop or zero-pad each axis in ``axes`` to ``shape``, keeping the centre."""
    target = [int(v) for v in np.asarray(shape).reshape(-1)]
    ax = list(range(x.ndim)) if axes is None else [a % x.ndim for a in axes]
    if len(target) != len(ax):
        raise ValueError(f"shape has {len(target)} values for {len(ax)} axes")
    out_shape = list(x.shape)
    src = [slice(None)] * x.ndim
    dst = [slice(None)] * x.ndim
    for a, want in zip(ax, target):
        have = x.shape[a]
        out_shape[a] = want
        if want < have:
            start = (have - want) // 2
            src[a] = slice(start, start + want)
        elif want > have:
            start = (want - have) // 2
            dst[a] = slice(start, start + have)
    out = np.zeros(out_shape, x.dtype)
    out[tuple(dst)] = x[tuple(src)]
    return out


def col2im_positions(
    image: Sequence[int], block: Sequence[int], dilations: Sequence[int], pads: Sequence[int], strides: Sequence[int]
) -> list[int]:
    """How many block positions Col2Im slides along each spatial dimension.

    Raises:
        ValueError: a dilated block does not fit in the padded image.
    """
    n = len(image)
    out = []
    for i in range(n):
        span = dilations[i] * (block[i] - 1) + 1
        room = image[i] + pads[i] + pads[i + n] - span
        if room < 0:
            raise ValueError(f"block {list(block)} does not fit image {list(image)} with pads {list(pads)}")
        out.append(room // strides[i] + 1)
    return out


def col2im(
    x: np.ndarray,
    image_shape: np.ndarray,
    block_shape: np.ndarray,
    dilations: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
) -> np.ndarray:
    """Sum columns of blocks back into images: (N, C * prod(block), L) -> (N, C, *image).

    One strided add per block offset (a few dozen at most), each over every position.

    Raises:
        ValueError: the column count L does not match the block positions.
    """
    image = [int(v) for v in np.asarray(image_shape).reshape(-1)]
    block = [int(v) for v in np.asarray(block_shape).reshape(-1)]
    nd = len(image)
    dil = list(dilations or [1] * nd)
    pad_ = list(pads or [0] * (2 * nd))
    stride = list(strides or [1] * nd)
    positions = col2im_positions(image, block, dil, pad_, stride)
    n, cb, length = x.shape
    kk = int(np.prod(block))
    if cb % kk or length != int(np.prod(positions)):
        raise ValueError(f"input of shape {x.shape} does not match blocks {block} over {positions} positions")
    c = cb // kk
    cols = x.reshape(n, c, *block, *positions)
    padded = np.zeros((n, c, *(image[i] + pad_[i] + pad_[i + nd] for i in range(nd))), x.dtype)
    for offset in itertools.product(*(range(b) for b in block)):
        where = tuple(
            slice(offset[i] * dil[i], offset[i] * dil[i] + stride[i] * (positions[i] - 1) + 1, stride[i]) for i in range(nd)
        )
        padded[(slice(None), slice(None)) + where] += cols[(slice(None), slice(None)) + offset]
    crop = tuple(slice(pad_[i], pad_[i] + image[i]) for i in range(nd))
    return padded[(slice(None), slice(None), *crop)]


def decode_image(encoded: np.ndarray, pixel_format: str = "RGB") -> np.ndarray:
    """An encoded image (the bytes of a BMP, JPEG, JPEG 2000, PNG, PNM, TIFF or WebP file, as
    uint8) decoded to uint8 pixels: (H, W, 3) in RGB or BGR order, or (H, W, 1) for Grayscale.

    Decoding is Pillow's (the ``image`` extra), as onnx.reference decodes.

    Raises:
        ImportError: Pillow is not installed.
        ValueError: the bytes are not an image Pillow can read.
    """
    import io

    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError as exc:
        raise ImportError("ImageDecoder needs Pillow: pip install 'aioge[image]'") from exc
    try:
        img = Image.open(io.BytesIO(np.ascontiguousarray(encoded, dtype=np.uint8).tobytes()))
        img.load()
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"ImageDecoder: the {encoded.size} bytes are not a readable image ({exc})") from None
    if pixel_format == "Grayscale":
        return np.asarray(img.convert("L"), dtype=np.uint8)[:, :, None].copy()
    rgb = np.asarray(img.convert("RGB"), dtype=np.uint8)
    return (rgb[:, :, ::-1] if pixel_format == "BGR" else rgb).copy()
