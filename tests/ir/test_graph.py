"""Graph IR: building, validation errors naming the node, topological order, fingerprints."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from aioge import ops
from aioge.errors import GraphError
from aioge.ir import Graph, TensorDesc

FINGERPRINT_SCRIPT = """
import numpy as np
from aioge import ops
from aioge.ir import Graph
g = Graph("fp")
x = g.input("x", ("N", 4), "float32")
w = g.constant(np.arange(16, dtype=np.float32).reshape(4, 4), "w")
g.output(ops.relu(ops.add(x, w)), names=["y"])
print(g.fingerprint())
"""


def _graph(const: float = 1.0) -> Graph:
    g = Graph("fp")
    x = g.input("x", ("N", 4), "float32")
    w = g.constant(np.arange(16, dtype=np.float32).reshape(4, 4) * const, "w")
    g.output(ops.relu(ops.add(x, w)), names=["y"])
    return g


def test_build_infers_descs() -> None:
    g = Graph("g")
    x = g.input("x", (2, 1, 3))
    y = ops.mul(x, np.ones((4, 1), np.float32))
    assert y.desc == TensorDesc((2, 4, 3), "float32")
    z = ops.cast(y, to="int64")
    assert z.dtype == "int64"


def test_symbolic_dims_broadcast() -> None:
    g = Graph("g")
    x = g.input("x", ("N", 3))
    assert ops.add(x, np.ones(3, np.float32)).shape == ("N", 3)


def test_duplicate_names_raise() -> None:
    g = Graph("g")
    g.input("x", (1,))
    with pytest.raises(GraphError, match="duplicate value name 'x'"):
        g.input("x", (1,))
    x = g.value("x")
    ops.relu(x, name="r")
    with pytest.raises(GraphError, match="duplicate node name 'r'"):
        ops.relu(x, name="r")


def test_shape_and_dtype_mismatch_name_the_node() -> None:
    g = Graph("g")
    x = g.input("x", (2, 3))
    with pytest.raises(GraphError, match=r"node 'bad'.*do not broadcast"):
        ops.add(x, g.input("y", (4,)), name="bad")
    with pytest.raises(GraphError, match=r"node 'bad2'.*share one dtype"):
        ops.add(x, g.input("i", (2, 3), "int64"), name="bad2")


def test_bad_attribute_names_the_node() -> None:
    g = Graph("g")
    x = g.input("x", (2, 3))
    with pytest.raises(GraphError, match=r"node 'lr'.*attribute 'alpha'.*expected float"):
        ops.leaky_relu(x, alpha="big", name="lr")
    with pytest.raises(GraphError, match=r"unknown attribute"):
        ops.relu(x, beta=1.0)


def test_inputs_from_another_graph_raise() -> None:
    a, b = Graph("a"), Graph("b")
    x = a.input("x", (2,))
    y = b.input("y", (2,))
    with pytest.raises(GraphError, match="belongs to graph 'a'"):
        ops.add(y, x)


def test_cycle_is_reported() -> None:
    g = Graph("cyc")
    x = g.input("x", (2,))
    a = ops.relu(x, name="a")
    b = ops.neg(a, name="b")
    a.producer.set_input(0, b)  # make a read b: a cycle
    g.output(b)
    with pytest.raises(GraphError, match="cycle"):
        g.validate()


def test_dangling_input_is_reported() -> None:
    g = Graph("g")
    x = g.input("x", (2,))
    a = ops.relu(x, name="a")
    b = ops.neg(a, name="b")
    g.output(b)
    g.nodes.remove(a.producer)  # a's producer is gone but b still reads it
    with pytest.raises(GraphError, match="node 'b'.*not in the graph"):
        g.validate()


def test_no_outputs_is_an_error() -> None:
    g = Graph("g")
    g.input("x", (2,))
    with pytest.raises(GraphError, match="no outputs"):
        g.validate()


def test_topological_order_is_stable() -> None:
    g = Graph("g")
    x = g.input("x", (2,))
    a = ops.relu(x, name="a")
    b = ops.neg(x, name="b")
    c = ops.add(a, b, name="c")
    g.output(c)
    assert [n.name for n in g.topological_order()] == ["a", "b", "c"]


def test_fingerprint_depends_on_structure_and_data() -> None:
    base = _graph().fingerprint()
    assert _graph().fingerprint() == base
    assert _graph(2.0).fingerprint() != base
    g = Graph("fp")
    x = g.input("x", ("N", 4), "float32")
    w = g.constant(np.arange(16, dtype=np.float32).reshape(4, 4), "w")
    g.output(ops.sigmoid(ops.add(x, w)), names=["y"])
    assert g.fingerprint() != base


def test_fingerprint_is_identical_across_processes() -> None:
    out = subprocess.run([sys.executable, "-c", FINGERPRINT_SCRIPT], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == _graph().fingerprint()


def test_variables_and_value_sugar() -> None:
    g = Graph("g")
    x = g.input("x", (3,))
    v = g.variable("counter", np.zeros(3, np.float32))
    y = (x + v) * 2.0 - 1.0
    assert y.desc == TensorDesc((3,), "float32")
    assert g.variables["counter"].data.flags.writeable is False


def test_builders_are_not_shadowed_by_family_modules() -> None:
    g = Graph("g")
    x = g.input("x", (2, 3))
    assert ops.shape(x).desc == TensorDesc((2,), "int64")
    assert ops.conv(g.input("img", (1, 1, 4, 4)), np.ones((1, 1, 3, 3), np.float32)).shape == (1, 1, 2, 2)


def test_clip_of_a_scalar_tensor() -> None:
    from aioge.kernels.elementwise import clip

    out = clip(np.array(5.0, np.float32), np.array(0.0, np.float32), np.array(1.0, np.float32))
    assert isinstance(out, np.ndarray) and out.shape == () and out == 1.0


def test_big_weights_hashed_on_threads_give_the_same_fingerprint(monkeypatch) -> None:
    from aioge.ir import fingerprint

    def graph(scale: float) -> Graph:
        g = Graph("weights")
        x = g.input("x", (1, 64), "float32")
        rng = np.random.default_rng(0)
        h = x
        for i in range(20):
            h = ops.matmul(h, g.constant((scale * rng.standard_normal((64, 64))).astype(np.float32), f"w{i}"))
        g.output(h, names=["y"])
        return g

    serial = graph(1.0).fingerprint()
    monkeypatch.setattr(fingerprint, "_PARALLEL_BYTES", 1024)  # every 16 KB weight counts as big
    threads = []
    real = fingerprint.ThreadPoolExecutor
    monkeypatch.setattr(fingerprint, "ThreadPoolExecutor", lambda **kw: threads.append(kw) or real(**kw))
    assert graph(1.0).fingerprint() == serial
    assert graph(2.0).fingerprint() != serial
    assert threads or (os.cpu_count() or 1) < 2  # the threaded path ran (on a machine with two cores)
