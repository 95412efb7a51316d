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

import aioge  # noqa: E402
from aioge.errors import GraphError, UnsupportedOpError  # noqa: E402
from tensorflow.core.framework import graph_pb2  # noqa: E402

pytestmark = pytest.mark.anyio


def _freeze(model: Any, shape: tuple[int | None, ...]) -> Any:
    """A frozen GraphDef of ``model`` in inference mode, input placeholder ``x``, and the concrete function."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    fn = tf.function(lambda x: model(x, training=False)).get_concrete_function(tf.TensorSpec(shape, tf.float32, name="x"))
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
    fn = tf.function(lambda x: tf.math.cumsum(x, axis=1) + 1.0).get_concrete_function(tf.TensorSpec((2, 3), tf.float32, name="x"))
    with pytest.raises(UnsupportedOpError, match=r"tf::Cumsum.*at nodes Cumsum"):
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
    async with aioge.Session() as session:
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
