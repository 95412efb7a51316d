"""Weights hashed early (ir.fingerprint.prehash): as load_onnx reads them, on the other core."""

from __future__ import annotations

import gc

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import aioge
from aioge import ops
from aioge.ir import Graph, fingerprint


def _graph(w: np.ndarray) -> Graph:
    g = Graph("g")
    x = g.input("x", (1, w.shape[0]), "float32")
    g.output(ops.matmul(x, g.constant(w, "w")), names=["y"])
    return g


def _weight(seed: int) -> np.ndarray:
    w = np.random.default_rng(seed).standard_normal((512, 1024)).astype(np.float32)  # 2 MiB
    w.setflags(write=False)
    return w


def test_a_prehashed_weight_is_not_hashed_again_and_fingerprints_the_same(monkeypatch) -> None:
    w = _weight(1)
    assert fingerprint.prehash([w]) == 1
    fingerprint._early[id(w)][1].result()
    want = fingerprint.graph_fingerprint(_graph(w.copy()))  # a copy: hashed the ordinary way

    def refuse(a: np.ndarray) -> str:
        assert a.nbytes < 1 << 20, "a prehashed weight was hashed again"
        return real(a)

    real = fingerprint.array_digest
    monkeypatch.setattr(fingerprint, "array_digest", refuse)
    assert fingerprint.graph_fingerprint(_graph(w)) == want
    monkeypatch.undo()
    key = id(w)
    del w
    gc.collect()
    assert key not in fingerprint._early  # the entry leaves with its array


def test_only_big_arrays_that_cannot_change_are_prehashed() -> None:
    owner = np.ones((512, 1024), np.float32)
    view = owner.view()
    view.setflags(write=False)  # read-only, but its owner may still change it: a digest could go stale
    small = np.ones(16, np.float32)
    small.setflags(write=False)
    assert fingerprint.prehash([view, small, owner]) == 0
    assert fingerprint._early_digest(view) is None
    w = _weight(2)
    fingerprint.prehash([w])
    assert fingerprint._early_digest(w) is not None


def test_load_onnx_begins_hashing_its_weights(tmp_path) -> None:
    w = _weight(3)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1024])],
        [numpy_helper.from_array(w, "w")],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    g = aioge.load_onnx(str(path))
    (c,) = g.constants.values()
    early = fingerprint._early_digest(c.data)
    assert early is not None and early.result() == fingerprint.array_digest(w)


def test_a_forked_child_hashes_on_its_own_pool() -> None:
    """The parent's hashing thread does not exist in a forked child: its pending digests are
    dropped there and new ones get a thread of their own (no wait on a thread that is not there)."""
    import os
    import time

    w = _weight(4)
    fingerprint.prehash([w])
    pid = os.fork()
    if pid == 0:  # the child: exit 0 if it hashed on its own
        try:
            v = _weight(5)
            ok = fingerprint._early_digest(w) is None and fingerprint.prehash([v]) == 1
            ok = ok and fingerprint._digests([v, w]) == [fingerprint.array_digest(v), fingerprint.array_digest(w)]
            os._exit(0 if ok else 1)
        except BaseException:
            os._exit(2)
    deadline = time.monotonic() + 60
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if done[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert done[0] == pid and os.waitstatus_to_exitcode(done[1]) == 0, "the child hung or hashed wrong"
