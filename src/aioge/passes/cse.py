"""Common-subexpression elimination: equal constants become one, and nodes that apply the
same op with the same attributes to the same inputs become one."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

from aioge.ir.fingerprint import array_digest, canonical_attr
from aioge.ir.graph import Graph, Value
from aioge.passes.rewrite import RANDOM_OPS, replace_values

__all__ = ["common_subexpressions"]


def common_subexpressions(graph: Graph) -> bool:
    """Merge equal constants (same dtype, shape and bytes), then merge nodes computing the
    same thing, in topological order so that merges cascade. Random ops are never merged.

    Returns True if it merged anything.
    """
    changed = _merge_constants(graph)
    seen: dict[tuple[Any, ...], Any] = {}
    for node in graph.topological_order():
        if node.op_type in RANDOM_OPS or not node.outputs:
            continue
        key = (
            node.domain,
            node.op_type,
            _attrs_key(node.attrs),
            tuple(None if v is None else id(v) for v in node.inputs),
            len(node.outputs),
        )
        first = seen.get(key)
        if first is None:
            seen[key] = node
            continue
        pairs = [(old, new) for old, new in zip(node.outputs, first.outputs) if old.uses or _is_out(graph, old)]
        if pairs and replace_values(graph, pairs, [node]):  # no pairs: dead, dead-code elimination's job
            changed = True
    return changed


def _is_out(graph: Graph, v: Value) -> bool:
    return any(o is v for o in graph.outputs)


def _attrs_key(attrs: dict[str, Any]) -> bytes:
    return msgpack.packb([[k, canonical_attr(attrs[k])] for k in sorted(attrs)], use_bin_type=True)


def _merge_constants(graph: Graph) -> bool:
    groups: dict[tuple[str, tuple[int, ...]], list[Value]] = {}
    for v in graph.constants.values():
        if v.data is not None and v.data.dtype.kind not in "OU":
            groups.setdefault((v.data.dtype.str, v.data.shape), []).append(v)
    changed = False
    for members in groups.values():
        if len(members) < 2:
            continue
        # Hash only where shapes collide, so big unique weights are never read; and where they
        # do (a transformer's layers all have the same shapes), a sample of each first: real
        # weights differ in it, and only equal samples pay for hashing the whole arrays.
        samples: dict[bytes, int] = {}
        for v in members:
            sample = _sample(v.data)  # type: ignore[arg-type]
            samples[sample] = samples.get(sample, 0) + 1
        keep: dict[str, Value] = {}
        for v in members:
            if samples[_sample(v.data)] < 2:  # type: ignore[arg-type]
                continue
            digest = array_digest(v.data)  # type: ignore[arg-type]
            first = keep.setdefault(digest, v)
            # An unused one is dead-code elimination's; an output keeps its own name.
            if first is v or not v.uses or _is_out(graph, v):
                continue
            if replace_values(graph, [(v, first)], []):
                changed = True
    if changed:
        graph.remove_unused_values()
    return changed


# Elements of a constant that its sample holds: equal arrays have equal samples, and two real
# weights of the same shape almost never do.
_SAMPLE_ELEMENTS = 4096


def _sample(data: np.ndarray) -> bytes:
    flat = data.reshape(-1)
    step = max(1, flat.size // _SAMPLE_ELEMENTS)
    return np.ascontiguousarray(flat[::step]).tobytes()
