"""aioge.load_tf: frozen GraphDefs, SavedModels, .keras files and Keras models (made here,
seeded) against TensorFlow's own outputs; crafted graphs that must not run anything.

Tolerances: float32; rtol 1e-4 / atol 1e-5 (reordered sums: im2col and blocked matmuls
against TensorFlow's kernels), on logits scaled to a largest magnitude of 1 where random
weights make them tiny or large.
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# The PyTorch front-end tests run in this process too: torch's compiler (triton) must be
# loaded before TensorFlow, or the process crashes (see aioge.torch._check_import_order).
with contextlib.suppress(ImportError):
    import aioge.torch  # noqa: F401
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from tensorflow.core.framework import graph_pb2  # noqa: E402

import aioge  # noqa: E402
from aioge.errors import GraphError, UnsupportedOpError  # noqa: E402

pytestmark = pytest.mark.anyio


def _freeze(model: Any, shape: tuple[int | None, ...], dtype: Any = None) -> Any:
    """A frozen GraphDef of ``model`` in inference mode, input placeholder ``x``, and the concrete function."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    fn = tf.function(lambda x: model(x, training=False)).get_concrete_function(
        tf.TensorSpec(shape, dtype or tf.float32, name="x")
    )
    frozen = convert_variables_to_constants_v2(fn)
    return frozen.graph.as_graph_def(), frozen


def _mobilenet_like() -> Any:
    inp = keras.Input((32, 32, 3))
    h = keras.layers.Conv2D(8, 3, strides=2, padding="same", use_bias=False)(inp)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.ReLU(6.0)(h)
    h = keras.layers.DepthwiseConv2D(3, padding="same")(h)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.ReLU(6.0)(h)
    h = keras.layers.Conv2D(16, 1)(h)
    h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.AveragePooling2D(3, strides=1, padding="same")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(inp, keras.layers.Dense(10, activation="softmax")(h))


def _mlp() -> Any:
    inp = keras.Input((16,))
    h = keras.layers.Dense(32, activation="gelu")(inp)
    h = keras.layers.Dense(32, activation="tanh")(h)
    return keras.Model(inp, keras.layers.Dense(4)(h))


def _transformer_block() -> Any:
    inp = keras.Input((10, 32))
    att = keras.layers.MultiHeadAttention(num_heads=4, key_dim=8)(inp, inp)
    h = keras.layers.LayerNormalization()(inp + att)
    f = keras.layers.Dense(32)(keras.layers.Dense(64, activation="relu")(h))
    return keras.Model(inp, keras.layers.LayerNormalization()(h + f))


def _randomise_batch_norm(model: Any, seed: int) -> Any:
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            n = layer.gamma.shape[0]
            layer.set_weights(
                [
                    1 + 0.1 * rng.standard_normal(n),
                    0.1 * rng.standard_normal(n),
                    0.1 * rng.standard_normal(n),
                    0.5 + rng.random(n),
                ]
            )
    return model


@pytest.fixture(scope="module")
def frozen() -> dict[str, tuple[Any, Any, tuple[int, ...]]]:
    keras.utils.set_random_seed(0)
    made = {}
    for name, build, shape in [
        ("cnn", _mobilenet_like, (None, 32, 32, 3)),
        ("mlp", _mlp, (None, 16)),
        ("block", _transformer_block, (None, 10, 32)),
    ]:
        model = build()
        if name == "cnn":
            _randomise_batch_norm(model, 1)
        graph_def, fn = _freeze(model, shape)
        made[name] = (graph_def, fn, tuple(3 if d is None else d for d in shape))
    return made


@pytest.mark.parametrize("name", ["cnn", "mlp", "block"])
async def test_matches_tensorflow(name: str, frozen: dict[str, Any], tmp_path: Path) -> None:
    graph_def, fn, shape = frozen[name]
    path = tmp_path / f"{name}.pb"
    path.write_bytes(graph_def.SerializeToString())
    graph = aioge.load_tf(path)
    assert [v.name for v in graph.inputs] == ["x"]
    assert isinstance(graph.inputs[0].shape[0], str)  # the unknown batch stays symbolic
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    ref = fn(tf.constant(x))[0].numpy()
    async with aioge.Session() as session:
        out = await session.run(graph, {"x": x})
    (got,) = out.values()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def _nhwc_block() -> Any:
    keras.utils.set_random_seed(0)
    L = keras.layers
    x = inp = keras.Input((16, 16, 3))
    x = L.ZeroPadding2D(1)(x)
    x = L.Activation("swish")(L.BatchNormalization()(L.Conv2D(8, 3, strides=2)(x)))  # x * sigmoid(1 * x)
    x = L.ZeroPadding2D(((0, 1), (0, 1)))(x)
    x = L.ReLU(6.0)(L.BatchNormalization()(L.DepthwiseConv2D(3, strides=2, use_bias=False)(x)))
    x = L.MaxPooling2D(3, strides=1)(L.ZeroPadding2D(1)(x))  # >= 0 after the Relu6: the pad joins the pool
    s = L.Reshape((1, 1, 8))(L.GlobalAveragePooling2D()(x))
    s = L.Conv2D(8, 1, activation="sigmoid")(s)
    x = L.Add()([x, L.Multiply()([x, s])])
    return _randomise_batch_norm(keras.Model(inp, L.Dense(4)(L.GlobalAveragePooling2D()(x))), 3)


async def test_nhwc_graph_runs_nchw_between_transposes() -> None:
    # Keras convs are NHWC, aioge's NCHW: only the input is transposed; BN and biases fold into
    # the convs, the ZeroPadding2D pads into the conv or max pool after them, the SE scales stay NCHW;
    # Keras swish's Mul by beta=1 goes, so the SiLU fuses into its conv.
    model = _nhwc_block()
    graph = aioge.load_tf(model)
    x = np.random.default_rng(2).standard_normal((2, 16, 16, 3)).astype(np.float32)
    async with aioge.Session() as session:
        await session.add_graph(1, graph)
        (got,) = (await session.run_graph(1, {graph.inputs[0].name: x})).values()
        ops_run = [n.op_type for n in session.compiled(1).nodes]
    np.testing.assert_allclose(got, model(x, training=False).numpy(), rtol=1e-4, atol=1e-5)
    assert ops_run.count("Transpose") == 1
    assert sum(op in ("Conv", "FusedConv") for op in ops_run) == 3
    assert not {"Pad", "BatchNormalization", "Sub", "Sigmoid", "Swish"} & set(ops_run), ops_run
    assert ops_run[:3] == ["Transpose", "FusedConv", "FusedConv"]  # swish and Relu6 fused into their convs


def test_named_outputs_and_fixed_shapes(frozen: dict[str, Any]) -> None:
    graph_def, _, _ = frozen["mlp"]
    matmuls = [n.name for n in graph_def.node if n.op == "MatMul"]
    graph = aioge.load_tf(graph_def.SerializeToString(), inputs=["x"], outputs=[matmuls[0]], shapes={"x": [5, None]})
    assert graph.inputs[0].shape == (5, 16)
    assert [v.name for v in graph.outputs] == [matmuls[0]]


def test_bad_inputs_name_the_thing_at_fault(frozen: dict[str, Any], tmp_path: Path) -> None:
    graph_def, _, _ = frozen["mlp"]
    with pytest.raises(GraphError, match="no node 'nope' for output"):
        aioge.load_tf(graph_def, outputs=["nope"])
    with pytest.raises(GraphError, match="no node 'y' for input"):
        aioge.load_tf(graph_def, inputs=["y"])
    junk = tmp_path / "junk.pb"
    junk.write_bytes(b"this is not a protobuf \xff\xfe")
    with pytest.raises(GraphError, match="junk.pb: not a TensorFlow GraphDef"):
        aioge.load_tf(junk)


def test_unsupported_op_is_listed_with_its_node() -> None:
    fn = tf.function(lambda x: tf.math.cumprod(x, axis=1) + 1.0).get_concrete_function(
        tf.TensorSpec((2, 3), tf.float32, name="x")
    )
    with pytest.raises(UnsupportedOpError, match=r"tf::Cumprod.*at nodes Cumprod"):
        aioge.load_tf(fn.graph.as_graph_def())


def test_cli_compiles_a_pb(frozen: dict[str, Any], tmp_path: Path) -> None:
    graph_def, _, _ = frozen["mlp"]
    pb = tmp_path / "mlp.pb"
    pb.write_bytes(graph_def.SerializeToString())
    om = tmp_path / "mlp.om"
    done = subprocess.run(
        [sys.executable, "-m", "aioge", "compile", str(pb), "-o", str(om), "--input-shape", "x:4,16"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert om.is_file() and om.stat().st_size > 0
    bad = tmp_path / "bad.pb"
    bad.write_bytes(b"\x00garbage")
    done = subprocess.run(
        [sys.executable, "-m", "aioge", "compile", str(bad), "-o", str(tmp_path / "bad.om")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0 and "not a TensorFlow GraphDef" in done.stderr and "Traceback" not in done.stderr


def test_aioge_torch_after_tensorflow_is_an_import_error_not_a_crash() -> None:
    pytest.importorskip("torch")
    code = (
        "import importlib.util, tensorflow\n"
        "try:\n    import aioge.torch\nexcept ImportError as exc:\n    print('ImportError', exc)\n"
        "else:\n    print('imported', importlib.util.find_spec('triton') is None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(("ImportError aioge.torch must be imported before tensorflow", "imported True"))


async def _run(graph: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    # heuristic kernel choice: the results are the same, the compile skips timing candidates
    async with aioge.Session(options={"aioge.tune_mode": "heuristic"}) as session:
        return list((await session.run(graph, feeds)).values())


# -- security: a GraphDef is never run by TensorFlow; constants are bounded -------------------


def test_crafted_graph_runs_nothing_while_loading(tmp_path: Path) -> None:
    """A Transpose whose perm is AddV2 of two Consts, with a WriteFile control dependency:
    the perm is computed by aioge's kernels, the WriteFile is dropped (with a warning), no file."""
    target = tmp_path / "pwned.txt"
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (2, 3, 4), name="x")
        perm = tf.raw_ops.AddV2(x=tf.constant([1, 0, 0], name="a"), y=tf.constant([1, 0, 1], name="b"), name="perm")
        evil = tf.raw_ops.WriteFile(filename=str(target), contents="pwned", name="evil")
        with tf.control_dependencies([evil]):
            tf.raw_ops.Transpose(x=x, perm=perm, name="y")
    pb = tmp_path / "crafted.pb"
    pb.write_bytes(g.as_graph_def().SerializeToString())
    with pytest.warns(UserWarning, match=r"control inputs, not run: evil \(WriteFile\)"):
        graph = aioge.load_tf(pb, outputs=["y"])
    assert not target.exists()
    x_val = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (got,) = anyio_run(_run, graph, {"x": x_val})
    np.testing.assert_array_equal(got, x_val.transpose(2, 0, 1))
    assert not target.exists()


async def _run_batches(graph: Any, x: np.ndarray, batches: tuple[int, ...] = (1, 4)) -> list[np.ndarray]:
    """The graph's first output at each batch size (the first rows of ``x``), in one session."""
    async with aioge.Session(options={"aioge.tune_mode": "heuristic"}) as session:
        return [list((await session.run(graph, {graph.inputs[0].name: x[:b]})).values())[0] for b in batches]


async def _run_thrice(graph: Any, x: np.ndarray) -> tuple[np.ndarray, Any]:
    """The graph's first output on its third run in a session of default options, and its
    executable (whose ``native_runs`` tell whether the runs were native programs)."""
    async with aioge.Session() as s:
        await s.add_graph(1, graph)
        for _ in range(3):
            got = list((await s.run_graph(1, {graph.inputs[0].name: x})).values())[0]
        return got, s.executable(1)


def anyio_run(fn: Any, *args: Any) -> Any:
    import anyio

    return anyio.run(fn, *args)


def _const_graph(dims: list[int], *, stored: int = 1) -> bytes:
    from tensorflow.core.framework import node_def_pb2, tensor_pb2, types_pb2

    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[1.0] * stored)
    for d in dims:
        tensor.tensor_shape.dim.add(size=d)
    const = node_def_pb2.NodeDef(name="huge", op="Const")
    const.attr["dtype"].type = types_pb2.DT_FLOAT
    const.attr["value"].tensor.CopyFrom(tensor)
    neg = node_def_pb2.NodeDef(name="out", op="Neg", input=["huge"])
    neg.attr["T"].type = types_pb2.DT_FLOAT
    return graph_pb2.GraphDef(node=[const, neg]).SerializeToString()


@pytest.mark.parametrize(
    ("dims", "match"),
    [
        ([8192, 8192], r"Const 'huge' expands its stored values to 268435456 bytes"),  # a 256 MiB splat
        ([10**6, 10**6], r"Const 'huge' declares 4000000000000 bytes"),
        ([1 << 40, 1 << 40, 1 << 40], r"Const 'huge' declares"),  # past int64: no overflow
    ],
)
def test_const_size_is_checked_before_it_is_materialised(dims: list[int], match: str) -> None:
    data = _const_graph(dims)
    assert len(data) < 200
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(GraphError, match=match) as err:
        aioge.load_tf(data)
    assert err.value.node == "huge"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # KiB: nothing materialised
    graph = aioge.load_tf(_const_graph([2, 3]))  # small splats still load
    (got,) = anyio_run(_run, graph, {})
    np.testing.assert_array_equal(got, -np.ones((2, 3), np.float32))
    with pytest.raises(GraphError, match=r"declares 24 bytes .* 16-byte limit"):
        aioge.load_tf(_const_graph([2, 3], stored=6), max_const_bytes=16)


# -- the formats TF users hold: SavedModel, .keras, frozen .pb -------------------------------


def _randomise_norms(model: Any, seed: int = 1) -> Any:
    """Batch-norm statistics away from 0/1 so that FusedBatchNorm's folding is checked."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.set_weights(
                [
                    (
                        0.5 + rng.random(w.shape)
                        if "variance" in w.path or "gamma" in w.path
                        else 0.2 * rng.standard_normal(w.shape)
                    )
                    for w in layer.weights
                ]
            )
    return model


def _check_scaled(got: np.ndarray, ref: np.ndarray) -> None:
    """rtol 1e-4 / atol 1e-5 on logits scaled to a largest magnitude of 1 (random weights make them tiny or large)."""
    scale = float(np.abs(ref).max()) or 1.0
    np.testing.assert_allclose(got / scale, ref / scale, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """MobileNetV3Small (Pad, StridedSlice, hard-swish, squeeze-excite) saved once in every format."""
    keras.utils.set_random_seed(0)
    model = _randomise_norms(
        keras.applications.MobileNetV3Small(weights=None, input_shape=(32, 32, 3), classifier_activation=None)
    )
    root = tmp_path_factory.mktemp("tf_formats")
    with warnings.catch_warnings():  # keras' own numpy-2 DeprecationWarning while saving
        warnings.simplefilter("ignore", DeprecationWarning)
        model.export(str(root / "saved_model"), verbose=False)
        model.save(root / "model.keras")
    graph_def, _ = _freeze(model, (None, 32, 32, 3))
    (root / "model.pb").write_bytes(graph_def.SerializeToString())
    x = np.random.default_rng(3).standard_normal((4, 32, 32, 3)).astype(np.float32)
    return {"model": model, "root": root, "x": x, "ref": model(x, training=False).numpy(), "input": model.inputs[0].name}


@pytest.mark.parametrize("fmt", ["saved_model", "model.keras", "model.pb"])
def test_formats_load_and_match_tensorflow(fmt: str, saved: dict[str, Any]) -> None:
    graph = aioge.load_tf(saved["root"] / fmt)
    names = {
        "saved_model": ([saved["input"]], ["output_0"]),
        "model.keras": ([saved["model"].layers[0].name], None),
        "model.pb": (["x"], None),
    }
    ins, outs = names[fmt]
    assert [v.name for v in graph.inputs] == ins
    if outs is not None:
        assert [v.name for v in graph.outputs] == outs
    assert isinstance(graph.inputs[0].shape[0], str)  # the batch stays symbolic
    for batch, got in zip((1, 4), anyio_run(_run_batches, graph, saved["x"])):
        _check_scaled(got, saved["ref"][:batch])


def test_saved_model_signature_errors_list_what_exists(saved: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(GraphError, match=r"no signature 'nope'; its signatures are \['serve', 'serving_default'\]"):
        aioge.load_tf(saved["root"] / "saved_model", signature="nope")
    path = saved["root"] / "saved_model" / "saved_model.pb"  # the file inside names its directory
    graph = aioge.load_tf(path, signature="serve", shapes={saved["input"]: [2, 32, 32, 3]})
    assert graph.inputs[0].shape == (2, 32, 32, 3)
    with pytest.raises(GraphError, match="without saved_model.pb is not a SavedModel"):
        aioge.load_tf(tmp_path)
    with pytest.raises(GraphError, match="cannot read: no such file"):
        aioge.load_tf(tmp_path / "missing.keras")
    (tmp_path / "bad.keras").write_bytes(b"not a zip")
    with pytest.raises(GraphError, match="bad.keras: cannot load the Keras model"):
        aioge.load_tf(tmp_path / "bad.keras")
    (tmp_path / "saved_model.pb").write_bytes(b"\x00junk")
    with pytest.raises(GraphError, match="cannot load the SavedModel"):
        aioge.load_tf(tmp_path)


def test_unfrozen_graph_def_says_how_to_freeze() -> None:
    dense = keras.layers.Dense(3)
    fn = tf.function(lambda x: dense(x)).get_concrete_function(tf.TensorSpec((None, 4), tf.float32, name="x"))
    with pytest.raises(GraphError, match=r"reads variables \(ReadVariableOp.*convert_variables_to_constants_v2.*SavedModel"):
        aioge.load_tf(fn.graph.as_graph_def())


def test_tf1_while_loop_is_an_unsupported_op_not_a_cycle() -> None:
    from tensorflow.core.framework import node_def_pb2, types_pb2

    def node(name: str, op: str, *inputs: str) -> Any:
        n = node_def_pb2.NodeDef(name=name, op=op, input=list(inputs))
        n.attr["T"].type = types_pb2.DT_FLOAT
        return n

    x = node("x", "Placeholder")
    x.attr["dtype"].type = types_pb2.DT_FLOAT
    nodes = [
        x,
        node("enter", "Enter", "x"),
        node("merge", "Merge", "enter", "next"),
        node("cond", "LoopCond", "merge"),
        node("switch", "Switch", "merge", "cond"),
        node("body", "Square", "switch:1"),
        node("next", "NextIteration", "body"),
        node("exit", "Exit", "switch"),
    ]
    # TF1 loops are unrolled when their trip count is known at load time; this one's is not
    with pytest.raises(UnsupportedOpError, match=r"tf::LoopCond \(a TF1 loop whose trip count is known only at run time\)"):
        aioge.load_tf(graph_pb2.GraphDef(node=nodes), outputs=["exit"])


def test_cli_compiles_a_saved_model(saved: dict[str, Any], tmp_path: Path) -> None:
    om = tmp_path / "m.om"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "aioge",
            "compile",
            str(saved["root"] / "saved_model"),
            "-o",
            str(om),
            "--input-shape",
            f"{saved['input']}:1,32,32,3",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert om.is_file() and om.stat().st_size > 0


# -- every tf.keras.applications family, random weights, against TensorFlow -------------------

_APPS = [
    ("MobileNet", 32),
    ("MobileNetV2", 32),
    ("MobileNetV3Small", 32),
    ("MobileNetV3Large", 32),
    ("ResNet50", 32),
    ("ResNet50V2", 32),
    ("InceptionV3", 75),  # the smallest input it accepts
    ("Xception", 71),  # the smallest input it accepts
    ("DenseNet121", 32),
    ("EfficientNetB0", 32),
    ("EfficientNetV2B0", 32),
    ("NASNetMobile", 32),
    ("ConvNeXtTiny", 32),
    ("VGG16", 32),
]


@pytest.mark.slow
@pytest.mark.timeout(600)  # freezing the bigger ones takes TensorFlow 5-15 s on a loaded 2-core machine
@pytest.mark.parametrize(("name", "size"), _APPS, ids=[a for a, _ in _APPS])
def test_keras_application_matches_tensorflow(name: str, size: int) -> None:
    keras.utils.set_random_seed(0)
    model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3), classifier_activation=None)
    graph = aioge.load_tf(_randomise_norms(model))  # frozen by TensorFlow's own convert_variables_to_constants_v2
    assert isinstance(graph.inputs[0].shape[0], str)
    x = np.random.default_rng(7).standard_normal((4, size, size, 3)).astype(np.float32)
    ref = model(x, training=False).numpy()
    for batch, got in zip((1, 4), anyio_run(_run_batches, graph, x)):
        _check_scaled(got, ref[:batch])


# -- Keras text models: TF2 While loops unrolled from their body functions ---------------------


def _text_model(kind: str) -> Any:
    keras.utils.set_random_seed(0)
    inp = keras.Input((12,), dtype="int32")
    h = keras.layers.Embedding(50, 16, mask_zero=kind == "lstm_masked")(inp)  # the mask: Select in the loop body
    if kind in ("lstm", "lstm_masked"):
        h = keras.layers.LSTM(8)(h)
    elif kind == "gru":
        h = keras.layers.GRU(8, return_sequences=True)(h)
        h = keras.layers.GlobalAveragePooling1D()(h)
    elif kind == "stacked":  # frozen with TF1 loops: the GRU's loop reads the SimpleRNN loop's result
        h = keras.layers.GRU(4)(keras.layers.SimpleRNN(6, return_sequences=True, go_backwards=True)(h))
    else:
        h = keras.layers.Bidirectional(keras.layers.LSTM(8, return_sequences=True))(h)
        h = keras.layers.GlobalMaxPooling1D()(h)
    return keras.Model(inp, keras.layers.Dense(3)(h))


def test_keras_lstm_at_batch_1_runs_as_one_native_program(monkeypatch: pytest.MonkeyPatch) -> None:
    """The unrolled Keras LSTM runs as one C call (``aioge bench``'s lstm row): its embedding's
    int32 index fix-up (Less, int32 Add, Where), Gather by int32 indices, and each step's gates
    (FusedElementwise of Sigmoid, Tanh, Mul, Add) have C forms; it matches TensorFlow."""
    from aioge.kernels import native

    if not native.available():
        pytest.skip("the compiled tier is not built")
    monkeypatch.setattr("aioge.compiler.graph.NATIVE_SLACK_MS", float("inf"))  # tuning noise must not pick numpy
    model = _text_model("lstm")
    graph = aioge.load_tf(model)
    x = np.random.default_rng(5).integers(1, 50, (1, 12)).astype(np.int32)
    ref = model(x, training=False).numpy()

    got, exe = anyio_run(_run_thrice, graph, x)
    kinds = {p.op_type for p in exe.model.nodes}
    assert {"FusedElementwise", "Gather", "Less"} <= kinds and exe.native_runs >= 3, [
        f"{p.op_type}:{p.kernel.impl}" for p in exe.model.nodes
    ]
    _check_scaled(got, ref)


@pytest.mark.parametrize("kind", ["lstm", "lstm_masked", "gru", "bidirectional"])
def test_keras_recurrent_text_models_match_tensorflow(kind: str) -> None:
    model = _text_model(kind)
    graph = aioge.load_tf(model)
    x = np.random.default_rng(2).integers(1, 50, (4, 12)).astype(np.int32)
    x[1:, 8:] = 0  # padded sequences
    ref = model(x, training=False).numpy()
    for batch, got in zip((1, 4), anyio_run(_run_batches, graph, x)):
        _check_scaled(got, ref[:batch])


def _layer_model(kind: str) -> tuple[Any, np.ndarray]:
    keras.utils.set_random_seed(0)
    L = keras.layers
    rng = np.random.default_rng(4)
    if kind == "conv3d":  # Conv3D, MaxPool3D, AvgPool3D, Conv3DBackpropInputV2
        inp = keras.Input((4, 6, 6, 2))
        h = L.MaxPooling3D(2)(L.Conv3D(4, 3, padding="same", activation="relu")(inp))
        h = L.Conv3DTranspose(3, 3, strides=2, padding="same")(L.AveragePooling3D(2, strides=1, padding="same")(h))
        return keras.Model(inp, L.GlobalMaxPooling3D()(h)), rng.standard_normal((4, 4, 6, 6, 2)).astype(np.float32)
    if kind == "category_encoding":  # Bucketize, DenseBincount (its size a Minimum of a Maximum)
        inp = keras.Input((6,))
        h = L.Discretization(bin_boundaries=[-1.0, 0.0, 0.5, 1.0])(inp)
        h = L.Concatenate()([L.CategoryEncoding(8, output_mode="multi_hot")(h), L.CategoryEncoding(8, output_mode="count")(h)])
        return keras.Model(inp, L.Dense(3)(h)), rng.standard_normal((4, 6)).astype(np.float32)
    if kind == "causal_attention":  # MatrixBandPart
        inp = keras.Input((12,), dtype="int32")
        h = L.Embedding(50, 16)(inp)
        h = L.MultiHeadAttention(num_heads=2, key_dim=4)(h, h, use_causal_mask=True)
        h = L.Concatenate()([h, L.Attention()([h, h], use_causal_mask=True)])
        return keras.Model(inp, L.Dense(3)(L.Flatten()(h))), rng.integers(1, 50, (4, 12)).astype(np.int32)
    if kind in ("dilated_conv1d", "attention"):
        inp = keras.Input((12,), dtype="int32")
        h = L.Embedding(50, 16, mask_zero=kind == "attention")(inp)
        if kind == "dilated_conv1d":  # a dilated Conv1D: SpaceToBatchND, Conv2D, BatchToSpaceND
            h = L.Conv1D(8, 3, padding="causal", dilation_rate=2)(L.Conv1D(8, 3, activation="relu")(h))
        else:  # the masks' Any
            h = L.Concatenate()([L.Attention(use_scale=True)([h, h]), L.AdditiveAttention()([h, h])])
        x = rng.integers(1, 50, (4, 12)).astype(np.int32)
        x[1:, 8:] = 0
        return keras.Model(inp, L.Dense(3)(L.GlobalAveragePooling1D()(h))), x
    inp = keras.Input((16, 16, 3))
    if kind == "conv_transpose_upsampling":
        h = L.Conv2DTranspose(4, 3, strides=2, padding="valid")(inp)
        h = L.Conv2DTranspose(3, 3, strides=2, padding="same", activation="relu")(h)
        h = L.Concatenate()(
            [L.UpSampling2D(2)(inp), L.UpSampling2D(2, interpolation="bilinear")(inp), L.Cropping2D(((16, 18), (15, 19)))(h)]
        )
    else:  # preprocessing layers: Rescaling, Resizing (both ways), Normalization, CenterCrop
        h = L.Resizing(12, 20)(L.Rescaling(1 / 127.5, offset=-1)(inp))
        h = L.Normalization(mean=[0.5, -0.2, 1.0], variance=[2.0, 0.5, 1.5])(h)
        h = L.CenterCrop(8, 8)(L.Resizing(24, 24, interpolation="nearest")(h))
    x = (rng.random((4, 16, 16, 3)) * 255).astype(np.float32)
    return keras.Model(inp, L.Conv2D(4, 3)(h)), x


@pytest.mark.parametrize(
    "kind",
    [
        "dilated_conv1d",
        "attention",
        "conv_transpose_upsampling",
        "preprocessing",
        "conv3d",
        "category_encoding",
        "causal_attention",
    ],
)
def test_keras_layer_models_match_tensorflow(kind: str) -> None:
    model, x = _layer_model(kind)
    graph = aioge.load_tf(model)
    ref = model(x, training=False).numpy()
    for batch, got in zip((1, 4), anyio_run(_run_batches, graph, x)):
        _check_scaled(got, ref[:batch])


def test_while_with_a_run_time_trip_count_is_unsupported() -> None:
    def halve(x: Any) -> Any:
        return tf.while_loop(lambda v: tf.reduce_sum(v) > 1.0, lambda v: [v * 0.5], [x])[0]

    fn = tf.function(halve).get_concrete_function(tf.TensorSpec((3,), tf.float32, name="x"))
    with pytest.raises(UnsupportedOpError, match=r"tf::(Stateless)?While \(a loop whose trip count is known only at run time\)"):
        aioge.load_tf(fn)


# -- single ops by TensorFlow's semantics (graphs traced here, compared with TF) ---------------

_X = np.arange(2 * 5 * 6 * 3, dtype=np.float32).reshape(2, 5, 6, 3) / 7.0 - 4.0
_OPS: dict[str, Any] = {
    "strided_slice_basic": lambda x: x[:, 1:4, ::2],
    "strided_slice_negative": lambda x: x[::-1, -2:, ::-3, 1],
    "strided_slice_ellipsis": lambda x: x[..., 1:],
    "strided_slice_ellipsis_new_axis": lambda x: x[1, ..., tf.newaxis, 0],
    "strided_slice_new_axis_shrink": lambda x: x[tf.newaxis, :, 2, :, ::-1],
    "strided_slice_dynamic_begin": lambda x: x[:, tf.shape(x)[1] - 3 :],
    "pad": lambda x: tf.pad(x, [[0, 0], [1, 2], [2, 0], [0, 0]]),
    "pad_v2": lambda x: tf.pad(x, [[0, 0], [1, 1], [0, 3], [0, 0]], constant_values=-1.5),
    "mirror_pad_reflect": lambda x: tf.pad(x, [[0, 0], [2, 1], [1, 2], [0, 0]], mode="REFLECT"),
    "mirror_pad_symmetric": lambda x: tf.pad(x, [[0, 0], [2, 1], [1, 3], [0, 0]], mode="SYMMETRIC"),
    "split_v": lambda x: tf.split(x, [1, -1, 2], axis=2)[1] * 2.0,
    "unstack_reverse": lambda x: tf.reverse(tf.unstack(x, axis=1)[3], axis=[0, 2]),
    "select_v2": lambda x: tf.where(x < 0.5, x, tf.zeros_like(x) + 3.0),
    "tile_fill": lambda x: tf.tile(x[:, :1], [1, 2, 1, 1]) + tf.fill([2, 2, 6, 3], 0.25),
    "floor_div_mod": lambda x: tf.math.floordiv(x, 1.5) + tf.math.floormod(x, -1.25),
    "grouped_conv": lambda x: tf.nn.conv2d(tf.concat([x, x], -1), tf.reshape(tf.range(54.0) / 50.0, (3, 3, 2, 3)), 1, "SAME"),
    "slice_range": lambda x: tf.slice(x, [0, 1, 2, 0], [-1, 3, 2, 2]) * tf.range(2.0),
    # Keras' Dense on 4-D: Tensordot (Reshape to [-1, K], MatMul, Reshape back), then a grouped conv (ConvNeXt)
    "resize_bilinear_half_pixel": lambda x: tf.image.resize(x, (7, 4)),
    "resize_bilinear_align_corners": lambda x: tf.compat.v1.image.resize_bilinear(x, (9, 11), align_corners=True),
    "resize_bilinear_legacy": lambda x: tf.compat.v1.image.resize_bilinear(x, (3, 13)),
    "resize_nearest_half_pixel": lambda x: tf.image.resize(x, (8, 5), method="nearest"),
    "resize_nearest_align_corners": lambda x: tf.compat.v1.image.resize_nearest_neighbor(x, (9, 4), align_corners=True),
    "resize_nearest_legacy": lambda x: tf.compat.v1.image.resize_nearest_neighbor(x, (7, 13)),
    "resize_bicubic_half_pixel": lambda x: tf.image.resize(x, (10, 9), method="bicubic"),
    "resize_area": lambda x: tf.image.resize(x, (3, 4), method="area") + tf.image.resize(x, (7, 9), method="area")[:, :3, :4],
    "resize_area_align_corners": lambda x: tf.compat.v1.image.resize_area(x, (4, 4), align_corners=True),
    "resize_lanczos_gaussian": lambda x: (
        tf.image.resize(x, (3, 9), method="lanczos3")
        + tf.image.resize(x, (3, 9), method="gaussian")
        + tf.image.resize(x, (3, 9), method="lanczos5", antialias=True)
    ),
    "resize_mitchell_antialiased": lambda x: (
        tf.image.resize(x, (8, 4), method="mitchellcubic")
        + tf.image.resize(x, (8, 4), antialias=True)
        + tf.image.resize(x, (8, 4), method="bicubic", antialias=True)
    ),
    "space_to_batch": lambda x: tf.space_to_batch_nd(x, [2, 3], [[1, 0], [0, 0]]),
    "batch_to_space": lambda x: tf.batch_to_space(x, [2, 1], [[0, 1], [0, 0]]),
    "conv2d_transpose_same": lambda x: tf.nn.conv2d_transpose(
        x, tf.reshape(tf.range(54.0) / 50.0, (3, 3, 2, 3)), tf.stack([tf.shape(x)[0], 10, 12, 2]), 2, "SAME"
    ),
    "conv2d_transpose_valid_odd": lambda x: tf.nn.conv2d_transpose(
        x, tf.reshape(tf.range(36.0) / 30.0, (2, 3, 2, 3)), tf.stack([tf.shape(x)[0], 11, 14, 2]), [2, 2], "VALID"
    ),
    "any_all": lambda x: (
        tf.cast(tf.reduce_any(x > 3.0, axis=[1, 2]), tf.float32) + tf.cast(tf.reduce_all(x > -4.5, axis=1), tf.float32)[:, 0]
    ),
    # Keras' ZeroPadding2D before a pool: into the pool's pads (after a Relu for a max; always for an average)
    "pad_max_pool_relu": lambda x: tf.nn.max_pool2d(
        tf.pad(tf.nn.relu(tf.nn.conv2d(x, tf.ones((1, 1, 3, 2)), 1, "SAME")), [[0, 0], [1, 1], [1, 1], [0, 0]]), 3, 2, "VALID"
    ),
    "pad_max_pool_signed": lambda x: tf.nn.max_pool2d(tf.pad(x, [[0, 0], [1, 1], [2, 1], [0, 0]]), 3, 2, "VALID"),
    "pad_avg_pool": lambda x: tf.nn.avg_pool2d(
        tf.pad(tf.nn.conv2d(x, tf.ones((1, 1, 3, 2)), 1, "SAME"), [[0, 0], [1, 0], [1, 2], [0, 0]]), 2, 1, "VALID"
    ),
    # activations and elementwise ops Keras layers and keras.ops emit
    "unary_math": lambda x: (
        tf.nn.softsign(x)
        + tf.math.log1p(tf.abs(x))
        + tf.math.expm1(x / 4)
        + tf.clip_by_value(x, -1.0, 2.0)
        + tf.tan(x / 8)
        + tf.atan(x)
        + tf.asin(x / 5)
        + tf.acos(x / 5)
        + tf.sinh(x / 3)
        + tf.cosh(x / 3)
        + tf.asinh(x)
        + tf.acosh(tf.abs(x) + 1)
        + tf.atanh(x / 5)
    ),
    "is_finite_add_n_broadcast": lambda x: (
        tf.cast(tf.math.is_finite(x / (x - x[:, :1])), tf.float32)
        + tf.cast(tf.math.is_nan(x - x), tf.float32)
        + tf.cast(tf.math.is_inf(1 / x), tf.float32)
        + tf.add_n([x, x * 2.0, -x])
        + tf.broadcast_to(x[:1, :1, :1], tf.shape(x))
    ),
    "cumsum": lambda x: tf.cumsum(x, axis=2) + tf.cumsum(x, axis=1, exclusive=True, reverse=True),
    "depth_space": lambda x: tf.nn.depth_to_space(tf.nn.space_to_depth(tf.concat([x, x], 1)[:, :, :, :2], 2) * 1.5, 2),
    "one_hot_xor": lambda x: (
        tf.transpose(tf.one_hot(tf.cast(tf.abs(x[..., 0]), tf.int32), 4, 2.0, -1.0, axis=1), [0, 2, 3, 1])[..., :3]
        + tf.cast(tf.math.logical_xor(x[..., :1] > 0, x[..., 1:2] > 1), tf.float32)
    ),
    # causal masks (MultiHeadAttention's use_causal_mask), Discretization, CategoryEncoding, a load-time If
    "band_part": lambda x: tf.linalg.band_part(x, 1, -1) + tf.linalg.band_part(x, -1, 0) * 2.0 + tf.linalg.band_part(x, 0, 2),
    "bucketize_bincount": lambda x: (
        tf.cast(tf.raw_ops.Bucketize(input=x, boundaries=[-1.0, 0.0, 2.5]), tf.float32)
        + tf.raw_ops.DenseBincount(
            input=tf.cast(tf.abs(x[:, :, 0, 0]), tf.int32), size=5, weights=tf.constant([], tf.float32), binary_output=True
        )[:, None, None, :3]
        + tf.math.bincount(tf.cast(tf.abs(x[:, :, 1, 0]), tf.int32), minlength=4, maxlength=4, axis=-1, dtype=tf.float32)[
            :, None, None, 1:
        ]
        + tf.cast(tf.size(x), tf.float32)
    ),
    "if_known_at_load_time": lambda x: tf.cond(tf.shape(x)[1] > 3, lambda: x * 2.0, lambda: x - 1.0),
    "tensordot_grouped_conv": lambda x: tf.nn.conv2d(
        tf.tensordot(x, tf.reshape(tf.range(18.0) / 9.0, (3, 6)), 1), tf.reshape(tf.range(54.0) / 50.0, (3, 3, 2, 3)), 1, "SAME"
    ),
}


@pytest.mark.parametrize("op", list(_OPS))
def test_op_matches_tensorflow(op: str) -> None:
    fn = tf.function(_OPS[op]).get_concrete_function(tf.TensorSpec((None, 5, 6, 3), tf.float32, name="x"))
    graph = aioge.load_tf(fn.graph.as_graph_def())  # no _output_shapes: shapes come from aioge's inference alone
    (got,) = anyio_run(_run, graph, {"x": _X})
    # TF's bicubic resize reads its cubic weights from a 1024-entry table (the offset rounded to
    # 1/1024); aioge computes them exactly: they differ by up to 1.4e-4 on values near 4.
    atol = 3e-4 if "bicubic" in op else 1e-5
    np.testing.assert_allclose(got, fn(tf.constant(_X)).numpy(), rtol=1e-5, atol=atol)


def test_crafted_function_body_runs_nothing_while_loading(tmp_path: Path) -> None:
    """The same WriteFile inside a library function that a (Stateful)PartitionedCall calls."""
    target = tmp_path / "pwned.txt"

    @tf.function
    def inner(x: Any) -> Any:
        evil = tf.raw_ops.WriteFile(filename=str(target), contents="pwned", name="evil")
        with tf.control_dependencies([evil]):
            return tf.identity(tf.transpose(x, tf.constant([1, 0]) + tf.constant([0, 0])) * 2.0)

    fn = tf.function(lambda x: inner(x)).get_concrete_function(tf.TensorSpec((2, 3), tf.float32, name="x"))
    graph_def = fn.graph.as_graph_def()
    assert any(n.op.endswith("PartitionedCall") for n in graph_def.node)
    with pytest.warns(UserWarning, match=r"of function .* control inputs, not run: evil \(WriteFile\)"):
        graph = aioge.load_tf(graph_def, outputs=["Identity"])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (got,) = anyio_run(_run, graph, {"x": x})
    np.testing.assert_array_equal(got, x.T * 2.0)
    assert not target.exists()


@pytest.mark.parametrize("kind", ["lstm_masked", "gru", "stacked"])
def test_keras_rnn_frozen_with_lowered_tf1_loops_is_unrolled(kind: str) -> None:
    """convert_variables_to_constants_v2 lowers While to TF1 Enter/Merge/Switch/NextIteration/Exit
    by default: the frame is unrolled as the functional While is."""
    model = _text_model(kind)
    graph_def, _ = _freeze(model, (None, 12), tf.int32)
    assert {"Enter", "NextIteration", "LoopCond"} <= {n.op for n in graph_def.node}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the loop's own bookkeeping is dropped without a warning
        graph = aioge.load_tf(graph_def)
    assert [v.name for v in graph.outputs] == ["Identity"]  # not the Identity(Const) variable reads freezing left
    x = np.random.default_rng(2).integers(1, 50, (4, 12)).astype(np.int32)
    x[1:, 8:] = 0
    ref = model(x, training=False).numpy()
    for batch, got in zip((1, 4), anyio_run(_run_batches, graph, x)):
        _check_scaled(got, ref[:batch])


def test_recurrent_attention_encoder_from_saved_model_and_keras_file(tmp_path: Path) -> None:
    """A Bidirectional GRU under a MultiHeadAttention block, saved both ways: While bodies in a SavedModel's library."""
    keras.utils.set_random_seed(0)
    inp = keras.Input((12,), dtype="int32")
    h = keras.layers.Embedding(50, 16)(inp)
    h = keras.layers.Bidirectional(keras.layers.GRU(8, return_sequences=True))(h)
    h = keras.layers.LayerNormalization()(h + keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)(h, h))
    model = keras.Model(inp, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling1D()(h)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        model.export(str(tmp_path / "saved"), verbose=False)
        model.save(tmp_path / "m.keras")
    x = np.random.default_rng(2).integers(1, 50, (4, 12)).astype(np.int32)
    ref = model(x, training=False).numpy()
    for path in (tmp_path / "saved", tmp_path / "m.keras"):
        graph = aioge.load_tf(path)
        for batch, got in zip((1, 4), anyio_run(_run_batches, graph, x)):
            _check_scaled(got, ref[:batch])


# -- frozen .pb files with no recorded shapes: dilated convs, an unrolled LSTM's zero state ------

_DILATED: dict[str, tuple[tuple[int, ...], Any]] = {
    "conv1d_causal_same": (
        (12, 6),
        lambda L, x: L.Conv1D(4, 3, padding="causal", dilation_rate=2)(L.Conv1D(5, 3, dilation_rate=3, padding="same")(x)),
    ),
    "depthwise_conv1d": ((12, 6), lambda L, x: L.DepthwiseConv1D(3, depth_multiplier=2, dilation_rate=2)(x)),
    "conv2d_depthwise_separable": (
        (16, 16, 3),
        lambda L, x: L.SeparableConv2D(4, 3, dilation_rate=2, padding="same")(
            L.DepthwiseConv2D(3, dilation_rate=(2, 3), padding="same")(L.Conv2D(4, 3, dilation_rate=2)(x))
        ),
    ),
    "conv3d": ((5, 7, 8, 2), lambda L, x: L.Conv3D(3, 3, dilation_rate=(1, 2, 3), padding="same")(x)),
}


@pytest.mark.parametrize("kind", list(_DILATED))
def test_dilated_conv_frozen_without_shapes_matches_tensorflow(kind: str) -> None:
    """TF builds a dilated conv as SpaceToBatchND -> conv -> BatchToSpaceND with run-time shapes:
    it loads as one dilated conv, whatever the rank, dilation and padding, with a symbolic batch."""
    shape, body = _DILATED[kind]
    keras.utils.set_random_seed(0)
    inp = keras.Input(shape)
    model = keras.Model(inp, body(keras.layers, inp))
    graph_def, _ = _freeze(model, (None, *shape))
    assert not any("_output_shapes" in n.attr for n in graph_def.node)
    graph = aioge.load_tf(graph_def)
    dilations = [tuple(n.attrs.get("dilations") or ()) for n in graph.nodes if n.op_type == "Conv"]
    assert any(max(d, default=1) > 1 for d in dilations)
    x = np.random.default_rng(5).standard_normal((4, *shape)).astype(np.float32)
    ref = model(x, training=False).numpy()
    for batch, got in zip((1, 4), anyio_run(_run_batches, graph, x)):
        _check_scaled(got, ref[:batch])


@pytest.mark.parametrize("kind", ["unrolled_under_lstm", "masked_state"])
def test_rnn_zero_states_keep_their_shapes_frozen_without_shapes(kind: str) -> None:
    """An unroll=True LSTM's zero state is Fill(Pack(batch, units)), a masked RNN's zero output
    ZerosLike: their shapes stay known at load time, so the RNN above finds its sequence length
    (TensorListFromTensor)."""
    keras.utils.set_random_seed(0)
    inp = keras.Input((6,), dtype="int32")
    h = keras.layers.Embedding(50, 8, mask_zero=kind == "masked_state")(inp)
    if kind == "unrolled_under_lstm":
        h = keras.layers.LSTM(4)(keras.layers.LSTM(6, return_sequences=True, unroll=True)(h))
    else:
        lstm = keras.layers.LSTM(6, return_sequences=True, return_state=True, go_backwards=True)
        seq, state_h, _ = lstm(h)
        h = keras.layers.Concatenate()([keras.layers.GRU(4)(seq), state_h])
    model = keras.Model(inp, keras.layers.Dense(3)(h))
    graph_def, _ = _freeze(model, (None, 6), tf.int32)
    graph = aioge.load_tf(graph_def)
    x = np.random.default_rng(2).integers(1, 50, (4, 6)).astype(np.int32)
    x[1:, 4:] = 0  # padded: the masked RNN keeps its state there
    ref = model(x, training=False).numpy()
    for batch, got in zip((1, 4), anyio_run(_run_batches, graph, x)):
        _check_scaled(got, ref[:batch])


def test_keras_nasnet_and_mobilenet_v3_blocks_run_as_one_native_program(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 41: NASNetMobile's cells (ZeroPadding2D then Cropping2D, a zero pad before a 3x3
    stride-2 MaxPool, AveragePool without the pads counted, BatchNormalization and ReLU after a
    Concat, GlobalAveragePooling2D) and MobileNetV3's (hard-swish, an SE block gated by
    hard_sigmoid) had steps without C forms: they run as one program now, matching TensorFlow."""
    from aioge.kernels import native

    if not native.available():
        pytest.skip("the compiled tier is not built")
    monkeypatch.setattr("aioge.compiler.graph.NATIVE_SLACK_MS", float("inf"))  # tuning noise must not pick numpy
    keras.utils.set_random_seed(3)
    L = keras.layers
    inp = keras.Input((17, 17, 8))
    a = L.AveragePooling2D(1, strides=2)(L.Cropping2D(((1, 0), (1, 0)))(L.ZeroPadding2D(((0, 1), (0, 1)))(L.ReLU()(inp))))
    b = L.MaxPooling2D(3, strides=2)(L.ZeroPadding2D(1)(L.Conv2D(8, 1)(inp)))
    c = L.AveragePooling2D(3, strides=2, padding="same")(L.SeparableConv2D(8, 3, padding="same")(inp))
    h = L.ReLU()(L.BatchNormalization()(L.Concatenate()([a, b, c])))
    h = L.Conv2D(16, 3, padding="same")(h)
    h = L.Multiply()([h, L.ReLU(6.0)(h + 3.0) / 6.0])  # hard-swish
    s = L.Conv2D(16, 1)(L.ReLU()(L.Conv2D(4, 1)(L.GlobalAveragePooling2D(keepdims=True)(h))))
    h = L.Multiply()([h, L.ReLU(6.0)(s + 3.0) * (1.0 / 6.0)])  # SE gated by hard_sigmoid
    model = keras.Model(inp, L.Dense(5)(L.GlobalAveragePooling2D()(h)))
    for layer in model.layers:  # BatchNormalization's statistics away from 0 and 1
        if isinstance(layer, L.BatchNormalization):
            layer.set_weights(
                [w + np.random.default_rng(1).uniform(0.2, 1.0, w.shape).astype(np.float32) for w in layer.get_weights()]
            )
    graph = aioge.load_tf(model)
    x = np.random.default_rng(4).standard_normal((1, 17, 17, 8)).astype(np.float32)
    ref = model(x, training=False).numpy()

    got, exe = anyio_run(_run_thrice, graph, x)
    kinds = {p.op_type for p in exe.model.nodes}
    assert exe.native_runs >= 3, [f"{p.op_type}:{p.kernel.impl}" for p in exe.model.nodes]
    assert "SqueezeExcite" in kinds and "Pad" in kinds and not {"Clip", "Div"} & kinds, kinds
    transposes = [p for p in exe.model.nodes if p.op_type == "Transpose"]
    assert len(transposes) <= 3, "the Concat of NCHW twins moved each part to NHWC and back"
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())


def test_keras_attention_block_lowers_einsum_and_fuses_layer_norm_and_gelu() -> None:
    # Keras' MultiHeadAttention einsums become MatMul between transposes, its LayerNormalization
    # (x * s + (-mean * s + beta)) one LayerNormalization, its exact gelu (0.5 x erfc(-x / sqrt 2))
    # one Gelu; Tensordot's identity transposes go: the outputs still match TensorFlow's
    from aioge.benchmarks.frontends import _keras_model

    model, x, _ = _keras_model("mha", 32)
    graph = aioge.load_tf(model)
    loaded = {n.op_type for n in graph.nodes}
    assert "Einsum" not in loaded and {"Erf", "Neg"} <= loaded
    perms = [list(n.attrs["perm"]) for n in graph.nodes if n.op_type == "Transpose"]
    assert len(perms) == 4 and [0, 1, 2] not in perms  # q, k and v's, the context's back; no Tensordot identity
    got, exe = anyio_run(_run_thrice, graph, x)
    ops = [n.op_type for n in exe.model.graph.nodes]
    assert ops.count("LayerNormalization") == 2 and not {"Einsum", "Neg", "Erf", "ReduceMean"} & set(ops)
    np.testing.assert_allclose(got, model(x, training=False).numpy(), rtol=1e-4, atol=1e-4)
