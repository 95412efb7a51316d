"""plan.serialize (and its codec): CompiledModel <-> .om, inline and external weights, validation, Session.load_model."""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from typing import Any, Literal

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aioge
from aioge import ops
from aioge.compiler.graph import compile_graph_sync
from aioge.compiler.specialize import input_signature
from aioge.engines import Engine
from aioge.errors import GraphError, ModelFormatError
from aioge.keys import signature_of
from aioge.options import resolve_options
from aioge.plan import codec as plan_codec
from aioge.plan import io, serialize
from aioge.plan.model import CompiledModel
from aioge.runtime.executor import Executable

pytestmark = pytest.mark.anyio

W = (np.arange(64, dtype=np.float32).reshape(8, 8) - 32) / 64
W2 = np.cos(np.arange(64, dtype=np.float32)).reshape(8, 8)
B = np.linspace(-1, 1, 8, dtype=np.float32)
HALF = np.full(8, 0.5, np.float32)


def _graph(scale: float = 1.0) -> aioge.Graph:
    g = aioge.Graph("ser")
    x = g.input("x", ("N", 8))
    h1 = ops.einsum(x, g.constant(W * scale, "w"), equation="ni,ij->nj")
    h2 = ops.einsum(x, g.constant(W2, "w2"), equation="ni,ij->nj")  # independent of h1: a second stream
    s = ops.sigmoid(x) * g.variable("v", HALF)
    half = g.constant(HALF.copy(), "half")  # the same bytes as v: one weight file for both
    g.output(ops.relu(ops.tanh(h1) + s + g.constant(B, "b")) - h2 * half, names=["y"])
    return g


def _ref(x: np.ndarray, scale: float = 1.0) -> np.ndarray:
    return np.maximum(np.tanh(x @ (W * scale)) + 1 / (1 + np.exp(-x)) * 0.5 + B, 0) - (x @ W2) * 0.5


def _compile(graph: aioge.Graph | None = None, batch: int = 4) -> CompiledModel:
    graph = graph or _graph()
    return compile_graph_sync(graph, input_signature(graph, {"x": (batch, 8)}), resolve_options({"aioge.tune_mode": "heuristic"}))


async def _run(model: CompiledModel, x: np.ndarray, tmp_path) -> np.ndarray:
    """Run a model through the public path: save it, Session.load_model, run_graph."""
    path = tmp_path / f"run_{id(model)}.om"
    serialize.save_model_sync(path, model)
    async with aioge.Session() as s:
        return (await s.run_graph(await s.load_model(path), {"x": x}))["y"]


def _same_graph(a: aioge.Graph, b: aioge.Graph) -> None:
    assert a.name == b.name
    assert [(v.name, v.desc) for v in a.inputs] == [(v.name, v.desc) for v in b.inputs]
    assert [v.name for v in a.outputs] == [v.name for v in b.outputs]
    for table in ("constants", "variables"):
        ta, tb = getattr(a, table), getattr(b, table)
        assert list(ta) == list(tb)
        for name in ta:
            assert ta[name].desc == tb[name].desc
            np.testing.assert_array_equal(ta[name].data, tb[name].data)
    assert len(a.nodes) == len(b.nodes)
    for na, nb in zip(a.nodes, b.nodes):
        assert (na.name, na.op_type, na.domain) == (nb.name, nb.op_type, nb.domain)
        assert [None if v is None else v.name for v in na.inputs] == [None if v is None else v.name for v in nb.inputs]
        assert [(o.name, o.desc) for o in na.outputs] == [(o.name, o.desc) for o in nb.outputs]
        assert set(na.attrs) == set(nb.attrs)
        for k in na.attrs:
            assert type(na.attrs[k]) is type(nb.attrs[k]), k
            np.testing.assert_array_equal(na.attrs[k], nb.attrs[k])


async def test_roundtrip_keeps_every_field_and_the_numbers(tmp_path) -> None:
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _graph())
        model = await s.build_graph(1, {"x": (4, 8)})
        direct = (await s.run_graph(1, {"x": x}))["y"]
    assert model.streams.num_streams >= 2 and model.streams.events  # the plan has something to lose
    data, weights = serialize.encode_model(model)
    assert weights == {}
    back = serialize.decode_model(data)
    for f in dataclasses.fields(CompiledModel):
        if f.name not in ("graph", "stats"):
            assert getattr(back, f.name) == getattr(model, f.name), f.name  # dataclass equality: every field
    _same_graph(model.graph, back.graph)
    assert back.stats.kernels_compiled == 0 and not back.stats.graph_cache_hit
    assert back.stats.nodes_before_passes == model.stats.nodes_before_passes
    got = await _run(back, x, tmp_path)
    np.testing.assert_array_equal(got, direct)
    np.testing.assert_allclose(got, _ref(x), rtol=1e-5, atol=1e-5)
    assert not back.graph.constants["w"].data.flags.writeable


def test_descs_are_stored_not_reinferred() -> None:
    model = _compile()
    out = model.graph.nodes[0].outputs[0]
    out.desc = dataclasses.replace(out.desc, format="FRACTAL_NZ")  # a layout a pass might pick
    model.graph.constants["w"].desc = dataclasses.replace(model.graph.constants["w"].desc, format="NC1HWC0")
    # The kernels were compiled for those descs (a kernel records its node's signature).
    model.nodes = tuple(
        dataclasses.replace(p, kernel=dataclasses.replace(p.kernel, inputs=ins, outputs=outs))
        for p, (ins, outs) in zip(model.nodes, (signature_of(n) for n in model.graph.nodes))
    )
    back = serialize.decode_model(serialize.encode_model(model)[0])
    assert back.graph.nodes[0].outputs[0].desc.format == "FRACTAL_NZ"
    assert back.graph.constants["w"].desc.format == "NC1HWC0"


def test_generic_values_roundtrip_with_their_types() -> None:
    value = {
        1: (2, [3, (4.5, "s")], None, b"raw", True),
        "big": 1 << 80,
        "np": np.float32(1.5),
        "i64": np.int64(-3),
        "arr": np.arange(6, dtype=np.int16).reshape(2, 3),
        "strs": np.array([["a", "bc"], ["", "d"]]),
        "engine": Engine.AIVEC,
        "set": frozenset({1, 2}),
        "empty": (),
    }
    back = plan_codec.decode_value(io.unpack(io.pack(plan_codec.encode_value(value))))
    assert back.keys() == value.keys()
    assert back[1] == value[1] and type(back[1][1][1]) is tuple
    assert back["big"] == 1 << 80 and back["engine"] is Engine.AIVEC and back["set"] == frozenset({1, 2})
    assert type(back["np"]) is np.float32 and type(back["i64"]) is np.int64 and back["empty"] == ()
    np.testing.assert_array_equal(back["arr"], value["arr"])
    assert back["arr"].dtype == np.int16
    assert back["strs"].tolist() == value["strs"].tolist()
    with pytest.raises(TypeError):
        plan_codec.encode_value(object())


def test_an_engine_is_stored_under_its_old_name_whichever_module_defines_it() -> None:
    """Engine moved to kernels/contract.py (issue 21); .om files written before name it engines.Engine."""
    assert plan_codec.encode_value(Engine.AICPU) == {"~e": ["engines.Engine", "AiCpu"]}
    assert plan_codec.decode_value({"~e": ["engines.Engine", "AiVec"]}) is Engine.AIVEC


def test_attributes_roundtrip_and_are_checked_against_the_schema() -> None:
    g = aioge.Graph("attrs")
    x = g.input("x", (2, 3))
    y = ops.einsum(ops.cast(x, to="float64"), g.constant(np.ones((3, 2))), equation="ij,jk->ik")
    g.output(y, names=["y"])
    model = _compile_any(g)
    back = serialize.decode_model(serialize.encode_model(model)[0])
    _same_graph(model.graph, back.graph)
    assert back.graph.nodes[0].attrs["to"] == "float64"
    model.graph.nodes[0].attrs["no_such_attr"] = np.arange(3)  # not what the schema takes: cannot load, so not written
    with pytest.raises(ModelFormatError, match="unknown attribute"):
        serialize.encode_model(model)


def _compile_any(g: aioge.Graph) -> CompiledModel:
    return compile_graph_sync(g, input_signature(g, {}), resolve_options({"aioge.tune_mode": "heuristic"}))


def test_string_constants_roundtrip() -> None:
    model = _compile()
    c = model.graph.constant(np.array(["a", "bb"]), "labels")
    model.graph.outputs.append(c)
    back = serialize.decode_model(serialize.encode_model(model)[0])
    assert back.graph.constants["labels"].data.tolist() == ["a", "bb"]
    assert back.graph.constants["labels"].desc.dtype == "str"


async def test_external_weights_are_deduplicated_files_memory_mapped_on_load(tmp_path) -> None:
    model = _compile()
    path = tmp_path / "m.om"
    serialize.save_model_sync(path, model, external=True)
    wdir = tmp_path / "weight"
    files = sorted(p.name for p in wdir.iterdir())
    digest_w = hashlib.sha256(np.ascontiguousarray(W).tobytes()).hexdigest()
    assert f"weight_{digest_w}" in files
    # w, w2, b, half and the variable v; half and v hold the same bytes -> 4 files
    assert len(files) == 4 and all(f.startswith("weight_") and len(f) == 7 + 64 for f in files)
    assert (wdir / f"weight_{digest_w}").read_bytes() == W.tobytes()
    assert path.stat().st_size < 4 * W.nbytes + 8000  # the .om does not carry the weights inline
    back = serialize.load_model_sync(path)
    w = back.graph.constants["w"].data
    assert not isinstance(w, np.memmap) and not w.flags.writeable  # read into private memory, not mapped
    np.testing.assert_array_equal(w, W)
    x = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)
    async with aioge.Session() as s:
        out = await s.run_graph(await s.load_model(path), {"x": x})
    np.testing.assert_allclose(out["y"], _ref(x), rtol=1e-5, atol=1e-5)
    # saving again rewrites nothing that is already there and valid
    mtimes = {p.name: p.stat().st_mtime_ns for p in wdir.iterdir()}
    serialize.save_model_sync(tmp_path / "m2.om", model, external=True)
    assert {p.name: p.stat().st_mtime_ns for p in wdir.iterdir()} == mtimes


def test_bad_weight_files_are_model_format_errors(tmp_path) -> None:
    model = _compile()
    path = tmp_path / "m.om"
    serialize.save_model_sync(path, model, external=True)
    digest = hashlib.sha256(W.tobytes()).hexdigest()
    wfile = tmp_path / "weight" / f"weight_{digest}"
    good = wfile.read_bytes()
    wfile.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(ModelFormatError, match="checksum mismatch"):
        serialize.load_model_sync(path)
    wfile.write_bytes(good[:-4])
    with pytest.raises(ModelFormatError, match="needs 256"):
        serialize.load_model_sync(path)
    wfile.unlink()
    with pytest.raises(ModelFormatError, match="weight file of tensor"):
        serialize.load_model_sync(path)
    # a corrupt file in the way is replaced on the next save
    wfile.write_bytes(b"x" * len(good))
    serialize.save_model_sync(path, model, external=True)
    assert wfile.read_bytes() == good
    serialize.load_model_sync(path)


def test_corrupt_truncated_or_foreign_files_are_clear_errors(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    data, _ = serialize.encode_model(_compile())
    with pytest.raises(ModelFormatError, match="checksum"):
        serialize.decode_model(data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:], path="m.om")
    with pytest.raises(ModelFormatError, match="truncated"):
        serialize.decode_model(data[: len(data) // 2], path="m.om")
    with pytest.raises(ModelFormatError, match="bad magic"):
        serialize.decode_model(b"\x00" * 100)
    with pytest.raises(ModelFormatError, match="'idx' file where a 'om' file"):
        serialize.decode_model(io.make_envelope("idx", io.pack({})))
    with pytest.raises(ModelFormatError, match="cannot read"):
        serialize.load_model_sync(tmp_path / "missing.om")
    monkeypatch.setattr(io, "_versions", lambda: {"aioge": "0.0.1", "numpy": "1", "python": "3"})
    with pytest.raises(ModelFormatError, match="made under") as err:
        serialize.decode_model(data, path="m.om")
    assert err.value.path == "m.om"
    assert serialize.decode_model(data, check_versions=False).nodes


def _payload(data: bytes) -> dict:
    """The metadata of an .om as mutable plain data, the tensor bytes under "~blob"."""
    _, framed = io.open_envelope(data, "om")
    (n,) = struct.unpack_from("<Q", framed)
    meta = msgpack.unpackb(framed[8 : 8 + n], raw=False, strict_map_key=False, ext_hook=lambda c, d: msgpack.ExtType(c, d))
    return {"~meta": meta, "~blob": bytes(framed[8 + n + (-(8 + n) % 64) :])}


def _repack(payload: dict) -> bytes:
    return io.make_envelope("om", serialize._frame(msgpack.packb(payload["~meta"], use_bin_type=True), [payload["~blob"]]))


def test_well_formed_files_with_wrong_structure_are_rejected() -> None:
    data, _ = serialize.encode_model(_compile())
    cases = []
    p = _payload(data)
    p["~meta"]["layout_digest"] = "0" * 64
    cases.append((p, "plan layout"))
    p = _payload(data)
    p["~meta"]["ops"] = {k: 999 for k in p["~meta"]["ops"]}
    cases.append((p, "version 999 when compiled"))
    p = _payload(data)
    del p["~meta"]["fields"]["memory"]
    cases.append((p, "fields differ"))
    p = _payload(data)
    p["~meta"]["fields"]["nodes"]["~t"][0]["~dc"][1]["kernel"]["~dc"][1]["impl"] = "no_such_kernel"
    cases.append((p, "no_such_kernel.* is not a candidate"))
    p = _payload(data)
    p["~meta"]["fields"]["memory"]["~dc"][1]["arena_bytes"] = 1
    cases.append((p, "does not fit the arena"))
    p = _payload(data)
    p["~meta"]["graph"]["nodes"][0][1] = "NoSuchOp"
    cases.append((p, "unknown to this aioge"))
    p = _payload(data)
    p["~meta"]["graph"]["nodes"] = 5
    cases.append((p, "malformed"))
    p = _payload(data)
    p["~meta"]["graph"]["constants"][0][1] = [[3, 3], "float32", "ND"]
    cases.append((p, "its desc"))
    p = _payload(data)
    p["~blob"] = p["~blob"][:10]
    cases.append((p, "do not fit"))
    for payload, message in cases:
        with pytest.raises(ModelFormatError, match=message):
            serialize.decode_model(_repack(payload))
    for framed, message in (
        (struct.pack("<Q", 10**9) + b"x", "declares"),
        (b"abc", "too short"),
        (struct.pack("<Q", 1) + b"\xc1" + b"\0" * 55, "cannot decode"),
    ):
        with pytest.raises(ModelFormatError, match=message):
            serialize.decode_model(io.make_envelope("om", framed))


def _leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, (*path, i))
    yield path


_DATA = serialize.encode_model(_compile(batch=2))[0]
_PATHS = [("~meta", *path) for path in _leaves(_payload(_DATA)["~meta"])]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    index=st.integers(0, len(_PATHS) - 1),
    value=st.sampled_from([None, -1, 0, 10**12, "x", "", [], {}, [1, 2], {"~dc": ["memory.Buffer", {}]}, {"~t": 5}, 1.5, b"b"]),
)
def test_any_mutated_field_is_a_model_format_error_or_loads(index: int, value: object) -> None:
    payload = _payload(_DATA)
    path = _PATHS[index]
    parent = payload
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = value
    try:
        model = serialize.decode_model(_repack(payload))
    except ModelFormatError:
        return
    Executable(model, {n: v.data for n, v in model.graph.variables.items()})  # a model that loads also binds


def test_unstorable_models_fail_to_save_clearly() -> None:
    model = _compile()
    model.fingerprint = object()  # type: ignore[assignment]
    with pytest.raises(ModelFormatError, match="cannot serialise"):
        serialize.encode_model(model)


async def test_save_and_load_off_the_loop(tmp_path) -> None:
    model = _compile()
    await serialize.save_model(tmp_path / "a.om", model)
    back = await serialize.load_model(tmp_path / "a.om")
    assert back.fingerprint == model.fingerprint and back.signature == (("x", (4, 8)),)


async def test_session_load_model_registers_a_runnable_graph(tmp_path) -> None:
    model = _compile()
    serialize.save_model_sync(tmp_path / "a.om", model, external=True)
    x = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
    async with aioge.Session() as s:
        gid = await s.load_model(tmp_path / "a.om")
        assert gid == 1
        out = await s.run_graph(gid, {"x": x})
        np.testing.assert_allclose(out["y"], _ref(x), rtol=1e-5, atol=1e-5)
        assert s.compiled(gid).stats.kernels_compiled == 0
        np.testing.assert_array_equal(s.variable("v"), np.full(8, 0.5, np.float32))
        assert await s.load_model(tmp_path / "a.om", graph_id=7) == 7
        with pytest.raises(GraphError, match="already added"):
            await s.load_model(tmp_path / "a.om", graph_id=7)
        with pytest.raises(aioge.errors.FeedError):
            await s.run_graph(gid, {"x": np.zeros((5, 8), np.float32)})  # compiled for batch 4
        (tmp_path / "bad.om").write_bytes(b"AIOGE\x00\x01\x00" + b"\xff" * 10)
        with pytest.raises(ModelFormatError, match="bad.om"):
            await s.load_model(tmp_path / "bad.om")


_HINTS: list[tuple[Any, list[Any], list[Any]]] = [  # annotation, values it takes, values it refuses
    (int, [0, -3], [True, 1.0, "1", None]),
    (float, [1, 2.5], [False, "x"]),
    (str | None, ["a", None], [1, b"a"]),
    (tuple[int, ...], [(), (1, 2)], [[1], (1, "a")]),
    (tuple[int, str], [(1, "a")], [(1,), ("a", 1), [1, "a"]]),
    (list[float], [[], [1, 2.0], (3,)], [[None], 5]),
    (dict[str, int], [{}, {"a": 1}], [{1: 1}, {"a": "b"}, [("a", 1)]]),
    (frozenset[str], [frozenset(), frozenset({"a"})], [frozenset({1}), ["a"]]),
    (Literal["ND", "NCHW"], ["ND"], ["NHWC", None]),
    (Any, [object(), None], []),
]


@pytest.mark.parametrize("hint, good, bad", _HINTS)
def test_a_decoded_field_is_checked_against_its_annotation(hint, good, bad) -> None:
    """Decoding checks every value against its field's annotation (``codec._check``, built
    once per annotation): what fits passes, anything else is refused."""
    assert all(plan_codec._check(hint)(v) for v in good)
    assert not any(plan_codec._check(hint)(v) for v in bad)


def test_a_field_of_the_wrong_type_in_a_file_is_refused_naming_it() -> None:
    p = _payload(serialize.encode_model(_compile())[0])
    p["~meta"]["fields"]["memory"]["~dc"][1]["arena_bytes"] = "many"
    with pytest.raises(ModelFormatError, match=r"MemoryPlan.arena_bytes: expected <class 'int'>, got str"):
        serialize.decode_model(_repack(p))
