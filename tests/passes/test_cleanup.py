"""IdentityRemovalPass and DeadCodeEliminationPass (aioge.passes.cleanup).

Equivalence tolerance: exact — both passes only remove copies and unused work.
"""

from __future__ import annotations

import numpy as np
import pytest

import aioge
from aioge import ops
from tests.passes.switching import ALL_OFF, compare, only, run_switched

pytestmark = pytest.mark.anyio


async def test_identity_dropout_and_same_type_cast_are_removed() -> None:
    g = aioge.Graph("noops")
    x = g.input("x", (3, 5), "float32")
    h = ops.identity(ops.neg(x))
    h = ops.dropout(h, g.constant(np.float32(0.3)), g.constant(np.array(False)))
    h = ops.cast(ops.exp(h), to="float32")
    g.output(ops.identity(h), names=["y"])  # an Identity producing the graph output
    feeds = {"x": np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5)}
    on, off, out = await compare(g, feeds, only("IdentityRemovalPass"), ALL_OFF, rtol=0, atol=0)
    assert on == {"Neg": 1, "Exp": 1}
    assert off == {"Neg": 1, "Identity": 2, "Dropout": 1, "Exp": 1, "Cast": 1}
    np.testing.assert_array_equal(out["y"], np.exp(-feeds["x"]))


async def test_copies_that_must_stay() -> None:
    g = aioge.Graph("keep")
    x = g.input("x", (4,), "float32")
    d, mask = ops.dropout(ops.neg(x), num_outputs=2)  # the mask is used
    g.output(
        ops.identity(x),  # an output that is a graph input needs a node of its own
        d,
        ops.cast(mask, to="float32"),
        ops.cast(x, to="float64"),  # a real conversion
        names=["copy", "d", "m", "wide"],
    )
    model, out = await run_switched(g, {"x": np.arange(4, dtype=np.float32)}, only("IdentityRemovalPass"))
    assert sorted(n.op_type for n in model.nodes) == ["Cast", "Cast", "Dropout", "Identity", "Neg"]
    np.testing.assert_array_equal(out["copy"], np.arange(4))
    assert out["wide"].dtype == np.float64 and out["m"].tolist() == [1.0] * 4


async def test_output_name_moves_to_the_producer() -> None:
    g = aioge.Graph("rename")
    x = g.input("x", (2,), "float32")
    h = ops.neg(x)
    g.output(ops.identity(h), ops.relu(h), names=["y", "r"])
    model, out = await run_switched(g, {"x": np.array([1.0, -2.0], np.float32)}, only("IdentityRemovalPass"))
    assert sorted(n.op_type for n in model.nodes) == ["Neg", "Relu"]
    assert [v.name for v in model.graph.outputs] == ["y", "r"]
    assert model.graph.value("y").producer.op_type == "Neg"  # type: ignore[union-attr]
    np.testing.assert_array_equal(out["y"], [-1.0, 2.0])
    np.testing.assert_array_equal(out["r"], [0.0, 2.0])


async def test_dead_code_is_removed() -> None:
    g = aioge.Graph("dead")
    x = g.input("x", (3,), "float32")
    unused = ops.exp(ops.mul(x, g.constant(np.full(3, 7.0, np.float32))))
    ops.tanh(unused)  # a dead chain of two more nodes
    g.output(ops.relu(x), names=["y"])
    on, off, _ = await compare(
        g, {"x": np.array([-1.0, 0.0, 1.0], np.float32)}, only("DeadCodeEliminationPass"), ALL_OFF, rtol=0, atol=0
    )
    assert on == {"Relu": 1} and off == {"Mul": 1, "Exp": 1, "Tanh": 1, "Relu": 1}
    model, _ = await run_switched(g, {"x": np.zeros(3, np.float32)}, only("DeadCodeEliminationPass"))
    assert len(model.graph.constants) == 0  # the dead chain's constant went with it
