"""Sequence and optional kernels: a sequence is a Python list of arrays, an empty optional None.

Lists are values: a kernel never edits the list it reads, it returns a new one. Tensors
going into a list are copied, because the tensor a node reads may be an arena view whose
bytes a later node reuses, while the list outlives it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "concat_from_sequence",
    "optional",
    "optional_get_element",
    "optional_has_element",
    "own_copy",
    "sequence_at",
    "sequence_construct",
    "sequence_empty",
    "sequence_erase",
    "sequence_insert",
    "sequence_length",
    "split_to_sequence",
]


def own_copy(x: Any) -> Any:
    """A copy of a value: a tensor, a list of tensors (a sequence) or None (an empty optional)."""
    if x is None:
        return None
    if isinstance(x, list):
        return [np.array(t, copy=True) for t in x]
    return np.array(x, copy=True)


def _seq(s: Any, op: str) -> list[np.ndarray]:
    if not isinstance(s, list):
        raise ValueError(f"{op} takes a sequence (a list of arrays), got {'nothing' if s is None else type(s).__name__}")
    return s


def _position(pos: Any, n: int, op: str, *, insert: bool = False) -> int:
    p = np.asarray(pos)
    if p.size != 1 or p.dtype.kind not in "iu":
        raise ValueError(f"{op}: the position must be one integer, got {p.dtype}{list(p.shape)}")
    k = int(p.reshape(-1)[0])
    hi = n if insert else n - 1
    if not -n <= k <= hi:
        raise ValueError(f"{op}: position {k} is out of range for a sequence of {n} tensors")
    return k + n if k < 0 else k


def sequence_construct(*tensors: np.ndarray) -> list[np.ndarray]:
    """A new sequence of (copies of) the tensors, in order."""
    return [np.array(t, copy=True) for t in tensors]


def sequence_empty(dtype: str = "float32") -> list[np.ndarray]:
    """An empty sequence (its element dtype lives in the desc)."""
    return []


def sequence_at(s: list[np.ndarray], position: np.ndarray) -> np.ndarray:
    """The tensor at ``position`` (negative counts from the end).

    Raises:
        ValueError: the position is out of range.
    """
    items = _seq(s, "SequenceAt")
    return np.array(items[_position(position, len(items), "SequenceAt")], copy=True)


def sequence_insert(s: list[np.ndarray], tensor: np.ndarray, position: np.ndarray | None = None) -> list[np.ndarray]:
    """A new sequence with ``tensor`` inserted at ``position`` (default: appended).

    Raises:
        ValueError: the position is out of range, or the tensor's dtype differs from the elements'.
    """
    items = _seq(s, "SequenceInsert")
    if items and np.asarray(tensor).dtype != items[0].dtype:
        raise ValueError(f"SequenceInsert: a {np.asarray(tensor).dtype} tensor into a sequence of {items[0].dtype}")
    k = len(items) if position is None else _position(position, len(items), "SequenceInsert", insert=True)
    return [*items[:k], np.array(tensor, copy=True), *items[k:]]


def sequence_erase(s: list[np.ndarray], position: np.ndarray | None = None) -> list[np.ndarray]:
    """A new sequence without the tensor at ``position`` (default: the last).

    Raises:
        ValueError: the sequence is empty or the position is out of range.
    """
    items = _seq(s, "SequenceErase")
    if not items:
        raise ValueError("SequenceErase: the sequence is empty")
    k = len(items) - 1 if position is None else _position(position, len(items), "SequenceErase")
    return [*items[:k], *items[k + 1 :]]


def sequence_length(s: list[np.ndarray]) -> np.ndarray:
    """The number of tensors, an int64 scalar."""
    return np.asarray(len(_seq(s, "SequenceLength")), np.int64)


def split_to_sequence(x: np.ndarray, split: np.ndarray | None = None, *, axis: int = 0, keepdims: int = 1) -> list[np.ndarray]:
    """``x`` split along ``axis``: into ones (squeezed unless ``keepdims``) without ``split``,
    into chunks of ``split`` (a scalar: the last may be shorter) or of the sizes it lists.

    Raises:
        ValueError: sizes that do not add up to the axis length, or a non-positive chunk.
    """
    x = np.asarray(x)
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis < x.ndim:
        raise ValueError(f"SplitToSequence: axis {axis} is out of range for rank {x.ndim}")
    total = x.shape[axis]
    if split is None:
        parts = np.split(x, total, axis=axis) if total else []
        return [np.array(p if keepdims else np.squeeze(p, axis), copy=True) for p in parts]
    sp = np.asarray(split)
    if sp.ndim == 0:
        step = int(sp)
        if step <= 0:
            raise ValueError(f"SplitToSequence: a scalar split must be positive, got {step}")
        sizes = [min(step, total - s) for s in range(0, total, step)]
    else:
        sizes = [int(s) for s in sp.reshape(-1)]
        if sum(sizes) != total or min(sizes, default=0) < 0:
            raise ValueError(f"SplitToSequence: split {sizes} does not add up to the axis length {total}")
    bounds = np.cumsum(sizes)[:-1]
    return [np.array(p, copy=True) for p in np.split(x, bounds, axis=axis)] if sizes else []


def concat_from_sequence(s: list[np.ndarray], *, axis: int = 0, new_axis: int = 0) -> np.ndarray:
    """The tensors joined along ``axis`` (stacked on a new axis when ``new_axis``).

    Raises:
        ValueError: an empty sequence, or tensors whose shapes do not join.
    """
    items = _seq(s, "ConcatFromSequence")
    if not items:
        raise ValueError("ConcatFromSequence: the sequence is empty")
    if new_axis:
        rank = items[0].ndim + 1
        return np.stack(items, axis=axis + rank if axis < 0 else axis)
    return np.concatenate(items, axis=axis)


def optional(x: Any = None, **_: Any) -> Any:
    """The optional holding ``x`` (a copy), or an empty one (None)."""
    return own_copy(x)


def optional_has_element(x: Any = None) -> np.ndarray:
    """A bool scalar: whether the optional holds a value."""
    return np.asarray(x is not None)


def optional_get_element(x: Any = None) -> Any:
    """The value held (a copy: outputs never alias inputs).

    Raises:
        ValueError: the optional is empty.
    """
    if x is None:
        raise ValueError("OptionalGetElement: the optional is empty")
    return own_copy(x)
