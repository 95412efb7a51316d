"""The remote cache tier on a real redis-server: shared kernels across processes with separate
disk caches, corrupt and foreign entries, a server killed mid-compile, a slow network."""

from __future__ import annotations

import json
import logging
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.cache.remote import RemoteTier, read_remote_stats
from aioge.errors import OptionError
from aioge.keys import remote_namespace
from aioge.plan.io import make_envelope, pack

redis = pytest.importorskip("redis", reason="the redis extra (pip install 'aioge[redis]')")

pytestmark = pytest.mark.anyio

REDIS_SERVER = shutil.which("redis-server")
needs_server = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server (Debian package redis-server; .ci/run installs it)")
W = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
UNFUSED = "ActivationFusionPass:off;ElementwiseFusionPass:off;MatMulAddFusionPass:off"
REMOTE_LOG = "aioge.cache.remote"


def _graph(name: str = "g") -> aioge.Graph:
    g = aioge.Graph(name)
    x = g.input("x", (4, 8), "float32")
    h = ops.relu(ops.apply("MatMul", [ops.mul(x, 0.5), g.constant(W, "w")])[0])
    g.output(ops.tanh(h + 1.0), names=["y"])
    return g


KERNELS = 5  # Mul, MatMul, Relu, Add, Tanh: distinct keys


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self, tmp: Path) -> None:
        self.port = _free_port()
        self.proc = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(tmp),
                "--protected-mode",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.client = redis.Redis(host="127.0.0.1", port=self.port)

    def keys(self) -> list[str]:
        return sorted(k.decode() for k in self.client.keys("aioge:*"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed")
    d = tmp_path / "redis"
    d.mkdir()
    srv = RedisServer(d)
    try:
        yield srv
    finally:
        srv.client.close()
        srv.stop()


def _opts(root: Path, url: str, **extra: str) -> dict[str, str]:
    return {
        "ge.op_compiler_cache_dir": str(root),
        "aioge.tune_mode": "heuristic",
        "ge.optimizationSwitch": UNFUSED,
        "aioge.remote_cache": url,
        **extra,
    }


async def _build(options: dict[str, str]) -> aioge.CompiledModel:
    async with aioge.Session(options) as s:
        await s.add_graph(1, _graph())
        model = await s.build_graph(1)
        x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
        out = await s.run_graph(1, {"x": x})
        np.testing.assert_allclose(out["y"], np.tanh(np.maximum((x * 0.5) @ W, 0) + 1.0), rtol=1e-5, atol=1e-6)
    return model


def _remote_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == REMOTE_LOG and r.levelno >= logging.WARNING]


_CHILD = textwrap.dedent("""
    import json, sys, anyio, aioge
    sys.path.insert(0, {tests!r})
    from cache.test_remote import _build, _opts
    from pathlib import Path
    model = anyio.run(_build, _opts(Path(sys.argv[1]), sys.argv[2]))
    print(json.dumps({{"compiled": model.stats.kernels_compiled, "hits": model.stats.kernel_cache_hits}}))
""")


@needs_server
def test_two_processes_with_separate_disk_caches_share_kernels_through_redis(server: RedisServer, tmp_path: Path) -> None:
    script = _CHILD.format(tests=str(Path(__file__).parents[1]))
    results = []
    for name in ("a", "b"):
        out = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / name), server.url],
            capture_output=True,
            text=True,
            timeout=100,
            check=True,
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert results[0] == {"compiled": KERNELS, "hits": 0}
    assert results[1] == {"compiled": 0, "hits": KERNELS}  # the second compiles nothing
    assert len([k for k in server.keys() if ":kernel:" in k]) == KERNELS
    assert all(k.startswith(remote_namespace("AiogeSim") + ":kernel:") for k in server.keys())
    # The remote hits were published to b's own disk: a third compile there needs no network.
    assert len(list((tmp_path / "b" / "kernel_cache" / "AiogeSim").glob("*.aiok"))) == KERNELS
    stats = read_remote_stats(tmp_path / "b" / "kernel_cache")["AiogeSim"]
    assert (stats["hits"], stats["misses"], stats["errors"]) == (KERNELS, 0, 0)
    stats = read_remote_stats(tmp_path / "a" / "kernel_cache")["AiogeSim"]
    assert (stats["hits"], stats["misses"], stats["writes"]) == (0, KERNELS, KERNELS)


@needs_server
def test_cache_stats_reports_the_remote_tier_beside_the_disk(
    server: RedisServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio

    from aioge.cli import main

    anyio.run(_build, _opts(tmp_path / "a", server.url))
    anyio.run(_build, _opts(tmp_path / "b", server.url))
    monkeypatch.setenv("AIOGE_REMOTE_CACHE", f"redis://:pw@127.0.0.1:{server.port}/0")
    capsys.readouterr()
    assert main(["cache", "stats", "--dir", str(tmp_path / "b"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["remote"]["url"] == f"redis://:***@127.0.0.1:{server.port}/0"
    (soc,) = report["remote"]["socs"]
    assert (soc["soc"], soc["hits"], soc["misses"], soc["errors"]) == ("AiogeSim", KERNELS, 0, 0)
    assert (report["kernel"]["socs"][0]["hits"], report["kernel"]["socs"][0]["misses"]) == (
        0,
        KERNELS,
    )  # the disk tier missed, the remote served
    assert main(["cache", "stats", "--dir", str(tmp_path / "b")]) == 0
    text = capsys.readouterr().out
    assert f"remote cache: redis://:***@127.0.0.1:{server.port}/0" in text
    assert f"AiogeSim: hits {KERNELS}, misses 0, errors 0" in text


@needs_server
async def test_entries_carry_a_ttl_and_oversized_ones_are_not_sent(server: RedisServer, tmp_path: Path) -> None:
    await _build(_opts(tmp_path / "a", server.url, **{"aioge.remote_cache_ttl": "120"}))
    ttls = [server.client.ttl(k) for k in server.keys()]
    assert len(ttls) == KERNELS and all(0 < t <= 120 for t in ttls)
    tier = RemoteTier(_Stalling(), soc="X", max_entry_bytes=10)
    tier.put("kernel", "k", b"x" * 11)
    assert tier.stats.dropped == 1 and tier.stats.writes == 0


@needs_server
@pytest.mark.parametrize("entry", ["garbage", "foreign", "other-key"])
async def test_a_corrupt_or_foreign_remote_entry_is_a_miss_a_warning_and_a_recompile(
    server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture, entry: str
) -> None:
    await _build(_opts(tmp_path / "a", server.url))
    keys = [k for k in server.keys() if ":kernel:tanh_" in k]
    assert len(keys) == 1
    good = server.client.get(keys[0])
    bad = {
        "garbage": good[:-3] + b"xyz",  # payload no longer matches its checksum
        "foreign": make_envelope("aioge-stats", pack({})),
        "other-key": server.client.get(next(k for k in server.keys() if ":kernel:relu_" in k)),
    }[entry]
    server.client.set(keys[0], bad)
    caplog.set_level(logging.WARNING)
    model = await _build(_opts(tmp_path / "b", server.url))
    assert (model.stats.kernels_compiled, model.stats.kernel_cache_hits) == (1, KERNELS - 1)
    warnings = _remote_warnings(caplog)
    assert len(warnings) == 1 and "tanh_" in warnings[0] and "unusable" in warnings[0]
    assert server.client.get(keys[0]) == good  # the recompiled entry replaced it (write-behind, flushed on close)
    stats = read_remote_stats(tmp_path / "b" / "kernel_cache")["AiogeSim"]
    assert (stats["hits"], stats["invalid"], stats["misses"]) == (KERNELS - 1, 1, 1)


class _KillingStore:
    """Redis, killed by the test after the first lookup: the server dies mid-compile."""

    def __init__(self, server: RedisServer, timeout: float) -> None:
        from aioge.cache.remote import RedisStore

        self.inner = RedisStore(server.url, timeout)
        self.server = server
        self.gets = 0

    async def get(self, key: str) -> bytes | None:
        self.gets += 1
        if self.gets == 2:
            self.server.stop()
        return await self.inner.get(key)

    async def set(self, key: str, value: bytes, ttl_seconds: int) -> None:
        await self.inner.set(key, value, ttl_seconds)

    async def aclose(self) -> None:
        await self.inner.aclose()


@needs_server
async def test_a_server_killed_mid_compile_leaves_the_compile_working_with_one_warning(
    server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with aioge.Session(_opts(tmp_path / "a", server.url, **{"aioge.tune_mode": "heuristic"})) as s:
        store = _KillingStore(server, 0.5)
        s.remote_cache.store = store  # type: ignore[union-attr]
        await s.add_graph(1, _graph())
        model = await s.build_graph(1)
        out = await s.run_graph(1, {"x": np.ones((4, 8), np.float32)})
        stats = s.remote_cache.stats  # type: ignore[union-attr]
    np.testing.assert_allclose(out["y"], np.tanh(np.maximum((np.ones((4, 8)) * 0.5) @ W, 0) + 1.0), rtol=1e-5)
    assert server.proc.poll() is not None and store.gets >= 2
    assert model.stats.kernels_compiled == KERNELS
    assert stats.errors >= 1
    warnings = _remote_warnings(caplog)
    assert len(warnings) == 1 and "unavailable" in warnings[0], warnings
    assert len(list((tmp_path / "a" / "kernel_cache" / "AiogeSim").glob("*.aiok"))) == KERNELS  # the disk tier still works


async def test_a_remote_nobody_listens_on_costs_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    t0 = time.monotonic()
    model = await _build(_opts(tmp_path / "a", f"redis://127.0.0.1:{_free_port()}/0"))
    assert model.stats.kernels_compiled == KERNELS
    assert time.monotonic() - t0 < 30
    assert len(_remote_warnings(caplog)) == 1


class _DelayProxy:
    """A TCP proxy on 127.0.0.1 that holds every chunk ``delay`` seconds before passing it on."""

    def __init__(self, target_port: int, delay: float) -> None:
        self.delay = delay
        self.target = target_port
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stopped.is_set():
            try:
                client, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(0.2)
        while not self.stopped.is_set():
            try:
                data = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            time.sleep(self.delay)
            try:
                dst.sendall(data)
            except OSError:
                break
        for s in (src, dst):
            try:
                s.close()
            except OSError:
                pass

    def close(self) -> None:
        self.stopped.set()
        self.sock.close()


@needs_server
async def test_a_one_second_network_delay_does_not_stall_a_compile_beyond_the_deadline(
    server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await _build(_opts(tmp_path / "warm", server.url))  # the remote holds every kernel, behind a slow link
    local = _opts(tmp_path / "base", "")
    t0 = time.monotonic()
    await _build(local)
    base = time.monotonic() - t0
    proxy = _DelayProxy(server.port, 1.0)
    caplog.set_level(logging.WARNING)
    try:
        t0 = time.monotonic()
        model = await _build(
            _opts(tmp_path / "slow", f"redis://127.0.0.1:{proxy.port}/0", **{"aioge.remote_cache_timeout_ms": "200"})
        )
        slow = time.monotonic() - t0
    finally:
        proxy.close()
    assert model.stats.kernels_compiled == KERNELS  # nothing came back in time: compiled locally
    # One deadline (0.2 s) for the lookups in flight, one for closing: far below one delay of 1 s per lookup.
    assert slow < base + 0.9, (slow, base)
    warnings = _remote_warnings(caplog)
    assert len(warnings) == 1 and "timed out" in warnings[0]


class _Stalling:
    async def get(self, key: str) -> bytes | None:
        import asyncio

        await asyncio.sleep(10)
        return None

    async def set(self, key: str, value: bytes, ttl_seconds: int) -> None:
        import asyncio

        await asyncio.sleep(10)

    async def aclose(self) -> None:
        pass


async def test_a_stalled_store_is_cut_at_the_deadline_and_left_alone_afterwards(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    tier = RemoteTier(_Stalling(), soc="X", timeout=0.1)
    t0 = time.monotonic()
    assert await tier.get("kernel", "k") is None
    assert await tier.get("kernel", "k2") is None  # down: no second wait
    assert time.monotonic() - t0 < 1.0
    assert (tier.stats.errors, tier.stats.hits, tier.stats.misses) == (1, 0, 0)
    tier.put("kernel", "k", b"x")
    assert tier.stats.dropped == 1
    await tier.aclose()
    assert len(_remote_warnings(caplog)) == 1


def test_the_remote_cache_option_takes_redis_urls_and_the_env_var() -> None:
    from aioge.options import check_options, resolve_options

    with pytest.raises(OptionError, match="aioge.remote_cache"):
        check_options({"aioge.remote_cache": "http://cache:80"}, "session")
    with pytest.raises(OptionError, match="session level"):
        check_options({"aioge.remote_cache": "redis://h/0"}, "graph")
    assert resolve_options({}, env={"AIOGE_REMOTE_CACHE": "redis://h:1/2"}).remote_cache == "redis://h:1/2"
    assert resolve_options({}, env={}).remote_cache == ""
    with pytest.raises(OptionError, match="AIOGE_REMOTE_CACHE"):
        resolve_options({}, env={"AIOGE_REMOTE_CACHE": "memcached://x"})


def test_the_namespace_is_per_soc_and_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    import aioge.keys as keys

    a = remote_namespace("AiogeSim")
    assert a != remote_namespace("Other") and a.startswith("aioge:AiogeSim:")
    monkeypatch.setattr(keys, "versions", lambda: {"aioge": "0", "numpy": "0", "python": "0"})
    assert remote_namespace("AiogeSim") != a


def test_stats_name_the_url_without_its_password() -> None:
    from aioge.cache.remote import redact

    assert redact("redis://user:s3cret@h:6379/0") == "redis://user:***@h:6379/0"


async def _build_cached(options: dict[str, str], graph_dir: Path) -> tuple[aioge.CompiledModel, np.ndarray]:
    graph_dir.mkdir(exist_ok=True)
    async with aioge.Session({**options, "ge.graph_compiler_cache_dir": str(graph_dir)}) as s:
        await s.add_graph(1, _graph(), {"ge.graph_key": "mlp"})
        model = await s.build_graph(1)
        out = await s.run_graph(1, {"x": np.ones((4, 8), np.float32)})
    return model, out["y"]


@needs_server
async def test_a_graph_cache_entry_is_shared_through_redis(server: RedisServer, tmp_path: Path) -> None:
    a, ya = await _build_cached(_opts(tmp_path / "ka", server.url), tmp_path / "ga")
    assert not a.stats.graph_cache_hit and a.stats.kernels_compiled == KERNELS
    assert len([k for k in server.keys() if ":graph:mlp_" in k]) == 1
    b, yb = await _build_cached(_opts(tmp_path / "kb", server.url), tmp_path / "gb")
    assert b.stats.graph_cache_hit and (b.stats.kernels_compiled, b.stats.kernel_cache_hits) == (0, 0)
    np.testing.assert_array_equal(ya, yb)
    assert b.options["ge.graph_compiler_cache_dir"] == str(tmp_path / "gb")  # this session's, not the sender's
    assert (tmp_path / "gb" / "mlp.idx").is_file() and len(list((tmp_path / "gb").glob("mlp_*.om"))) == 1
    c, yc = await _build_cached(_opts(tmp_path / "kc", ""), tmp_path / "gb")  # b's disk alone now serves it
    assert c.stats.graph_cache_hit
    np.testing.assert_array_equal(ya, yc)


@needs_server
@pytest.mark.parametrize("entry", ["garbage", "other-shapes"])
async def test_a_corrupt_or_foreign_graph_entry_is_a_miss_and_a_warning(
    server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture, entry: str
) -> None:
    await _build_cached(_opts(tmp_path / "ka", server.url), tmp_path / "ga")
    (key,) = [k for k in server.keys() if ":graph:mlp_" in k]
    if entry == "garbage":
        server.client.set(key, server.client.get(key)[:-10])  # truncated
    else:  # a whole, valid model, but of another graph under this key
        other = aioge.Graph("g")
        x = other.input("x", (2, 8), "float32")
        other.output(ops.tanh(x), names=["y"])
        async with aioge.Session(_opts(tmp_path / "kx", "")) as s:
            await s.add_graph(1, other)
            from aioge.plan.serialize import encode_model

            server.client.set(key, encode_model(await s.build_graph(1))[0])
    caplog.set_level(logging.WARNING)
    b, _ = await _build_cached(_opts(tmp_path / "kb", server.url), tmp_path / "gb")
    assert not b.stats.graph_cache_hit and (b.stats.kernels_compiled, b.stats.kernel_cache_hits) == (0, KERNELS)
    warnings = _remote_warnings(caplog)
    assert len(warnings) == 1 and "graph entry mlp_" in warnings[0], warnings


def _y(x: np.ndarray) -> np.ndarray:
    return np.tanh(np.maximum((x * 0.5) @ W, 0) + 1.0)


@needs_server
@pytest.mark.parametrize("lie", ["zeroed-weights", "output-desc"])
async def test_a_graph_entry_with_other_weights_under_the_same_key_is_not_served(
    server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture, lie: str
) -> None:
    # The attacks of issue 37: the entry decoded, its weights zeroed (or a node's output desc
    # shrunk, which a kernel would trust), written back whole under its key with its
    # fingerprint unchanged. It must be a miss (recompiled), not a hit.
    from aioge.ir.desc import TensorDesc
    from aioge.plan.serialize import decode_model, encode_model

    await _build_cached(_opts(tmp_path / "ka", server.url), tmp_path / "ga")
    (key,) = [k for k in server.keys() if ":graph:mlp_" in k]
    model = decode_model(server.client.get(key))
    if lie == "zeroed-weights":
        for v in model.graph.constants.values():
            v.data = np.zeros_like(v.data)
    else:
        (matmul,) = [n for n in model.graph.nodes if n.op_type == "MatMul"]
        matmul.outputs[0].desc = TensorDesc((1, 8), "float32")
    server.client.set(key, encode_model(model)[0])
    caplog.set_level(logging.WARNING)
    b, y = await _build_cached(_opts(tmp_path / "kb", server.url), tmp_path / "gb")
    assert not b.stats.graph_cache_hit and (b.stats.kernels_compiled, b.stats.kernel_cache_hits) == (0, KERNELS)
    np.testing.assert_allclose(y, _y(np.ones((4, 8), np.float32)), rtol=1e-5, atol=1e-6)
    (warning,) = _remote_warnings(caplog)
    assert "graph entry mlp_" in warning, warning
    if lie == "zeroed-weights":
        assert "weights are not what graph 'g' compiles to" in warning


@needs_server
@pytest.mark.parametrize("entry", ["signed", "unsigned", "bad-tag", "other-key"])
async def test_with_a_key_only_entries_signed_with_it_are_served(
    server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture, entry: str
) -> None:
    from aioge.cache.remote import _SIGNED

    key_opt = {"aioge.remote_cache_key": "s3cret"}
    a, ya = await _build_cached(_opts(tmp_path / "ka", server.url, **key_opt), tmp_path / "ga")
    assert a.options["aioge.remote_cache_key"] == "***"  # the secret is never stored with a model
    (key,) = [k for k in server.keys() if ":graph:mlp_" in k]
    stored = server.client.get(key)
    assert all(server.client.get(k).startswith(_SIGNED) for k in server.keys())  # kernels are signed too
    if entry == "unsigned":
        server.client.set(key, stored[len(_SIGNED) + 32 :])
    elif entry == "bad-tag":
        server.client.set(key, stored[: len(_SIGNED)] + bytes(32) + stored[len(_SIGNED) + 32 :])
    elif entry == "other-key":  # a whole entry signed with another key: the tier of a writer without this one
        tier = RemoteTier(_NoStore(), soc="AiogeSim", key=b"guess")
        server.client.set(key, tier._sign(key, stored[len(_SIGNED) + 32 :]))
    caplog.set_level(logging.WARNING)
    b, yb = await _build_cached(_opts(tmp_path / "kb", server.url, **key_opt), tmp_path / "gb")
    np.testing.assert_array_equal(ya, yb)
    warnings = _remote_warnings(caplog)
    if entry == "signed":
        assert b.stats.graph_cache_hit and not warnings
    else:
        assert not b.stats.graph_cache_hit and (b.stats.kernels_compiled, b.stats.kernel_cache_hits) == (0, KERNELS)
        assert len(warnings) == 1 and "graph entry mlp_" in warnings[0] and "badly signed" in warnings[0], warnings


class _NoStore:
    async def get(self, key: str) -> bytes | None:
        return None

    async def set(self, key: str, value: bytes, ttl_seconds: int) -> None:
        return None

    async def aclose(self) -> None:
        return None


def test_the_remote_cache_key_comes_from_the_option_or_the_env_var_and_is_never_stored(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from aioge.cli import main
    from aioge.options import resolve_options

    assert main(["options"]) == 0
    listed = capsys.readouterr().out
    assert "aioge.remote_cache_key" in listed and "(env AIOGE_REMOTE_CACHE_KEY)" in listed
    assert "aioge.max_builds_per_graph" in listed and "default='8'" in listed

    assert resolve_options({}, env={"AIOGE_REMOTE_CACHE_KEY": "k1"}).remote_cache_key == "k1"
    opts = resolve_options({"aioge.remote_cache_key": "k2"}, env={"AIOGE_REMOTE_CACHE_KEY": "k1"})
    assert opts.remote_cache_key == "k2" and opts.raw["aioge.remote_cache_key"] == "***"
    assert resolve_options({}, env={}).raw["aioge.remote_cache_key"] == ""
