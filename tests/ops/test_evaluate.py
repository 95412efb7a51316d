"""One node evaluation ahead of a run (specialize, ConstantFolding, the ONNX frontend), driven by
the schemas' facts: random, shape-only, cost class."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import aioge
from aioge import ops
from aioge.errors import GraphError
from aioge.ir import Graph, TensorDesc
from aioge.ops.evaluate import evaluate_node
from aioge.ops.registry import REGISTRY, get_schema

pytestmark = pytest.mark.anyio


def test_op_facts_are_schema_flags() -> None:
    assert {s.name for s in REGISTRY.values() if s.random} == {"Dropout"}
    assert {s.name for s in REGISTRY.values() if s.shape_only} == {"Shape", "Size"}
    assert {s.name for s in REGISTRY.values() if s.cost == "matmul"} == {"MatMul", "Gemm", "FusedMatMul", "FusedGemm"}
    assert {s.name for s in REGISTRY.values() if s.cost == "conv"} == {"Conv", "ConvTranspose", "FusedConv"}


def test_evaluate_node_reads_only_descs_of_shape_only_ops_and_never_runs_random_ones() -> None:
    f = TensorDesc((2, 3), "float32")
    shape = evaluate_node(get_schema("Shape"), {"start": 0}, [f], [None], [TensorDesc((2,), "int64")], graph="g", node="n")
    assert shape is not None and shape[0].tolist() == [2, 3]
    assert evaluate_node(get_schema("Relu"), {}, [f], [None], [f], graph="g", node="n") is None  # data unknown
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert evaluate_node(get_schema("Dropout"), {}, [f], [x], [f], graph="g", node="n") is None
    relu = evaluate_node(get_schema("Relu"), {}, [f], [x - 2], [f], graph="g", node="n")
    assert relu is not None and relu[0].tolist() == np.maximum(x - 2, 0).tolist()
    # A result that disagrees with the inferred desc is not used.
    assert evaluate_node(get_schema("Relu"), {}, [f], [x], [TensorDesc((3, 2), "float32")], graph="g", node="n") is None


async def test_constant_division_by_zero_compiles_to_inf_without_a_warning() -> None:
    """Specialize evaluated small constant subgraphs with numpy's warnings on: under
    warnings-as-errors (this suite's setting) the compile failed with 'Reciprocal failed on
    constant inputs: divide by zero'; folding always ignored them. Now both give the run's inf."""
    g = Graph("g")
    x = g.input("x", (2,))
    g.output(ops.add(x, ops.reciprocal(g.constant(np.array([0.0, 2.0], np.float32)))), names=["y"])
    async with aioge.Session({"ge.op_compiler_cache_mode": "disable"}) as s:
        out = await s.run(g, {"x": np.ones(2, np.float32)})
    np.testing.assert_array_equal(out["y"], np.array([np.inf, 1.5], np.float32))


def _if_model_on_a_bad_cast() -> bytes:
    def branch(name: str, value: float) -> onnx.GraphProto:
        const = h.make_node("Constant", [], [f"{name}_out"], value=h.make_tensor(f"{name}_v", T.FLOAT, [1], [value]))
        return h.make_graph([const], name, [], [h.make_tensor_value_info(f"{name}_out", T.FLOAT, [1])])

    nodes = [
        h.make_node("Constant", [], ["s"], value=h.make_tensor("d", T.STRING, [], [b"abc"])),
        h.make_node("Cast", ["s"], ["f"], to=T.FLOAT, name="to_float"),
        h.make_node("Constant", [], ["zero"], value=h.make_tensor("z", T.FLOAT, [], [0.0])),
        h.make_node("Greater", ["f", "zero"], ["cond"]),
        h.make_node("If", ["cond"], ["y"], then_branch=branch("then", 1.0), else_branch=branch("else", 0.0), name="pick"),
        h.make_node("Add", ["x", "y"], ["out"]),
    ]
    g = h.make_graph(nodes, "m", [h.make_tensor_value_info("x", T.FLOAT, [1])], [h.make_tensor_value_info("out", T.FLOAT, [1])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def test_onnx_load_time_evaluation_error_names_the_node_whose_kernel_failed() -> None:
    """Before, the kernel's ValueError escaped KnownValues and was reported against the If
    that asked for the value; now the GraphError names the Cast whose kernel failed."""
    with pytest.raises(GraphError, match=r"node 'to_float'.*Cast failed on constant inputs.*abc"):
        aioge.load_onnx(_if_model_on_a_bad_cast())
