"""ConstantFoldingPass: nodes with known inputs become constants, evaluated by their kernels.

Equivalence tolerance: exact (rtol = atol = 0): a folded node runs the same kernel on the
same data, only earlier.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.ops.schema import KernelImpl, OpSchema
from aioge.passes import fold
from tests.passes.switching import ALL_OFF, compare, only, run_switched

pytestmark = pytest.mark.anyio

PASS = "ConstantFoldingPass"


async def test_constant_arithmetic_folds() -> None:
    g = aioge.Graph("arith")
    x = g.input("x", (3, 4), "float32")
    c = g.constant(np.arange(4, dtype=np.float32))
    k = ops.exp(ops.neg(ops.mul(c, 0.5)))  # all constant
    g.output(ops.add(x, k), names=["y"])
    feeds = {"x": np.ones((3, 4), np.float32)}
    on, off, out = await compare(g, feeds, only(PASS), ALL_OFF, rtol=0, atol=0)
    assert on == {"Add": 1} and off == {"Mul": 1, "Neg": 1, "Exp": 1, "Add": 1}
    np.testing.assert_array_equal(
        out["y"], np.broadcast_to(1 + np.exp(-(np.arange(4, dtype=np.float32) * np.float32(0.5))), (3, 4))
    )


async def test_static_shape_subgraph_folds() -> None:
    """Shape -> Gather -> Unsqueeze -> Concat feeding Reshape: on a static graph the whole
    shape computation is a constant, and only the Reshape of real data is left."""
    g = aioge.Graph("shapes")
    x = g.input("x", ("N", 3, 4), "float32")
    # ops.apply: `aioge.ops.shape` is the submodule aioge.ops.shape, which shadows the builder
    n = ops.gather(ops.apply("Shape", [x])[0], g.constant(np.array(0, np.int64)), axis=0)
    target = ops.concat(ops.unsqueeze(n, g.constant(np.array([0], np.int64))), g.constant(np.array([-1], np.int64)), axis=0)
    g.output(ops.reshape(x, target), names=["y"])
    feeds = {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4)}
    on, off, out = await compare(g, feeds, only(PASS), ALL_OFF, rtol=0, atol=0)
    assert on == {"Reshape": 1}
    assert off == {"Shape": 1, "Gather": 1, "Unsqueeze": 1, "Concat": 1, "Reshape": 1}
    np.testing.assert_array_equal(out["y"], feeds["x"].reshape(2, 12))


async def test_constant_of_shape_weights_fold_and_huge_results_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    g = aioge.Graph("cos")
    x = g.input("x", (2, 8), "float32")
    w = ops.constant_of_shape(g.constant(np.array([8, 4], np.int64)), value=np.array([0.25], np.float32))
    g.output(ops.apply("MatMul", [x, w])[0], names=["y"])
    feeds = {"x": np.ones((2, 8), np.float32)}
    on, off, out = await compare(g, feeds, only(PASS), ALL_OFF, rtol=0, atol=0)
    assert on == {"MatMul": 1} and off == {"ConstantOfShape": 1, "MatMul": 1}
    np.testing.assert_array_equal(out["y"], np.full((2, 4), 2.0, np.float32))
    monkeypatch.setattr(fold, "FOLD_MAX_BYTES", 8 * 4 * 4 - 1)  # one byte short of the weight
    model, _ = await run_switched(g, feeds, only(PASS))
    assert sorted(n.op_type for n in model.nodes) == ["ConstantOfShape", "MatMul"]


async def test_folded_graph_output_keeps_its_name() -> None:
    g = aioge.Graph("outconst")
    x = g.input("x", (2,), "float32")
    g.output(ops.neg(x), ops.add(g.constant(np.float32(1.5)), g.constant(np.float32(2.0))), names=["neg", "three_and_a_half"])
    model, out = await run_switched(g, {"x": np.ones(2, np.float32)}, only(PASS))
    assert [n.op_type for n in model.nodes] == ["Neg"]
    assert [v.name for v in model.graph.outputs] == ["neg", "three_and_a_half"]
    assert out["three_and_a_half"] == np.float32(3.5)
    out["three_and_a_half"][...] = 0  # the caller owns its outputs: the folded constant is untouched
    _, again = await run_switched(g, {"x": np.ones(2, np.float32)}, only(PASS))
    assert again["three_and_a_half"] == np.float32(3.5)


async def test_kernel_failure_on_constants_is_left_to_run_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel that raises on constant inputs is not folded (the error belongs to run time,
    where it names the node); the pass goes on with the rest."""
    real = fold.get_schema

    def failing(op_type: str, domain: str = "") -> OpSchema:
        schema = real(op_type, domain)
        if op_type != "Neg":
            return schema

        def build(*args: object) -> object:
            raise ValueError("kernel refuses")

        return dataclasses.replace(schema, impls=(KernelImpl("numpy", build),))

    monkeypatch.setattr(fold, "get_schema", failing)
    g = aioge.Graph("bad")
    x = g.input("x", (2,), "float32")
    c = g.constant(np.array([1.0, 2.0], np.float32))
    g.output(ops.add(x, ops.neg(c)), ops.add(x, ops.abs(c)), names=["y", "z"])
    model, out = await run_switched(g, {"x": np.zeros(2, np.float32)}, only(PASS))
    assert sorted(n.op_type for n in model.nodes) == ["Add", "Add", "Neg"]  # Abs folded, Neg not
    np.testing.assert_array_equal(out["y"], [-1.0, -2.0])
