"""CommonSubexpressionEliminationPass: equal constants and equal computations become one.

Equivalence tolerance: exact — a merged node computes the very same value once.
"""

from __future__ import annotations

import numpy as np
import pytest

import aioge
from aioge import ops
from tests.passes.switching import ALL_OFF, compare, only, run_switched

pytestmark = pytest.mark.anyio

PASS = "CommonSubexpressionEliminationPass"


async def test_repeated_subexpressions_merge_and_cascade() -> None:
    g = aioge.Graph("cse")
    x = g.input("x", (4, 4), "float32")
    # Two copies of tanh(x * 0.5) + sigmoid(x), each with its own 0.5 constant: the constants
    # merge, then the Muls, then the Tanhs, then the Adds.
    a = ops.tanh(ops.mul(x, 0.5)) + ops.sigmoid(x)
    b = ops.tanh(ops.mul(x, 0.5)) + ops.sigmoid(x)
    g.output(ops.sub(a, ops.neg(b)), names=["y"])
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)}
    on, off, out = await compare(g, feeds, only(PASS), ALL_OFF, rtol=0, atol=0)
    assert on == {"Mul": 1, "Tanh": 1, "Sigmoid": 1, "Add": 1, "Neg": 1, "Sub": 1}
    assert sum(off.values()) == 10
    model, _ = await run_switched(g, feeds, only(PASS))
    assert len(model.graph.constants) == 1


async def test_different_attributes_or_inputs_do_not_merge() -> None:
    g = aioge.Graph("distinct")
    x = g.input("x", (5,), "float32")
    y = g.input("y", (5,), "float32")
    g.output(
        ops.leaky_relu(x, alpha=0.1),
        ops.leaky_relu(x, alpha=0.2),
        ops.relu(x),
        ops.relu(y),
        ops.add(x, g.constant(np.ones(5, np.float32))),
        ops.add(x, g.constant(np.full(5, 2.0, np.float32))),
        names=["a", "b", "c", "d", "e", "f"],
    )
    model, _ = await run_switched(g, {"x": np.zeros(5, np.float32), "y": np.ones(5, np.float32)}, only(PASS))
    assert len(model.nodes) == 6


async def test_two_outputs_of_one_value_keep_both_names() -> None:
    g = aioge.Graph("outs")
    x = g.input("x", (3,), "float32")
    g.output(ops.exp(x), ops.exp(x), names=["first", "second"])
    model, out = await run_switched(g, {"x": np.zeros(3, np.float32)}, only(PASS))
    assert len(model.nodes) == 2  # one value cannot carry two output names
    assert out["first"].tolist() == out["second"].tolist() == [1.0, 1.0, 1.0]
    g2 = aioge.Graph("one_out")
    x = g2.input("x", (3,), "float32")
    g2.output(ops.add(ops.exp(x), ops.exp(x)), ops.exp(x), names=["sum", "e"])
    model, out = await run_switched(g2, {"x": np.zeros(3, np.float32)}, only(PASS))
    assert sorted(n.op_type for n in model.nodes) == ["Add", "Exp"]
    assert out["sum"].tolist() == [2.0] * 3 and out["e"].tolist() == [1.0] * 3
