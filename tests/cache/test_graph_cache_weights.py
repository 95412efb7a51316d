"""A graph cache hit takes the weights the graph in hand holds from it, not from the cache's files.

Weights the passes leave unchanged are stored in an entry as references by their fingerprint
digest; the graph's fingerprint (checked equal to the entry's) has just hashed those bytes,
so a hit neither reads nor hashes them again. Weights the passes changed (folded) are in the
entry as ever, read and verified.
"""

from __future__ import annotations

import hashlib
import logging
import os

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.cache import graph_cache
from aioge.errors import ModelFormatError
from aioge.ir import fingerprint
from aioge.plan import io, serialize

pytestmark = pytest.mark.anyio

RNG = np.random.default_rng(7)
W = RNG.standard_normal((64, 1024)).astype(np.float32) / 8  # 256 KB: the weight the passes keep
A = RNG.standard_normal(1024).astype(np.float32)
C = RNG.standard_normal(1024).astype(np.float32)  # A * C is folded into a new 4 KB constant
V = RNG.standard_normal(1024).astype(np.float32)  # a variable's initial value: referenced too
X = RNG.standard_normal((4, 64)).astype(np.float32)
HEURISTIC = {"aioge.tune_mode": "heuristic"}


def _graph(w: np.ndarray = W) -> aioge.Graph:
    g = aioge.Graph("weights")
    x = g.input("x", ("N", 64))
    bias = ops.mul(g.constant(A, "a"), g.constant(C, "c"))
    h = ops.tanh(ops.add(ops.matmul(x, g.constant(w, "w")), bias))
    g.output(ops.mul(h, g.variable("v", V)), names=["y"])
    return g


def _ref(w: np.ndarray = W) -> np.ndarray:
    return np.tanh(X @ w + A * C) * V


async def _build(cache_dir, graph: aioge.Graph | None = None, **graph_options: str) -> tuple[np.ndarray, object]:
    async with aioge.Session({"ge.graph_compiler_cache_dir": str(cache_dir), **HEURISTIC}) as s:
        await s.add_graph(1, graph or _graph(), {"ge.graph_key": "wk", **graph_options})
        out = await s.run_graph(1, {"x": X})
        return out["y"], s.compiled(1)


def _weight_file(cache_dir, array: np.ndarray):
    return cache_dir / "weight" / ("weight_" + hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest())


def _opened(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """(path, size) of every cache file opened from now on (every cache reader opens through here)."""
    seen: list[tuple[str, int]] = []
    real = io.open_regular

    def spy(path):
        fd, st = real(path)
        seen.append((os.fspath(path), st.st_size))
        return fd, st

    monkeypatch.setattr(io, "open_regular", spy)
    return seen


async def test_a_hit_opens_no_weight_file_for_weights_the_graph_holds(tmp_path, monkeypatch) -> None:
    first, model = await _build(tmp_path, **{"ge.externalWeight": "1"})
    assert not model.stats.graph_cache_hit
    np.testing.assert_allclose(first, _ref(), rtol=1e-5, atol=1e-5)
    folded = [v.data for v in model.graph.constants.values() if v.data.shape == (1024,)]
    assert len(folded) == 1 and not any(v.name in ("a", "c") for v in model.graph.constants.values())
    # The kept weight is stored nowhere in the cache (the graph holds it); the folded one is a file.
    assert not _weight_file(tmp_path, W).exists() and not _weight_file(tmp_path, V).exists()
    assert _weight_file(tmp_path, folded[0]).exists()
    opened = _opened(monkeypatch)
    second, hit = await _build(tmp_path, **{"ge.externalWeight": "1"})
    assert hit.stats.graph_cache_hit
    weights = [os.path.basename(p) for p, _ in opened if os.path.dirname(p) == str(tmp_path / "weight")]
    assert weights == [_weight_file(tmp_path, folded[0]).name]  # the folded one is still read (and verified)
    np.testing.assert_array_equal(second, first)  # what a fresh compile gives
    np.testing.assert_allclose(second, _ref(), rtol=1e-5, atol=1e-5)
    for array, want in ((hit.graph.constants["w"].data, W), (hit.graph.variables["v"].data, V)):
        assert array.tobytes() == want.tobytes() and not array.flags.writeable


async def test_an_inline_hit_reads_fewer_bytes_than_the_kept_weight(tmp_path, monkeypatch) -> None:
    first, _ = await _build(tmp_path)
    (om,) = [n for n in os.listdir(tmp_path) if n.endswith(".om")]
    assert os.path.getsize(tmp_path / om) < W.nbytes  # the entry does not carry the weight the graph holds
    opened = _opened(monkeypatch)
    hashed: list[int] = []
    real = fingerprint.array_digest
    monkeypatch.setattr(fingerprint, "array_digest", lambda a: hashed.append(a.nbytes) or real(a))
    second, hit = await _build(tmp_path)
    assert hit.stats.graph_cache_hit
    assert sum(size for path, size in opened if path.startswith(str(tmp_path))) < W.nbytes
    assert sorted(hashed) == sorted(a.nbytes for a in (W, A, C, V))  # each once, for the fingerprint
    np.testing.assert_array_equal(second, first)
    np.testing.assert_allclose(second, _ref(), rtol=1e-5, atol=1e-5)


async def test_a_changed_weight_is_still_read_and_verified(tmp_path, caplog) -> None:
    _, model = await _build(tmp_path, **{"ge.externalWeight": "1"})
    (folded,) = [v.data for v in model.graph.constants.values() if v.data.shape == (1024,)]
    path = _weight_file(tmp_path, folded)
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF  # same size, other bytes
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        out, again = await _build(tmp_path, **{"ge.externalWeight": "1"})
    assert not again.stats.graph_cache_hit  # corrupt: a warning and a recompile, never the wrong bias
    assert any("checksum mismatch" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    np.testing.assert_allclose(out, _ref(), rtol=1e-5, atol=1e-5)
    assert path.read_bytes() == np.ascontiguousarray(folded).tobytes()  # rewritten whole by the new entry
    out, hit = await _build(tmp_path, **{"ge.externalWeight": "1"})
    assert hit.stats.graph_cache_hit
    np.testing.assert_allclose(out, _ref(), rtol=1e-5, atol=1e-5)


async def test_a_graph_with_another_weight_never_gets_the_cached_one(tmp_path, caplog) -> None:
    await _build(tmp_path)
    w2 = (W * 2).astype(np.float32)
    with caplog.at_level(logging.WARNING):
        out, model = await _build(tmp_path, graph=_graph(w2))
    assert not model.stats.graph_cache_hit
    assert any("fingerprint differs" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(out, _ref(w2), rtol=1e-5, atol=1e-5)
    # Trusting the key (GE), the first entry cannot serve it either (it references W, which the
    # graph lacks): the second one, made for this graph, does.
    out, model = await _build(tmp_path, graph=_graph(w2), **{"aioge.graph_cache_check": "key"})
    assert model.stats.graph_cache_hit
    np.testing.assert_allclose(out, _ref(w2), rtol=1e-5, atol=1e-5)


async def test_key_mode_entries_are_whole_and_trust_the_key(tmp_path) -> None:
    await _build(tmp_path, **{"aioge.graph_cache_check": "key"})
    (om,) = [n for n in os.listdir(tmp_path) if n.endswith(".om")]
    assert os.path.getsize(tmp_path / om) > W.nbytes  # nothing fingerprinted, so nothing referenced
    out, model = await _build(tmp_path, graph=_graph((W * 2).astype(np.float32)), **{"aioge.graph_cache_check": "key"})
    assert model.stats.graph_cache_hit  # GE semantics: the key alone decides, with the weights it saved
    np.testing.assert_allclose(out, _ref(), rtol=1e-5, atol=1e-5)


async def test_a_key_mode_lookup_of_a_referencing_entry_with_other_weights_is_a_miss(tmp_path, caplog) -> None:
    await _build(tmp_path)  # fingerprint mode: W is referenced, not stored
    w2 = (W * 2).astype(np.float32)
    with caplog.at_level(logging.WARNING):
        out, model = await _build(tmp_path, graph=_graph(w2), **{"aioge.graph_cache_check": "key"})
    assert not model.stats.graph_cache_hit
    assert any("lacks a constant" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(out, _ref(w2), rtol=1e-5, atol=1e-5)
    assert len(graph_cache.read_index(tmp_path / "wk.idx")["cache_file_list"]) == 2  # the first entry is kept
    out, model = await _build(tmp_path, **{"aioge.graph_cache_check": "key"})  # the first graph: its own entry
    assert model.stats.graph_cache_hit
    np.testing.assert_allclose(out, _ref(), rtol=1e-5, atol=1e-5)


async def test_a_hit_saves_as_a_standalone_om_and_the_entry_does_not_load_alone(tmp_path) -> None:
    first, hit = await _build(tmp_path)
    out, hit = await _build(tmp_path)
    assert hit.stats.graph_cache_hit
    path = tmp_path / "alone" / "m.om"
    path.parent.mkdir()
    await hit.save(path)
    assert os.path.getsize(path) > W.nbytes  # aioge compile -o / save: the weights inside, as ever
    loaded = await aioge.load_model(path)
    async with aioge.Session(HEURISTIC) as s:
        gid = await s.load_model(path)
        np.testing.assert_array_equal((await s.run_graph(gid, {"x": X}))["y"], first)
    assert loaded.graph.constants["w"].data.tobytes() == W.tobytes()
    (om,) = tmp_path.glob("wk_*.om")
    with pytest.raises(ModelFormatError, match="loads only through the graph cache"):
        await aioge.load_model(om)


def test_layout_3_files_still_load(monkeypatch) -> None:
    from aioge.compiler.graph import compile_graph_sync
    from aioge.options import resolve_options

    model = compile_graph_sync(_graph(), [("x", (4, 64))], resolve_options(HEURISTIC))
    monkeypatch.setattr(serialize, "OM_LAYOUT", 3)  # what the aioge before graph references wrote
    data = serialize.encode_model(model)[0]
    monkeypatch.undo()
    again = serialize.decode_model(data, weight_dir="")
    assert again.graph.constants["w"].data.tobytes() == W.tobytes()
