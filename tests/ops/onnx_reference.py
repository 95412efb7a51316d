"""Helpers for op tests whose yardstick needs a newer opset than conftest's, another domain,
or onnx.reference.

``at_opset(n)`` runs conftest's ``check_op`` against onnxruntime at opset n (ops added after
opset 21: Swish, RMSNormalization, Attention, TensorScatter, signed BitShift, ...).
``check_against`` builds the one-node model for any domain and compares with onnxruntime
or ``onnx.reference`` (for the ops onnxruntime does not run); ``check_ref`` is its
onnx.reference form for the default domain. All reuse conftest's graph builder, evaluator
and tolerances.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import onnxruntime as ort
from onnx import helper
from onnx.reference import ReferenceEvaluator

from tests.ops import conftest as C

__all__ = ["at_opset", "check_against", "check_ref", "run_session"]


@contextmanager
def at_opset(opset: int) -> Iterator[None]:
    """Within the block, conftest's onnxruntime models use ``opset``."""
    old = C.OPSET
    C.OPSET = opset
    try:
        yield
    finally:
        C.OPSET = old


def check_against(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: Mapping[str, Any] | None = None,
    *,
    opset: int,
    domain: str = "",
    runtime: str = "ort",
    const: Sequence[int] = (),
    num_outputs: int = 1,
) -> list[np.ndarray]:
    """Compare aioge with onnxruntime (``runtime="ort"``) or onnx.reference on one op of
    ``domain`` at ``opset``; return aioge's outputs.

    The model's output types come from aioge's inference (the yardsticks only need them typed).
    """
    g, feeds = _graph(op_type, inputs, attrs, const, num_outputs, domain)
    names = ["" if x is None else f"in{i}" for i, x in enumerate(inputs)]
    outs = [f"out{i}" for i in range(num_outputs)]
    node = helper.make_node(op_type, names, outs, domain=domain or None, **{k: C._onnx_attr(v) for k, v in (attrs or {}).items()})
    graph = helper.make_graph(
        [node],
        "one_op",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
            for n, x in zip(names, inputs)
            if x is not None
        ],
        [
            helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(C.numpy_dtype(v.dtype)), None)
            for o, v in zip(outs, g.outputs)
        ],
    )
    opsets = [helper.make_opsetid("", opset if not domain else 21)] + ([helper.make_opsetid(domain, opset)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    given = {n: x for n, x in zip(names, inputs) if x is not None}
    if runtime == "ort":
        session = ort.InferenceSession(model.SerializeToString(), C._SESSION_OPTIONS, providers=["CPUExecutionProvider"])
        expected = session.run(outs, given)
    else:
        expected = ReferenceEvaluator(model).run(None, given)
    got = C.evaluate(g, feeds)
    for i, (e, r) in enumerate(zip(expected, got)):
        C.compare(np.asarray(e), r, f"{op_type} output {i}")
    return got


def _graph(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: Mapping[str, Any] | None,
    const: Sequence[int],
    num_outputs: int,
    domain: str,
) -> tuple[Any, dict[str, np.ndarray]]:
    """conftest's one-node graph, for ops of any domain."""
    if not domain:
        return C.aioge_graph(op_type, inputs, attrs, const=const, num_outputs=num_outputs)
    from aioge.ir.graph import Graph
    from aioge.ops import apply

    g = Graph("one_op")
    args: list[Any] = []
    feeds: dict[str, np.ndarray] = {}
    for i, x in enumerate(inputs):
        if x is None or i in const:
            args.append(x)
        else:
            args.append(g.input(f"in{i}", x.shape, x.dtype))
            feeds[f"in{i}"] = x
    g.output(*apply(op_type, args, attrs or {}, num_outputs=num_outputs, graph=g, name="node", domain=domain))
    return g, feeds


def check_ref(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: Mapping[str, Any] | None = None,
    *,
    opset: int,
    const: Sequence[int] = (),
    num_outputs: int = 1,
) -> list[np.ndarray]:
    """Compare aioge with onnx.reference on one op of the default domain."""
    return check_against(op_type, inputs, attrs, opset=opset, runtime="reference", const=const, num_outputs=num_outputs)


async def run_session(graph: Any, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Compile and run a graph in a real Session (heuristic tuning: timing is not the point)."""
    import aioge

    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        return await s.run(graph, feeds)
