"""Shape and dtype inference shared by many op families."""

from __future__ import annotations

from aioge.ir.desc import Dim, TensorDesc
from aioge.ops.schema import InferContext, InferError

__all__ = [
    "broadcast_shapes",
    "infer_binary",
    "infer_broadcast_same_dtype",
    "infer_like_input",
    "normalise_axis",
]


def broadcast_shapes(*shapes: tuple[Dim, ...] | None) -> tuple[Dim, ...] | None:
    """numpy broadcasting over shapes that may hold symbols; None if any rank is unknown.

    Raises:
        InferError: two static dimensions differ and neither is 1.
    """
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)  # type: ignore[arg-type]
    out: list[Dim] = []
    for axis in range(rank):
        dim: Dim = 1
        for s in shapes:
            assert s is not None
            k = axis - (rank - len(s))
            if k < 0:
                continue
            d = s[k]
            if d == 1:
                continue
            if dim == 1:
                dim = d
            elif d != dim:
                if isinstance(d, int) and isinstance(dim, int):
                    raise InferError(f"shapes {[tuple(x) for x in shapes if x is not None]} do not broadcast")
                dim = dim if isinstance(dim, int) else d
        out.append(dim)
    return tuple(out)


def infer_like_input(ctx: InferContext) -> list[TensorDesc]:
    """Output has the shape and dtype of input 0 (unary elementwise ops)."""
    d = ctx.inputs[0]
    if d is None:
        raise InferError("input 0 is required")
    return [TensorDesc(d.shape, d.dtype)]


def infer_broadcast_same_dtype(ctx: InferContext) -> list[TensorDesc]:
    """All inputs share a dtype; the output is their broadcast (Add, Mul, Sum, Max, ...)."""
    descs = [d for d in ctx.inputs if d is not None]
    dtypes = {d.dtype for d in descs}
    if len(dtypes) > 1:
        raise InferError(f"inputs must share one dtype, got {[d.dtype for d in descs]}")
    return [TensorDesc(broadcast_shapes(*(d.shape for d in descs)), descs[0].dtype)]


def infer_binary(ctx: InferContext, out_dtype: str | None = None) -> list[TensorDesc]:
    (desc,) = infer_broadcast_same_dtype(ctx)
    return [TensorDesc(desc.shape, out_dtype or desc.dtype)]


def normalise_axis(axis: int, rank: int, what: str = "axis") -> int:
    """Map a possibly negative axis into [0, rank).

    Raises:
        InferError: out of range.
    """
    if not -rank <= axis < max(rank, 1):
        raise InferError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0
