"""Shared cache trust, like ssh with its keys.

A kernel entry, ``.om``, ``.idx``, ``.rdcpkt`` or ``weight/`` file, or a cache directory, that
its group or others may write, or that another user owns, is not loaded (one warning names
the path and why) unless ``aioge.cache_shared=1`` says the cache is shared (others' writes stay
refused even then). Symbolic links inside a cache are not followed. New files are owner-only.
Graph keys and soc names cannot escape their directory. Foreign owners need root (os.chown).
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from pathlib import Path

import anyio
import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.cache.graph_cache import GraphCache
from aioge.errors import OptionError

W = (np.arange(16, dtype=np.float32).reshape(4, 4) - 8) / 16
X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
REF = np.maximum(X @ W, 0) + 1
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
FOREIGN = 54321
CASES: list[str] = []


def _graph() -> aioge.Graph:
    g = aioge.Graph("trusted")
    x = g.input("x", (2, 4))
    g.output(ops.relu(ops.einsum(x, g.constant(W, "w"), equation="ni,ij->nj")) + 1.0, names=["y"])
    return g


def _run(root: Path, *, graph_cache: bool, shared: bool = False) -> object:
    opts = {
        "ge.op_compiler_cache_dir": str(root / "kc"),
        "aioge.tune_mode": "heuristic",
        "aioge.cache_shared": "1" if shared else "0",
    }
    if graph_cache:
        opts["ge.graph_compiler_cache_dir"] = str(root / "gc")

    async def go() -> object:
        async with aioge.Session(opts) as s:
            await s.add_graph(1, _graph(), {"ge.graph_key": "tk", "ge.externalWeight": "1"} if graph_cache else {})
            y = (await s.run_graph(1, {"x": X}))["y"]
            np.testing.assert_allclose(y, REF, rtol=1e-5, atol=1e-6)
            return s.compiled(1)

    return anyio.run(go)


@pytest.fixture
def warm(tmp_path: Path) -> Path:
    (tmp_path / "gc").mkdir(mode=0o700)
    _run(tmp_path, graph_cache=True)
    _run(tmp_path, graph_cache=False)
    return tmp_path


def _entry(root: Path) -> Path:
    return next((root / "kc" / "kernel_cache" / "AiogeSim").glob("*.aiok"))


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("aioge")]


def _chmod_add(path: Path, bits: int) -> None:
    os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) | bits)


def _outside_copy(path: Path, tmp_path: Path) -> Path:
    """Replace ``path`` by a symbolic link to an identical copy outside the cache."""
    outside = tmp_path / "outside" / path.name
    outside.parent.mkdir(exist_ok=True)
    (shutil.copytree if path.is_dir() else shutil.copy2)(path, outside)
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    path.symlink_to(outside)
    return outside


KERNEL_CASES = {
    "entry group-writable": (lambda r, t: _chmod_add(_entry(r), stat.S_IWGRP), "writable by its group", True),
    "entry other-writable": (lambda r, t: _chmod_add(_entry(r), stat.S_IWOTH), "writable by others", False),
    "soc dir group-writable": (
        lambda r, t: _chmod_add(r / "kc" / "kernel_cache" / "AiogeSim", stat.S_IWGRP),
        "writable by its group",
        True,
    ),
    "kernel_cache dir other-writable": (
        lambda r, t: _chmod_add(r / "kc" / "kernel_cache", stat.S_IWOTH),
        "writable by others",
        False,
    ),
    "root dir group-writable": (lambda r, t: _chmod_add(r / "kc", stat.S_IWGRP), "writable by its group", True),
    "entry is a link outside": (lambda r, t: _outside_copy(_entry(r), t), "", False),
    "soc dir is a link outside": (lambda r, t: _outside_copy(r / "kc" / "kernel_cache" / "AiogeSim", t), "symbolic link", False),
}
if ROOT:
    KERNEL_CASES["entry owned by another user"] = (lambda r, t: os.chown(_entry(r), FOREIGN, -1), f"owned by uid {FOREIGN}", True)
    KERNEL_CASES["soc dir owned by another user"] = (
        lambda r, t: os.chown(r / "kc" / "kernel_cache" / "AiogeSim", FOREIGN, -1),
        f"owned by uid {FOREIGN}",
        True,
    )


@pytest.mark.parametrize("case", sorted(KERNEL_CASES))
def test_untrusted_kernel_cache_is_not_loaded(case: str, warm: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    damage, reason, shared_ok = KERNEL_CASES[case]
    damage(warm, tmp_path)
    with caplog.at_level(logging.WARNING):
        model = _run(warm, graph_cache=False)
    assert model.stats.kernel_cache_hits == 0 or "entry" in case, case  # a dir: nothing from it
    assert model.stats.kernels_compiled >= 1
    (w,) = {m for m in _warnings(caplog) if "not trusted" in m or "unusable" in m}
    assert "not trusted" in w or "Too many levels of symbolic links" in w or "symbolic link" in w, w
    assert reason in w and str(warm) in w, w
    caplog.clear()
    model = _run(warm, graph_cache=False, shared=True)  # a shared cache trusts its group and other users, never others' writes
    hits = model.stats.kernel_cache_hits >= 1
    if shared_ok:
        assert hits and not _warnings(caplog), (case, _warnings(caplog))
    CASES.append(f"kernel: {case}")


GRAPH_CASES = {
    ".om group-writable": (lambda r, t: _chmod_add(next((r / "gc").glob("tk_*.om")), stat.S_IWGRP), "writable by its group"),
    ".idx other-writable": (lambda r, t: _chmod_add(r / "gc" / "tk.idx", stat.S_IWOTH), "writable by others"),
    "weight file other-writable": (
        lambda r, t: _chmod_add(next((r / "gc" / "weight").iterdir()), stat.S_IWOTH),
        "writable by others",
    ),
    "weight dir group-writable": (lambda r, t: _chmod_add(r / "gc" / "weight", stat.S_IWGRP), "writable by its group"),
    "cache dir other-writable": (lambda r, t: _chmod_add(r / "gc", stat.S_IWOTH), "writable by others"),
    ".om is a link outside": (lambda r, t: _outside_copy(next((r / "gc").glob("tk_*.om")), t), "symbolic link"),
    ".idx is a link outside": (lambda r, t: _outside_copy(r / "gc" / "tk.idx", t), ""),
    "weight dir is a link outside": (lambda r, t: _outside_copy(r / "gc" / "weight", t), "symbolic link"),
    "weight file is a link outside": (lambda r, t: _outside_copy(next((r / "gc" / "weight").iterdir()), t), ""),
}
if ROOT:
    GRAPH_CASES[".om owned by another user"] = (
        lambda r, t: os.chown(next((r / "gc").glob("tk_*.om")), FOREIGN, -1),
        f"uid {FOREIGN}",
    )
    GRAPH_CASES["cache dir owned by another user"] = (lambda r, t: os.chown(r / "gc", FOREIGN, -1), f"uid {FOREIGN}")


@pytest.mark.parametrize("case", sorted(GRAPH_CASES))
def test_untrusted_graph_cache_files_are_not_loaded(
    case: str, warm: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    damage, reason = GRAPH_CASES[case]
    outside_before = sorted(p.name for p in (tmp_path / "outside").iterdir()) if (tmp_path / "outside").exists() else []
    damage(warm, tmp_path)
    with caplog.at_level(logging.WARNING):
        model = _run(warm, graph_cache=True)
    warnings = _warnings(caplog)
    assert len(warnings) == 1, (case, warnings)
    (w,) = warnings
    if ".idx" in case:  # the index is not read; it is rebuilt from this user's own valid .om files, which may hit
        assert "index unreadable" in w and "not trusted" in w or "symbolic links" in w, w
    else:
        assert not model.stats.graph_cache_hit, case
    assert reason in w and ("not trusted" in w or "symbolic links" in w), w
    assert str(warm) in w, w
    if (tmp_path / "outside").exists():  # nothing was written through a link to outside the cache
        assert sorted(p.name for p in (tmp_path / "outside").iterdir()) == outside_before or not outside_before
    CASES.append(f"graph: {case}")


def test_new_files_are_owner_only(tmp_path: Path) -> None:
    (tmp_path / "gc").mkdir(mode=0o700)
    old = os.umask(0o002)  # a permissive umask (user private groups) must not make the cache group-writable
    try:
        _run(tmp_path, graph_cache=True)
        _run(tmp_path, graph_cache=False)
    finally:
        os.umask(old)
    seen = 0
    for base in (tmp_path / "kc", tmp_path / "gc"):
        for p in [base, *base.rglob("*")]:
            mode = stat.S_IMODE(os.lstat(p).st_mode)
            want = 0o700 if p.is_dir() else 0o600
            assert mode == want, f"{p}: {mode:04o}, expected {want:04o}"
            seen += 1
    assert seen >= 10
    CASES.append("owner-only modes")


def test_a_shared_cache_is_group_writable_but_never_world_writable(tmp_path: Path) -> None:
    (tmp_path / "gc").mkdir(mode=0o770)
    old = os.umask(0o002)
    try:
        _run(tmp_path, graph_cache=True, shared=True)
        model = _run(tmp_path, graph_cache=True, shared=True)
    finally:
        os.umask(old)
    assert model.stats.graph_cache_hit
    for p in [*(tmp_path / "kc").rglob("*"), *(tmp_path / "gc").rglob("*")]:
        assert not os.lstat(p).st_mode & stat.S_IWOTH, p
    CASES.append("shared modes")


@pytest.mark.parametrize("key", ["../x", "/abs", "a/b", "a\\b", "a\x00b", ".", "..", "x" * 129, "a b", "ü"])
def test_graph_keys_cannot_escape_their_dir(key: str, tmp_path: Path) -> None:
    async def go() -> None:
        async with aioge.Session({"ge.graph_compiler_cache_dir": str(tmp_path)}) as s:
            await s.add_graph(1, _graph(), {"ge.graph_key": key})

    with pytest.raises(OptionError, match="ge.graph_key"):
        anyio.run(go)
    with pytest.raises(OptionError, match="ge.graph_key"):
        GraphCache(str(tmp_path), key)
    assert os.listdir(tmp_path) == []
    CASES.append(f"key {key!r}")


@pytest.mark.parametrize("soc", ["../x", "/abs", "a/b", "a\x00b"])
def test_soc_names_cannot_escape_the_kernel_cache(soc: str) -> None:
    with pytest.raises(OptionError, match="ge.socVersion"):
        aioge.Session({"ge.socVersion": soc})


@pytest.mark.parametrize("path", ["a\x00b", "x/\x00"])
def test_cache_paths_with_nul_are_refused(path: str) -> None:
    for key in ("ge.graph_compiler_cache_dir", "ge.op_compiler_cache_dir"):
        with pytest.raises(OptionError, match=key):
            aioge.Session({key: path})


def test_index_names_cannot_escape_the_dir(warm: Path, caplog: pytest.LogCaptureFixture) -> None:
    from aioge.plan import io

    idx = warm / "gc" / "tk.idx"
    _, payload = io.open_envelope(idx.read_bytes(), "idx", check_versions=False)
    entries = io.unpack(payload)["cache_file_list"]
    outside = warm / "secret.om"
    outside.write_bytes(next((warm / "gc").glob("tk_*.om")).read_bytes())
    evil = [{**entries[0], "cache_file_name": name} for name in ("../secret.om", str(outside), "a/../../secret.om", "x\x00y")]
    idx.write_bytes(io.make_envelope("idx", io.pack({"cache_file_list": evil})))
    with caplog.at_level(logging.WARNING):
        model = _run(warm, graph_cache=True)
    assert outside.exists()  # neither loaded nor deleted
    assert not model.stats.graph_cache_hit or next((warm / "gc").glob("tk_*.om"))
    assert any("malformed entries" in w for w in _warnings(caplog))
    CASES.append("index names")
