"""Bad and hostile ONNX models: each is a clear AiogeError, never a protobuf, numpy or KeyError traceback.

- mutations (truncated, bit-flipped, random bytes) of light/ models (load only: they are big)
  and of a small builder model (loaded, and when it loads, compiled and run);
- absurd shapes (inputs, initializers, ConstantOfShape/Expand/Tile/Range outputs of 10^12
  elements, a Reshape to huge dims): a GraphError before anything that size is allocated,
  shown under RLIMIT_AS in a subprocess and by tracemalloc's peak;
- cycles, dangling inputs, unknown domains and ops (UnsupportedOpError lists all of them).

Mutation counts scale with ``AIOGE_RELIABILITY_SCALE``.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import tracemalloc
import zlib
from pathlib import Path

import anyio
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import aioge
from aioge.errors import AiogeError, GraphError, UnsupportedOpError
from aioge.ir.desc import numpy_dtype

SCALE = float(os.environ.get("AIOGE_RELIABILITY_SCALE", "1"))
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
BIG = 10**6  # BIG x BIG = 10^12 elements: 4 TB of float32

# Mutated weights hold NaN and Inf: numpy's RuntimeWarnings are expected, the outcome is what counts.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _small_model() -> bytes:
    r = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["h2"], name="add"),
        helper.make_node("Relu", ["h2"], ["h3"], name="relu"),
        helper.make_node("Reshape", ["h3", "s"], ["h4"], name="rs"),
        helper.make_node("Transpose", ["h4"], ["h5"], perm=[0, 2, 1], name="tr"),
        helper.make_node("Softmax", ["h5"], ["y"], axis=-1, name="sm"),
        helper.make_node("ReduceSum", ["h3"], ["z"], keepdims=0, name="rsum"),
    ]
    inits = [
        numpy_helper.from_array(r.standard_normal((8, 6)).astype(np.float32), "w"),
        numpy_helper.from_array(r.standard_normal(6).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([2, 3, 4], np.int64), "s"),
    ]
    g = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
        ],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _mutate(data: bytes, rng: random.Random, i: int) -> bytes:
    """Truncated, 1-8 bit flips, 1-4 random bytes, or all random bytes, in turn."""
    kind = i % 4
    if kind == 0:
        return data[: rng.randrange(len(data))]
    b = bytearray(data)
    if kind == 1:
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == 2:
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    else:
        b = bytearray(rng.randbytes(rng.randrange(1, 400)))
    return bytes(b)


def _load_outcome(data: bytes) -> tuple[str, aioge.Graph | None]:
    try:
        return "loaded", aioge.load_onnx(data)
    except AiogeError as exc:
        assert str(exc), "an error must say what is wrong"
        return type(exc).__name__, None
    # Anything else (DecodeError, TypeError, KeyError, numpy errors...) fails the test with its traceback.


def test_small_model_mutations_load_or_fail_clearly_and_what_loads_runs() -> None:
    data = _small_model()
    n = max(200, int(1500 * SCALE))
    rng = random.Random(20240609)
    outcomes: dict[str, int] = {}
    loaded = []
    for i in range(n):
        what, graph = _load_outcome(_mutate(data, rng, i))
        outcomes[what] = outcomes.get(what, 0) + 1
        if graph is not None:
            loaded.append(graph)

    async def run_all() -> dict[str, int]:
        ran: dict[str, int] = {}
        async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
            for gid, graph in enumerate(loaded):
                feeds = {}
                for v in graph.inputs:
                    shape = tuple(d if isinstance(d, int) else 2 for d in (v.shape or ()))
                    feeds[v.name] = np.ones(shape, numpy_dtype(v.dtype)) if int(np.prod(shape)) <= 1 << 20 else None
                if any(f is None for f in feeds.values()):
                    ran["too big to feed"] = ran.get("too big to feed", 0) + 1
                    continue
                try:
                    await s.add_graph(gid, graph)
                    out = await s.run_graph(gid, feeds)
                    assert set(out) == {v.name for v in graph.outputs}
                    ran["ran"] = ran.get("ran", 0) + 1
                except AiogeError as exc:
                    key = f"run {type(exc).__name__}"
                    ran[key] = ran.get(key, 0) + 1
        return ran

    ran = anyio.run(run_all)
    print(f"\nsmall model: {n} mutations: {outcomes}; of those loaded: {ran}")
    assert outcomes.get("GraphError", 0) > n // 2 and outcomes.get("loaded", 0) > 0
    assert ran.get("ran", 0) > 0


@pytest.mark.parametrize("name", ["light_bvlc_alexnet", "light_squeezenet", "light_inception_v1"])
def test_light_model_mutations_load_or_fail_clearly(name: str) -> None:
    data = (LIGHT / f"{name}.onnx").read_bytes()
    n = max(100, int(500 * SCALE))
    rng = random.Random(zlib.crc32(name.encode()))
    outcomes: dict[str, int] = {}
    for i in range(n):
        what, _ = _load_outcome(_mutate(data, rng, i))
        outcomes[what] = outcomes.get(what, 0) + 1
    print(f"\n{name}: {n} mutations: {outcomes}")
    assert outcomes.get("GraphError", 0) > n // 2


def test_invalid_utf8_in_a_name_is_a_graph_error() -> None:
    """protobuf hands invalid UTF-8 in an onnx string field back as bytes (once a TypeError in UnsupportedOpError)."""
    data = bytearray(_small_model())
    at = data.index(b"Softmax")
    data[at] = 0xFF
    with pytest.raises(GraphError, match=r"op_type is not valid UTF-8"):
        aioge.load_onnx(bytes(data))


def test_invalid_utf8_in_nested_and_repeated_text_fields_is_a_graph_error_and_bytes_are_not_text() -> None:
    """The check walks string and message fields only: an initializer's name and a node's
    inputs are text, a weight's raw_data is bytes (here bytes that are not UTF-8, loaded as
    they are)."""
    w = np.frombuffer(b"\xff\xfe\xfd\x3f" * 48, np.float32).reshape(8, 6)  # raw_data no UTF-8 decoder takes
    original = np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32)  # _small_model's w
    data = bytearray(_small_model().replace(original.tobytes(), w.tobytes()))
    g = aioge.load_onnx(bytes(data))
    np.testing.assert_array_equal(g.constants["w"].data, w)
    # TensorProto.name is field 8 (tag 0x42), NodeProto.input field 1 (tag 0x0a)
    for text, field in ((b"\x42\x01w", "initializer.name"), (b"\x0a\x01x", "node.input")):
        at = data.index(text) + len(text) - 1
        bad = bytearray(data)
        bad[at] = 0xFF
        with pytest.raises(GraphError, match=rf"{field} is not valid UTF-8"):
            aioge.load_onnx(bytes(bad))


def test_random_bytes_and_empty_files(tmp_path: Path) -> None:
    rng = random.Random(7)
    for size in (0, 1, 2, 7, 64, 4096):
        path = tmp_path / f"r{size}.onnx"
        path.write_bytes(rng.randbytes(size))
        with pytest.raises(GraphError, match=str(path) if size else "empty"):
            aioge.load_onnx(path)
    with pytest.raises(GraphError, match="cannot read ONNX model"):
        aioge.load_onnx(tmp_path / "missing.onnx")
    with pytest.raises(GraphError, match="expects a path, bytes or onnx.ModelProto"):
        aioge.load_onnx(12)  # type: ignore[arg-type]


# -- absurd shapes ---------------------------------------------------------------------


def _tensor(name: str, dims: list[int], floats: list[float] | None = None, raw: bytes | None = None) -> TensorProto:
    t = TensorProto()
    t.name, t.data_type = name, TensorProto.FLOAT
    t.dims.extend(dims)
    if raw is not None:
        t.raw_data = raw
    elif floats:
        t.float_data.extend(floats)
    return t


def _model(nodes: list, inputs: list, inits: list) -> bytes:
    g = helper.make_graph(nodes, "absurd", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _absurd_models() -> dict[str, tuple[bytes, str]]:
    x1 = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])]
    shape = numpy_helper.from_array(np.array([BIG, BIG], np.int64), "s")
    one = helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])
    relu = [helper.make_node("Relu", ["w"], ["y"])]
    return {
        "input": (
            _model(
                [helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BIG, BIG])], []
            ),
            r"input 'x' is float32\[1000000, 1000000\]",
        ),
        "initializer without data": (
            _model(relu, [], [_tensor("w", [BIG, BIG])]),
            r"initializer 'w' declares \[1000000, 1000000\]",
        ),
        "initializer with 2 values": (_model(relu, [], [_tensor("w", [BIG, BIG], [1.0, 2.0])]), "initializer 'w' declares"),
        "initializer raw 8 bytes": (_model(relu, [], [_tensor("w", [BIG, BIG], raw=b"\0" * 8)]), "initializer 'w' declares"),
        "initializer overflowing int64": (
            _model(relu, [], [_tensor("w", [2**62, 4], raw=b"\0" * 8)]),
            "initializer 'w' declares",
        ),
        "initializer negative dim": (_model(relu, [], [_tensor("w", [-1], [1.0])]), "negative dimension"),
        "ConstantOfShape": (
            _model(
                [helper.make_node("ConstantOfShape", ["s"], ["c"], value=one), helper.make_node("Add", ["c", "x"], ["y"])],
                x1,
                [shape],
            ),
            r"ConstantOfShape 'c' is float32\[1000000, 1000000\]",
        ),
        "Expand": (
            _model([helper.make_node("Expand", ["x", "s"], ["y"])], x1, [shape]),
            r"Expand 'y' is float32\[1000000, 1000000\]",
        ),
        "Tile": (
            _model(
                [helper.make_node("Tile", ["x", "s"], ["y"])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
                [shape],
            ),
            "Tile 'y'",
        ),
        "Range": (
            _model(
                [helper.make_node("Range", ["z", "lim", "d"], ["y"])],
                [],
                [
                    helper.make_tensor("z", TensorProto.FLOAT, [], [0.0]),
                    helper.make_tensor("lim", TensorProto.FLOAT, [], [1e12]),
                    helper.make_tensor("d", TensorProto.FLOAT, [], [1.0]),
                ],
            ),
            "Range 'y'",
        ),
        "Reshape": (
            _model(
                [helper.make_node("Reshape", ["x", "s"], ["y"])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                [shape],
            ),
            "cannot reshape",
        ),
    }


ABSURD = _absurd_models()


@pytest.mark.parametrize("name", sorted(ABSURD))
def test_absurd_shapes_fail_at_load_without_allocating(name: str) -> None:
    data, message = ABSURD[name]
    tracemalloc.start()
    try:
        with pytest.raises(GraphError, match=message) as info:
            aioge.load_onnx(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{name}: {peak} bytes allocated before refusing"
    assert "larger than the 16 GiB" in str(info.value) or name in ("Reshape", "initializer negative dim")


def test_absurd_shapes_under_an_address_space_limit(tmp_path: Path) -> None:
    """In a child limited to 2 GiB of address space every absurd model is a GraphError, not a MemoryError."""
    for name, (data, _) in ABSURD.items():
        (tmp_path / f"{len(os.listdir(tmp_path))}.onnx").write_bytes(data)
    script = textwrap.dedent(f"""
        import glob, resource, sys
        import aioge  # imported before the limit: numpy's and onnx's own start-up is not what is measured
        from aioge.errors import GraphError
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        n = 0
        for path in sorted(glob.glob({str(tmp_path)!r} + "/*.onnx")):
            try:
                aioge.load_onnx(path)
            except GraphError:
                n += 1
        print(n)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.strip()) == len(ABSURD)


# -- structure ---------------------------------------------------------------------------


def _graph_of(nodes: list, inputs: list, outputs: list[str], opsets: list | None = None, inits: list | None = None) -> bytes:
    g = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits or []
    )
    return helper.make_model(g, opset_imports=opsets or [helper.make_opsetid("", 17)]).SerializeToString()


X = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])]


def test_cycle_is_a_graph_error_naming_its_nodes() -> None:
    data = _graph_of(
        [
            helper.make_node("Add", ["x", "c"], ["a"], name="n1"),
            helper.make_node("Relu", ["a"], ["b"], name="n2"),
            helper.make_node("Neg", ["b"], ["c"], name="n3"),
        ],
        X,
        ["b"],
    )
    with pytest.raises(GraphError, match=r"cycle through nodes 'n1' \(Add\), 'n2' \(Relu\), 'n3' \(Neg\)"):
        aioge.load_onnx(data)
    self_loop = _graph_of([helper.make_node("Add", ["x", "y"], ["y"], name="me")], X, ["y"])
    with pytest.raises(GraphError, match="cycle through nodes 'me'"):
        aioge.load_onnx(self_loop)


def test_dangling_input_and_double_definition() -> None:
    with pytest.raises(GraphError, match="reads 'nowhere', which no node"):
        aioge.load_onnx(_graph_of([helper.make_node("Add", ["x", "nowhere"], ["y"])], X, ["y"]))
    with pytest.raises(GraphError, match="defined twice"):
        aioge.load_onnx(_graph_of([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])], X, ["y"]))


def test_unknown_domains_and_ops_are_all_listed() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Frobnicate", ["a"], ["b"]),
        helper.make_node("Zap", ["b"], ["c"], domain="com.evil"),
        helper.make_node("Zop", ["c"], ["d"], domain="com.evil"),
        helper.make_node("Wibble", ["d"], ["y"], domain="org.unknown"),
    ]
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.evil", 1)]  # org.unknown is not even imported
    with pytest.raises(UnsupportedOpError) as info:
        aioge.load_onnx(_graph_of(nodes, X, ["y"], opsets))
    assert info.value.ops == [("", "Frobnicate"), ("com.evil", "Zap"), ("com.evil", "Zop"), ("org.unknown", "Wibble")]
    for name in ("ai.onnx::Frobnicate", "com.evil::Zap", "com.evil::Zop", "org.unknown::Wibble"):
        assert name in str(info.value)


def test_an_op_inside_a_subgraph_is_listed_too() -> None:
    branch = helper.make_graph(
        [helper.make_node("Nope", ["x"], ["o"])], "b", [], [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)]
    )
    cond = helper.make_tensor("c", TensorProto.BOOL, [], [True])
    data = _graph_of([helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)], X, ["y"], inits=[cond])
    with pytest.raises(UnsupportedOpError, match="ai.onnx::Nope"):
        aioge.load_onnx(data)


def test_default_domain_without_an_opset_import() -> None:
    data = _graph_of([helper.make_node("Relu", ["x"], ["y"])], X, ["y"], [helper.make_opsetid("com.x", 1)])
    with pytest.raises(GraphError, match="imports no opset for the default domain"):
        aioge.load_onnx(data)
