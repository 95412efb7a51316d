"""External weights (``ge.externalWeight=1``, the graph cache's ``weight/`` files) under a loaded model.

Weights were memory-mapped after their sha256 was checked: a weight file rewritten in place
then changed a loaded model's results silently, and one truncated killed the process with
SIGBUS on the next run. What is checked must be what is kept: a loaded model's weights do
not change whatever happens to the files. In a shared cache (``aioge.cache_shared=1``) a
weight file others may write is refused (a warning and a recompile), as every other cache
file is.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import stat
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

import aioge
from tests.reliability import _faults as F

WIDTH = 32
KEY = "wk"


def _options(root: Path, *, shared: bool = False) -> tuple[dict[str, str], dict[str, str]]:
    session = {
        "ge.op_compiler_cache_dir": str(root / "kc"),
        "ge.graph_compiler_cache_dir": str(root / "gc"),
        "aioge.cache_shared": "1" if shared else "0",
        **F.HEURISTIC,
    }
    # Trusting the key, an entry is saved whole: ``w`` is a weight file. (With the fingerprint
    # check the graph's own weights are references to it, not files: the weight files there
    # are those the passes made, tests/cache/test_graph_cache_weights.py.)
    return session, {"ge.graph_key": KEY, "ge.externalWeight": "1", "aioge.graph_cache_check": "key"}


def _weight_file(root: Path) -> Path:
    """The weight file of the constant ``w`` (files are named by the sha256 of their bytes)."""
    digest = hashlib.sha256(F.weights(1.0, WIDTH).tobytes()).hexdigest()
    path = root / "gc" / "weight" / f"weight_{digest}"
    assert path.is_file()
    return path


async def _build_once(root: Path, *, shared: bool = False) -> None:
    session, graph = _options(root, shared=shared)
    async with aioge.Session(session) as s:
        await s.add_graph(1, F.family_graph(1.0, width=WIDTH), graph)
        await s.run_graph(1, {"x": F.feed(4, 0, WIDTH)})


def _check(y: np.ndarray, x: np.ndarray) -> None:
    np.testing.assert_allclose(y, F.family_ref(x, 1.0, width=WIDTH), rtol=1e-5, atol=1e-6)


@pytest.fixture
def cached(tmp_path: Path) -> Path:
    (tmp_path / "gc").mkdir(mode=0o700)
    anyio.run(_build_once, tmp_path)
    return tmp_path


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_rewriting_a_weight_file_in_place_does_not_change_a_loaded_model(cached: Path) -> None:
    session, graph = _options(cached)
    async with aioge.Session(session) as s:
        await s.add_graph(1, F.family_graph(1.0, width=WIDTH), graph)
        x = F.feed(4, 1, WIDTH)
        _check((await s.run_graph(1, {"x": x}))["y"], x)
        assert s.compiled(1).stats.graph_cache_hit
        path = _weight_file(cached)
        with open(path, "r+b") as f:  # in place: same inode, same size, other numbers
            f.write(np.full(WIDTH * WIDTH, 3.0, np.float32).tobytes())
        for seed in (2, 3):
            x = F.feed(4, seed, WIDTH)
            _check((await s.run_graph(1, {"x": x}))["y"], x)


def _truncate_child(root: str, out: Any) -> None:
    async def main() -> list[bool]:
        session, graph = _options(Path(root))
        ok = []
        async with aioge.Session(session) as s:
            await s.add_graph(1, F.family_graph(1.0, width=WIDTH), graph)
            x = F.feed(4, 1, WIDTH)
            y = (await s.run_graph(1, {"x": x}))["y"]
            ok.append(s.compiled(1).stats.graph_cache_hit)
            ok.append(bool(np.allclose(y, F.family_ref(x, 1.0, width=WIDTH), rtol=1e-5, atol=1e-6)))
            for f in (Path(root) / "gc" / "weight").iterdir():
                os.truncate(f, 0)  # every weight file, under the loaded model
            for seed in (2, 3):
                x = F.feed(4, seed, WIDTH)
                y = (await s.run_graph(1, {"x": x}))["y"]
                ok.append(bool(np.allclose(y, F.family_ref(x, 1.0, width=WIDTH), rtol=1e-5, atol=1e-6)))
        return ok

    out.put(anyio.run(main))


@pytest.mark.timeout(120)
def test_truncating_weight_files_does_not_crash_or_change_a_loaded_model(cached: Path) -> None:
    # In a child: a SIGBUS must fail this test, not kill pytest.
    ctx = F.mp_context()
    out = ctx.Queue()
    p = ctx.Process(target=_truncate_child, args=(str(cached), out), daemon=True)
    p.start()
    try:
        ok = out.get(timeout=60)
    except queue.Empty:
        p.join(5)
        p.kill()
        pytest.fail(f"the child died or hung after the weight files were truncated (exit code {p.exitcode}; -7 is SIGBUS)")
    p.join(30)
    assert p.exitcode == 0, p.exitcode
    assert ok == [True, True, True, True], ok  # a hit, then right results before and after the truncation


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_loaded_models_weights_are_private_and_read_only(cached: Path) -> None:
    session, graph = _options(cached)
    async with aioge.Session(session) as s:
        await s.add_graph(1, F.family_graph(1.0, width=WIDTH), graph)
        await s.run_graph(1, {"x": F.feed(4, 0, WIDTH)})
        model = s.compiled(1)
    assert model.stats.graph_cache_hit
    w = model.graph.constants["w"].data
    assert not isinstance(w, np.memmap) and not isinstance(w.base, np.memmap)
    assert not w.flags.writeable
    np.testing.assert_array_equal(w, F.weights(1.0, WIDTH))


@pytest.mark.parametrize("bits, refused", [(stat.S_IWOTH, True), (stat.S_IWOTH | stat.S_IWGRP, True), (stat.S_IWGRP, False)])
@pytest.mark.timeout(60)
def test_shared_cache_refuses_weight_files_others_may_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bits: int, refused: bool
) -> None:
    (tmp_path / "gc").mkdir(mode=0o700)
    anyio.run(lambda: _build_once(tmp_path, shared=True))
    path = _weight_file(tmp_path)
    os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) | bits)

    async def again() -> Any:
        session, graph = _options(tmp_path, shared=True)
        async with aioge.Session(session) as s:
            await s.add_graph(1, F.family_graph(1.0, width=WIDTH), graph)
            x = F.feed(4, 5, WIDTH)
            _check((await s.run_graph(1, {"x": x}))["y"], x)
            return s.compiled(1)

    with caplog.at_level(logging.WARNING):
        model = anyio.run(again)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("aioge")]
    if not refused:  # the group of a shared cache is trusted, as for every other shared cache file
        assert model.stats.graph_cache_hit and not warnings, warnings
        return
    assert not model.stats.graph_cache_hit
    assert len(warnings) == 1 and "writable by others" in warnings[0] and path.name in warnings[0], warnings
    assert not stat.S_IMODE(os.lstat(path).st_mode) & stat.S_IWOTH  # the recompile rewrote it, not others-writable
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        model = anyio.run(again)
    assert model.stats.graph_cache_hit  # and the rewritten file is trusted again
