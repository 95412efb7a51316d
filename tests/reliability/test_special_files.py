"""A FIFO, socket, directory, device or link to a device in place of any cache file.

Opening a FIFO for reading waits for a writer: a cache that opened one blocked a worker
thread forever (no anyio timeout can cancel a thread), in the graph cache while holding the
key's lock. Every cache file kind is replaced by every special file in turn; the compile
and run must finish promptly with the right result and one warning naming the file and
what it is, as a miss. Each case runs in a child process, so a hang fails the test (the
child is killed) instead of hanging pytest.
"""

from __future__ import annotations

import os
import queue
import shutil
import socket
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aioge.errors import CacheError
from aioge.plan import io
from tests.reliability import _faults as F

SOC = "AiogeSim"
KEY = "sk"
WIDTH = 16
SPECIALS = ["fifo", "socket", "directory", "chardev", "link_to_dev_zero"]
# kind -> (glob under the cache root, whether the graph cache is on for the run)
KINDS = {
    "idx": (f"gc/{KEY}.idx", True),
    "om": (f"gc/{KEY}_*.om", True),
    "rdcpkt": (f"gc/{KEY}_*.rdcpkt", True),
    "weight": ("gc/weight/weight_*", True),
    "graph_lock": (f"gc/{KEY}.lock", True),
    "kernel": (f"kc/kernel_cache/{SOC}/*.aiok", False),
    "generation": (f"kc/kernel_cache/{SOC}/generation.aiog", False),
    "stats": (f"kc/kernel_cache/{SOC}/stats.aios", False),
    "op_cache_ini": ("kc/kernel_cache/op_cache.ini", False),
    "kernel_lock": (f"kc/kernel_cache/{SOC}/.locks/*.lock", False),
}
# A directory cannot be replaced by an atomic rename of a file: a save or store into its
# place fails too, and says so (one more warning, naming the same file).
WRITE_FAILS = {"directory"}
CHILD_TIMEOUT = 60.0


def _options(root: str, graph_cache: bool, force: bool = False) -> tuple[dict[str, str], dict[str, str]]:
    session = {"ge.op_compiler_cache_dir": os.path.join(root, "kc"), **F.HEURISTIC}
    graph = {"ge.op_compiler_cache_mode": "force" if force else "enable"}
    if graph_cache:
        session["ge.graph_compiler_cache_dir"] = os.path.join(root, "gc")
        graph.update({"ge.graph_key": KEY, "ge.externalWeight": "1"})
    return session, graph


def run_child(root: str, graph_cache: bool, force: bool, backend: str, out: Any) -> None:
    """Compile and run the family graph twice in one session; put outputs' correctness,
    stats and aioge's warnings on ``out``."""
    import anyio

    import aioge

    result: dict[str, Any] = {"ok": [], "error": None}

    async def main() -> None:
        session, graph = _options(root, graph_cache, force)
        async with aioge.Session(session) as s:
            await s.add_graph(1, F.family_graph(1.0, width=WIDTH), graph)
            for seed in (1, 2):
                x = F.feed(3, seed, WIDTH)
                y = (await s.run_graph(1, {"x": x}))["y"]
                result["ok"].append(bool(np.allclose(y, F.family_ref(x, 1.0, width=WIDTH), rtol=1e-5, atol=1e-6)))
            stats = s.compiled(1).stats
            result["graph_cache_hit"] = stats.graph_cache_hit
            result["kernel_cache_hits"] = stats.kernel_cache_hits

    with F.Warnings() as w:
        try:
            anyio.run(main, backend=backend)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            result["error"] = f"{type(exc).__name__}: {exc}"
    result["warnings"] = w.messages
    out.put(result)


def run_in_child(root: str | Path, *, graph_cache: bool, force: bool = False, backend: str = "asyncio") -> dict[str, Any]:
    """``run_child`` in a forkserver child; a child that does not answer in time is killed
    and the test fails (a hang must not hang pytest)."""
    ctx = F.mp_context()
    out = ctx.Queue()
    p = ctx.Process(target=run_child, args=(str(root), graph_cache, force, backend, out), daemon=True)
    p.start()
    try:
        result = out.get(timeout=CHILD_TIMEOUT)
    except queue.Empty:
        p.kill()
        p.join(10)
        pytest.fail(f"the compile and run did not finish in {CHILD_TIMEOUT:.0f} s (hung on a special file?)")
    p.join(30)
    assert p.exitcode == 0, p.exitcode
    return result


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A warm cache holding every file kind: a force compile (a generation file), then a
    graph cache entry with a variable (.rdcpkt) and external weights."""
    root = tmp_path_factory.mktemp("special_template")
    (root / "gc").mkdir(mode=0o700)
    first = run_in_child(root, graph_cache=False, force=True)
    second = run_in_child(root, graph_cache=True)
    third = run_in_child(root, graph_cache=True)
    for r in (first, second, third):
        assert r["error"] is None and r["ok"] == [True, True] and not r["warnings"], r
    assert third["graph_cache_hit"]
    return root


@pytest.fixture
def warm(template: Path, tmp_path: Path) -> Path:
    root = tmp_path / "cache"
    shutil.copytree(template, root, symlinks=True)
    return root


def _make_special(path: Path, special: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    if special == "fifo":
        os.mkfifo(path)
    elif special == "directory":
        path.mkdir(mode=0o700)
    elif special == "link_to_dev_zero":
        path.symlink_to("/dev/zero")
    elif special == "chardev":
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # what /dev/zero is
        except PermissionError:
            pytest.skip("mknod needs CAP_MKNOD (the FIFO, socket, directory and link cases cover the rest)")
    elif special == "socket":
        monkeypatch.chdir(path.parent)  # a socket's path must fit in 108 bytes: bind by its bare name
        s = socket.socket(socket.AF_UNIX)
        try:
            s.bind(path.name)
        finally:
            s.close()
    else:  # pragma: no cover
        raise AssertionError(special)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("special", SPECIALS)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_special_file_in_place_of_a_cache_file_is_a_miss(
    kind: str, special: str, warm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pattern, graph_cache = KINDS[kind]
    path = sorted(warm.glob(pattern))[0]
    _make_special(path, special, monkeypatch)
    result = run_in_child(warm, graph_cache=graph_cache)
    assert result["error"] is None, result
    assert result["ok"] == [True, True], result
    warnings = result["warnings"]
    if kind.endswith("lock"):  # a lock file is only flocked, never read: nothing to warn about
        assert not warnings, warnings
        return
    assert warnings, "no warning named the special file"
    assert path.name in warnings[0], warnings
    if kind == "op_cache_ini":
        assert len(set(warnings)) == 1, warnings  # the limits are read more than once per compile: the same warning
    elif special in WRITE_FAILS:
        assert len(warnings) <= 3 and all(path.name in w or "could not save" in w for w in warnings), warnings
    else:
        assert len(warnings) == 1, warnings
    if special != "link_to_dev_zero" and kind != "rdcpkt":
        what = {"fifo": "a FIFO", "socket": "a socket", "directory": "a directory", "chardev": "a character device"}[special]
        assert what in "".join(warnings), warnings


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("kind", ["idx", "om", "weight", "generation"])
def test_a_fifo_does_not_hang_either_backend(kind: str, backend: str, warm: Path) -> None:
    pattern, graph_cache = KINDS[kind]
    path = sorted(warm.glob(pattern))[0]
    path.unlink()
    os.mkfifo(path)
    result = run_in_child(warm, graph_cache=graph_cache, backend=backend)
    assert result["error"] is None and result["ok"] == [True, True], result
    assert len(result["warnings"]) == 1 and "FIFO" in result["warnings"][0], result["warnings"]
    if kind == "idx":  # rebuilt from the .om files: still a hit
        assert result["graph_cache_hit"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("special", ["fifo", "socket", "directory", "link_to_dev_zero"])
def test_open_regular_refuses_without_blocking(special: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f"
    path.touch()
    _make_special(path, special, monkeypatch)
    with pytest.raises((CacheError, OSError)) as err:
        io.read_bytes_sync(path)
    assert str(path.name) in str(err.value) or err.value.__class__ is OSError
    assert io.unlink_if_ours(path) is False
    assert os.path.lexists(path)


@pytest.mark.timeout(120)
def test_cli_cache_tools_do_not_hang_on_special_files(warm: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from aioge import cli

    soc = warm / "kc" / "kernel_cache" / SOC
    for name in ("generation.aiog", "stats.aios"):
        (soc / name).unlink()
        os.mkfifo(soc / name)
    entry = sorted(soc.glob("*.aiok"))[0]
    ctx = F.mp_context()
    out = ctx.Queue()
    p = ctx.Process(target=_cli_child, args=(str(warm / "kc"), out), daemon=True)
    p.start()
    try:
        codes = out.get(timeout=CHILD_TIMEOUT)
    except queue.Empty:
        p.kill()
        pytest.fail("aioge cache stats/clear hung on a FIFO")
    p.join(30)
    assert codes == [0, 0], codes
    assert not entry.exists()  # clear removed the entries
    assert stat.S_ISFIFO(os.lstat(soc / "generation.aiog").st_mode)  # and left what it did not write
    assert cli is not None


@pytest.mark.timeout(120)
def test_graph_cache_clear_and_prune_do_not_hang_on_special_files(tmp_path: Path) -> None:
    """A FIFO named like a key's index (or its model) is not aioge's: left alone, no hang."""
    gc = tmp_path / "gc"
    gc.mkdir(mode=0o700)
    os.mkfifo(gc / "k.idx")
    os.mkfifo(gc / "k_20261203000000.om")
    ctx = F.mp_context()
    out = ctx.Queue()
    p = ctx.Process(target=_graph_tools_child, args=(str(gc), out), daemon=True)
    p.start()
    try:
        got = out.get(timeout=CHILD_TIMEOUT)
    except queue.Empty:
        p.kill()
        pytest.fail("clearing or pruning the graph cache hung on a FIFO")
    p.join(30)
    assert got == (0, [])
    assert stat.S_ISFIFO(os.lstat(gc / "k.idx").st_mode) and stat.S_ISFIFO(os.lstat(gc / "k_20261203000000.om").st_mode)


def _graph_tools_child(directory: str, out: Any) -> None:
    from aioge.cache.graph_tools import clear_graph_cache, prune_graph_cache

    out.put((clear_graph_cache(directory), prune_graph_cache(directory, now=4e9)))


def _cli_child(root: str, out: Any) -> None:
    from aioge import cli

    out.put([cli.main(["cache", "stats", "--dir", root]), cli.main(["cache", "clear", "--dir", root])])
