"""Memory planning: safe reuse under streams, arenas near the lower bound, the bound itself, no-reuse.

Safety is checked independently of the planner: happens-before is recomputed from the stream
plan (tests/compiler/test_streams.py), and every pair of tensors that share arena bytes must
have all readers of one end before the producer of the other.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aioge
from aioge import ops
from aioge.compiler.graph import compile_graph_sync
from aioge.compiler.memory import ALIGNMENT, check_reuse
from aioge.compiler.streams import check_stream_plan, predecessors
from aioge.examples import build_cnn
from aioge.ir.graph import Graph
from aioge.options import check_options, resolve_options
from aioge.plan.model import CompiledModel
from tests.compiler.test_streams import HEAVY, _reach

# Elementwise fusion would fold the elementwise test graphs into single nodes.
HEURISTIC = {"aioge.tune_mode": "heuristic", "ge.optimizationSwitch": "ElementwiseFusionPass:off"}


def _compile(g: Graph, **options: str) -> CompiledModel:
    opts = resolve_options(check_options({**HEURISTIC, **options}, "session"))
    signature = tuple((v.name, tuple(int(d) for d in v.shape)) for v in g.inputs)  # type: ignore[union-attr]
    return compile_graph_sync(g, signature, opts)


def _readers(model: CompiledModel) -> dict[str, set[int]]:
    """The nodes that read each planned tensor (its producer, if none does). Unplanned values
    are fresh arrays (the kernel contract, enforced by the executor), so they hold no bytes."""
    g = model.graph
    index = {node.name: i for i, node in enumerate(g.nodes)}
    out = {}
    for name in model.memory.offsets():
        v = g.value(name)
        out[name] = {index[c.name] for c, _ in v.uses} or {index[v.producer.name]}  # type: ignore[union-attr]
    return out


def _unsafe_pairs(model: CompiledModel) -> list[tuple[str, str]]:
    n = len(model.nodes)
    before = _reach(model.streams, n)
    readers = _readers(model)
    bufs = model.memory.buffers
    bad = []
    for a, b in itertools.combinations(bufs, 2):
        if a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes:
            a_first = all(r in before[b.producer] for r in readers[a.value])
            b_first = all(r in before[a.producer] for r in readers[b.value])
            if not (a_first or b_first):
                bad.append((a.value, b.value))
    return bad


def _sequential_peak(model: CompiledModel) -> int:
    """Max over the execution order of the bytes live at each step (a tensor lives from its
    producer to its last reader, inclusive)."""
    readers = _readers(model)
    n = len(model.nodes)
    live = [0] * (n + 1)
    for b in model.memory.buffers:
        for step in range(b.producer, max(readers[b.value]) + 1):
            live[step] += b.nbytes
    return max(live, default=0)


def _decoder_verdict(model: CompiledModel) -> str:
    """What the .om decoder says of the plans (compiler.serialize checks loaded plans so)."""
    g = model.graph
    index = {id(node): i for i, node in enumerate(g.nodes)}
    reason = check_stream_plan(model.streams, predecessors(g.nodes))
    uses = [(b, sorted({index[id(c)] for c, _ in g.value(b.value).uses})) for b in model.memory.buffers]
    return reason or check_reuse(uses, model.streams)


def _check(model: CompiledModel) -> None:
    mem = model.memory
    assert _unsafe_pairs(model) == []
    assert _decoder_verdict(model) == ""  # what the planner makes, the decoder accepts
    assert all(b.offset % ALIGNMENT == 0 and b.nbytes % ALIGNMENT == 0 for b in mem.buffers)
    assert all(b.offset + b.nbytes <= mem.arena_bytes for b in mem.buffers)
    assert _sequential_peak(model) <= mem.lower_bound_bytes <= mem.arena_bytes <= mem.no_reuse_bytes
    assert mem.no_reuse_bytes == sum(b.nbytes for b in mem.buffers)


# -- models -------------------------------------------------------------------------------


def _conv(h: aioge.ir.Value, g: Graph, cin: int, cout: int, k: int, rng: np.random.Generator) -> aioge.ir.Value:  # type: ignore[name-defined]
    w = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
    return ops.relu(ops.conv2d(h, g.constant(w), g.constant(np.zeros(cout, np.float32)), pads=(k // 2,) * 4))


def _resnet(blocks: int = 3, c: int = 16, hw: int = 16) -> Graph:
    rng = np.random.default_rng(0)
    g = Graph("resnet")
    h = _conv(g.input("x", (1, 3, hw, hw)), g, 3, c, 3, rng)
    for _ in range(blocks):
        y = _conv(_conv(h, g, c, c, 3, rng), g, c, c, 3, rng)
        h = ops.relu(ops.add(h, y))
    g.output(ops.flatten(ops.global_average_pool(h), axis=1))
    return g


def _inception(modules: int = 2, c: int = 16, hw: int = 16) -> Graph:
    rng = np.random.default_rng(1)
    g = Graph("inception")
    h = _conv(g.input("x", (1, 3, hw, hw)), g, 3, c, 3, rng)
    cin = c
    for _ in range(modules):
        b1 = _conv(h, g, cin, c, 1, rng)
        b2 = _conv(_conv(h, g, cin, c // 2, 1, rng), g, c // 2, c, 3, rng)
        b3 = _conv(_conv(_conv(h, g, cin, c // 4, 1, rng), g, c // 4, c // 2, 3, rng), g, c // 2, c, 3, rng)
        b4 = _conv(ops.max_pool(h, kernel_shape=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1)), g, cin, c, 1, rng)
        h = ops.concat(b1, b2, b3, b4, axis=1)
        cin = 4 * c
    g.output(ops.flatten(ops.global_average_pool(h), axis=1))
    return g


def _densenet(layers: int = 5, growth: int = 8, hw: int = 16) -> Graph:
    rng = np.random.default_rng(2)
    g = Graph("densenet")
    h = _conv(g.input("x", (1, 3, hw, hw)), g, 3, 2 * growth, 3, rng)
    cin = 2 * growth
    for _ in range(layers):
        y = _conv(_conv(h, g, cin, 2 * growth, 1, rng), g, 2 * growth, growth, 3, rng)
        h = ops.concat(h, y, axis=1)
        cin += growth
    g.output(ops.flatten(ops.global_average_pool(h), axis=1))
    return g


def _parallel_chains(length: int = 4) -> Graph:
    g = Graph("parallel")
    x = g.input("x", HEAVY)
    a, b = x, x
    for k in range(length):
        a = ops.tanh(a, name=f"a{k}")
        b = ops.sigmoid(b, name=f"b{k}")
    g.output(ops.add(a, b))
    return g


# -- tests --------------------------------------------------------------------------------


def test_builder_cnn_is_within_5_percent_of_the_bound() -> None:
    g, feeds, _ = build_cnn()
    model = _compile(g)
    _check(model)
    mem = model.memory
    assert mem.arena_bytes <= 1.05 * mem.lower_bound_bytes
    assert mem.arena_bytes < mem.no_reuse_bytes


def test_other_models_are_within_5_percent_of_the_bound() -> None:
    for build in (_resnet, _inception, _densenet, _parallel_chains):
        g = build()
        for options in ({}, {"ge.enableSingleStream": "true"}):
            model = _compile(g, **options)
            _check(model)
            mem = model.memory
            assert mem.arena_bytes <= 1.05 * mem.lower_bound_bytes, (g.name, options, mem)


def test_inception_uses_several_streams_and_a_bound_above_the_sequential_one() -> None:
    model = _compile(_inception(c=32, hw=32))
    assert model.streams.num_streams > 1
    # Streams keep more tensors live at once than the execution order alone suggests; the
    # bound counts them, so it is a bound for this schedule, not for a sequential one.
    assert model.memory.lower_bound_bytes >= _sequential_peak(model)
    single = _compile(_inception(c=32, hw=32), **{"ge.enableSingleStream": "true"})
    assert single.memory.lower_bound_bytes == _sequential_peak(single)
    assert model.memory.arena_bytes >= single.memory.lower_bound_bytes


def test_reuse_waits_for_happens_before_not_for_topological_order() -> None:
    """Two parallel chains: in sequence a tensor of one chain may take the bytes of the other
    chain's dead tensor; on two streams nothing orders them, so they must not share bytes."""
    multi = _compile(_parallel_chains())
    single = _compile(_parallel_chains(), **{"ge.enableSingleStream": "true"})
    assert multi.streams.num_streams == 2 and single.streams.num_streams == 1
    _check(multi)
    _check(single)

    def cross_sharing(model: CompiledModel) -> int:
        count = 0
        for a, b in itertools.combinations(model.memory.buffers, 2):
            overlap = a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes
            if overlap and a.value[0] in "ab" and b.value[0] in "ab":
                chain = {model.graph.value(v).producer.name[0] for v in (a.value, b.value)}  # type: ignore[union-attr]
                count += len(chain) == 2
        return count

    assert cross_sharing(single) > 0, "in sequence the chains do share bytes"
    assert cross_sharing(multi) == 0
    assert multi.memory.arena_bytes > single.memory.arena_bytes


def test_disable_reuse_gives_every_tensor_its_own_bytes() -> None:
    g, _, _ = build_cnn()
    model = _compile(g, **{"ge.exec.disableReuseMemory": "1"})
    mem = model.memory
    assert not mem.reuse and mem.arena_bytes == mem.no_reuse_bytes > mem.lower_bound_bytes
    for a, b in itertools.combinations(mem.buffers, 2):
        assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset


@st.composite
def _dags(draw: st.DrawFn) -> tuple[Graph, dict[str, str]]:
    n = draw(st.integers(2, 12))
    g = Graph("random")
    shapes = [(64, 64), (128, 128), (256, 256)]
    values = [g.input(f"x{k}", s) for k, s in enumerate(shapes)]
    for k in range(n):
        a = draw(st.sampled_from(values))
        kind = draw(st.sampled_from(["tanh", "cast", "add", "sigmoid"]))
        if kind == "add":
            same = [v for v in values if v.shape == a.shape]
            v = ops.add(a, draw(st.sampled_from(same)), name=f"n{k}")
        elif kind == "cast":
            v = ops.cast(a, to="float32", name=f"n{k}")
        else:
            v = getattr(ops, kind)(a, name=f"n{k}")
        values.append(v)
    g.output(values[-1])
    options = draw(st.sampled_from([{}, {"ge.enableSingleStream": "true"}, {"ge.streamMaxParallelNum": "AiCore:2,AiCpu:2"}]))
    return g, options


def _max_clique_brute(model: CompiledModel) -> int:
    n = len(model.nodes)
    before = _reach(model.streams, n)
    readers = _readers(model)
    bufs = model.memory.buffers

    def conflict(a, b) -> bool:  # type: ignore[no-untyped-def]
        return not (
            all(r in before[b.producer] for r in readers[a.value]) or all(r in before[a.producer] for r in readers[b.value])
        )

    best = 0
    for r in range(1, len(bufs) + 1):
        for subset in itertools.combinations(bufs, r):
            if all(conflict(a, b) for a, b in itertools.combinations(subset, 2)):
                best = max(best, sum(b.nbytes for b in subset))
    return best


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_dags())
def test_random_dags_plan_safely_and_bound_exactly(case: tuple[Graph, dict[str, str]]) -> None:
    g, options = case
    model = _compile(g, **options)
    _check(model)
    if len(model.memory.buffers) <= 10:
        assert model.memory.lower_bound_bytes == _max_clique_brute(model)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_dags(), st.data())
def test_the_decoders_reuse_check_agrees_with_brute_force(case: tuple[Graph, dict[str, str]], data: st.DataObject) -> None:
    """Offsets moved at random (as a crafted .om may): check_reuse refuses exactly the plans
    in which two tensors that may be live together share bytes."""
    g, options = case
    model = _compile(g, **options)
    bufs = model.memory.buffers
    if not bufs:
        return
    slots = data.draw(st.lists(st.integers(0, 3), min_size=len(bufs), max_size=len(bufs)))
    size = max(b.nbytes for b in bufs)
    moved = tuple(dataclasses.replace(b, offset=k * size // 2) for b, k in zip(bufs, slots))
    model.memory = dataclasses.replace(model.memory, buffers=moved, arena_bytes=4 * size)
    assert bool(_unsafe_pairs(model)) == bool(_decoder_verdict(model)), (_unsafe_pairs(model), _decoder_verdict(model))


def _light_models() -> list[str]:
    import glob
    import os

    import onnx

    return sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "*.onnx")))


def test_light_onnx_models_are_within_5_percent_of_the_bound() -> None:
    from aioge.frontends.onnx import load_onnx

    paths = _light_models()
    assert len(paths) == 9, paths  # onnx (a dependency) ships the nine light/ models
    for path in paths:
        model = _compile(load_onnx(path))
        _check(model)
        mem = model.memory
        assert mem.arena_bytes <= 1.05 * mem.lower_bound_bytes, (path, mem.arena_bytes, mem.lower_bound_bytes, mem.strategy)
