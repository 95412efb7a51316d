"""The structural fingerprint of a graph: stable across processes and machines.

Built from named parts (JAX's habit): the signature (inputs and outputs by name and desc),
the constants (desc and a BLAKE3 of the bytes), the variables, and the nodes in topological
order with their op type, attributes and which values they read. Value and node names of
intermediates are left out: renaming an intermediate does not change what a graph computes.
"""

from __future__ import annotations

import hashlib
import logging
import os
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import blake3
import msgpack
import numpy as np

if TYPE_CHECKING:
    from aioge.ir.graph import Graph, Value

__all__ = ["array_digest", "canonical_attr", "data_digests", "fingerprint_parts", "graph_fingerprint", "prehash"]

log = logging.getLogger(__name__)


def array_digest(array: np.ndarray) -> str:
    """BLAKE3 over an array's dtype, shape and bytes (C order). Every weight of a graph is
    hashed for its fingerprint, so on a graph-cache hit too: BLAKE3 hashes at 4.7 GB/s a core
    here, sha256 at 1.8 (resnet18's 46 MB: 10 ms against 26)."""
    h = blake3.blake3(f"{array.dtype.str}|{array.shape}|".encode())
    if array.dtype.kind in "OU":
        h.update(repr(array.tolist()).encode())
    else:
        # The bytes themselves through the buffer protocol: no copy of a weight (tobytes would
        # copy 440 MB for a BERT-base), and blake3 releases the GIL while it hashes them.
        h.update(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
    return h.hexdigest()


# Weights at least this big are hashed on a second thread too (a BERT-base's 440 MB of weights
# take about 0.1 s on one core).
_PARALLEL_BYTES = 1 << 20


def _digests(arrays: list[np.ndarray]) -> list[str]:
    """``array_digest`` of each array, the big ones spread over the cores (or begun early: ``prehash``)."""
    early = [_early_digest(a) for a in arrays]
    rest = [a for a, e in zip(arrays, early) if e is None]
    big = sum(a.nbytes for a in rest if a.nbytes >= _PARALLEL_BYTES)
    workers = min(os.cpu_count() or 1, 4)
    if workers < 2 or big < 16 * _PARALLEL_BYTES:
        done = iter([array_digest(a) for a in rest])
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="aioge-fingerprint") as pool:
            done = iter(list(pool.map(array_digest, rest)))
    return [next(done) if e is None else e.result() for e in early]


# Digests begun by ``prehash``, by the array's id, with a weak reference that tells it is the same
# array (an entry leaves with its array).
_early: dict[int, tuple[weakref.ref[np.ndarray], Future[str]]] = {}
_early_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aioge-prehash")  # its thread starts on first use


def _after_fork() -> None:  # a forked child has no pool thread: it would wait forever on the parent's
    global _early_pool
    _early.clear()
    _early_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="aioge-prehash")


os.register_at_fork(after_in_child=_after_fork)


def _frozen(a: Any) -> bool:
    """``a`` and every array it views are read-only: its digest cannot go stale."""
    while isinstance(a, np.ndarray) and not a.flags.writeable:
        a = a.base
    return not isinstance(a, np.ndarray)


def prehash(arrays: list[np.ndarray]) -> int:
    """Begin ``array_digest`` of each big read-only array on a thread of its own (a front end's
    weights, on the other core while it converts the nodes), so the fingerprint asked for next
    finds them done (BERT-base: 0.1 s of hashing off the start). Returns how many were begun."""
    todo = [a for a in arrays if a.nbytes >= _PARALLEL_BYTES and _frozen(a)]
    if not todo or (os.cpu_count() or 1) < 2:
        return 0
    for a in todo:
        _early[id(a)] = (weakref.ref(a), _early_pool.submit(array_digest, a))
        weakref.finalize(a, _early.pop, id(a), None)
    return len(todo)


def _early_digest(a: np.ndarray) -> Future[str] | None:
    entry = _early.get(id(a))
    return entry[1] if entry is not None and entry[0]() is a and _frozen(a) else None


def canonical_attr(value: Any) -> Any:
    """Turn an attribute value into plain msgpack-able data with a stable encoding."""
    if isinstance(value, np.ndarray):
        return ["tensor", value.dtype.str, list(value.shape), array_digest(value)]
    if isinstance(value, (list, tuple)):
        return [canonical_attr(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return [[k, canonical_attr(value[k])] for k in sorted(value)]
    return value


def _data(v: Value) -> np.ndarray:
    # Graph.constant and Graph.variable always store the array: a value without one is a bug.
    assert v.data is not None, f"{v.kind.value} {v.name!r} has no data"
    return v.data


def _desc(v: Any) -> list[Any]:
    shape = None if v.desc.shape is None else list(v.desc.shape)
    if v.desc.container != "tensor":
        return [shape, v.desc.dtype, v.desc.format, v.desc.container]
    return [shape, v.desc.dtype, v.desc.format]


def data_digests(graph: Graph) -> list[tuple[str, np.ndarray]]:
    """``(array_digest, array)`` of each constant and variable of ``graph``: the digests the
    fingerprint is built from, by which a graph cache entry names the arrays it takes from the graph."""
    arrays = [_data(v) for v in [*graph.constants.values(), *graph.variables.values()]]
    return list(zip(_digests(arrays), arrays))


def fingerprint_parts(graph: Graph, held: list[tuple[str, np.ndarray]] | None = None) -> dict[str, bytes]:
    """Return the fingerprint's named parts, each as canonical msgpack bytes; ``held``, when
    given, is extended with ``data_digests(graph)`` (computed once, for both)."""
    ids: dict[int, str] = {}
    for v in graph.inputs:
        ids[id(v)] = "in:" + v.name
    for v in graph.constants.values():
        ids[id(v)] = "const:" + v.name
    for v in graph.variables.values():
        ids[id(v)] = "var:" + v.name
    nodes = []
    for i, node in enumerate(graph.topological_order()):
        for j, out in enumerate(node.outputs):
            ids[id(out)] = f"n{i}:{j}"
        nodes.append(
            [
                node.domain,
                node.op_type,
                [[k, canonical_attr(node.attrs[k])] for k in sorted(node.attrs)],
                [None if v is None else ids[id(v)] for v in node.inputs],
                [_desc(o) for o in node.outputs],
            ]
        )
    consts, variables = list(graph.constants.values()), list(graph.variables.values())
    pairs = data_digests(graph)
    if held is not None:
        held.extend(pairs)
    digests = [d for d, _ in pairs]
    parts = {
        "inputs": [[v.name, _desc(v)] for v in graph.inputs],
        "constants": sorted([v.name, _desc(v), d] for v, d in zip(consts, digests[: len(consts)])),
        "variables": sorted([v.name, _desc(v), d] for v, d in zip(variables, digests[len(consts) :])),
        "nodes": nodes,
        "outputs": [[v.name, ids.get(id(v))] for v in graph.outputs],
    }
    return {k: msgpack.packb(p, use_bin_type=True) for k, p in parts.items()}


def graph_fingerprint(graph: Graph, held: list[tuple[str, np.ndarray]] | None = None) -> str:
    """Hex sha256 of the graph's structure; identical across processes for the same graph.
    ``held``, when given, is extended with ``data_digests(graph)``."""
    h = hashlib.sha256(b"aioge-graph-v1")
    for name, blob in fingerprint_parts(graph, held).items():
        part = hashlib.sha256(blob).hexdigest()
        log.debug("fingerprint %s: part %s = %s", graph.name, name, part[:16])
        h.update(name.encode() + b"=" + part.encode())
    return h.hexdigest()
