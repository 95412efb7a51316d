"""aioge.frontends.onnx: load_onnx end to end, against onnxruntime and onnx.reference.

Symbolic dims, initializers, Constant forms, opset-version mappings (old vs new opsets give
the same numbers as onnxruntime / onnx.reference), external data confinement, unsupported-op
listing, and garbage files.
"""

from __future__ import annotations

import os
import random
from typing import Any, Sequence

import anyio
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

import aioge
from aioge.errors import AiogeError, GraphError, UnsupportedOpError
from aioge.frontends.onnx_ops import CONVERTERS, find_converter

OPTIONS = {"aioge.tune_mode": "heuristic", "ge.op_compiler_cache_mode": "disable"}
RNG = np.random.default_rng(0)


def _model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[Any],
    inits: Sequence[onnx.TensorProto] = (),
    opset: int = 21,
    ir: int | None = None,
    **kw: Any,
) -> onnx.ModelProto:
    outs = [o if isinstance(o, onnx.ValueInfoProto) else onnx.ValueInfoProto(name=o) for o in outputs]
    g = h.make_graph(list(nodes), "m", list(inputs), outs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset), *kw.pop("extra_opsets", [])], **kw)
    m.ir_version = ir or min(m.ir_version, 10)  # onnxruntime 1.32 reads IR <= 11
    return m


def _f32(name: str, shape: Any) -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, T.FLOAT, shape)


def _run(graph: aioge.Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    async def go() -> dict[str, np.ndarray]:
        async with aioge.Session(OPTIONS) as s:
            return await s.run(graph, feeds)

    return anyio.run(go)


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], reference: str = "ort", **tol: float) -> None:
    """aioge's outputs equal onnxruntime's (or onnx.reference's) on the same model."""
    graph = aioge.load_onnx(model)
    got = _run(graph, feeds)
    want = _ort(model, feeds) if reference == "ort" else ReferenceEvaluator(model).run(None, feeds)
    names = [o.name for o in model.graph.output]
    assert sorted(got) == sorted(names)
    for name, w in zip(names, want):
        assert got[name].shape == np.asarray(w).shape, name
        np.testing.assert_allclose(got[name], w, rtol=tol.get("rtol", 1e-5), atol=tol.get("atol", 1e-6), err_msg=name)


# -- inputs, symbols and shapes= -------------------------------------------------------------


def _symbolic() -> onnx.ModelProto:
    return _model([h.make_node("Add", ["x", "y"], ["z"])], [_f32("x", ["N", 3]), _f32("y", [None, 3])], ["z"])


def test_symbolic_dims_stay_symbolic_until_feeds_fix_them() -> None:
    g = aioge.load_onnx(_symbolic())
    x, y = g.inputs
    assert x.shape == ("N", 3)
    assert isinstance(y.shape[0], str) and y.shape[0] not in ("N", "?")  # a fresh symbol of its own
    for n in (2, 5):
        a, b = RNG.standard_normal((n, 3), np.float32), RNG.standard_normal((n, 3), np.float32)
        np.testing.assert_allclose(_run(g, {"x": a, "y": b})["z"], a + b, rtol=1e-6)


def test_shapes_fix_dims_by_symbol_or_by_input() -> None:
    assert aioge.load_onnx(_symbolic(), shapes={"N": 4}).inputs[0].shape == (4, 3)
    g = aioge.load_onnx(_symbolic(), shapes={"x": [4, 3], "y": [4, None]})
    assert [v.shape for v in g.inputs] == [(4, 3), (4, 3)]


@pytest.mark.parametrize(
    "shapes, match",
    [
        ({"x": [4, 2]}, "dimension 1 is 3"),
        ({"x": [4]}, "rank 2"),
        ({"nope": 3}, "neither an input"),
        ({"N": -1}, "non-negative"),
        ({"N": 2, "x": [3, 3]}, "dimension 'N' is given as 2 and as 3"),
    ],
)
def test_bad_shapes_are_refused(shapes: dict[str, Any], match: str) -> None:
    with pytest.raises(GraphError, match=match):
        aioge.load_onnx(_symbolic(), shapes=shapes)


def test_initializers_are_constants_not_inputs() -> None:
    w = RNG.standard_normal((3,), np.float32)
    init = numpy_helper.from_array(w, "w")
    for ir in (3, 8):  # IR 3 lists initializers among the inputs as well
        inputs = [_f32("x", [2, 3])] + ([_f32("w", [3])] if ir == 3 else [])
        g = aioge.load_onnx(_model([h.make_node("Mul", ["x", "w"], ["y"])], inputs, ["y"], [init], opset=13, ir=ir))
        assert [v.name for v in g.inputs] == ["x"]
        np.testing.assert_array_equal(g.constants["w"].data, w)
        x = RNG.standard_normal((2, 3), np.float32)
        np.testing.assert_allclose(_run(g, {"x": x})["y"], x * w)


def test_constant_node_forms() -> None:
    forms = {
        "a": ("value", numpy_helper.from_array(np.arange(6, dtype=np.int32).reshape(2, 3))),
        "b": ("value_float", 2.5),
        "c": ("value_floats", [1.0, 2.0]),
        "d": ("value_int", 7),
        "e": ("value_ints", [1, 2, 3]),
        "f": ("value_string", "hi"),
        "g": ("value_strings", ["x", "yz"]),
    }
    nodes = [h.make_node("Constant", [], [k], **{attr: v}) for k, (attr, v) in forms.items()]
    model = _model(nodes, [], list(forms))
    got = _run(aioge.load_onnx(model), {})
    want = ReferenceEvaluator(model).run(None, {})
    for k, w in zip(forms, want):
        assert got[k].dtype == w.dtype or (w.dtype.kind in "OU" and got[k].dtype.kind in "OU"), k
        np.testing.assert_array_equal(got[k], w, err_msg=k)


def test_outputs_keep_model_names_even_for_inputs_and_constants() -> None:
    c = h.make_node("Constant", [], ["k"], value_floats=[1.0, 2.0])
    model = _model([c, h.make_node("Relu", ["x"], ["r"])], [_f32("x", [2])], ["k", "r"])
    g = aioge.load_onnx(model)
    assert [v.name for v in g.outputs] == ["k", "r"]
    out = _run(g, {"x": np.array([-1.0, 3.0], np.float32)})
    np.testing.assert_array_equal(out["k"], [1.0, 2.0])
    np.testing.assert_array_equal(out["r"], [0.0, 3.0])


def test_unnamed_and_duplicate_node_names() -> None:
    nodes = [
        h.make_node("Relu", ["x"], ["a"], name="n"),
        h.make_node("Neg", ["a"], ["b"], name="n"),
        h.make_node("Abs", ["b"], ["c"]),
        h.make_node("Relu", ["c"], ["d"], name="Abs_2"),
    ]
    g = aioge.load_onnx(_model(nodes, [_f32("x", [3])], ["d"]))
    names = [n.name for n in g.nodes]
    assert len(set(names)) == len(names) == 4
    assert names[0] == "n" and names[3] == "Abs_2"  # the model's names are kept where they are unique
    np.testing.assert_array_equal(_run(g, {"x": np.array([-1, 2, -3], np.float32)})["d"], [0, 2, 0])


def test_nodes_out_of_order_are_sorted() -> None:
    nodes = [h.make_node("Neg", ["a"], ["b"]), h.make_node("Relu", ["x"], ["a"])]
    g = aioge.load_onnx(_model(nodes, [_f32("x", [2])], ["b"]))
    np.testing.assert_array_equal(_run(g, {"x": np.array([-1, 2], np.float32)})["b"], [0, -2])


def test_cast_to_is_an_onnx_enum() -> None:
    model = _model(
        [h.make_node("Cast", ["x"], ["y"], to=T.INT32), h.make_node("CastLike", ["x", "t"], ["z"])],
        [_f32("x", [4]), h.make_tensor_value_info("t", T.DOUBLE, [1])],
        ["y", "z"],
    )
    feeds = {"x": np.array([1.7, -2.2, 3.0, 0.5], np.float32), "t": np.zeros(1)}
    got = _run(aioge.load_onnx(model), feeds)
    assert got["y"].dtype == np.int32 and got["z"].dtype == np.float64
    want = _ort(model, feeds)
    np.testing.assert_array_equal(got["y"], want[0])
    np.testing.assert_array_equal(got["z"], want[1])


def test_cast_round_mode_is_honoured() -> None:
    def cast(**attrs: Any) -> onnx.ModelProto:
        return _model([h.make_node("Cast", ["x"], ["y"], to=T.FLOAT8E8M0, **attrs)], [_f32("x", [2])], ["y"], opset=25)

    assert aioge.load_onnx(cast(round_mode="up")).nodes[0].attrs["round_mode"] == "up"
    assert aioge.load_onnx(cast(round_mode="down")).nodes[0].attrs["round_mode"] == "down"
    with pytest.raises(GraphError, match="round_mode"):
        aioge.load_onnx(cast(round_mode="sideways"))


def test_unknown_dtypes_are_named() -> None:
    vi = h.make_tensor_value_info("x", T.FLOAT, [2])
    vi.type.tensor_type.elem_type = 99
    model = _model([h.make_node("Identity", ["x"], ["y"])], [vi], ["y"])
    with pytest.raises(GraphError, match="unknown ONNX data type 99"):
        aioge.load_onnx(model)


def test_sequence_inputs_are_lists_or_unrolled_by_their_length() -> None:
    """Without lengths= a sequence input is one first-class input fed as a list, and a sequence
    output comes back as one; with lengths= (the optimisation) the input is unrolled into tensors."""
    seq = h.make_tensor_sequence_value_info("s", T.FLOAT, None)
    model = _model([h.make_node("Identity", ["s"], ["y"])], [seq], [h.make_tensor_sequence_value_info("y", T.FLOAT, None)])
    g = aioge.load_onnx(model)
    assert [(v.name, v.desc.container) for v in g.inputs] == [("s", "sequence")]
    items = [_x(2), _x(3, 1)]
    got = _run(g, {"s": items})["y"]
    assert isinstance(got, list) and len(got) == 2
    for a, b in zip(got, items):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(GraphError, match="not inputs of the model"):
        aioge.load_onnx(model, lengths={"t": 2})
    g = aioge.load_onnx(model, lengths={"s": 2})
    assert [v.name for v in g.inputs] == ["s[0]", "s[1]"] and [v.name for v in g.outputs] == ["y"]
    got = _run(g, {"s[0]": items[0], "s[1]": items[1]})["y"]
    assert [a.shape for a in got] == [(2,), (3, 1)]


# -- opset versions -------------------------------------------------------------------------


def test_converter_table_shape() -> None:
    """One table keyed by op type; ranges never overlap; the node's opset picks the entry."""
    assert find_converter("", "Squeeze", 11) is CONVERTERS[("", "Squeeze")][0]
    assert find_converter("", "Squeeze", 13).convert.__name__ == "passthrough"
    for entries in CONVERTERS.values():
        for a, b in zip(entries, entries[1:]):
            assert a.until < b.since


def _x(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _i64(name: str, values: Sequence[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


OPSET_CASES: dict[str, tuple[list[tuple[int, Any]], dict[str, np.ndarray]]] = {}


def _opset_case(name: str, feeds: dict[str, np.ndarray], *versions: tuple[int, Any]) -> None:
    OPSET_CASES[name] = (list(versions), feeds)


_X = {"x": _x(2, 3, 4)}
_opset_case(
    "Reshape",
    _X,
    (13, lambda: ([h.make_node("Reshape", ["x", "s"], ["y"])], [_i64("s", [0, -1])])),
    (21, lambda: ([h.make_node("Reshape", ["x", "s"], ["y"], allowzero=0)], [_i64("s", [4, 0, 2])])),
)
_opset_case(
    "Split",
    _X,
    (11, lambda: ([h.make_node("Split", ["x"], ["a", "b"], axis=2, split=[1, 3])], [])),
    (11, lambda: ([h.make_node("Split", ["x"], ["a", "b"], axis=2)], [])),
    (13, lambda: ([h.make_node("Split", ["x", "s"], ["a", "b"], axis=2)], [_i64("s", [3, 1])])),
    (13, lambda: ([h.make_node("Split", ["x"], ["a", "b"], axis=-1)], [])),
    (18, lambda: ([h.make_node("Split", ["x"], ["a", "b"], axis=2, num_outputs=2)], [])),
)
_opset_case(
    "Slice",
    _X,
    (9, lambda: ([h.make_node("Slice", ["x"], ["y"], starts=[0, 1], ends=[1, 100], axes=[0, 2])], [])),
    (9, lambda: ([h.make_node("Slice", ["x"], ["y"], starts=[1, 0], ends=[2, 2])], [])),
    (
        13,
        lambda: (
            [h.make_node("Slice", ["x", "b", "e", "a", "s"], ["y"])],
            [_i64("b", [-1, 3]), _i64("e", [-100, 0]), _i64("a", [1, 2]), _i64("s", [-1, -2])],
        ),
    ),
)
_opset_case(
    "Squeeze",
    {"x": _x(1, 3, 1, 2)},
    (11, lambda: ([h.make_node("Squeeze", ["x"], ["y"], axes=[0, -2])], [])),
    (11, lambda: ([h.make_node("Squeeze", ["x"], ["y"])], [])),
    (13, lambda: ([h.make_node("Squeeze", ["x", "a"], ["y"])], [_i64("a", [2])])),
)
_opset_case(
    "Unsqueeze",
    {"x": _x(3, 2)},
    (11, lambda: ([h.make_node("Unsqueeze", ["x"], ["y"], axes=[0, -1])], [])),
    (13, lambda: ([h.make_node("Unsqueeze", ["x", "a"], ["y"])], [_i64("a", [1])])),
)
for _op in ("Softmax", "LogSoftmax", "Hardmax"):
    _opset_case(
        _op,
        _X,
        (11, lambda op=_op: ([h.make_node(op, ["x"], ["y"])], [])),  # default axis 1: over 3x4 flattened
        (11, lambda op=_op: ([h.make_node(op, ["x"], ["y"], axis=0)], [])),
        (11, lambda op=_op: ([h.make_node(op, ["x"], ["y"], axis=-1)], [])),
        (13, lambda op=_op: ([h.make_node(op, ["x"], ["y"], axis=1)], [])),
    )
_opset_case(
    "ReduceMean",
    _X,
    (13, lambda: ([h.make_node("ReduceMean", ["x"], ["y"], axes=[0, 2], keepdims=0)], [])),
    (13, lambda: ([h.make_node("ReduceMean", ["x"], ["y"])], [])),
    (18, lambda: ([h.make_node("ReduceMean", ["x", "a"], ["y"])], [_i64("a", [-1])])),
)
_opset_case(
    "ReduceSum",
    _X,
    (11, lambda: ([h.make_node("ReduceSum", ["x"], ["y"], axes=[1])], [])),
    (13, lambda: ([h.make_node("ReduceSum", ["x", "a"], ["y"], keepdims=0)], [_i64("a", [0, 1])])),
)
_opset_case(
    "Pad",
    {"x": _x(2, 3)},
    (10, lambda: ([h.make_node("Pad", ["x"], ["y"], pads=[0, 1, 1, 2], value=1.5)], [])),
    (10, lambda: ([h.make_node("Pad", ["x"], ["y"], pads=[1, 1, 1, 1], mode="reflect")], [])),
    (13, lambda: ([h.make_node("Pad", ["x", "p"], ["y"], mode="edge")], [_i64("p", [1, 0, 0, 2])])),
)
_opset_case(
    "Clip",
    {"x": _x(3, 4)},
    (10, lambda: ([h.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.25)], [])),
    (10, lambda: ([h.make_node("Clip", ["x"], ["y"], max=0.1)], [])),
    (13, lambda: ([h.make_node("Clip", ["x", "", "hi"], ["y"])], [numpy_helper.from_array(np.array(0.3, np.float32), "hi")])),
)
_opset_case(
    "TopK",
    {"x": _x(3, 5)},
    (9, lambda: ([h.make_node("TopK", ["x"], ["v", "i"], k=2)], [])),
    (11, lambda: ([h.make_node("TopK", ["x", "k"], ["v", "i"], axis=0, largest=0)], [_i64("k", [2])])),
)
_opset_case(
    "Upsample",
    {"x": _x(1, 2, 2, 3)},
    (7, lambda: ([h.make_node("Upsample", ["x"], ["y"], scales=[1.0, 1.0, 2.0, 3.0])], [])),
    (
        9,
        lambda: (
            [h.make_node("Upsample", ["x", "s"], ["y"], mode="nearest")],
            [numpy_helper.from_array(np.array([1, 1, 3, 2], np.float32), "s")],
        ),
    ),
)
_opset_case(
    "Dropout",
    {"x": _x(3, 4)},
    (7, lambda: ([h.make_node("Dropout", ["x"], ["y"], ratio=0.3)], [])),
    (10, lambda: ([h.make_node("Dropout", ["x"], ["y"], ratio=0.3)], [])),
    (13, lambda: ([h.make_node("Dropout", ["x"], ["y"])], [])),
)
_BN = [
    numpy_helper.from_array(a.astype(np.float32), n)
    for n, a in (("s", RNG.random(3) + 0.5), ("b", RNG.random(3)), ("m", RNG.random(3)), ("v", RNG.random(3) + 0.5))
]
_opset_case(
    "BatchNormalization",
    {"x": _x(2, 3, 4, 4)},
    (7, lambda: ([h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)], _BN)),
    (9, lambda: ([h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], _BN)),
    (15, lambda: ([h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], _BN)),
)


@pytest.mark.parametrize("op", sorted(OPSET_CASES))
def test_opset_versions_match_onnxruntime(op: str) -> None:
    """Each op at old and new opsets gives what onnxruntime gives at that opset."""
    versions, feeds = OPSET_CASES[op]
    for opset, make in versions:
        nodes, inits = make()
        inputs = [_f32(k, list(v.shape)) for k, v in feeds.items()]
        model = _model(nodes, inputs, list(nodes[0].output), inits, opset=opset)
        _check(model, feeds)


def test_batch_norm_spatial_0_and_legacy_broadcast_at_opset_6() -> None:
    """Opset 6/7 forms onnxruntime no longer reads: checked against onnx.reference and numpy."""
    x = _x(2, 3, 4)
    stats = {n: (RNG.random((3, 4)) + 0.5).astype(np.float32) for n in "sbmv"}
    bn = h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], spatial=0, epsilon=1e-2)
    inits = [numpy_helper.from_array(a, n) for n, a in stats.items()]
    g = aioge.load_onnx(_model([bn], [_f32("x", [2, 3, 4])], ["y"], inits, opset=7))
    s, b, m, v = (stats[k] for k in "sbmv")
    np.testing.assert_allclose(_run(g, {"x": x})["y"], (x - m) / np.sqrt(v + 1e-2) * s + b, rtol=1e-5, atol=1e-6)

    c = _x(3)
    add = h.make_node("Add", ["x", "c"], ["y"], broadcast=1, axis=1)  # c lines up with x's axis 1
    g = aioge.load_onnx(_model([add], [_f32("x", [2, 3, 4]), _f32("c", [3])], ["y"], opset=6))
    np.testing.assert_allclose(_run(g, {"x": x, "c": c})["y"], x + c[None, :, None], rtol=1e-6)

    slope = (RNG.random(3)).astype(np.float32)
    prelu = h.make_node("PRelu", ["x", "p"], ["y"])
    g = aioge.load_onnx(_model([prelu], [_f32("x", [2, 3, 4])], ["y"], [numpy_helper.from_array(slope, "p")], opset=6))
    np.testing.assert_allclose(_run(g, {"x": x})["y"], np.where(x >= 0, x, x * slope[None, :, None]), rtol=1e-6)


def test_old_opsets_are_refused_only_for_ops_that_changed() -> None:
    neg = _model([h.make_node("Not", ["x"], ["y"])], [h.make_tensor_value_info("x", T.BOOL, [2])], ["y"], opset=1)
    assert aioge.load_onnx(neg).nodes[0].op_type == "Not"  # Not-1 is still Not at opset 6
    relu = _model([h.make_node("Relu", ["x"], ["y"])], [_f32("x", [2])], ["y"], opset=5)
    with pytest.raises(GraphError, match=r"opset 5 is older than aioge supports .* \['Relu'\]"):
        aioge.load_onnx(relu)


# -- control flow resolved at load time ----------------------------------------------------------


def _branch(name: str, op: str) -> onnx.GraphProto:
    return h.make_graph([h.make_node(op, ["x"], [f"{name}_y"])], name, [], [onnx.ValueInfoProto(name=f"{name}_y")])


def test_if_with_a_condition_known_at_load_time_is_inlined() -> None:
    """The condition follows from a static input shape (Shape -> Gather -> Equal): the taken branch is inlined."""
    nodes = [
        h.make_node("Shape", ["x"], ["s"]),
        h.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        h.make_node("Equal", ["n", "three"], ["c"]),
        h.make_node("If", ["c"], ["y"], then_branch=_branch("then", "Neg"), else_branch=_branch("else", "Abs")),
    ]
    inits = [_i64("zero", 0), _i64("three", [3])]
    inits[0].dims[:] = []
    for rows, want in ((3, "Neg"), (2, "Abs")):
        model = _model(nodes, [_f32("x", [rows, 2])], ["y"], inits, opset=16)
        g = aioge.load_onnx(model)
        assert "If" not in {n.op_type for n in g.nodes} and want in {n.op_type for n in g.nodes}
        x = _x(rows, 2)
        np.testing.assert_allclose(_run(g, {"x": x})["y"], _ort(model, {"x": x})[0])


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("cond", [True, False])
def test_if_with_a_run_time_condition_selects_between_both_branches(cond: bool) -> None:
    nodes = [h.make_node("If", ["c"], ["y"], then_branch=_branch("then", "Neg"), else_branch=_branch("else", "Abs"))]
    model = _model(nodes, [h.make_tensor_value_info("c", T.BOOL, []), _f32("x", [2])], [_f32("y", [2])], opset=16)
    g = aioge.load_onnx(model)
    assert "Where" in {n.op_type for n in g.nodes}
    feeds = {"c": np.array(cond), "x": np.array([-1.5, 2.0], np.float32)}
    np.testing.assert_array_equal(_run(g, feeds)["y"], _ort(model, feeds)[0])


def test_if_with_a_run_time_condition_and_branches_of_other_shapes_runs_the_branch() -> None:
    """Where cannot join outputs of different shapes: the run-time If op runs the branch taken."""
    other = h.make_graph(
        [h.make_node("Concat", ["x", "x"], ["else_y"], axis=0)], "else", [], [onnx.ValueInfoProto(name="else_y")]
    )
    nodes = [h.make_node("If", ["c"], ["y"], then_branch=_branch("then", "Neg"), else_branch=other)]
    model = _model(nodes, [h.make_tensor_value_info("c", T.BOOL, []), _f32("x", [2])], ["y"], opset=16)
    g = aioge.load_onnx(model)
    assert [n.op_type for n in g.nodes if n.op_type == "If"] == ["If"]
    x = _x(2)
    np.testing.assert_array_equal(_run(g, {"c": np.asarray(True), "x": x})["y"], -x)
    np.testing.assert_array_equal(_run(g, {"c": np.asarray(False), "x": x})["y"], np.concatenate([x, x]))


def _loop_model() -> onnx.ModelProto:
    """Loop with a run-time trip count and condition: acc += x * i while acc < limit; scan outputs acc."""
    body = h.make_graph(
        [
            h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
            h.make_node("Mul", ["x", "fi"], ["step"]),
            h.make_node("Add", ["acc", "step"], ["acc_out"]),
            h.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
            h.make_node("Less", ["total", "limit"], ["go"]),
            h.make_node("Identity", ["acc_out"], ["scan"]),
        ],
        "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []), _f32("acc", [3])],
        [h.make_tensor_value_info("go", T.BOOL, []), _f32("acc_out", [3]), _f32("scan", [3])],
    )
    loop = h.make_node("Loop", ["n", "", "a0"], ["acc_final", "accs"], body=body)
    return _model(
        [loop],
        [h.make_tensor_value_info("n", T.INT64, []), _f32("a0", [3]), _f32("x", [3]), _f32("limit", [])],
        [_f32("acc_final", [3]), _f32("accs", None)],
        opset=16,
    )


@pytest.mark.parametrize(("n", "limit"), [(5, 1e9), (50, 30.0), (0, 1e9)])
def test_loop_with_a_run_time_trip_count_runs_as_onnxruntime(n: int, limit: float) -> None:
    model = _loop_model()
    g = aioge.load_onnx(model)
    assert "Loop" in {node.op_type for node in g.nodes}
    feeds = {
        "n": np.array(n, np.int64),
        "a0": np.array([1, 0, -1], np.float32),
        "x": np.array([0.5, 1, 2], np.float32),
        "limit": np.array(limit, np.float32),
    }
    got = _run(g, feeds)
    want = _ort(model, feeds)
    np.testing.assert_allclose(got["acc_final"], want[0], rtol=1e-6)
    if n:
        np.testing.assert_allclose(got["accs"], want[1], rtol=1e-6)
    else:
        assert got["accs"].size == want[1].size == 0


@pytest.mark.anyio
async def test_loop_body_program_survives_om_and_kernel_cache(tmp_path) -> None:
    from aioge.plan import serialize

    g = aioge.load_onnx(_loop_model())
    feeds = {
        "n": np.array(4, np.int64),
        "a0": np.zeros(3, np.float32),
        "x": np.ones(3, np.float32),
        "limit": np.array(1e9, np.float32),
    }
    opts = {"aioge.tune_mode": "heuristic", "ge.op_compiler_cache_dir": str(tmp_path / "cache")}
    async with aioge.Session(opts) as s:
        await s.add_graph(1, g)
        model = await s.build_graph(1, {k: v.shape for k, v in feeds.items()})
        serialize.save_model_sync(tmp_path / "loop.om", model)
    async with aioge.Session(opts) as s:
        got = await s.run_graph(await s.load_model(tmp_path / "loop.om"), feeds)
    np.testing.assert_allclose(got["acc_final"], [6, 6, 6])  # 0 + 1 + 2 + 3
    np.testing.assert_allclose(got["accs"][:, 0], [0, 1, 3, 6])


def _scan_body() -> onnx.GraphProto:
    """state' = state + x_t * y_t; outputs the running state and x_t - y_t."""
    nodes = [
        h.make_node("Mul", ["x_t", "y_t"], ["p"]),
        h.make_node("Add", ["state", "p"], ["state_out"]),
        h.make_node("Sub", ["x_t", "y_t"], ["d"]),
        h.make_node("Identity", ["state_out"], ["run"]),
    ]
    ins = [_f32("state", [2]), _f32("x_t", [2]), _f32("y_t", [2])]
    outs = [_f32("state_out", [2]), _f32("run", [2]), _f32("d", [2])]
    return h.make_graph(nodes, "body", ins, outs)


def test_scan_is_unrolled_like_onnxruntime_runs_it() -> None:
    scan = h.make_node(
        "Scan",
        ["s0", "xs", "ys"],
        ["s", "runs", "ds"],
        body=_scan_body(),
        num_scan_inputs=2,
        scan_input_axes=[0, 1],
        scan_input_directions=[0, 1],
        scan_output_axes=[0, -1],
        scan_output_directions=[1, 0],
    )
    model = _model([scan], [_f32("s0", [2]), _f32("xs", [4, 2]), _f32("ys", [2, 4])], ["s", "runs", "ds"], opset=16)
    g = aioge.load_onnx(model)
    assert "Scan" not in {n.op_type for n in g.nodes}
    feeds = {"s0": _x(2), "xs": _x(4, 2), "ys": _x(2, 4)}
    got = _run(g, feeds)
    for name, want in zip(["s", "runs", "ds"], _ort(model, feeds)):
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_scan_8_has_a_batch_axis() -> None:
    scan = h.make_node(
        "Scan", ["", "s0", "xs", "ys"], ["s", "runs", "ds"], body=_scan_body(), num_scan_inputs=2, directions=[1, 0]
    )
    model = _model([scan], [_f32("s0", [3, 2]), _f32("xs", [3, 4, 2]), _f32("ys", [3, 4, 2])], ["s", "runs", "ds"], opset=8)
    feeds = {"s0": _x(3, 2), "xs": _x(3, 4, 2), "ys": _x(3, 4, 2)}
    got = _run(aioge.load_onnx(model), feeds)
    for name, want in zip(["s", "runs", "ds"], _ort(model, feeds)):
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_scan_over_a_dynamic_length_is_refused() -> None:
    scan = h.make_node("Scan", ["s0", "xs", "ys"], ["s", "runs", "ds"], body=_scan_body(), num_scan_inputs=2)
    model = _model([scan], [_f32("s0", [2]), _f32("xs", ["T", 2]), _f32("ys", ["T", 2])], ["s"], opset=16)
    with pytest.raises(GraphError, match="sequence length must be static"):
        aioge.load_onnx(model)
    assert aioge.load_onnx(model, shapes={"T": 3}).inputs[1].shape == (3, 2)  # shapes= makes it static


def test_unsupported_ops_inside_bodies_are_listed() -> None:
    nodes = [h.make_node("If", ["c"], ["y"], then_branch=_branch("then", "Frobnicate"), else_branch=_branch("else", "Abs"))]
    model = _model(nodes, [h.make_tensor_value_info("c", T.BOOL, []), _f32("x", [2])], ["y"], opset=16)
    with pytest.raises(UnsupportedOpError, match="ai.onnx::Frobnicate"):
        aioge.load_onnx(model)


# -- unsupported ops ----------------------------------------------------------------------------


def test_every_unsupported_op_is_listed_at_once() -> None:
    nodes = [
        h.make_node("Relu", ["x"], ["a"]),
        h.make_node("FancyOp", ["a"], ["b"]),
        h.make_node("FancyOp", ["b"], ["c"]),
        h.make_node("SVMRegressor", ["c"], ["d"], domain="ai.onnx.ml"),
        h.make_node("FusedGelu", ["d"], ["e"], domain="com.example"),
        h.make_node("ImageEncoder", ["e"], ["f"]),
    ]
    model = _model(
        nodes, [_f32("x", [2])], ["f"], extra_opsets=[h.make_opsetid("ai.onnx.ml", 3), h.make_opsetid("com.example", 1)]
    )
    with pytest.raises(UnsupportedOpError) as info:
        aioge.load_onnx(model)
    assert info.value.ops == [("", "FancyOp"), ("", "ImageEncoder"), ("ai.onnx.ml", "SVMRegressor"), ("com.example", "FusedGelu")]
    for text in ("ai.onnx::FancyOp", "ai.onnx::ImageEncoder", "ai.onnx.ml::SVMRegressor", "com.example::FusedGelu"):
        assert text in str(info.value)


# -- external data ------------------------------------------------------------------------------


def _external_model(tmp_path: Any) -> tuple[str, np.ndarray]:
    """A model whose two initializers live in one external file, at different offsets."""
    w = RNG.standard_normal((64, 32)).astype(np.float32)
    b = RNG.standard_normal((32,)).astype(np.float32)
    model = _model(
        [h.make_node("Mul", ["x", "w"], ["a"]), h.make_node("Add", ["a", "b"], ["y"])],
        [_f32("x", [64, 32])],
        ["y"],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
        opset=13,
    )
    path = str(tmp_path / "model.onnx")
    onnx.save_model(model, path, save_as_external_data=True, location="weights.bin", size_threshold=0)
    assert os.path.getsize(tmp_path / "weights.bin") >= w.nbytes + b.nbytes
    return path, w


def _relocate(path: str, location: str) -> None:
    model = onnx.load(path, load_external_data=False)
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = location
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def test_external_data_loads_from_the_model_directory(tmp_path: Any) -> None:
    path, w = _external_model(tmp_path)
    g = aioge.load_onnx(path)
    np.testing.assert_array_equal(g.constants["w"].data, w)
    b = g.constants["b"].data
    assert b.shape == (32,)
    x = _x(64, 32)
    np.testing.assert_allclose(_run(g, {"x": x})["y"], x * w + b, rtol=1e-6)
    want = ReferenceEvaluator(path).run(None, {"x": x})[0]
    np.testing.assert_allclose(_run(g, {"x": x})["y"], want, rtol=1e-6)
    with open(path, "rb") as f:
        data = f.read()
    with pytest.raises(GraphError, match="'w' keeps its data in external file 'weights.bin'"):
        aioge.load_onnx(data)
    np.testing.assert_array_equal(aioge.load_onnx(data, base_dir=tmp_path).constants["w"].data, w)


def test_external_data_in_a_subdirectory_is_fine(tmp_path: Any) -> None:
    path, w = _external_model(tmp_path)
    (tmp_path / "sub").mkdir()
    os.replace(tmp_path / "weights.bin", tmp_path / "sub" / "weights.bin")
    _relocate(path, "sub/../sub/weights.bin")
    np.testing.assert_array_equal(aioge.load_onnx(path).constants["w"].data, w)


@pytest.mark.parametrize("where", ["dotdot", "absolute", "symlink", "missing"])
def test_external_data_outside_the_model_directory_is_refused(tmp_path: Any, where: str) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    path, _ = _external_model(model_dir)
    outside = tmp_path / "outside.bin"
    os.replace(model_dir / "weights.bin", outside)  # the data exists, just not inside
    location, match = {
        "dotdot": ("../outside.bin", "escapes the model's directory"),
        "absolute": (str(outside), "is an absolute path"),
        "symlink": ("link.bin", "escapes the model's directory"),
        "missing": ("nothere.bin", "does not exist"),
    }[where]
    if where == "symlink":
        os.symlink(outside, model_dir / "link.bin")
    _relocate(path, location)
    with pytest.raises(GraphError, match=match) as info:
        aioge.load_onnx(path)
    assert "'w'" in str(info.value) and repr(location) in str(info.value)


def test_external_data_beyond_the_file_is_refused(tmp_path: Any) -> None:
    path, _ = _external_model(tmp_path)
    with open(tmp_path / "weights.bin", "r+b") as f:
        f.truncate(100)
    with pytest.raises(GraphError, match="holds 100 bytes"):
        aioge.load_onnx(path)


# -- garbage files ------------------------------------------------------------------------------


def _small_model_bytes() -> bytes:
    w = numpy_helper.from_array(RNG.standard_normal((4, 4)).astype(np.float32), "w")
    nodes = [h.make_node("Mul", ["x", "w"], ["a"]), h.make_node("Relu", ["a"], ["y"])]
    return _model(nodes, [_f32("x", ["N", 4])], [_f32("y", ["N", 4])], [w], opset=13).SerializeToString()


def _loads_or_graph_error(data: bytes) -> None:
    """Whatever the bytes, load_onnx returns a Graph or raises an AiogeError, nothing else."""
    try:
        aioge.load_onnx(data)
    except AiogeError:
        pass


def test_empty_file(tmp_path: Any) -> None:
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(GraphError, match="empty"):
        aioge.load_onnx(tmp_path / "empty.onnx")


def test_missing_file(tmp_path: Any) -> None:
    with pytest.raises(GraphError, match="cannot read ONNX model"):
        aioge.load_onnx(tmp_path / "nope.onnx")


def test_random_bytes() -> None:
    rnd = random.Random(1)
    for _ in range(50):
        data = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 400)))
        with pytest.raises(GraphError):
            aioge.load_onnx(data)


def test_truncated_file(tmp_path: Any) -> None:
    data = _small_model_bytes()
    (tmp_path / "t.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(GraphError, match="t.onnx"):
        aioge.load_onnx(tmp_path / "t.onnx")
    for cut in range(len(data)):
        _loads_or_graph_error(data[:cut])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_bit_flips_give_a_graph_or_a_graph_error(data: st.DataObject) -> None:
    raw = bytearray(_small_model_bytes())
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] ^= 1 << data.draw(st.integers(0, 7))
    _loads_or_graph_error(bytes(raw))


def test_cycle_and_dangling_inputs() -> None:
    cycle = [
        h.make_node("Relu", ["x", "c"], ["a"], name="r"),
        h.make_node("Add", ["a", "x"], ["b"], name="p"),
        h.make_node("Neg", ["b"], ["c"], name="n"),
    ]
    with pytest.raises(GraphError, match="cycle through nodes 'r' \\(Relu\\), 'p' \\(Add\\), 'n' \\(Neg\\)"):
        aioge.load_onnx(_model(cycle, [_f32("x", [2])], ["c"]))
    dangling = [h.make_node("Add", ["x", "ghost"], ["y"], name="add")]
    with pytest.raises(GraphError, match="node 'add' \\(Add\\) reads 'ghost'"):
        aioge.load_onnx(_model(dangling, [_f32("x", [2])], ["y"]))
    twice = [h.make_node("Relu", ["x"], ["y"]), h.make_node("Neg", ["x"], ["y"])]
    with pytest.raises(GraphError, match="defined twice"):
        aioge.load_onnx(_model(twice, [_f32("x", [2])], ["y"]))


def test_default_domain_must_be_imported() -> None:
    model = _model([h.make_node("Relu", ["x"], ["y"])], [_f32("x", [2])], ["y"])
    del model.opset_import[:]
    model.opset_import.append(h.make_opsetid("ai.onnx.ml", 3))
    with pytest.raises(GraphError, match="imports no opset for the default domain"):
        aioge.load_onnx(model)


def test_not_a_model_at_all() -> None:
    with pytest.raises(GraphError, match="expects a path, bytes or onnx.ModelProto"):
        aioge.load_onnx(42)
    with pytest.raises(GraphError, match="no graph"):
        aioge.load_onnx(onnx.ModelProto(ir_version=8))


# -- sequences and optionals ----------------------------------------------------------------


def test_sequence_ops_match_onnxruntime() -> None:
    """SplitToSequence -> SequenceErase -> SequenceInsert -> ConcatFromSequence, and SequenceLength, against onnxruntime."""
    nodes = [
        h.make_node("SplitToSequence", ["x", "split"], ["s"], axis=1),
        h.make_node("SequenceErase", ["s", "one"], ["s2"]),
        h.make_node("SequenceInsert", ["s2", "x", "zero"], ["s3"]),
        h.make_node("ConcatFromSequence", ["s3"], ["y"], axis=1),
        h.make_node("SequenceLength", ["s3"], ["n"]),
    ]
    inits = [
        onnx.numpy_helper.from_array(np.array([1, 2, 3], np.int64), "split"),
        onnx.numpy_helper.from_array(np.array(1, np.int64), "one"),
        onnx.numpy_helper.from_array(np.array(0, np.int64), "zero"),
    ]
    model = _model(nodes, [_f32("x", [2, 6])], [_f32("y", None), h.make_tensor_value_info("n", T.INT64, [])], inits, opset=16)
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(2, 6)}
    got = _run(aioge.load_onnx(model), feeds)
    want = _ort(model, feeds)
    np.testing.assert_array_equal(got["y"], want[0])
    assert int(got["n"]) == int(want[1]) == 3


def test_sequence_position_known_only_at_run_time_runs_as_an_op() -> None:
    """The unrolled sequence becomes a first-class one (SequenceConstruct) for a run-time SequenceAt."""
    nodes = [h.make_node("SequenceConstruct", ["x", "z"], ["s"]), h.make_node("SequenceAt", ["s", "i"], ["y"])]
    model = _model(nodes, [_f32("x", [2]), _f32("z", [2]), h.make_tensor_value_info("i", T.INT64, [])], ["y"], opset=16)
    g = aioge.load_onnx(model)
    assert {"SequenceConstruct", "SequenceAt"} <= {n.op_type for n in g.nodes}
    x, z = _x(2), _x(2)
    for i, want in ((0, x), (1, z), (-1, z)):
        np.testing.assert_array_equal(_run(g, {"x": x, "z": z, "i": np.asarray(i, np.int64)})["y"], want)
    with pytest.raises(aioge.errors.ExecutionError, match="position 2 is out of range for a sequence of 2"):
        _run(g, {"x": x, "z": z, "i": np.asarray(2, np.int64)})


def test_image_decoder_refuses_bytes_that_are_no_image() -> None:
    model = _model([h.make_node("ImageDecoder", ["b"], ["y"])], [h.make_tensor_value_info("b", T.UINT8, [None])], ["y"], opset=20)
    with pytest.raises(aioge.errors.ExecutionError, match="not a readable image"):
        _run(aioge.load_onnx(model), {"b": np.frombuffer(b"definitely not a png", np.uint8)})
