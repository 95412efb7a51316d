"""Sequences and optionals as first-class values (aioge.ops.sequence, aioge.ops.control's If and Loop).

Through Session: sequence feeds and outputs as lists, optional feeds as None or a value; ONNX
models loaded without ``lengths=`` (so the values stay first-class) against onnx.reference;
the memory plan leaving them to the runtime; the .om round trip.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

import aioge
from aioge.compiler.graph import compile_graph_sync
from aioge.compiler.specialize import input_signature
from aioge.errors import FeedError, GraphError
from aioge.ops import apply
from aioge.options import resolve_options
from aioge.plan import serialize

HEURISTIC = {"aioge.tune_mode": "heuristic", "ge.op_compiler_cache_mode": "disable"}
F32 = np.float32


def _seq_graph() -> aioge.Graph:
    g = aioge.Graph("seq")
    s = g.input("s", (None, 3), "float32", "sequence")
    x = g.input("x", (2, 3), "float32")
    pos = g.input("pos", (), "int64")
    (s2,) = apply("SequenceInsert", [s, x, pos], graph=g)
    (at,) = apply("SequenceAt", [s2, pos], graph=g)
    (s3,) = apply("SequenceErase", [s2], graph=g)
    (n,) = apply("SequenceLength", [s3], graph=g)
    (cat,) = apply("ConcatFromSequence", [s2], {"axis": 0}, graph=g)
    y = at * 2.0  # a float32 tensor op after the sequence ops
    g.output(s2, s3, n, cat, y, names=["s2", "s3", "n", "cat", "y"])
    return g


def _seq_expected(s: list[np.ndarray], x: np.ndarray, pos: int) -> dict[str, Any]:
    k = pos + len(s) if pos < 0 else pos
    s2 = [*s[:k], x, *s[k:]]
    return {"s2": s2, "s3": s2[:-1], "n": len(s2) - 1, "cat": np.concatenate(s2), "y": s2[pos] * 2}


def _same(got: Any, want: Any) -> None:
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for a, b in zip(got, want):
            _same(a, b)
    elif want is None:
        assert got is None
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert np.asarray(got).dtype == np.asarray(want).dtype


@pytest.mark.anyio
async def test_sequence_feeds_and_outputs_through_session() -> None:
    g = _seq_graph()
    assert [i.container for i in g.get_inputs()] == ["sequence", "tensor", "tensor"]
    assert g.get_outputs()[0].container == "sequence" and g.get_outputs()[0].shape == ("?", 3)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3)).astype(F32)
    async with aioge.Session(HEURISTIC) as sess:
        for s, pos in (([rng.standard_normal((1, 3)).astype(F32), rng.standard_normal((4, 3)).astype(F32)], -1), ([], 0)):
            out = await sess.run(g, {"s": s, "x": x, "pos": np.asarray(pos, np.int64)})
            want = _seq_expected(s, x, pos)
            for k in want:
                _same(out[k], np.asarray(want[k], np.int64) if k == "n" else want[k])
        # A run-time position out of range is an ExecutionError naming the node, not a crash.
        with pytest.raises(aioge.errors.ExecutionError, match="position 5 is out of range"):
            await sess.run(g, {"s": [], "x": x, "pos": np.asarray(5, np.int64)})


@pytest.mark.anyio
async def test_bad_sequence_and_optional_feeds_are_feed_errors() -> None:
    g = _seq_graph()
    x, pos = np.zeros((2, 3), F32), np.asarray(0, np.int64)
    async with aioge.Session(HEURISTIC) as sess:
        with pytest.raises(FeedError, match="input 's' expects sequence.*a list of arrays, got ndarray"):
            await sess.run(g, {"s": np.zeros((1, 3), F32), "x": x, "pos": pos})
        with pytest.raises(FeedError, match="input 's' element 0 expects float32.*got dtype int64"):
            await sess.run(g, {"s": [np.zeros((1, 3), np.int64)], "x": x, "pos": pos})
        with pytest.raises(FeedError, match="input 's' expects sequence.*got None"):
            await sess.run(g, {"s": None, "x": x, "pos": pos})
        with pytest.raises(FeedError, match=r"input 's' element 1 expects float32\[\?, 3\], got shape \[2, 4\]"):
            await sess.run(g, {"s": [np.zeros((1, 3), F32), np.zeros((2, 4), F32)], "x": x, "pos": pos})


@pytest.mark.anyio
async def test_typed_builders_make_sequences() -> None:
    g = aioge.Graph("typed")
    x = g.input("x", (2,), "float32")
    s = aioge.ops.sequence_insert(aioge.ops.sequence_empty(g, dtype="float32"), x)
    s = aioge.ops.sequence_insert(s, x * 3.0, np.asarray(0, np.int64))
    # Inserting into a sequence of unknown element shape: the element shape stays unknown.
    assert s.desc == aioge.ir.TensorDesc(None, "float32", "ND", "sequence")
    g.output(s, aioge.ops.concat_from_sequence(s, axis=0, new_axis=1), names=["s", "stacked"])
    x0 = np.asarray([1, 2], F32)
    async with aioge.Session(HEURISTIC) as sess:
        out = await sess.run(g, {"x": x0})
    _same(out["s"], [x0 * 3, x0])
    _same(out["stacked"], np.stack([x0 * 3, x0]))


def test_tensor_ops_refuse_sequences() -> None:
    g = aioge.Graph("bad")
    s = g.input("s", (3,), "float32", "sequence")
    with pytest.raises(GraphError, match="Relu: input 0 must be a tensor, got a sequence"):
        apply("Relu", [s], graph=g)
    with pytest.raises(GraphError, match="unknown value container 'list'"):
        g.input("t", (3,), "float32", "list")


def test_memory_plan_leaves_sequences_to_the_runtime() -> None:
    g = _seq_graph()
    model = compile_graph_sync(g, input_signature(g, {"x": (2, 3), "pos": ()}), resolve_options(HEURISTIC))
    planned = set(model.memory.offsets())
    containers = {v.name for v in model.graph.values() if not v.desc.is_tensor}
    assert containers >= {"s", "s2", "s3"}
    assert not planned & containers
    # The .om codec keeps every desc, containers included.
    back = serialize.decode_model(serialize.encode_model(model)[0], weight_dir=".")
    assert {v.name: v.desc for v in back.graph.values()} == {v.name: v.desc for v in model.graph.values()}


@pytest.mark.anyio
async def test_om_round_trip_runs_the_sequence_graph(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = [np.ones((1, 3), F32), np.full((2, 3), 2, F32)]
    feeds = {"s": s, "x": np.arange(6, dtype=F32).reshape(2, 3), "pos": np.asarray(1, np.int64)}

    async def build() -> tuple[dict[str, Any], Any]:
        async with aioge.Session({"ge.graph_compiler_cache_dir": str(tmp_path), **HEURISTIC}) as sess:
            await sess.add_graph(1, _seq_graph(), {"ge.graph_key": "seq"})
            return await sess.run_graph(1, feeds), sess.compiled(1)

    first, _ = await build()

    async def no_compile(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled although the graph cache holds the graph")

    monkeypatch.setattr(aioge.session, "compile_graph", no_compile)
    second, model = await build()
    assert model.stats.graph_cache_hit
    want = _seq_expected(s, feeds["x"], 1)
    for k in want:
        _same(second[k], np.asarray(want[k], np.int64) if k == "n" else want[k])
        _same(second[k], first[k])


def _load(model: Any) -> aioge.Graph:
    return aioge.load_onnx(model)


def _reference(model: Any, feeds: dict[str, Any]) -> list[Any]:
    return list(ReferenceEvaluator(model).run(None, feeds))


def _ort(model: Any, feeds: dict[str, Any]) -> list[Any]:
    import onnxruntime as ort

    model.ir_version = min(model.ir_version, 8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(sess.run(None, feeds))


def _seq_info(name: str, shape: Any = None) -> Any:
    return h.make_tensor_sequence_value_info(name, T.FLOAT, shape)


def _loop_model() -> Any:
    body = h.make_graph(
        [
            h.make_node("Identity", ["cond_in"], ["cond_out"]),
            h.make_node("Cast", ["i"], ["f"], to=T.FLOAT),
            h.make_node("Mul", ["f", "x"], ["t"]),
            h.make_node("SequenceInsert", ["s_in", "t"], ["s_out"]),
            h.make_node("SequenceLength", ["s_out"], ["n"]),
        ],
        "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []), _seq_info("s_in")],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), _seq_info("s_out"), h.make_tensor_value_info("n", T.INT64, [])],
    )
    graph = h.make_graph(
        [
            h.make_node("Loop", ["trip", "", "s0"], ["s", "ns"], body=body),
            h.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0, new_axis=1),
        ],
        "loop_seq",
        [h.make_tensor_value_info("trip", T.INT64, []), _seq_info("s0", [2]), h.make_tensor_value_info("x", T.FLOAT, [2])],
        [_seq_info("s"), h.make_tensor_value_info("ns", T.INT64, None), h.make_tensor_value_info("cat", T.FLOAT, None)],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.anyio
async def test_loop_carrying_a_sequence_matches_onnxruntime() -> None:
    """A Loop whose trip count is fed and whose state is a sequence fed as a list (no lengths=).
    (onnx.reference's Loop fails on this model: its scan outputs beside a sequence state.)"""
    model = _loop_model()
    g = _load(model)
    assert g.value("s0").desc.container == "sequence" and any(n.op_type == "Loop" for n in g.nodes)
    x = np.asarray([1.5, -2], F32)
    async with aioge.Session(HEURISTIC) as sess:
        for trip, s0 in ((3, [np.asarray([7, 8], F32)]), (0, [np.zeros(2, F32)]), (2, [np.ones(2, F32), -np.ones(2, F32)])):
            feeds = {"trip": np.asarray(trip, np.int64), "s0": s0, "x": x}
            got = await sess.run(g, feeds)
            want = _ort(model, feeds)
            _same(got["s"], want[0])
            _same(got["ns"], want[1])
            _same(got["cat"], want[2])


@pytest.mark.anyio
async def test_optional_input_given_and_absent_matches_onnx_reference() -> None:
    """An optional tensor input: fed None or a value; If on OptionalHasElement picks at run time."""
    then = h.make_graph(
        [h.make_node("OptionalGetElement", ["o"], ["v"]), h.make_node("Add", ["v", "x"], ["r"])],
        "then",
        [],
        [h.make_tensor_value_info("r", T.FLOAT, [3])],
    )
    other = h.make_graph([h.make_node("Neg", ["x"], ["r2"])], "else", [], [h.make_tensor_value_info("r2", T.FLOAT, [3])])
    graph = h.make_graph(
        [
            h.make_node("OptionalHasElement", ["o"], ["has"]),
            h.make_node("If", ["has"], ["y"], then_branch=then, else_branch=other),
        ],
        "opt",
        [
            h.make_value_info("o", h.make_optional_type_proto(h.make_tensor_type_proto(T.FLOAT, [3]))),
            h.make_tensor_value_info("x", T.FLOAT, [3]),
        ],
        [h.make_tensor_value_info("has", T.BOOL, []), h.make_tensor_value_info("y", T.FLOAT, [3])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])
    g = _load(model)
    assert g.value("o").desc.container == "optional"
    x = np.asarray([1, 2, 3], F32)
    async with aioge.Session(HEURISTIC) as sess:
        for o in (None, np.asarray([10, 20, 30], F32)):
            got = await sess.run(g, {"o": o, "x": x})
            want = _reference(model, {"o": o, "x": x})
            _same(got["has"], want[0])
            _same(got["y"], want[1])


@pytest.mark.anyio
async def test_sequence_and_optional_outputs_of_a_run_time_if() -> None:
    """If on a fed condition whose branches give an empty optional sequence or a full one."""
    empty = h.make_graph(
        [h.make_node("Optional", [], ["e"], type=h.make_sequence_type_proto(h.make_tensor_type_proto(T.FLOAT, [2])))],
        "then",
        [],
        [h.make_value_info("e", h.make_optional_type_proto(h.make_sequence_type_proto(h.make_tensor_type_proto(T.FLOAT, [2]))))],
    )
    full = h.make_graph(
        [h.make_node("SequenceConstruct", ["x", "x"], ["s"]), h.make_node("Optional", ["s"], ["f"])],
        "else",
        [],
        [h.make_value_info("f", h.make_optional_type_proto(h.make_sequence_type_proto(h.make_tensor_type_proto(T.FLOAT, [2]))))],
    )
    graph = h.make_graph(
        [h.make_node("If", ["c"], ["y"], then_branch=empty, else_branch=full)],
        "ifopt",
        [h.make_tensor_value_info("c", T.BOOL, []), h.make_tensor_value_info("x", T.FLOAT, [2])],
        [h.make_value_info("y", h.make_optional_type_proto(h.make_sequence_type_proto(h.make_tensor_type_proto(T.FLOAT, [2]))))],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])
    g = _load(model)
    x = np.asarray([4, 5], F32)
    async with aioge.Session(HEURISTIC) as sess:
        assert (await sess.run(g, {"c": np.asarray(True), "x": x}))["y"] is None
        got = (await sess.run(g, {"c": np.asarray(False), "x": x}))["y"]
    _same(got, [x, x])


@pytest.mark.anyio
async def test_split_to_sequence_with_a_run_time_split_matches_onnx_reference() -> None:
    graph = h.make_graph(
        [h.make_node("SplitToSequence", ["x", "split"], ["s"], axis=1), h.make_node("SequenceLength", ["s"], ["n"])],
        "split",
        [h.make_tensor_value_info("x", T.FLOAT, [2, "w"]), h.make_tensor_value_info("split", T.INT64, ["k"])],
        [_seq_info("s"), h.make_tensor_value_info("n", T.INT64, [])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    g = _load(model)
    assert any(n.op_type == "SplitToSequence" for n in g.nodes)
    x = np.arange(14, dtype=F32).reshape(2, 7)
    async with aioge.Session(HEURISTIC) as sess:
        for split in ([3, 4], [1, 1, 5], [7]):
            feeds = {"x": x, "split": np.asarray(split, np.int64)}
            got = await sess.run(g, feeds)
            want = _reference(model, feeds)
            _same(got["s"], want[0])
            _same(got["n"], want[1])


@pytest.mark.anyio
async def test_batching_refuses_sequence_inputs() -> None:
    feeds = {"s": [np.ones((1, 3), F32)], "x": np.zeros((2, 3), F32), "pos": np.asarray(0, np.int64)}
    async with aioge.Session(HEURISTIC) as sess:
        with pytest.raises(FeedError, match=r"gears and batching .* take tensor inputs; \['s'\] are sequences"):
            await sess.run(_seq_graph(), feeds, {"aioge.batch_max_rows": "8"})


@pytest.mark.anyio
async def test_a_sequence_keeps_its_tensors_when_the_arena_bytes_are_reused() -> None:
    """SequenceConstruct of an arena-planned tensor, then a chain of ops whose buffers reuse
    those bytes: the sequence still holds the values (its kernels copy what they put in)."""
    g = aioge.Graph("reuse")
    x = g.input("x", (64, 64), "float32")
    (a,) = apply("Relu", [x], graph=g)
    (s,) = apply("SequenceConstruct", [a], graph=g)
    (n,) = apply("SequenceLength", [s], graph=g)
    w = g.constant(np.eye(64, dtype=F32) * 0.5)
    y = (a @ w) * apply("Cast", [n], {"to": "float32"}, graph=g)[0]  # after the sequence is made
    for _ in range(4):
        y = y @ w
    g.output(s, y, names=["s", "y"])
    model = compile_graph_sync(g, input_signature(g, {"x": (64, 64)}), resolve_options(HEURISTIC))
    offsets = model.memory.offsets()
    relu = next(n.outputs[0].name for n in model.graph.nodes if n.op_type == "Relu")
    assert any(name != relu and off == offsets[relu][0] for name, (off, _) in offsets.items())  # its bytes are reused
    x0 = np.random.default_rng(3).standard_normal((64, 64)).astype(F32)
    async with aioge.Session(HEURISTIC) as sess:
        out = await sess.run(g, {"x": x0})
    np.testing.assert_array_equal(out["s"][0], np.maximum(x0, 0))
    np.testing.assert_allclose(out["y"], np.maximum(x0, 0) / 32, rtol=1e-6)


@pytest.mark.anyio
async def test_om_round_trip_of_a_loop_carrying_a_sequence(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Loop's body program (its node output types name containers) through the graph cache's .om."""
    model = _loop_model()
    feeds = {"trip": np.asarray(2, np.int64), "s0": [np.asarray([7, 8], F32)], "x": np.asarray([1.5, -2], F32)}

    async def build() -> tuple[dict[str, Any], Any]:
        async with aioge.Session({"ge.graph_compiler_cache_dir": str(tmp_path), **HEURISTIC}) as sess:
            await sess.add_graph(1, _load(model), {"ge.graph_key": "loop"})
            return await sess.run_graph(1, feeds), sess.compiled(1)

    await build()

    async def no_compile(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled although the graph cache holds the graph")

    monkeypatch.setattr(aioge.session, "compile_graph", no_compile)
    got, compiled = await build()
    assert compiled.stats.graph_cache_hit
    want = _ort(model, feeds)
    for k, w in zip(["s", "ns", "cat"], want):
        _same(got[k], w)
