"""Evaluating one node on known inputs, with the op's own kernel, ahead of any run.

Three places compute values before a graph runs: specialisation (small values that shape
inference needs), the ONNX frontend's ``KnownValues`` (load-time decisions such as which If
branch to inline) and the ConstantFolding pass. They all go through ``evaluate_node``, so they
agree on what may be evaluated: never a random op (``OpSchema.random``); an input of static
shape stands in for its data when the op reads only descs (``OpSchema.shape_only``); the
first implementation that applies to the signature; floating-point errors give the inf and
NaN the run would give, never a warning; a result that disagrees with the inferred descs is
not used. How big a value is worth computing stays each caller's choice.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from aioge.errors import GraphError
from aioge.ir.desc import TensorDesc, numpy_dtype
from aioge.ops.schema import OpSchema

__all__ = ["KNOWN_VALUE_LIMIT", "evaluate_node", "known_outputs"]

# Values of at most this many elements are evaluated ahead of a run when shape inference may
# need them (specialisation, and the re-inference that checks a decoded .om).
KNOWN_VALUE_LIMIT = 4096


def evaluate_node(
    schema: OpSchema,
    attrs: Mapping[str, Any],
    in_descs: Sequence[TensorDesc | None],
    in_values: Sequence[np.ndarray | None],
    out_descs: Sequence[TensorDesc],
    *,
    graph: str,
    node: str,
) -> list[np.ndarray] | None:
    """The node's outputs computed from its known inputs, or None when they cannot be known now.

    ``in_values[i]`` is input ``i``'s value when known (None where unknown or absent; an
    absent optional input has desc None). None comes back for a random op, an input that is
    neither known nor (for a shape-only op) of static shape, an output desc that is not
    static, or a kernel result of another shape or dtype than its desc.

    Raises:
        GraphError: the kernel failed on these inputs (naming graph and node); it would fail
            again at run time.
    """
    if schema.random or not all(d.static for d in out_descs):
        return None
    args: list[np.ndarray | None] = []
    for i, desc in enumerate(in_descs):
        value = in_values[i] if i < len(in_values) else None
        if desc is None:
            args.append(None)
        elif value is not None:
            args.append(value)
        elif schema.shape_only and desc.static:
            # Only the shape is read: a zero-stride view stands in for the data.
            args.append(np.broadcast_to(np.zeros((), numpy_dtype(desc.dtype)), desc.shape))  # type: ignore[arg-type]
        else:
            return None
    impl = next((i for i in schema.impls if i.applies(in_descs, attrs)), schema.impls[0])
    try:
        with np.errstate(all="ignore"):
            raw = impl.build(attrs, {}, in_descs, out_descs)(args, None)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - any kernel error: the same inputs fail at run time
        raise GraphError(
            f"{schema.name} failed on constant inputs: {type(exc).__name__}: {exc}", graph=graph, node=node
        ) from None
    results = [np.asarray(r) for r in list(raw)[: len(out_descs)]]  # a kernel may make optional outputs nobody reads
    if len(results) != len(out_descs):
        return None
    for a, d in zip(results, out_descs):
        if a.shape != tuple(d.shape) or a.dtype != numpy_dtype(d.dtype):  # type: ignore[arg-type]
            return None
    return results


def known_outputs(
    schema: OpSchema,
    attrs: Mapping[str, Any],
    in_descs: Sequence[TensorDesc | None],
    in_values: Sequence[np.ndarray | None],
    out_descs: Sequence[TensorDesc],
    *,
    graph: str,
    node: str,
) -> list[np.ndarray] | None:
    """``evaluate_node`` for outputs of at most ``KNOWN_VALUE_LIMIT`` elements each (what
    shape inference downstream may need), else None.

    Raises:
        GraphError: as ``evaluate_node``.
    """
    if not all(d.static and d.size <= KNOWN_VALUE_LIMIT for d in out_descs):
        return None
    return evaluate_node(schema, attrs, in_descs, in_values, out_descs, graph=graph, node=node)
