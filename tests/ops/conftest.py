"""Run one op in onnxruntime and in aioge and compare.

``check_op(op_type, inputs, attrs, const=...)`` builds a one-node ONNX model and runs it in
onnxruntime (the yardstick), builds the same node with ``aioge.ops.apply`` (inputs whose
index is in ``const`` become graph constants, so shape inference sees their values; the
rest are graph inputs) and evaluates it with a small local evaluator that runs EVERY kernel
implementation of the op twice: with ``outputs=None`` and with preallocated outputs filled
with garbage (as a reused arena buffer is). Both runs must agree, match the inferred descs,
leave the inputs untouched and (the fresh run) not alias them.

Tolerances against onnxruntime: float32 rtol 1e-4 / atol 1e-5, float64 rtol 1e-7 / atol
1e-9, float16 rtol 1e-2 / atol 1e-3; integers and bools exactly.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from aioge.errors import GraphError
from aioge.ir.desc import numpy_dtype
from aioge.ir.graph import Graph, Value
from aioge.kernels import parallel
from aioge.ops import apply
from aioge.ops.registry import get_schema

OPSET = 21  # onnxruntime 1.32 runs it; every op form the library implements exists there
TOLERANCES = {"float16": (1e-2, 1e-3), "float32": (1e-4, 1e-5), "float64": (1e-7, 1e-9)}

__all__ = [
    "OPSET",
    "TOLERANCES",
    "aioge_graph",
    "check_op",
    "compare",
    "evaluate",
    "expect_graph_error",
    "ort_run",
    "rand",
    "session_run",
]


def rand(rng: np.random.Generator, *shape: int, dtype: Any = np.float32, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    """Uniform random array of a float dtype, or random ints in [low, high] for int dtypes."""
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        return np.asarray(rng.integers(int(low), int(high) + 1, size=shape)).astype(dt)
    if dt.kind == "b":
        return np.asarray(rng.random(shape) < 0.5)
    return np.asarray(rng.uniform(low, high, size=shape)).astype(dt)


def count_splits(monkeypatch: pytest.MonkeyPatch, module: str = "aioge.kernels.conv_algos") -> list[int]:
    """The pieces of every ``split_native`` call ``module``'s kernels make, as they happen."""
    pieces: list[int] = []
    real = parallel.split_native

    def counted(par, job, args, total, *, worth=True):  # type: ignore[no-untyped-def]
        pieces.append(real(par, job, args, total, worth=worth))
        return pieces[-1]

    monkeypatch.setattr(f"{module}.split_native", counted)
    return pieces


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


# -- onnxruntime -------------------------------------------------------------------------


def _onnx_attr(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return numpy_helper.from_array(value)
    if isinstance(value, tuple):
        return list(value)
    return value


_SESSION_OPTIONS = ort.SessionOptions()
_SESSION_OPTIONS.intra_op_num_threads = 1
_SESSION_OPTIONS.inter_op_num_threads = 1
_SESSION_OPTIONS.log_severity_level = 3


def ort_run(
    op_type: str, inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any] | None = None, num_outputs: int = 1
) -> list[np.ndarray]:
    """Run one ``op_type`` node in onnxruntime (CPU) and return its outputs."""
    names = ["" if x is None else f"in{i}" for i, x in enumerate(inputs)]
    outs = [f"out{i}" for i in range(num_outputs)]
    node = helper.make_node(op_type, names, outs, **{k: _onnx_attr(v) for k, v in (attrs or {}).items()})
    graph_inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
        for n, x in zip(names, inputs)
        if x is not None
    ]
    graph = helper.make_graph([node], "one_op", graph_inputs, [helper.ValueInfoProto(name=o) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=10)
    # outputs stay untyped (the checker would want types, which only aioge could supply):
    # onnxruntime infers them itself
    session = ort.InferenceSession(model.SerializeToString(), _SESSION_OPTIONS, providers=["CPUExecutionProvider"])
    feeds = {n: x for n, x in zip(names, inputs) if x is not None}
    return list(session.run(outs, feeds))


# -- aioge --------------------------------------------------------------------------------


def aioge_graph(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: Mapping[str, Any] | None = None,
    *,
    const: Sequence[int] = (),
    num_outputs: int | None = None,
    name: str = "node",
) -> tuple[Graph, dict[str, np.ndarray]]:
    """A graph with one ``op_type`` node; returns it and the feeds for its data inputs."""
    g = Graph("one_op")
    args: list[Any] = []
    feeds: dict[str, np.ndarray] = {}
    for i, x in enumerate(inputs):
        if x is None:
            args.append(None)
        elif i in const:
            args.append(x)
        else:
            args.append(g.input(f"in{i}", x.shape, x.dtype))
            feeds[f"in{i}"] = x
    outs = apply(op_type, args, attrs or {}, num_outputs=num_outputs, graph=g, name=name)
    g.output(*outs)
    return g, feeds


def _garbage(shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
    out = np.empty(tuple(shape), dtype)
    if dtype.kind in "fc":
        out.fill(np.nan)
    elif dtype.kind == "b":
        out.fill(False)
    elif dtype.kind in "iu":
        out.fill(91)
    return out


def _check_desc(value: Value, array: Any, what: str) -> None:
    assert isinstance(array, np.ndarray), f"{what}: kernel returned {type(array).__name__}, not an ndarray"
    assert array.dtype == numpy_dtype(value.dtype), f"{what}: dtype {array.dtype}, inferred {value.dtype}"
    shape = value.shape
    if shape is not None:
        assert array.ndim == len(shape), f"{what}: shape {array.shape}, inferred {shape}"
        for got, want in zip(array.shape, shape):
            assert not isinstance(want, int) or got == want, f"{what}: shape {array.shape}, inferred {shape}"


def _ml_float(dtype: np.dtype) -> bool:
    """bfloat16, float8, float4: ml_dtypes' floats (kind 'V' in older ml_dtypes releases)."""
    if dtype.kind in "fc":
        return False
    try:
        ml_dtypes.finfo(dtype)
    except (TypeError, ValueError):
        return False
    return True


def _assert_same(a: np.ndarray, b: np.ndarray, what: str, tight: bool = True) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype, f"{what}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    if _ml_float(a.dtype):  # values equal, NaN payloads free (ONNX does not fix them)
        np.testing.assert_array_equal(a.astype(np.float32), b.astype(np.float32), err_msg=what)
    elif a.dtype.kind in "fc":
        rtol, atol = (1e-6, 1e-7) if tight else TOLERANCES.get(a.dtype.name, (1e-6, 1e-7))
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(a, b, err_msg=what)


def evaluate(graph: Graph, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Evaluate a graph node by node with every kernel implementation; return its outputs.

    The first implementation's results flow on; the others must agree with it.
    """
    env: dict[str, np.ndarray] = {}
    for v in graph.inputs:
        array = np.array(feeds[v.name])
        array.setflags(write=False)  # a kernel that writes into its inputs fails loudly
        env[v.name] = array
    for v in graph.constants.values():
        env[v.name] = v.data
    for node in graph.topological_order():
        schema = get_schema(node.op_type, node.domain)
        ins = [None if v is None else env[v.name] for v in node.inputs]
        in_descs = [None if v is None else v.desc for v in node.inputs]
        out_descs = [o.desc for o in node.outputs]
        first: list[np.ndarray] | None = None
        for impl in schema.impls:
            if not impl.applies(in_descs, node.attrs):
                continue
            what = f"{node.op_type}[{impl.name}]"
            run = impl.build(node.attrs, {}, in_descs, out_descs)
            fresh = list(run(ins, None))
            assert len(fresh) == len(node.outputs), f"{what}: {len(fresh)} outputs, node has {len(node.outputs)}"
            for i, (o, r) in enumerate(zip(node.outputs, fresh)):
                _check_desc(o, r, f"{what} output {i}")
                for x in ins:
                    if x is not None and r.size and x.size:
                        assert not np.shares_memory(r, x), f"{what}: output {i} aliases an input"
            pre = [_garbage(r.shape, r.dtype) for r in fresh]
            got = list(run(ins, pre))
            for i, (g, p, r) in enumerate(zip(got, pre, fresh)):
                assert g is p, f"{what}: output {i} was not written into the preallocated array"
                _assert_same(g, r, f"{what} output {i}: out= run vs fresh run")
            if first is None:
                first = fresh
            else:
                for i, (r, f) in enumerate(zip(fresh, first)):
                    _assert_same(r, f, f"{what} output {i} vs {schema.impls[0].name}", tight=False)
        assert first is not None
        for o, r in zip(node.outputs, first):
            r.setflags(write=False)
            env[o.name] = r
    return [env[v.name] for v in graph.outputs]


def compare(expected: np.ndarray, got: np.ndarray, what: str = "") -> None:
    """aioge's output against onnxruntime's: same dtype and shape, values within tolerance."""
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype}, onnxruntime gives {expected.dtype}"
    assert got.shape == expected.shape, f"{what}: shape {got.shape}, onnxruntime gives {expected.shape}"
    if expected.dtype.name in TOLERANCES:
        rtol, atol = TOLERANCES[expected.dtype.name]
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(got, expected, err_msg=what)


def check_op(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: Mapping[str, Any] | None = None,
    *,
    const: Sequence[int] = (),
    num_outputs: int = 1,
    static: bool | None = None,
    onnx_attrs: Mapping[str, Any] | None = None,
) -> list[np.ndarray]:
    """Compare aioge with onnxruntime on one op; return aioge's outputs.

    ``static`` (when given) asserts whether inference produced fully static output shapes.
    ``onnx_attrs`` overrides attributes spelled differently for ONNX (Cast's ``to`` code).
    """
    expected = ort_run(op_type, inputs, {**(attrs or {}), **(onnx_attrs or {})}, num_outputs)
    graph, feeds = aioge_graph(op_type, inputs, attrs, const=const, num_outputs=num_outputs)
    if static is not None:
        got_static = all(v.desc.static for v in graph.outputs)
        assert got_static == static, f"{op_type}: output descs {[str(v.desc) for v in graph.outputs]}, static={static} expected"
    got = evaluate(graph, feeds)
    for i, (e, g) in enumerate(zip(expected, got)):
        compare(e, g, f"{op_type} output {i}")
        desc = graph.outputs[i].desc
        if desc.static:
            assert tuple(desc.shape or ()) == e.shape, f"{op_type}: inferred {desc}, onnxruntime gives {e.shape}"
    return got


def expect_graph_error(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: Mapping[str, Any] | None = None,
    *,
    const: Sequence[int] = (),
    num_outputs: int | None = None,
    match: str = "",
) -> GraphError:
    """Building the node must raise a GraphError that names it (and matches ``match``)."""
    with pytest.raises(GraphError) as info:
        aioge_graph(op_type, inputs, attrs, const=const, num_outputs=num_outputs, name="bad_node")
    message = str(info.value)
    assert "bad_node" in message, f"the error does not name the node: {message}"
    if match:
        import re

        assert re.search(match, message), f"{match!r} not in {message!r}"
    return info.value


async def session_run(graph: Graph, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Run a graph through ``aioge.Session`` (kernel cache off); outputs in graph order."""
    import aioge

    async with aioge.Session({"ge.op_compiler_cache_mode": "disable"}) as s:
        out = await s.run(graph, dict(feeds))
    return [out[v.name] for v in graph.outputs]
