"""View ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity, a Transpose of size-1 axes) on a
planned input share its buffer: no copy job, results bit-equal to the copying plan and to numpy."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.kernels import native
from aioge.plan import serialize
from aioge.runtime.native_program import NativeProgram
from aioge.runtime.workers import EngineWorkers

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(not native.available(), reason="needs the compiled kernels")]

RNG = np.random.default_rng(3)
W1, W2, W3 = (RNG.standard_normal(s, dtype=np.float32) for s in ((4, 8), (8, 5), (5, 8)))
X = RNG.standard_normal((2, 3, 4), dtype=np.float32)


def _graph() -> aioge.Graph:
    g = aioge.Graph("views")
    x = g.input("x", (2, 3, 4))
    i64 = lambda *v: g.constant(np.array(v, np.int64))  # noqa: E731
    h = ops.matmul(a := ops.reshape(x, i64(6, 4)), g.constant(W1))  # input -> Reshape: a copy (the feed is the caller's)
    v = ops.transpose(ops.unsqueeze(ops.reshape(h, i64(2, 3, 8)), i64(0)), perm=(1, 0, 2, 3))  # views of h
    m = ops.relu(ops.matmul(ops.squeeze(v, i64(1)), g.constant(W2)))  # a view read by a fused in-place activation
    k = ops.mul(h, ops.matmul(ops.reshape(m, i64(6, 5)), g.constant(W3)))  # h read as itself after its views' readers
    q = ops.reshape(ops.relu(ops.matmul(a, g.constant(W1))), i64(1, 48))  # q's buffer must outlive its view's readers
    z = ops.add(ops.flatten(ops.mul(k, ops.identity(k)), axis=0), q)
    g.output(ops.flatten(m, axis=0), z, names=["y", "z"])  # -> output: copies
    return g


def _reference() -> dict[str, np.ndarray]:
    h = X.reshape(6, 4) @ W1
    m = np.maximum(h.reshape(2, 3, 8) @ W2, 0).reshape(6, 5)
    return {"y": m.reshape(1, 30), "z": ((h * (m @ W3)) ** 2 + np.maximum(h, 0)).reshape(1, 48)}


async def _runs(monkeypatch: pytest.MonkeyPatch, share: bool) -> tuple[Any, list[dict[str, np.ndarray]], int, Any]:
    if not share:
        monkeypatch.setattr("aioge.compiler.memory.is_view", lambda node: False)
    async with aioge.Session() as s:
        await s.add_graph(1, _graph())
        outs = [await s.run_graph(1, {"x": X * (1 + k)}) for k in range(3)]
        exe = s.executable(1)
        ctx = exe._acquire(False)
        prog = exe._native_program(ctx)
        exe._release(ctx)
        workers = EngineWorkers(min_lanes=1, cpu_slots=1)
        try:  # step by step, each step's bytes poisoned before it writes them
            steps = [await exe.run({"x": X}, workers=workers, mode=m, poison=True) for m in ("sink", "host")]
        finally:
            workers.close()
    assert isinstance(prog, NativeProgram)
    assert exe.native_runs >= 3
    for k in ("y", "z"):
        assert all(np.array_equal(st[k], outs[0][k]) for st in steps)
    return exe.model.memory, outs, prog._n, exe


async def test_view_ops_share_their_input_buffer_without_copy_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("aioge.compiler.graph.NATIVE_SLACK_MS", float("inf"))  # take every C form
    mem, outs, jobs, exe = await _runs(monkeypatch, True)
    first = {k: a.copy() for k, a in outs[0].items()}
    shared = dict(mem.views)
    assert len(shared) == 7 and set(shared.values()) <= {b.value for b in mem.buffers}
    assert sorted(collections.Counter(shared.values()).values()) == [1, 1, 1, 4]  # h's buffer holds four views
    g, last = exe.model.graph, {b.value: b.last_use for b in mem.buffers}
    index = {id(n): i for i, n in enumerate(g.nodes)}
    assert all(last[r] >= index[id(c)] for v, r in mem.views for c, _ in g.value(v).uses)  # buffers outlive views' readers
    for k, want in _reference().items():
        np.testing.assert_allclose(outs[0][k], want, rtol=1e-5, atol=1e-5)
        assert np.array_equal(outs[0][k], first[k])  # later runs wrote nothing the caller holds
        assert not np.shares_memory(outs[0][k], outs[1][k]) and outs[1][k][0, 0] != first[k][0, 0]
    model = serialize.decode_model(serialize.encode_model(exe.model)[0])  # the .om check accepts the views
    assert model.memory == exe.model.memory
    base_mem, base_outs, base_jobs, _ = await _runs(monkeypatch, False)
    assert base_mem.views == () and jobs == base_jobs - 7  # seven copy jobs fewer
    for a, b in zip(outs, base_outs):
        assert all(np.array_equal(a[k], b[k]) for k in ("y", "z"))  # bit-equal to the copying plan
