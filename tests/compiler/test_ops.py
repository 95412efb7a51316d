"""The op compiler: concurrent kernel compiles, once per key (in a session and across
sessions sharing a cache dir), errors, tune mode end to end."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import anyio
import numpy as np
import pytest

import aioge
import aioge.compiler.ops as op_compiler
from aioge import ops
from aioge.compiler.graph import compile_graph, compile_graph_sync
from aioge.compiler.ops import DebugConfig, cache_policy, read_debug_config
from aioge.errors import CompileError
from aioge.options import check_options, resolve_options

pytestmark = pytest.mark.anyio

UNFUSED = "ActivationFusionPass:off;ElementwiseFusionPass:off;MatMulAddFusionPass:off"
SHAPES = [(2, 8), (4, 8), (2, 16), (8, 4)]


def _graph(i: int) -> aioge.Graph:
    """Graph i: shared ops on one of four shapes, plus one op of its own kind."""
    g = aioge.Graph(f"g{i}")
    x = g.input("x", SHAPES[i % 4], "float32")
    h = ops.tanh(ops.relu(x) * np.float32(0.5))
    own = [ops.sigmoid, ops.neg, ops.exp, ops.abs][i // 4]
    g.output(own(h), names=["y"])
    return g


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Count real kernel compiles per key (and make each take long enough to overlap)."""
    calls: Counter = Counter()
    lock = threading.Lock()
    real = op_compiler.compile_kernel_sync

    def compile_and_count(node, engine, options, key, schema=None):
        with lock:
            calls[key] += 1
        time.sleep(0.01)
        return real(node, engine, options, key, schema)

    monkeypatch.setattr(op_compiler, "compile_kernel_sync", compile_and_count)
    return calls


def _opts(root: Path, **extra: str) -> dict[str, str]:
    return {"ge.op_compiler_cache_dir": str(root), "aioge.tune_mode": "heuristic", "ge.optimizationSwitch": UNFUSED, **extra}


async def test_16_concurrent_compiles_compile_each_unique_key_once(tmp_path: Path, counted: Counter) -> None:
    async with aioge.Session(_opts(tmp_path)) as s:
        for i in range(16):
            await s.add_graph(i, _graph(i))
        models = {}

        async def build(i: int) -> None:
            models[i] = await s.build_graph(i)

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(build, i)
        assert len(s.kernel_cache.flights) == 0  # no flight outlives its compile
        for i in range(16):
            x = np.random.default_rng(i).standard_normal(SHAPES[i % 4]).astype(np.float32)
            out = (await s.run_graph(i, {"x": x}))["y"]
            h = np.tanh(np.maximum(x, 0) * 0.5)
            want = [lambda v: 1 / (1 + np.exp(-v)), np.negative, np.exp, np.abs][i // 4](h)
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    keys = {n.kernel.key for m in models.values() for n in m.nodes}
    # relu, mul, tanh on 4 shapes + the 4 own ops each on 4 shapes
    assert len(keys) == 4 * 3 + 16
    assert set(counted) == keys and all(c == 1 for c in counted.values()), counted
    assert sum(m.stats.kernels_compiled for m in models.values()) == len(keys)
    assert sum(m.stats.kernel_cache_hits for m in models.values()) == 16 * 4 - len(keys)


async def test_sessions_sharing_a_dir_compile_each_key_once(tmp_path: Path, counted: Counter) -> None:
    models = []

    async def session(k: int) -> None:
        async with aioge.Session(_opts(tmp_path)) as s:
            for i in range(4):
                await s.add_graph(i, _graph(4 * k + i))
            for i in range(4):
                models.append(await s.build_graph(i))

    async with anyio.create_task_group() as tg:
        for k in range(4):
            tg.start_soon(session, k)
    keys = {n.kernel.key for m in models for n in m.nodes}
    # Other sessions' compiles of a key are waited for through the key's file lock, then loaded.
    assert set(counted) == keys and all(c == 1 for c in counted.values()), counted


async def test_disable_still_shares_concurrent_compiles_in_a_session(tmp_path: Path, counted: Counter) -> None:
    async with aioge.Session(_opts(tmp_path / "c", **{"ge.op_compiler_cache_mode": "disable"})) as s:
        await s.add_graph(1, _graph(0))
        await s.add_graph(2, _graph(4))  # same shape: relu, mul, tanh keys shared
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.build_graph, 1)
            tg.start_soon(s.build_graph, 2)
    assert len(counted) == 5 and max(counted.values()) == 1
    assert not (tmp_path / "c").exists()


async def test_a_node_without_kernel_fails_the_compile_and_leaks_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = op_compiler.compile_kernel_sync

    def failing(node, engine, options, key, schema=None):
        if node.op_type == "Tanh":
            raise CompileError("no kernel of Tanh applies", nodes=[node.name])
        time.sleep(0.01)
        return real(node, engine, options, key, schema)

    monkeypatch.setattr(op_compiler, "compile_kernel_sync", failing)
    async with aioge.Session(_opts(tmp_path)) as s:
        await s.add_graph(1, _graph(0))
        await s.add_graph(2, _graph(4))
        errors = []

        async def build(i: int) -> None:
            try:
                await s.build_graph(i)
            except CompileError as exc:  # one error, not an ExceptionGroup
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(build, 1)
            tg.start_soon(build, 2)
        assert len(errors) == 2 and all("Tanh" in str(e) for e in errors)
        assert len(s.kernel_cache.flights) == 0


async def test_cancelled_compile_hands_its_keys_to_another(tmp_path: Path, counted: Counter) -> None:
    async with aioge.Session(_opts(tmp_path)) as s:
        await s.add_graph(1, _graph(1))
        await s.add_graph(2, _graph(5))
        result = {}

        async def patient() -> None:
            result["model"] = await s.build_graph(2)

        async with anyio.create_task_group() as tg:
            with anyio.move_on_after(0.005):
                tg.start_soon(patient)
                await s.build_graph(1)  # cancelled while leading the shared keys' compiles
        assert result["model"].stats.kernels_compiled + result["model"].stats.kernel_cache_hits == 4
        assert len(s.kernel_cache.flights) == 0


async def test_tune_mode_end_to_end_agrees_with_numpy(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((6, 8, 1, 1)).astype(np.float32)
    g = aioge.Graph("convs")
    x = g.input("x", (2, 4, 10, 10), "float32")
    h = ops.conv2d(x, g.constant(w1, "w1"), pads=(1, 1, 1, 1))
    h = ops.conv2d(ops.relu(h), g.constant(w2, "w2"))
    g.output(ops.softmax(ops.max_pool(h, kernel_shape=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)), axis=1), names=["y"])
    feeds = {"x": rng.standard_normal((2, 4, 10, 10)).astype(np.float32)}
    async with aioge.Session({"ge.op_compiler_cache_dir": str(tmp_path), "aioge.tune_budget_ms": "20"}) as s:
        await s.add_graph(1, g)
        model = await s.build_graph(1)
        out = (await s.run_graph(1, feeds))["y"]
    assert any(n.kernel.tuned for n in model.nodes)  # several candidates were timed
    sess_ref = _reference(feeds["x"], w1, w2)
    np.testing.assert_allclose(out, sess_ref, rtol=1e-4, atol=1e-5)


def _reference(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    def conv(x, w, pad):
        xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))
        return np.einsum("nchwij,mcij->nmhw", win, w)

    h = conv(np.maximum(conv(x, w1, 1), 0), w2, 0)
    hp = np.pad(h, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    win = np.lib.stride_tricks.sliding_window_view(hp, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    p = win.max(axis=(4, 5))
    e = np.exp(p - p.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


async def test_compile_graph_without_a_cache_and_the_blocking_form() -> None:
    options = resolve_options(check_options({"aioge.tune_mode": "heuristic", "ge.optimizationSwitch": UNFUSED}, "session"))
    g = _graph(0)
    signature = (("x", SHAPES[0]),)
    model = await compile_graph(g, signature, options)
    assert model.stats.kernels_compiled == 4 and model.stats.compile_seconds > 0
    blocking = compile_graph_sync(g, signature, options)
    assert [n.kernel for n in blocking.nodes] == [n.kernel for n in model.nodes]


def test_debug_config_parsing_and_policy(tmp_path: Path) -> None:
    cfg = tmp_path / "dbg.cfg"
    cfg.write_text("op_debug_config = ccec_g\n# comment\nop_debug_list = conv1 , opType::Relu,MatMul\n")
    dc = read_debug_config(str(cfg))
    assert dc.names == {"conv1", "MatMul"} and dc.op_types == {"Relu"} and len(dc.digest) == 64
    opts = resolve_options(check_options({"op_debug_config": str(cfg)}, "session"))
    assert cache_policy(opts, dc).read and cache_policy(opts, dc).write
    cfg.write_text("op_debug_config = ccec_g\n")
    assert not cache_policy(opts, read_debug_config(str(cfg))).uses_disk
    lvl = resolve_options(check_options({"op_debug_level": "2"}, "session"))
    assert not cache_policy(lvl, DebugConfig()).uses_disk
    force = resolve_options(check_options({"ge.op_compiler_cache_mode": "force"}, "session"))
    p = cache_policy(force, DebugConfig())
    assert (p.read, p.write) == (False, True)
