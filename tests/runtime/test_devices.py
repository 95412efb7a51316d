"""Device processes (aioge.exec_devices): same results as in-process runs, spread over the
devices, dead devices failing only their runs (kernel errors: tests/reliability/
test_kernel_faults), cancellation, what stays in this process, and the frame codec refusing
malformed frames."""

from __future__ import annotations

import io
import os
import signal
import struct

import anyio
import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.errors import ExecutionError, OptionError
from aioge.examples import build_cnn
from aioge.plan import io as cache_io
from aioge.runtime import schedule
from aioge.runtime.devices.protocol import read_frame as _read_frame
from aioge.runtime.devices.protocol import write_frame as _write_frame
from tests.reliability.test_kernel_faults import _concurrently
from tests.runtime.test_executor import _branches, _branches_ref

pytestmark = pytest.mark.anyio

OPTS = {"aioge.tune_mode": "heuristic", "aioge.exec_devices": "2"}


@pytest.fixture(autouse=True)
def _no_short_runs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """These graphs are small; runs under a millisecond would stay in this process."""
    if "keeps_short_runs" not in request.keywords:
        monkeypatch.setattr(schedule, "INLINE_US", 0.0)


@pytest.mark.parametrize("threads", ["auto", "streams"])
async def test_device_runs_match_in_process_runs_and_numpy(threads: str) -> None:
    g, weights = _branches(n=48)
    cnn, cnn_feeds, cnn_ref = build_cnn(batch=2)
    rng = np.random.default_rng(0)
    xs = [{"x": rng.standard_normal((48, 48)).astype(np.float32)} for _ in range(8)]
    async with (
        aioge.Session({**OPTS, "aioge.exec_threads": threads}) as dev,
        aioge.Session({"aioge.tune_mode": "heuristic"}) as local,
    ):
        for s in (dev, local):
            await s.add_graph(1, g)
            await s.add_graph(2, cnn)
        got = await _concurrently(dev, xs)
        for x, r in zip(xs, got):
            assert isinstance(r, dict)
            np.testing.assert_allclose(r["y"], _branches_ref(x["x"], weights), rtol=1e-4, atol=1e-5)
            np.testing.assert_array_equal(r["y"], (await local.run_graph(1, x))["y"])
            assert r["y"].flags.writeable
        out = await dev.run_graph(2, cnn_feeds)
        np.testing.assert_allclose(out["logits"], cnn_ref(cnn_feeds)["logits"], rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(out["logits"], (await local.run_graph(2, cnn_feeds))["logits"])
        out["logits"][:] = 0  # the caller's own array
        assert len(dev._devices.pids) == 2  # type: ignore[union-attr]


async def test_a_graph_without_nodes_runs_on_a_device() -> None:
    g = aioge.Graph("identity")
    x = g.input("x", (2, 3))
    g.output(x, names=["y"])
    async with aioge.Session(OPTS) as s:
        await s.add_graph(1, g)
        xv = np.arange(6, dtype=np.float32).reshape(2, 3)
        out = await s.run_graph(1, {g.inputs[0].name: xv})  # naming the output renamed the input
        (y,) = out.values()
        np.testing.assert_array_equal(y, xv)
        assert not np.shares_memory(y, xv)
        assert s._devices is not None and sum(s._devices.completed) == 1


async def test_64_concurrent_runs_spread_over_both_devices() -> None:
    g = aioge.Graph("chain")
    x = g.input("x", (64, 64))
    h = x
    for _ in range(4):
        h = ops.tanh(ops.mul(h, 1.01))
    g.output(h, names=["y"])
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((64, 64)).astype(np.float32)} for _ in range(64)]
    async with aioge.Session(OPTS) as s:
        await s.add_graph(1, g)
        results = await _concurrently(s, feeds)
        pool = s._devices
        assert pool is not None
        done = pool.completed
    for f, r in zip(feeds, results):
        want = f["x"]
        for _ in range(4):
            want = np.tanh(want * np.float32(1.01))
        assert isinstance(r, dict)
        np.testing.assert_allclose(r["y"], want, rtol=1e-6, atol=1e-6)
    assert sum(done) == 64 and min(done) > 0, f"runs per device: {done}"


@pytest.mark.parametrize("direct", ["every other", "never"])
async def test_runs_written_by_the_caller_or_the_writer_thread_keep_order_and_results(
    direct: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submit writes its frame itself when the pipe has room, else queues it for the
    writer thread: mixed, every run still gets its own outputs; a feed no frame carries
    fails only its run with the same ExecutionError on either path."""
    from aioge.runtime.devices import pool as pool_mod

    real, calls, wrote = pool_mod._unread, [0], []
    monkeypatch.setattr(pool_mod, "_unread", lambda fd: real(fd) if direct == "every other" and calls[0] % 2 else None)
    write_now = pool_mod._Device._write_now

    def counted(self, *args):  # type: ignore[no-untyped-def]
        calls[0] += 1
        wrote.append(write_now(self, *args))
        return wrote[-1]

    monkeypatch.setattr(pool_mod._Device, "_write_now", counted)
    g, weights = _branches(n=16)
    rng = np.random.default_rng(2)
    xs = [{"x": rng.standard_normal((16, 16)).astype(np.float32)} for _ in range(24)]
    async with aioge.Session({**OPTS, "aioge.exec_devices": "1"}) as s:
        await s.add_graph(1, g)
        got = await _concurrently(s, xs)
        for x, r in zip(xs, got):
            assert isinstance(r, dict)
            np.testing.assert_allclose(r["y"], _branches_ref(x["x"], weights), rtol=1e-4, atol=1e-5)
        assert (True in wrote) == (direct == "every other") and False in wrote
        pool = s._devices
        assert pool is not None
        device = pool._pick()
        exe_id = next(iter(device.loaded))
        calls[0] = 0  # "every other": this one is written by the caller
        pending = device.submit(10**6, exe_id, {"x": np.array([["a"]], dtype=object)})
        await pending.done.wait()
        assert wrote[-1] == (direct == "every other")
        assert isinstance(pending.error, ExecutionError) and "cannot send the feeds" in str(pending.error)
        after = await s.run_graph(1, xs[0])  # the device still serves
        np.testing.assert_allclose(after["y"], _branches_ref(xs[0]["x"], weights), rtol=1e-4, atol=1e-5)


async def test_a_killed_device_fails_its_runs_and_is_replaced() -> None:
    g, weights = _branches(n=160)
    x = {"x": np.ones((160, 160), np.float32)}
    want = _branches_ref(x["x"], weights)
    async with aioge.Session(OPTS) as s:
        await s.add_graph(1, g)
        await s.run_graph(1, x)
        pool = s._devices
        assert pool is not None
        await _concurrently(s, [x] * 4)  # both devices started
        victim = pool.pids[0]
        results: list[object] = []

        async def one() -> None:
            try:
                results.append(await s.run_graph(1, x))
            except ExecutionError as exc:
                results.append(exc)

        device = next(d for d in pool._devices if d is not None and d.proc.pid == victim)
        async with anyio.create_task_group() as tg:
            for _ in range(24):
                tg.start_soon(one)
            with anyio.fail_after(10):
                while not device.in_flight:
                    await anyio.sleep(0)
            os.kill(victim, signal.SIGKILL)
        failed = [r for r in results if isinstance(r, ExecutionError)]
        assert failed and len(results) == 24
        assert all("stopped" in str(e) and str(victim) in str(e) for e in failed)
        for r in results:
            if not isinstance(r, ExecutionError):
                np.testing.assert_allclose(r["y"], want, rtol=1e-4, atol=1e-5)
        # The next runs start a new process in the dead one's slot, and they are right.
        after = await _concurrently(s, [x] * 6)
        assert all(isinstance(r, dict) for r in after)
        np.testing.assert_allclose(after[0]["y"], want, rtol=1e-4, atol=1e-5)  # type: ignore[index]
        assert victim not in pool.pids and len(pool.pids) == 2


async def test_cancelled_device_runs_leave_later_runs_right() -> None:
    g, weights = _branches(n=128)
    x = {"x": np.full((128, 128), 0.5, np.float32)}
    want = _branches_ref(x["x"], weights)
    async with aioge.Session(OPTS) as s:
        await s.add_graph(1, g)
        await s.run_graph(1, x)
        cancelled = 0
        for k in range(30):
            with anyio.move_on_after(0.0005 * (k % 5)) as scope:
                await s.run_graph(1, x)
            cancelled += scope.cancelled_caught
        assert cancelled > 0
        for r in await _concurrently(s, [x] * 8):
            assert isinstance(r, dict)
            np.testing.assert_allclose(r["y"], want, rtol=1e-4, atol=1e-5)
        pool = s._devices
        assert pool is not None
        with anyio.fail_after(10):  # replies of the cancelled runs arrive and are dropped
            while any(d is not None and d.in_flight for d in pool._devices):
                await anyio.sleep(0.01)


async def test_graphs_with_variables_and_traced_runs_stay_in_this_process(tmp_path) -> None:
    g = aioge.Graph("v")
    x = g.input("x", (2,))
    g.output(x + g.variable("bias", np.array([1.0, 2.0], np.float32)), names=["y"])
    async with aioge.Session(OPTS) as s:
        await s.add_graph(1, g)
        out = await s.run_graph(1, {"x": np.zeros(2, np.float32)})
        np.testing.assert_array_equal(out["y"], [1, 2])
        pool = s._devices
        assert pool is not None and pool.pids == []
        c = aioge.Graph("c")
        y = c.input("x", (3,))
        c.output(ops.tanh(y), names=["y"])
        await s.add_graph(2, c)
        out = await s.run_graph(2, {"x": np.zeros(3, np.float32)}, trace=tmp_path / "t.json")
        assert (tmp_path / "t.json").stat().st_size > 0 and pool.pids == []


async def test_string_tensors_stay_in_this_process_and_devices_stay_usable() -> None:
    g = aioge.Graph("cast")
    t = g.input("t", (3,), "str")
    g.output(ops.add(ops.cast(t, to="float32"), 1.0), names=["v"])
    c = aioge.Graph("c")
    y = c.input("x", (3,))
    c.output(ops.tanh(y), names=["y"])
    async with aioge.Session(OPTS) as s:
        await s.add_graph(1, g)
        await s.add_graph(2, c)
        out = await s.run_graph(1, {"t": np.array(["1.5", "2", "-3"], dtype=object)})
        np.testing.assert_array_equal(out["v"], [2.5, 3.0, -2.0])
        pool = s._devices
        assert pool is not None and pool.pids == [] and not pool.eligible(s.executable(1))
        out = await s.run_graph(2, {"x": np.zeros(3, np.float32)})
        np.testing.assert_array_equal(out["y"], [0, 0, 0])
        assert len(pool.pids) == 2
        # Past the eligibility check, a feed no frame carries fails its run only.
        pids = pool.pids
        with pytest.raises(ExecutionError, match="cannot send the feeds"):
            await pool.run(s.executable(2), {"x": np.array([None, None, None])})
        out = await s.run_graph(2, {"x": np.ones(3, np.float32)})
        np.testing.assert_allclose(out["y"], np.tanh(np.ones(3)), rtol=1e-6)
        assert pool.pids == pids


async def test_closing_the_session_ends_the_device_processes() -> None:
    c = aioge.Graph("c")
    y = c.input("x", (3,))
    c.output(ops.tanh(y), names=["y"])
    s = aioge.Session(OPTS)
    await s.add_graph(1, c)
    await s.run_graph(1, {"x": np.zeros(3, np.float32)})
    pool = s._devices
    assert pool is not None
    procs = [d.proc for d in pool._devices if d is not None]
    assert len(procs) == 2 and all(p.poll() is None for p in procs)
    await s.aclose()
    assert all(p.poll() == 0 for p in procs), [p.returncode for p in procs]


@pytest.mark.keeps_short_runs
async def test_runs_that_compute_under_a_millisecond_on_a_device_come_back_to_this_process() -> None:
    c = aioge.Graph("c")
    y = c.input("x", (3,))
    c.output(ops.tanh(y), names=["y"])
    async with aioge.Session(OPTS) as s:
        await s.add_graph(1, c)
        for k in range(6):
            out = await s.run_graph(1, {"x": np.full(3, k, np.float32)})
            np.testing.assert_allclose(out["y"], np.tanh(np.full(3, k)), rtol=1e-6)
        pool = s._devices
        assert pool is not None
        assert sum(pool.completed) == 1, "the first run went to a device, which measured it short"
        assert s.executable(1).short and s.executable(1).inline_runs == 5


@pytest.mark.parametrize("value", ["-1", "65", "two", "1.5"])
def test_exec_devices_is_checked(value: str) -> None:
    with pytest.raises(OptionError, match="aioge.exec_devices"):
        aioge.Session({"aioge.exec_devices": value})


async def test_exec_devices_is_a_session_option() -> None:
    async with aioge.Session() as s:
        with pytest.raises(OptionError, match="aioge.exec_devices"):
            await s.add_graph(1, aioge.Graph("g"), {"aioge.exec_devices": "2"})


def test_frames_round_trip_and_malformed_frames_are_refused() -> None:
    buf = io.BytesIO()
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    _write_frame(buf, {"op": "run", "rid": 7}, {"a": a, "e": np.zeros((0, 2), np.int64)}, blobs=(b"model",))
    raw = buf.getvalue()
    header, arrays, blobs = _read_frame(io.BytesIO(raw), "test")  # type: ignore[misc]
    assert header == {"op": "run", "rid": 7}
    np.testing.assert_array_equal(arrays["a"], a)
    assert arrays["a"].flags.writeable and arrays["e"].shape == (0, 2) and bytes(blobs[0]) == b"model"
    assert _read_frame(io.BytesIO(raw[:-3]), "test") is None, "a cut frame is the end of the stream"
    with pytest.raises(TypeError, match="dtype object"):
        _write_frame(io.BytesIO(), {}, {"o": np.array([None])})
    # Lengths beyond the limits, and data that the header does not account for.
    with pytest.raises(ValueError, match="beyond"):
        _read_frame(io.BytesIO(struct.pack("<QQ", 1 << 40, 0)), "test")
    head = cache_io.pack({"arrays": [["a", "float32", [4]]], "blobs": []})
    with pytest.raises(ValueError, match="runs past"):
        _read_frame(io.BytesIO(struct.pack("<QQ", len(head), 8) + head + b"\0" * 8), "test")
    head = cache_io.pack({"arrays": [["a", "object", [1]]], "blobs": []})
    with pytest.raises(ValueError, match="bad dtype"):
        _read_frame(io.BytesIO(struct.pack("<QQ", len(head), 8) + head + b"\0" * 8), "test")
    head = cache_io.pack({"arrays": [], "blobs": []})
    with pytest.raises(ValueError, match="no array or blob claims"):
        _read_frame(io.BytesIO(struct.pack("<QQ", len(head), 4) + head + b"\0" * 4), "test")


@pytest.mark.parametrize("graph_cache", [False, True])
async def test_external_weights_reach_the_device_inline(tmp_path, monkeypatch: pytest.MonkeyPatch, graph_cache: bool) -> None:
    """A graph compiled with ge.externalWeight=1 (its weights in the cache's weight/ when it has
    one) runs on a device started in a directory with no weight/: the device gets them inline."""
    cnn, feeds, ref = build_cnn(batch=2)
    monkeypatch.chdir(tmp_path)  # the devices' working directory: no weight/ here
    session = {**OPTS, "aioge.exec_devices": "1"}
    graph = {"ge.externalWeight": "1"}
    if graph_cache:
        (tmp_path / "gc").mkdir()
        session["ge.graph_compiler_cache_dir"] = str(tmp_path / "gc")
        graph["ge.graph_key"] = "ext"
    for _ in range(2 if graph_cache else 1):  # compiled, then loaded from the cache's .om and weight/
        async with aioge.Session(session) as s:
            await s.add_graph(1, cnn, graph)
            out = await s.run_graph(1, feeds)
            np.testing.assert_allclose(out["logits"], ref(feeds)["logits"], rtol=1e-4, atol=1e-5)
            assert s._devices is not None and sum(s._devices.completed) == 1
            hit = s.executable(1).model.stats.graph_cache_hit
    if graph_cache:
        assert os.listdir(tmp_path / "gc" / "weight") and hit
    assert not os.path.exists(tmp_path / "weight")


async def test_a_device_refuses_a_model_that_references_weight_files(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Weight files beside the device's working directory are never read: a device takes inline weights only."""
    from aioge.plan.serialize import WEIGHT_DIR, encode_model
    from aioge.runtime.devices.child import serve

    g, _ = _branches(n=8)
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, g)
        model = await s.build_graph(1)
    om, files = encode_model(model, external=True)
    assert files
    os.makedirs(tmp_path / WEIGHT_DIR)
    for name, a in files.items():
        (tmp_path / WEIGHT_DIR / name).write_bytes(a.tobytes())
    monkeypatch.chdir(tmp_path)
    requests, replies = io.BytesIO(), io.BytesIO()
    _write_frame(requests, {"op": "load", "exe": 0, "threads": "auto"}, blobs=(om,))
    _write_frame(requests, {"op": "run", "rid": 7, "exe": 0}, {"x": np.ones((8, 8), np.float32)})
    requests.seek(0)
    await anyio.to_thread.run_sync(serve, requests, replies)
    replies.seek(0)
    load = _read_frame(replies, "reply")
    run = _read_frame(replies, "reply")
    assert load is not None and load[0]["op"] == "load_failed"
    assert run is not None and run[0]["rid"] == 7 and not run[1]
    assert "references weight file weight_" in run[0]["error"]["message"], run[0]
