"""Feeds checked against a graph's inputs, and the key of a feed layout whose check a caller may remember."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from aioge.errors import FeedError
from aioge.ir.desc import TensorDesc, numpy_dtype
from aioge.ir.graph import Graph

__all__ = ["FEED_KEYS", "FeedKey", "feed_arrays", "feed_key"]

FeedKey = tuple[tuple[str, tuple[int, ...], np.dtype], ...]
FEED_KEYS = 64  # feed layouts whose check is remembered per graph


def feed_arrays(graph: Graph, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The feeds as arrays of the inputs' dtypes, every input fed and nothing else.

    Raises:
        FeedError: a missing, extra or mistyped feed.
    """
    if not isinstance(feeds, Mapping):
        raise FeedError(f"feeds must be a mapping of input name to array, got {type(feeds).__name__}", graph=graph.name)
    names = [v.name for v in graph.inputs]
    missing = [n for n in names if n not in feeds]
    extra = sorted(set(feeds) - set(names))
    if missing:
        descs = ", ".join(f"{n}: {graph.value(n).desc}" for n in missing)
        # A misspelt name shows up twice: as the unknown key given and as the input missing.
        also = f"; got feeds for unknown inputs {extra} instead" if extra else ""
        raise FeedError(f"missing feeds for inputs {descs}{also}", graph=graph.name, input=missing[0])
    if extra:
        raise FeedError(f"feeds for unknown inputs {extra}; inputs are {names}", graph=graph.name, input=extra[0])
    arrays: dict[str, np.ndarray] = {}
    for v in graph.inputs:
        x = feeds[v.name]
        want = numpy_dtype(v.dtype)
        if not v.desc.is_tensor:
            arrays[v.name] = _container_feed(graph, v.name, v.desc, x)
            continue
        if not isinstance(x, np.ndarray):
            try:
                x = np.asarray(x, dtype=want)
            except (TypeError, ValueError) as exc:
                raise FeedError(f"input {v.name!r} expects {v.desc}: {exc}", graph=graph.name, input=v.name) from None
        if x.dtype != want and not (v.dtype == "str" and x.dtype.kind in "UO"):
            raise FeedError(f"input {v.name!r} expects {v.desc}, got dtype {x.dtype}", graph=graph.name, input=v.name)
        arrays[v.name] = x
    return arrays


def _container_feed(graph: Graph, name: str, desc: TensorDesc, x: Any) -> Any:
    """A sequence feed as a list of arrays of the element dtype, an optional's as None or its value.

    Raises:
        FeedError: a feed that is not what the input holds.
    """
    if x is None:
        if desc.container.startswith("optional"):
            return None
        raise FeedError(f"input {name!r} expects {desc}, got None", graph=graph.name, input=name)
    if desc.container == "optional":
        items, one = [x], True
    elif isinstance(x, (list, tuple)):
        items, one = list(x), False
    else:
        raise FeedError(f"input {name!r} expects {desc}: a list of arrays, got {type(x).__name__}", graph=graph.name, input=name)
    want = numpy_dtype(desc.dtype)
    out = []
    for i, t in enumerate(items):
        try:
            a = t if isinstance(t, np.ndarray) else np.asarray(t, dtype=want)
        except (TypeError, ValueError) as exc:
            raise FeedError(f"input {name!r} element {i} expects {desc.element}: {exc}", graph=graph.name, input=name) from None
        if a.dtype != want and not (desc.dtype == "str" and a.dtype.kind in "UO"):
            raise FeedError(
                f"input {name!r} element {i} expects {desc.element}, got dtype {a.dtype}", graph=graph.name, input=name
            )
        if desc.shape is not None and (
            a.ndim != len(desc.shape) or any(isinstance(d, int) and d != n for d, n in zip(desc.shape, a.shape))
        ):
            raise FeedError(
                f"input {name!r} element {i} expects {desc.element}, got shape {list(a.shape)}", graph=graph.name, input=name
            )
        out.append(a)
    return out[0] if one else out


def feed_key(feeds: Mapping[str, Any]) -> FeedKey | None:
    """Names, shapes and dtypes of feeds that are all arrays, or None."""
    if type(feeds) is not dict and not isinstance(feeds, Mapping):  # an ABC check costs a microsecond
        return None
    key = []
    for n, x in feeds.items():
        if type(x) is not np.ndarray:
            return None
        key.append((n, x.shape, x.dtype))
    return tuple(key)
