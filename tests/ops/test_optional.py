"""OptionalHasElement and OptionalGetElement over tensors (aioge.ops.optional)."""

from __future__ import annotations

import numpy as np
import pytest

import aioge
from tests.ops.conftest import aioge_graph, evaluate, expect_graph_error, rand
from tests.ops.onnx_reference import run_session


def test_has_element_and_get_element(rng):
    x = rand(rng, 2, 3)
    g, feeds = aioge_graph("OptionalHasElement", [x])
    assert evaluate(g, feeds)[0].item() is True
    g, feeds = aioge_graph("OptionalGetElement", [x])
    (got,) = evaluate(g, feeds)
    np.testing.assert_array_equal(got, x)
    expect_graph_error("OptionalGetElement", [None], match="takes 1 inputs")


@pytest.mark.anyio
async def test_absent_optional_in_session(rng):
    g = aioge.Graph("opt")
    g.input("unused", (1,), "float32")
    (has,) = aioge.ops.apply("OptionalHasElement", [], graph=g)
    g.output(has, names=["has"])
    out = await run_session(g, {"unused": np.zeros(1, np.float32)})
    assert out["has"].dtype == np.bool_ and out["has"].item() is False
