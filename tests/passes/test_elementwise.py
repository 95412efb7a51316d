"""ElementwiseFusionPass: chains of elementwise ops become one FusedElementwise node.

Equivalence: outputs with the pass on and off agree exactly (rtol = atol = 0) for float32
and float64 — the fused kernel runs the same ufuncs in the same order — except where a
float32 chain holds Erf or Gelu, whose fused erf is a rational approximation within 1e-7
of the op's float64 series: rtol 1e-5, atol 1e-6 there. Property tests draw random chains
over random broadcast patterns.
"""

from __future__ import annotations

import anyio
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aioge
from aioge import ops
from aioge.kernels import elementwise as k
from tests.passes.switching import ALL_OFF, compare, only, run_switched, without

pytestmark = pytest.mark.anyio

PASS = "ElementwiseFusionPass"


def _chain() -> aioge.Graph:
    g = aioge.Graph("chain")
    x = g.input("x", (4, 6, 8), "float32")
    b = g.input("b", (6, 1), "float32")
    h = ops.tanh(ops.mul(x, 0.5)) + ops.sigmoid(x)
    h = ops.clip(h * b, -0.3, 1.0)
    h = ops.gelu(ops.leaky_relu(h, alpha=0.2)) + ops.sum(h, x, b)
    g.output(ops.relu(h - 0.25), names=["y"])
    return g


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((4, 6, 8)).astype(np.float32), "b": rng.standard_normal((6, 1)).astype(np.float32)}


ERF_TOL = {"rtol": 1e-5, "atol": 1e-6}


async def test_chain_becomes_one_node_and_off_restores_it() -> None:
    on, off, out = await compare(_chain(), _feeds(), "", without(PASS), **ERF_TOL)
    assert on == {"FusedElementwise": 1}
    assert off["FusedElementwise"] == 0 and sum(off.values()) == 12
    assert {"Tanh", "Sigmoid", "Clip", "Gelu", "LeakyRelu", "Sum", "Relu"} <= set(off)
    x, b = _feeds()["x"], _feeds()["b"]
    h = np.tanh(x * np.float32(0.5)) + 1 / (1 + np.exp(-x))
    h = np.clip(h * b, np.float32(-0.3), np.float32(1.0))
    lr = np.where(h >= 0, h, h * np.float32(0.2))
    want = np.maximum(k.gelu(lr) + (h + x + b) - np.float32(0.25), 0)
    np.testing.assert_allclose(out["y"], want, rtol=1e-5, atol=1e-6)


async def test_intermediate_read_outside_splits_the_group() -> None:
    g = aioge.Graph("split")
    x = g.input("x", (16, 16), "float32")
    shared = ops.exp(ops.neg(x))  # read by two chains and an output: it stays a value of its own
    g.output(ops.relu(shared + 1.0), ops.tanh(shared * 2.0), shared, names=["a", "b", "s"])
    feeds = {"x": np.random.default_rng(1).standard_normal((16, 16)).astype(np.float32)}
    on, off, out = await compare(g, feeds, "", without(PASS), rtol=0, atol=0)
    assert on == {"FusedElementwise": 3}
    np.testing.assert_array_equal(out["s"], np.exp(-feeds["x"]))
    np.testing.assert_array_equal(out["a"], np.maximum(np.exp(-feeds["x"]) + np.float32(1.0), 0))


async def test_smaller_shaped_producers_stay_outside() -> None:
    # (p * q) has shape (8, 1); fusing it into the (8, 32) chain would compute it 32 times over.
    g = aioge.Graph("bcast")
    x = g.input("x", (8, 32), "float64")
    p = g.input("p", (8, 1), "float64")
    q = g.input("q", (8, 1), "float64")
    small = ops.sqrt(ops.abs(p * q))
    g.output(ops.exp(ops.neg(x * small)), names=["y"])
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((8, 32)), "p": rng.standard_normal((8, 1)), "q": rng.standard_normal((8, 1))}
    on, _, out = await compare(g, feeds, "", without(PASS), rtol=0, atol=0)
    assert on == {"FusedElementwise": 2}
    np.testing.assert_array_equal(out["y"], np.exp(-(feeds["x"] * np.sqrt(np.abs(feeds["p"] * feeds["q"])))))


async def test_non_fusable_ops_and_dtypes_break_chains() -> None:
    g = aioge.Graph("mixed")
    x = g.input("x", (4, 10), "float32")
    i = g.input("i", (4, 10), "int64")
    h = ops.softmax(ops.exp(ops.neg(x)), axis=-1)  # Softmax is not elementwise
    k = ops.abs(ops.neg(i))  # integers are not fused
    g.output(ops.relu(ops.sqrt(h)), k, names=["y", "k"])
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((4, 10)).astype(np.float32), "i": rng.integers(-5, 5, (4, 10))}
    on, off, out = await compare(g, feeds, only(PASS), ALL_OFF, rtol=0, atol=0)
    assert on == {"FusedElementwise": 2, "Softmax": 1, "Abs": 1, "Neg": 1}
    np.testing.assert_array_equal(out["k"], np.abs(-feeds["i"]))


async def test_graph_output_name_is_kept_and_inputs_may_repeat() -> None:
    g = aioge.Graph("names")
    x = g.input("x", (3, 3), "float64")
    g.output(ops.mul(ops.add(x, x), x), names=["result"])
    feeds = {"x": np.arange(9.0).reshape(3, 3)}
    model, out = await run_switched(g, feeds, only(PASS))
    assert [n.op_type for n in model.nodes] == ["FusedElementwise"]
    assert model.graph.outputs[0].name == "result" and list(out) == ["result"]
    np.testing.assert_array_equal(out["result"], (feeds["x"] + feeds["x"]) * feeds["x"])


async def test_float16_chain() -> None:
    g = aioge.Graph("half")
    x = g.input("x", (64,), "float16")
    g.output(ops.sigmoid(ops.mul(ops.tanh(x), 3.0)), names=["y"])
    feeds = {"x": np.linspace(-4, 4, 64).astype(np.float16)}
    on, _, out = await compare(g, feeds, "", without(PASS), rtol=0, atol=0)
    assert on == {"FusedElementwise": 1} and out["y"].dtype == np.float16


# -- property tests through a whole session ---------------------------------------------

_UNARY = ["Neg", "Abs", "Tanh", "Relu", "Sigmoid", "Exp", "Sin", "Floor", "Erf"]
_BINARY = ["Add", "Sub", "Mul", "Max", "Min"]


@st.composite
def _graphs(draw: st.DrawFn) -> tuple[aioge.Graph, dict[str, np.ndarray]]:
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(rank))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    g = aioge.Graph("prop")
    values = [g.input("x0", shape, dtype)]
    feeds = {"x0": rng.standard_normal(shape).astype(dtype)}
    for j in range(1, draw(st.integers(1, 3))):
        drop = draw(st.integers(0, rank - 1))
        s = tuple(d if draw(st.booleans()) else 1 for d in shape[drop:])
        values.append(g.input(f"x{j}", s, dtype))
        feeds[f"x{j}"] = rng.standard_normal(s).astype(dtype)
    for _ in range(draw(st.integers(2, 7))):
        if draw(st.booleans()):
            a, b = draw(st.sampled_from(values)), draw(st.sampled_from(values))
            values.append(ops.apply(draw(st.sampled_from(_BINARY)), [a, b])[0])
        else:
            values.append(ops.apply(draw(st.sampled_from(_UNARY)), [draw(st.sampled_from(values))])[0])
    outs = [values[-1]]
    if draw(st.booleans()) and values[-2] is not values[-1] and values[-2].producer is not None:
        outs.append(values[-2])  # an intermediate that is also an output
    g.output(*outs, names=[f"y{i}" for i in range(len(outs))])
    return g, feeds


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=_graphs())
def test_random_chains_match_unfused(anyio_backend: str, case: tuple[aioge.Graph, dict[str, np.ndarray]]) -> None:
    graph, feeds = case

    async def both() -> None:
        erf = any(n.op_type == "Erf" for n in graph.nodes) and graph.inputs[0].dtype == "float32"
        with np.errstate(over="ignore"):
            on, off, _ = await compare(graph, feeds, only(PASS), ALL_OFF, **(ERF_TOL if erf else {"rtol": 0, "atol": 0}))
        assert sum(on.values()) <= sum(off.values())

    anyio.run(both, backend=anyio_backend)


async def test_a_lone_op_is_fused_only_when_its_kernel_makes_several_passes() -> None:
    g = aioge.Graph("alone")
    x = g.input("x", (32, 32), "float32")
    g.output(ops.sigmoid(x), ops.tanh(x), ops.gelu(x), names=["s", "t", "g"])
    feeds = {"x": np.random.default_rng(4).standard_normal((32, 32)).astype(np.float32)}
    on, off, _ = await compare(g, feeds, only(PASS), ALL_OFF, **ERF_TOL)
    assert on == {"FusedElementwise": 2, "Tanh": 1} and off == {"Sigmoid": 1, "Tanh": 1, "Gelu": 1}


@pytest.mark.parametrize("exponent", [3.0, 2.0, 0.5, 1.7])
async def test_pow_by_a_constant_fused_or_not_agrees_exactly_and_with_numpy(exponent: float) -> None:
    """BERT's GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 Pow(x, 3)))). Exponents 2, 3 and
    0.5 are products or a square root, fused or not; others stay numpy's power."""
    g = aioge.Graph("gelu_pow")
    x = g.input("x", (4, 64), "float32")
    inner = ops.mul(ops.add(x, ops.mul(ops.pow(ops.abs(x), np.float32(exponent)), 0.044715)), 0.7978845608)
    g.output(ops.mul(ops.mul(x, 0.5), ops.add(ops.tanh(inner), 1.0)), names=["y"])
    feeds = {"x": np.random.default_rng(5).standard_normal((4, 64)).astype(np.float32)}
    on, off, out = await compare(g, feeds, "", without(PASS), rtol=0, atol=0)
    assert on["FusedElementwise"] == 1 and off["Pow"] == 1
    xv = feeds["x"].astype(np.float64)
    want = 0.5 * xv * (1 + np.tanh(0.7978845608 * (xv + 0.044715 * np.abs(xv) ** exponent)))
    np.testing.assert_allclose(out["y"], want, rtol=1e-5, atol=1e-6)
