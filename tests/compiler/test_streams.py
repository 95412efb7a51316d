"""Stream planning on hand-built DAGs: assignment, minimal events, happens-before and deadlock freedom.

Happens-before is recomputed here from first principles (stream order plus events, closed
transitively) rather than with the module's own helper, and executions are simulated under
random interleavings of the streams.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aioge
from aioge import ops
from aioge.compiler.streams import StreamPlan, happens_before, node_cost, plan_streams
from aioge.engines.assign import assign_engines
from aioge.ir.graph import Graph, Node
from aioge.options import check_options, resolve_options

HEAVY = (512, 512)  # ~0.5 ms of estimated work per op: worth a stream of its own
TINY = (4,)  # ~1 us: never worth an event


def _plan(g: Graph, **options: str) -> tuple[list[Node], StreamPlan]:
    opts = resolve_options(check_options(options, "session"))
    engines = assign_engines(g, opts.exclude_engines)
    return plan_streams(g, g.topological_order(), engines, opts)


def _edges(order: list[Node]) -> set[tuple[int, int]]:
    index = {id(n): i for i, n in enumerate(order)}
    return {(index[id(v.producer)], i) for i, n in enumerate(order) for v in n.inputs if v is not None and v.producer is not None}


def _reach(plan: StreamPlan, n: int, skip: int = -1) -> list[set[int]]:
    """before[i]: every node that ends before node i starts (stream order, events, transitively)."""
    into: list[set[int]] = [set() for _ in range(n)]
    for s in plan.streams:
        for a, b in zip(s.nodes, s.nodes[1:]):
            into[b].add(a)
    for e in plan.events:
        if e.id != skip:
            into[e.consumer].add(e.producer)
    before: list[set[int]] = [set() for _ in range(n)]
    for i in range(n):  # every edge points backwards in the execution order (checked in _check)
        for p in into[i]:
            before[i] |= before[p] | {p}
    return before


def _simulate(plan: StreamPlan, n: int, rng: random.Random) -> list[int]:
    """Run the streams in a random interleaving; a stream may start a node once its waits are recorded."""
    cursor = [0] * plan.num_streams
    done: set[int] = set()
    waits = {i: {e.producer for e in plan.waits(i)} for i in range(n)}
    trace = []
    while len(done) < n:
        ready = [s.id for s in plan.streams if cursor[s.id] < len(s.nodes) and waits[s.nodes[cursor[s.id]]] <= done]
        assert ready, f"deadlock: every unfinished stream waits; done {sorted(done)}"
        s = rng.choice(ready)
        node = plan.streams[s].nodes[cursor[s]]
        done.add(node)
        trace.append(node)
        cursor[s] += 1
    return trace


def _check(order: list[Node], plan: StreamPlan, **options: str) -> None:
    """The invariants every plan must meet."""
    n = len(order)
    edges = _edges(order)
    assert sorted(i for s in plan.streams for i in s.nodes) == list(range(n))
    for s in plan.streams:
        assert list(s.nodes) == sorted(s.nodes), "a stream runs in execution order"
        assert all(plan.node_stream[i] == s.id for i in s.nodes)
    assert all(p < c for p, c in edges), "the execution order is topological"
    assert all(e.producer < e.consumer for e in plan.events), "waits point backwards: no cycle"
    before = _reach(plan, n)
    assert all(p in before[c] for p, c in edges), "every data dependency is honoured"
    assert [sum(1 << j for j in b) for b in before] == happens_before(plan, n)
    for e in plan.events:
        assert plan.node_stream[e.producer] != plan.node_stream[e.consumer]
        assert (e.producer, e.consumer) in edges
        assert e.producer not in _reach(plan, n, skip=e.id)[e.consumer], f"event {e} is implied by the others"
    rng = random.Random(0)
    for _ in range(20):
        trace = _simulate(plan, n, rng)
        pos = {node: k for k, node in enumerate(trace)}
        assert all(pos[p] < pos[c] for p, c in edges)


def _streams_of(order: list[Node], plan: StreamPlan, prefix: str) -> set[int]:
    return {plan.node_stream[i] for i, node in enumerate(order) if node.name.startswith(prefix)}


def _chain(shape: tuple[int, ...], length: int = 6) -> Graph:
    g = aioge.Graph("chain")
    h = g.input("x", shape)
    for k in range(length):
        h = ops.tanh(h, name=f"c{k}")
    g.output(h)
    return g


def _diamond(shape: tuple[int, ...]) -> Graph:
    g = aioge.Graph("diamond")
    x = g.input("x", shape)
    a = ops.tanh(x, name="a")
    b = ops.tanh(a, name="b")
    c = ops.sigmoid(a, name="c")
    g.output(ops.add(b, c, name="d"))
    return g


def _branches(count: int, depth: int, shape: tuple[int, ...] = HEAVY) -> Graph:
    g = aioge.Graph("branches")
    x = g.input("x", shape)
    tails = []
    for b in range(count):
        h = x
        for k in range(depth):  # a different scale per branch, so no pass merges the branches
            h = ops.tanh(h, name=f"b{b}_{k}") if k else ops.mul(h, float(b + 1), name=f"b{b}_{k}")
        tails.append(h)
    out = tails[0]
    for k, t in enumerate(tails[1:]):
        out = ops.add(out, t, name=f"join{k}")
    g.output(out)
    return g


def test_a_chain_stays_on_one_stream() -> None:
    for shape in (HEAVY, TINY):
        order, plan = _plan(_chain(shape))
        _check(order, plan)
        assert plan.num_streams == 1 and plan.events == ()


def test_heavy_diamond_splits_and_needs_two_events() -> None:
    order, plan = _plan(_diamond(HEAVY))
    _check(order, plan)
    assert plan.num_streams == 2
    names = [n.name for n in order]
    assert names[0] == "a"
    # b and c overlap on two streams; a's stream and d's stream each hold one of them.
    s = {name: plan.node_stream[names.index(name)] for name in "abcd"}
    assert s["b"] != s["c"] and s["a"] in (s["b"], s["c"]) and s["d"] in (s["b"], s["c"])
    crossing = {(p, c) for p, c in _edges(order) if plan.node_stream[p] != plan.node_stream[c]}
    assert len(crossing) == 2 and {(e.producer, e.consumer) for e in plan.events} == crossing


def test_tiny_diamond_is_not_worth_an_event() -> None:
    order, plan = _plan(_diamond(TINY))
    _check(order, plan)
    assert plan.num_streams == 1 and plan.events == ()


def test_four_independent_branches_get_four_streams() -> None:
    order, plan = _plan(_branches(4, 3))
    _check(order, plan)
    per_branch = [_streams_of(order, plan, f"b{b}_") for b in range(4)]
    assert all(len(s) == 1 for s in per_branch), "each branch is a chain: one stream"
    assert len(set().union(*per_branch)) == 4
    # Only the joins cross streams: one event per branch that joins from another stream.
    assert len(plan.events) == 3


def test_streams_per_engine_are_capped() -> None:
    order, plan = _plan(_branches(4, 3), **{"ge.streamMaxParallelNum": "AiCore:2"})
    _check(order, plan)
    assert plan.num_streams == 2 and {s.engine for s in plan.streams} == {"AiCore"}
    # Each stream still holds whole runs of some branch: a branch moves at most once (when
    # moving its tail to the idle stream finishes sooner than waiting).
    assert all(len(_streams_of(order, plan, f"b{b}_")) <= 2 for b in range(4))


def test_single_stream_option_puts_everything_on_one_stream() -> None:
    g = _alternating(HEAVY)
    order, plan = _plan(g, **{"ge.enableSingleStream": "true"})
    _check(order, plan)
    assert plan.num_streams == 1 and plan.events == ()
    assert plan.streams[0].engine == "AiCore"  # the best engine among its nodes runs it


def _alternating(shape: tuple[int, ...], length: int = 6) -> Graph:
    """tanh (AiCore) and cast (AiCpu only) in turn."""
    g = aioge.Graph("alternating")
    h = g.input("x", shape)
    for k in range(length):
        h = ops.tanh(h, name=f"t{k}") if k % 2 == 0 else ops.cast(h, to="float32", name=f"c{k}")
    g.output(h)
    return g


def test_alternating_engines_use_one_stream_per_engine() -> None:
    for shape in (HEAVY, TINY):
        order, plan = _plan(_alternating(shape))
        _check(order, plan)
        assert sorted(s.engine for s in plan.streams) == ["AiCore", "AiCpu"]
        assert len(plan.events) == 5  # every edge changes engine, and none is implied by another


def test_implied_events_are_dropped() -> None:
    """q2 and q3 run on q's stream after the longer chain q0, q1; both read p from the other stream.

    q2 waits for p; q3's read of p is implied by stream order, so it gets no event."""
    g = aioge.Graph("implied")
    x = g.input("x", HEAVY)
    p = ops.tanh(x, name="p")
    q1 = ops.sigmoid(ops.sigmoid(x, name="q0"), name="q1")
    q2 = ops.add(q1, p, name="q2")
    q3 = ops.mul(q2, p, name="q3")
    g.output(q3)
    order, plan = _plan(g)
    _check(order, plan)
    names = [n.name for n in order]
    stream = {name: plan.node_stream[names.index(name)] for name in names}
    assert stream["q0"] == stream["q1"] == stream["q2"] == stream["q3"] != stream["p"]
    assert [(names[e.producer], names[e.consumer]) for e in plan.events] == [("p", "q2")]


@st.composite
def _dags(draw: st.DrawFn) -> tuple[Graph, str]:
    n = draw(st.integers(2, 14))
    g = aioge.Graph("random")
    shape = draw(st.sampled_from([HEAVY, (64, 64), TINY]))
    values = [g.input("x", shape)]
    for k in range(n):
        kind = draw(st.sampled_from(["tanh", "elu", "cast", "add"]))
        a = values[draw(st.integers(0, len(values) - 1))]
        if kind == "add":
            b = values[draw(st.integers(0, len(values) - 1))]
            v = ops.add(a, b, name=f"n{k}")
        elif kind == "cast":
            v = ops.cast(a, to="float32", name=f"n{k}")
        else:
            v = getattr(ops, kind)(a, name=f"n{k}")
        values.append(v)
    g.output(values[-1], *values[1:-1:3])
    caps = draw(st.sampled_from(["AiCore:4,AiVec:2,AiCpu:1", "AiCore:1,AiVec:1,AiCpu:1", "AiCore:3,AiVec:3,AiCpu:2"]))
    return g, caps


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_dags())
def test_random_dags_meet_every_invariant(case: tuple[Graph, str]) -> None:
    g, caps = case
    order, plan = _plan(g, **{"ge.streamMaxParallelNum": caps})
    _check(order, plan)
    limit = dict(item.split(":") for item in caps.split(","))
    for engine, cap in limit.items():
        assert sum(s.engine == engine for s in plan.streams) <= int(cap)


def test_plan_feeds_a_correct_multi_stream_run() -> None:
    """The planned order and streams compute what numpy computes (sink mode, four streams)."""
    import anyio

    g = _branches(4, 3, (128, 128))
    x = np.random.default_rng(0).standard_normal((128, 128)).astype(np.float32)

    async def main() -> dict[str, np.ndarray]:
        async with aioge.Session({"aioge.tune_mode": "heuristic", "ge.optimizationSwitch": "ElementwiseFusionPass:off"}) as s:
            await s.add_graph(1, g)
            out = await s.run_graph(1, {"x": x})
            assert s.compiled(1).streams.num_streams == 4
            return out

    out = anyio.run(main)
    ref = sum(np.tanh(np.tanh(x * np.float32(b + 1))) for b in range(4))
    np.testing.assert_allclose(next(iter(out.values())), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [HEAVY, TINY])
def test_plans_are_deterministic(shape: tuple[int, ...]) -> None:
    a = _plan(_branches(3, 2, shape))[1]
    b = _plan(_branches(3, 2, shape))[1]
    assert a == b


@pytest.mark.parametrize(("a_shape", "b_shape"), [((6,), (6,)), ((2, 3, 4, 6), (6,)), ((4, 6), (6, 5)), ((2, 4, 6), (2, 6, 5))])
def test_matmul_cost_counts_the_contracted_dimension(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    """A 1-D B is (k,), as numpy and ONNX have it (it raised IndexError: ONNX's test_matmul_1d_1d)."""
    g = aioge.Graph("mm")
    y = ops.matmul(g.input("a", a_shape), g.input("b", b_shape))
    g.output(y)
    out_size = int(np.prod(y.shape))
    assert node_cost(y.producer, dispatch_us=0.0, us_per_flop=1.0) == pytest.approx(
        2 * out_size * 6 + 1e-3 * (np.prod(a_shape) + np.prod(b_shape) + out_size)
    )
