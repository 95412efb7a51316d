"""cache.graph_cache: GE's graph compile cache (.idx/.om/.rdcpkt/weight/ and the lock) through Session."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.cache import graph_cache
from aioge.compiler import cached
from aioge.errors import CompileError, OptionError
from aioge.plan import io, serialize

pytestmark = pytest.mark.anyio

W = (np.arange(64, dtype=np.float32).reshape(8, 8) - 32) / 64
HEURISTIC = {"aioge.tune_mode": "heuristic"}
X = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)


def _graph(scale: float = 1.0, var_shape: tuple[int, ...] = (8,), with_var: bool = True) -> aioge.Graph:
    g = aioge.Graph("cached")
    x = g.input("x", ("N", 8))
    h = ops.tanh(ops.einsum(x, g.constant(W * scale, "w"), equation="ni,ij->nj"))
    s = ops.sigmoid(x)
    if with_var:
        s = s * g.variable("v", np.full(var_shape, 0.5, np.float32))
    g.output(ops.relu(h + s), names=["y"])
    return g


def _ref(x: np.ndarray, scale: float = 1.0, with_var: bool = True) -> np.ndarray:
    return np.maximum(np.tanh(x @ (W * scale)) + 1 / (1 + np.exp(-x)) * (0.5 if with_var else 1.0), 0)


async def _build(cache_dir, key: str = "gk", graph: aioge.Graph | None = None, **graph_options: str) -> tuple[dict, object]:
    """One fresh session: add, run, return (outputs, compiled model)."""
    async with aioge.Session({"ge.graph_compiler_cache_dir": str(cache_dir), **HEURISTIC}) as s:
        await s.add_graph(1, graph or _graph(), {"ge.graph_key": key, **graph_options})
        out = await s.run_graph(1, {"x": X})
        return out, s.compiled(1)


def _index(cache_dir, key: str = "gk") -> list[dict]:
    return graph_cache.read_index(cache_dir / f"{key}.idx")["cache_file_list"]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.startswith("aioge.cache")]


async def test_files_and_index_entry(tmp_path) -> None:
    out, model = await _build(tmp_path)
    np.testing.assert_allclose(out["y"], _ref(X), rtol=1e-5, atol=1e-6)
    assert not model.stats.graph_cache_hit
    names = sorted(os.listdir(tmp_path))
    om = [n for n in names if n.endswith(".om")]
    assert len(om) == 1 and re.fullmatch(r"gk_\d{14}\.om", om[0])
    stem = om[0][:-3]
    # No weight/ without externalWeight; the lookup counts of aioge cache stats and their lock.
    assert names == sorted(["gk.idx", "gk.lock", om[0], f"{stem}.rdcpkt", "aioge.graph-stats", ".aioge.graph-stats.lock"])
    (entry,) = _index(tmp_path)
    assert entry["cache_file_name"] == om[0] and entry["graph_key"] == "gk" and entry["var_desc_file_name"] == f"{stem}.rdcpkt"
    assert entry["fingerprint"] == _graph().fingerprint() and entry["signature"] == [["x", [4, 8]]]
    assert entry["versions"] == dict(model.versions) and entry["om_sha256"] and abs(entry["created"] - time.time()) < 60
    assert "ge.graph_key" not in entry["options"] and entry["options"]["aioge.tune_mode"] == "heuristic"
    _, payload = io.open_envelope((tmp_path / f"{stem}.rdcpkt").read_bytes(), "rdcpkt")
    assert io.unpack(payload)["before"] == [["v", [8], "float32", "ND"]]


async def test_second_session_loads_instead_of_compiling(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, _ = await _build(tmp_path)

    async def no_compile(*args, **kwargs):
        raise AssertionError("compiled although the cache holds the graph")

    monkeypatch.setattr(aioge.session, "compile_graph", no_compile)
    second, model = await _build(tmp_path)
    assert model.stats.graph_cache_hit and model.stats.kernels_compiled == 0
    np.testing.assert_array_equal(second["y"], first["y"])
    assert len(_index(tmp_path)) == 1


async def test_no_variables_no_rdcpkt_and_external_weights_are_loaded(tmp_path) -> None:
    await _build(tmp_path, graph=_graph(with_var=False), **{"ge.externalWeight": "1"})
    assert not any(n.endswith(".rdcpkt") for n in os.listdir(tmp_path))
    (entry,) = _index(tmp_path)
    assert entry["var_desc_file_name"] == "" and entry["external_weight"] is True
    weights = os.listdir(tmp_path / "weight")
    assert any(f == "weight_" + __import__("hashlib").sha256(W.tobytes()).hexdigest() for f in weights)
    out, model = await _build(tmp_path, graph=_graph(with_var=False), **{"ge.externalWeight": "1"})
    assert model.stats.graph_cache_hit
    w = model.graph.constants["w"].data
    assert not isinstance(w, np.memmap) and not isinstance(w.base, np.memmap)  # private memory, not the file
    assert not w.flags.writeable
    np.testing.assert_allclose(out["y"], _ref(X, with_var=False), rtol=1e-5, atol=1e-6)


async def test_cache_off_unless_both_dir_and_key(tmp_path) -> None:
    async with aioge.Session({"ge.graph_compiler_cache_dir": str(tmp_path), **HEURISTIC}) as s:
        await s.add_graph(1, _graph())
        await s.run_graph(1, {"x": X})
    async with aioge.Session(HEURISTIC) as s:
        with pytest.warns(UserWarning, match="ge.graph_key 'gk' has no effect"):  # off, but never silently
            await s.add_graph(1, _graph(), {"ge.graph_key": "gk"})
        await s.run_graph(1, {"x": X})
    assert os.listdir(tmp_path) == []


async def test_missing_dir_is_E13026(tmp_path) -> None:
    missing = tmp_path / "nope"
    async with aioge.Session({"ge.graph_compiler_cache_dir": str(missing)}) as s:
        with pytest.raises(CompileError, match=r"E13026.*nope.*does not exist") as err:
            await s.add_graph(1, _graph(), {"ge.graph_key": "gk"})
        assert err.value.code == "E13026"
    there = tmp_path / "there"
    there.mkdir()
    async with aioge.Session({"ge.graph_compiler_cache_dir": str(there)}) as s:
        await s.add_graph(1, _graph(), {"ge.graph_key": "gk"})
        there.rmdir()
        with pytest.raises(CompileError, match="E13026"):
            await s.build_graph(1, {"x": (4, 8)})


@pytest.mark.parametrize("key", ["../up", "a/b", "a.b", "x" * 129, "sp ace", "a\\b"])
async def test_unsafe_keys_are_refused(tmp_path, key: str) -> None:
    async with aioge.Session({"ge.graph_compiler_cache_dir": str(tmp_path)}) as s:
        with pytest.raises(OptionError, match="ge.graph_key"):
            await s.add_graph(1, _graph(), {"ge.graph_key": key})
    with pytest.raises(OptionError):
        graph_cache.GraphCache(str(tmp_path), key)
    assert os.listdir(tmp_path) == []


async def test_variable_desc_change_recompiles_into_a_second_entry(tmp_path, caplog) -> None:
    # check=key trusts the key as GE does, so only the variable descs can tell the graphs apart
    await _build(tmp_path, **{"aioge.graph_cache_check": "key"})
    with caplog.at_level(logging.INFO):
        out, model = await _build(tmp_path, graph=_graph(var_shape=(1, 8)), **{"aioge.graph_cache_check": "key"})
    assert not model.stats.graph_cache_hit
    assert any("'gk'" in w and "variable descs differ" in w for w in _warnings(caplog))
    assert out["y"].shape == (4, 8)
    entries = _index(tmp_path)
    assert len(entries) == 2 and len({e["cache_file_name"] for e in entries}) == 2
    assert len({e["var_desc_file_name"] for e in entries}) == 2
    assert len([n for n in os.listdir(tmp_path) if n.endswith(".rdcpkt")]) == 2
    for shape in ((8,), (1, 8)):  # both variants now hit their own entry
        _, model = await _build(tmp_path, graph=_graph(var_shape=shape), **{"aioge.graph_cache_check": "key"})
        assert model.stats.graph_cache_hit and model.graph.variables["v"].desc.shape == shape


async def test_changed_graph_recompiles_with_a_warning_unless_the_key_is_trusted(tmp_path, caplog) -> None:
    await _build(tmp_path)
    _, model = await _build(tmp_path, graph=_graph(scale=2.0), **{"aioge.graph_cache_check": "key"})
    assert model.stats.graph_cache_hit  # GE semantics: the key alone decides
    caplog.clear()
    out, model = await _build(tmp_path, graph=_graph(scale=2.0))
    assert not model.stats.graph_cache_hit
    np.testing.assert_allclose(out["y"], _ref(X, 2.0), rtol=1e-5, atol=1e-6)
    assert any("'gk'" in w and "fingerprint differs" in w for w in _warnings(caplog))
    assert len(_index(tmp_path)) == 2


async def test_changed_compile_options_or_shapes_miss(tmp_path, caplog) -> None:
    await _build(tmp_path)
    _, model = await _build(tmp_path, **{"ge.exec.exclude_engines": "AiCore"})
    assert not model.stats.graph_cache_hit and {n.engine for n in model.nodes} <= {"AiVec", "AiCpu"}
    assert any("compile options differ: ['ge.exec.exclude_engines']" in w for w in _warnings(caplog))
    async with aioge.Session({"ge.graph_compiler_cache_dir": str(tmp_path), **HEURISTIC}) as s:
        await s.add_graph(1, _graph(), {"ge.graph_key": "gk"})
        assert not (await s.build_graph(1, {"x": (2, 8)})).stats.graph_cache_hit
        assert (await s.build_graph(1, {"x": (4, 8)})).stats.graph_cache_hit
    assert len(_index(tmp_path)) == 3


async def test_foreign_versions_recompile(tmp_path, caplog) -> None:
    await _build(tmp_path)
    cache = graph_cache.GraphCache(str(tmp_path), "gk")
    entries, _ = cache.read_index_sync()
    entries[0]["versions"] = {"aioge": "0.0.9", "numpy": "1.0", "python": "3.0"}
    cache._publish_index(entries)
    out, model = await _build(tmp_path)
    assert not model.stats.graph_cache_hit
    assert any("'gk'" in w and "versions differ" in w for w in _warnings(caplog))
    np.testing.assert_allclose(out["y"], _ref(X), rtol=1e-5, atol=1e-6)
    assert [e["versions"]["aioge"] for e in _index(tmp_path)] == ["0.0.9", aioge.__version__]  # the foreign one is kept


async def test_an_entry_compiled_on_another_isa_tier_recompiles(tmp_path, caplog, monkeypatch) -> None:
    # A plan's kernels were tuned among its tier's candidates: a cache shared with a process on
    # another tier (AIOGE_ISA, or another machine) serves it nothing, and keeps its entry.
    from aioge.kernels import native

    monkeypatch.setattr(native, "tier", lambda: "avx2")
    await _build(tmp_path)
    assert [e["versions"]["native"] for e in _index(tmp_path)] == ["avx2"]
    monkeypatch.setattr(native, "tier", lambda: "avx512")
    out, model = await _build(tmp_path)
    assert not model.stats.graph_cache_hit and model.versions["native"] == "avx512"
    assert any("'gk'" in w and "versions differ" in w and "'native': 'avx2'" in w for w in _warnings(caplog))
    np.testing.assert_allclose(out["y"], _ref(X), rtol=1e-5, atol=1e-6)
    assert [e["versions"]["native"] for e in _index(tmp_path)] == ["avx2", "avx512"]
    assert (await _build(tmp_path))[1].stats.graph_cache_hit  # its own tier's entry serves


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
async def test_corrupt_om_recovers(tmp_path, caplog, damage: str) -> None:
    await _build(tmp_path)
    (old,) = [p for p in tmp_path.iterdir() if p.suffix == ".om"]
    data = old.read_bytes()
    old.write_bytes({"flip": data[:-5] + bytes([data[-5] ^ 0x10]) + data[-4:], "truncate": data[:-100], "empty": b""}[damage])
    out, model = await _build(tmp_path)
    assert not model.stats.graph_cache_hit
    np.testing.assert_allclose(out["y"], _ref(X), rtol=1e-5, atol=1e-6)
    assert any("'gk'" in w and old.name in w for w in _warnings(caplog))
    (entry,) = _index(tmp_path)  # the broken entry is gone, the new one is in
    assert entry["cache_file_name"] != old.name and not old.exists()
    _, model = await _build(tmp_path)
    assert model.stats.graph_cache_hit


async def test_missing_or_corrupt_weight_file_recompiles(tmp_path, caplog) -> None:
    await _build(tmp_path, **{"ge.externalWeight": "1"})
    for f in (tmp_path / "weight").iterdir():
        f.write_bytes(b"\0" * f.stat().st_size)
    out, model = await _build(tmp_path, **{"ge.externalWeight": "1"})
    assert not model.stats.graph_cache_hit and any("checksum mismatch" in w for w in _warnings(caplog))
    np.testing.assert_allclose(out["y"], _ref(X), rtol=1e-5, atol=1e-6)
    _, model = await _build(tmp_path, **{"ge.externalWeight": "1"})
    assert model.stats.graph_cache_hit  # the weights were rewritten


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage"])
async def test_corrupt_index_is_rebuilt_from_the_valid_models(tmp_path, caplog, damage: str) -> None:
    await _build(tmp_path)
    await _build(tmp_path, graph=_graph(scale=3.0))
    idx = tmp_path / "gk.idx"
    data = idx.read_bytes()
    idx.write_bytes(
        {"flip": data[:-3] + bytes([data[-3] ^ 1]) + data[-2:], "truncate": data[: len(data) // 2], "garbage": b"{json?"}[damage]
    )
    (tmp_path / "gk_20000101000000.om").write_bytes(b"not a model")  # a broken leftover is not resurrected
    out, model = await _build(tmp_path)
    assert model.stats.graph_cache_hit  # recovered from the .om files
    assert any("index is broken" in w or "index unreadable" in w for w in _warnings(caplog))
    entries = _index(tmp_path)  # a valid index again, with both valid entries
    assert len(entries) == 2 and {e["fingerprint"] for e in entries} == {_graph().fingerprint(), _graph(3.0).fingerprint()}


async def test_malformed_entries_are_dropped_and_valid_ones_kept(tmp_path, caplog) -> None:
    await _build(tmp_path)
    cache = graph_cache.GraphCache(str(tmp_path), "gk")
    entries, _ = cache.read_index_sync()
    bad = [{"cache_file_name": "../../etc/passwd", "graph_key": "gk"}, {"cache_file_name": 5}, "junk"]
    (tmp_path / "gk.idx").write_bytes(io.make_envelope("idx", io.pack({"cache_file_list": bad + entries})))
    _, model = await _build(tmp_path)
    assert model.stats.graph_cache_hit
    assert any("malformed entries" in w for w in _warnings(caplog))
    assert _index(tmp_path) == entries


def test_same_second_saves_get_distinct_names_and_racing_writers_keep_a_valid_index(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(graph_cache.time, "strftime", lambda fmt, t=None: "20250101120000")
    g = _graph()
    model = serialize.decode_model(serialize.encode_model(_compiled(g))[0])
    cache = graph_cache.GraphCache(str(tmp_path), "gk")
    errors = []

    def save() -> None:
        try:
            cached.save_sync(cache, model, g)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=save) for _ in range(4)]  # no lock taken: correctness must not need it
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    names = sorted(n for n in os.listdir(tmp_path) if n.endswith(".om"))
    assert names == sorted(["gk_20250101120000.om"] + [f"gk_20250101120000_{i}.om" for i in (1, 2, 3)])
    entries = _index(tmp_path)
    assert 1 <= len(entries) <= 4 and all(e["cache_file_name"] in names for e in entries)
    for e in entries:  # every entry names a whole model whose rdcpkt shares its stem
        serialize.decode_model((tmp_path / e["cache_file_name"]).read_bytes(), expect_sha256=e["om_sha256"])
        assert e["var_desc_file_name"] == e["cache_file_name"][:-3] + ".rdcpkt"


def _compiled(g: aioge.Graph):
    from aioge.compiler.graph import compile_graph_sync
    from aioge.compiler.specialize import input_signature
    from aioge.options import resolve_options

    return compile_graph_sync(g, input_signature(g, {"x": (4, 8)}), resolve_options(HEURISTIC))


async def test_lock_file_serialises_sessions_in_one_process(tmp_path) -> None:
    cache = graph_cache.GraphCache(str(tmp_path), "gk")
    other = graph_cache.GraphCache(str(tmp_path), "gk")
    import anyio

    order = []

    async def hold() -> None:
        async with cache.locked() as held:
            assert held
            order.append("a-in")
            await anyio.sleep(0.2)
            order.append("a-out")

    async def wait() -> None:
        await anyio.sleep(0.05)
        async with other.locked():
            order.append("b-in")

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold)
        tg.start_soon(wait)
    assert order == ["a-in", "a-out", "b-in"]


_CHILD = r"""
import json, sys, time
import anyio, numpy as np
sys.path.insert(0, sys.argv[3])
import aioge, aioge.session
from test_graph_cache import _graph, X

real = aioge.session.compile_graph

async def slow_compile(*args, **kwargs):
    with open(sys.argv[4], "a") as f:   # one line per real compile
        f.write("compile\n")
    await anyio.sleep(0.5)              # make the compile long enough for the others to arrive
    return await real(*args, **kwargs)

aioge.session.compile_graph = slow_compile

async def main():
    while time.time() < float(sys.argv[2]):
        await anyio.sleep(0.005)
    async with aioge.Session({"ge.graph_compiler_cache_dir": sys.argv[1], "aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _graph(), {"ge.graph_key": "shared"})
        out = await s.run_graph(1, {"x": X})
        print(json.dumps({"hit": s.compiled(1).stats.graph_cache_hit, "y": out["y"].tolist()}))

anyio.run(main)
"""


def test_processes_started_together_compile_once(tmp_path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    marker = tmp_path / "compiles.txt"
    start = time.time() + 3.0  # every child is imported and waiting by then
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(cache), str(start), os.path.dirname(__file__), str(marker)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(4)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert marker.read_text().count("compile") == 1
    assert sorted(r["hit"] for r in results) == [False, True, True, True]
    for r in results:
        np.testing.assert_allclose(np.array(r["y"], np.float32), _ref(X), rtol=1e-5, atol=1e-6)
    assert len(_index(cache, "shared")) == 1
    assert len([n for n in os.listdir(cache) if n.endswith(".om")]) == 1


async def test_key_mode_hit_does_not_even_fingerprint(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    await _build(tmp_path, **{"aioge.graph_cache_check": "key"})

    def no_fingerprint(self):
        raise AssertionError("fingerprinted although the key is trusted")

    monkeypatch.setattr(aioge.Graph, "fingerprint", no_fingerprint)
    _, model = await _build(tmp_path, **{"aioge.graph_cache_check": "key"})
    assert model.stats.graph_cache_hit


async def test_a_cache_that_cannot_be_written_never_fails_the_build(tmp_path, monkeypatch, caplog) -> None:
    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(serialize, "save_model_sync", disk_full)
    out, model = await _build(tmp_path)
    np.testing.assert_allclose(out["y"], _ref(X), rtol=1e-5, atol=1e-6)
    assert any("could not save" in w and "No space left" in w for w in _warnings(caplog))
    assert not (tmp_path / "gk.idx").exists() and not any(n.endswith((".om", ".rdcpkt")) for n in os.listdir(tmp_path))


async def test_read_ahead_begins_the_newest_entry_that_may_serve(tmp_path) -> None:
    """Of two entries of a key that differ only in what the read-ahead cannot check (here the
    fingerprint; after an upgrade the code), the packs read begun is the newest's."""
    from aioge.options import resolve_options

    await _build(tmp_path)
    _, model = await _build(tmp_path, graph=_graph(scale=2.0))
    first, newest = _index(tmp_path)
    options = resolve_options({"ge.graph_compiler_cache_dir": str(tmp_path), **HEURISTIC}, {"ge.graph_key": "gk"})
    signature = tuple((n, tuple(s)) for n, s in model.signature)
    soon = cached._read_ahead(graph_cache.GraphCache(str(tmp_path), "gk"), "cached", signature, options)
    assert [sha for _, sha in soon] == [newest["om_sha256"]] != [first["om_sha256"]]


def test_graph_cache_save_and_load_leave_filelock_unimported(tmp_path) -> None:
    """The cache locks are flocks taken without importing filelock (8.5 ms of a fresh start)."""
    tests = os.path.dirname(os.path.dirname(__file__))
    code = (
        f"import sys, anyio\nsys.path.insert(0, {tests!r})\nfrom cache.test_graph_cache import _build\n"
        f"from pathlib import Path\nfor _ in range(2):\n    out, model = anyio.run(_build, Path({str(tmp_path)!r}))\n"
        "print(model.stats.graph_cache_hit, 'filelock' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.split() == ["True", "False"]
