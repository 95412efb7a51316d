"""Detection ops: NonMaxSuppression and RoiAlign.

NMS selects by index (AiCpu); RoiAlign's bilinear sampling is vector work, its int64 batch
indices legitimate inputs (``float_only`` off).
"""

from __future__ import annotations

from aioge.ir.desc import TensorDesc
from aioge.kernels import detection as k
from aioge.kernels.base import returning
from aioge.ops.schema import CPU_ONLY, FLOAT_DTYPES, VECTOR_ENGINES, Attr, InferContext, InferError, OpSchema

__all__ = ["SCHEMAS"]

_FLOATS = FLOAT_DTYPES


def _infer_nms(ctx: InferContext) -> list[TensorDesc]:
    boxes, scores = ctx.shape(0), ctx.shape(1)
    if boxes is not None and (len(boxes) != 3 or boxes[-1] not in (4, "?") and isinstance(boxes[-1], int)):
        raise InferError(f"boxes must be (batches, boxes, 4), got shape {boxes}")
    if scores is not None and len(scores) != 3:
        raise InferError(f"scores must be (batches, classes, boxes), got shape {scores}")
    return [TensorDesc(None, "int64")]  # how many boxes survive is only known at run time


def _infer_roi_align(ctx: InferContext) -> list[TensorDesc]:
    dtype = ctx.dtype(0)
    if dtype not in _FLOATS or ctx.dtype(1) != dtype:
        raise InferError(f"X and rois must be float tensors of one dtype, got {dtype} and {ctx.dtype(1)}")
    if ctx.dtype(2) != "int64":
        raise InferError(f"batch_indices must be int64, got {ctx.dtype(2)}")
    x, rois = ctx.shape(0), ctx.shape(1)
    if x is not None and len(x) != 4:
        raise InferError(f"X must be 4-D (N, C, H, W), got shape {x}")
    if x is None or rois is None:
        return [TensorDesc(None, dtype)]
    return [TensorDesc((rois[0], x[1], ctx.attrs["output_height"], ctx.attrs["output_width"]), dtype)]


SCHEMAS: tuple[OpSchema, ...] = (
    OpSchema(
        "NonMaxSuppression",
        _infer_nms,
        (returning("numpy", k.non_max_suppression),),
        CPU_ONLY,
        {"center_point_box": Attr("int", 0, (0, 1))},
        (2, 5),
        family="detection",
        float_only=False,
        doc="greedy per-class box selection by score with IoU suppression: [batch, class, box] rows",
    ),
    OpSchema(
        "RoiAlign",
        _infer_roi_align,
        (returning("numpy", k.roi_align),),
        VECTOR_ENGINES,
        {
            "coordinate_transformation_mode": Attr("string", "half_pixel", ("half_pixel", "output_half_pixel")),
            "mode": Attr("string", "avg", ("avg", "max")),
            "output_height": Attr("int", 1),
            "output_width": Attr("int", 1),
            "sampling_ratio": Attr("int", 0),
            "spatial_scale": Attr("float", 1.0),
        },
        (3, 3),
        family="detection",
        float_only=False,
        doc="bilinearly sampled, pooled features of regions of interest",
    ),
)
