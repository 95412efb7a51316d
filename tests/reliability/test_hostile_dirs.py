"""Cache dirs that cannot be used, and an index that names files it does not own.

- A kernel cache root with any error but "not found" (a path under a regular file, a name
  too long, permission denied, the default ``$HOME/atc_data`` not readable by this user)
  made every compile fail with a raw OSError. It must degrade to no cache: one warning
  naming the path and the problem, compiles and results as without a cache.
- The ``aioge cache`` tools and ``aioge demo`` printed a traceback for the same: they must
  print one line naming the path and the problem on stderr and exit non-zero.
- An unreadable graph cache dir raised a bare PermissionError on every run: one warning,
  then compiles without it.
- A crafted ``.idx`` entry naming any file in the dir got that file deleted: only files
  provably the key's own entries may be removed.

Permission denied needs another user when the tests run as root: those cases run in a
forkserver child that turns uid 65534 (as tests/reliability/test_disk_faults.py does).
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

import aioge
from aioge.cache import graph_cache
from tests.reliability import _faults as F

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
WIDTH = 16
LONG = "n" * 300  # longer than NAME_MAX (255)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("aioge")]


async def _compile_and_run(session: dict[str, str], graph_options: dict[str, str] | None = None) -> list[Any]:
    """Two graphs, two input shapes each (four builds) in one session; returns their stats."""
    stats = []
    async with aioge.Session({**F.HEURISTIC, **session}) as s:
        for gid, variant in ((1, 0), (2, 1)):
            await s.add_graph(gid, F.family_graph(1.0, variant=variant, width=WIDTH), graph_options or {})
            for n in (2, 3):
                x = F.feed(n, n, WIDTH)
                with anyio.fail_after(30):
                    y = (await s.run_graph(gid, {"x": x}))["y"]
                np.testing.assert_allclose(y, F.family_ref(x, 1.0, variant=variant, width=WIDTH), rtol=1e-5, atol=1e-6)
                stats.append(s.compiled(gid).stats)
    return stats


# -- the kernel cache root ---------------------------------------------------------------


def _bad_root(tmp_path: Path, case: str) -> tuple[str, str]:
    """(root, what the warning must say) for a root that cannot be used."""
    afile = tmp_path / "afile"
    afile.write_text("a user's file")
    if case == "under_a_file":
        return str(afile / "kc"), "Not a directory"
    if case == "is_a_file":
        return str(afile), "not a directory"
    if case == "name_too_long":
        return str(tmp_path / LONG / "kc"), "File name too long"
    raise AssertionError(case)


@pytest.mark.anyio
@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", ["under_a_file", "is_a_file", "name_too_long"])
async def test_unusable_kernel_cache_root_compiles_without_it_with_one_warning(
    case: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root, problem = _bad_root(tmp_path, case)
    with caplog.at_level(logging.WARNING):
        stats = await _compile_and_run({"ge.op_compiler_cache_dir": root})
    assert all(s.kernels_compiled >= 1 and s.kernel_cache_hits == 0 for s in stats)
    warnings = _warnings(caplog)
    assert len(warnings) == 1, warnings
    assert root in warnings[0] and problem in warnings[0] and "compiling without it" in warnings[0], warnings
    assert (tmp_path / "afile").read_text() == "a user's file"


# -- as another user: permission denied -----------------------------------------------------


@pytest.fixture
def base():
    # Not under tmp_path: its parents are 0o700, and the child may run as another user.
    d = tempfile.mkdtemp(prefix="aioge-hostile-")
    os.chmod(d, 0o711)
    yield Path(d)
    for dirpath, dirnames, _ in os.walk(d):
        for n in dirnames:
            os.chmod(os.path.join(dirpath, n), 0o700)
    shutil.rmtree(d, ignore_errors=True)


def _nobody_child(fn: str, args: tuple[Any, ...], env: dict[str, str | None], as_nobody: bool, out: Any) -> None:
    """Run ``fn(*args)`` of this module (as uid 65534 when ``as_nobody``) with ``env`` applied; put
    its result, aioge's warnings and its error on ``out``."""
    import anyio._backends._asyncio  # noqa: F401 - imported before the user changes (it may not read it after)
    import numpy.testing  # noqa: F401 - it imports unittest, from the stdlib (which may be private to root)

    import aioge.cache.kernel_cache  # noqa: F401
    import aioge.cli  # noqa: F401

    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    if as_nobody:
        os.setgid(F.NOBODY)
        os.setuid(F.NOBODY)
    result: dict[str, Any] = {"error": None, "value": None}
    with F.Warnings() as w:
        try:
            result["value"] = globals()[fn](*args)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            result["error"] = f"{type(exc).__name__}: {exc}"
    result["warnings"] = w.messages
    out.put(result)


def _in_child(fn: str, *args: Any, env: dict[str, str | None] | None = None) -> dict[str, Any]:
    if ROOT and not _nobody_can_import():
        pytest.skip("uid 65534 cannot read this interpreter's packages (a private venv dir), so permission faults cannot run")
    ctx = F.mp_context()
    out = ctx.Queue()
    p = ctx.Process(target=_nobody_child, args=(fn, args, env or {}, ROOT, out), daemon=True)
    p.start()
    try:
        result = out.get(timeout=90)
    except queue.Empty:
        p.kill()
        pytest.fail("the child hung or died")
    p.join(30)
    assert p.exitcode == 0, p.exitcode
    return result


def _probe(site: str, out: Any) -> None:
    try:
        os.setgid(F.NOBODY)
        os.setuid(F.NOBODY)
        out.put(os.access(site, os.R_OK | os.X_OK))
    except Exception:  # noqa: BLE001 - any failure means: cannot run as nobody here
        out.put(False)


def _nobody_can_import() -> bool:
    import threadpoolctl  # a package the children import late, from site-packages

    ctx = F.mp_context()
    out = ctx.Queue()
    p = ctx.Process(target=_probe, args=(os.path.dirname(os.path.abspath(threadpoolctl.__file__)), out), daemon=True)
    p.start()
    ok = bool(out.get(timeout=60))
    p.join(30)
    return ok


def _locked(path: Path) -> Path:
    """A directory this test's child cannot look into (as root: the child is another user)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o000)
    return path


def _mine(path: Path) -> Path:
    """A directory the child owns (it may write there)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if ROOT:
        os.chown(path, F.NOBODY, F.NOBODY)
    return path


def compile_and_run_child(session: dict[str, str], graph_options: dict[str, str]) -> list[list[Any]]:
    stats = anyio.run(_compile_and_run, session, graph_options)
    return [[s.kernels_compiled, s.kernel_cache_hits, s.graph_cache_hit] for s in stats]


@pytest.mark.timeout(120)
def test_kernel_cache_root_permission_denied_compiles_without_it(base: Path) -> None:
    root = _locked(base / "private") / "kc"
    result = _in_child("compile_and_run_child", {"ge.op_compiler_cache_dir": str(root)}, {})
    assert result["error"] is None, result
    assert all(kc >= 1 and hits == 0 for kc, hits, _ in result["value"]), result
    (w,) = result["warnings"]
    assert str(root) in w and "Permission denied" in w and "compiling without it" in w, w


@pytest.mark.timeout(120)
def test_default_kernel_cache_root_not_readable_compiles_without_it(base: Path) -> None:
    home = base / "home"
    home.mkdir(mode=0o755)
    _locked(home / "atc_data")  # someone else's, not readable by this user
    result = _in_child("compile_and_run_child", {}, {}, env={"HOME": str(home), "ASCEND_CACHE_PATH": None})
    assert result["error"] is None, result
    (w,) = result["warnings"]
    assert str(home / "atc_data") in w and "Permission denied" in w, w


@pytest.mark.timeout(120)
@pytest.mark.parametrize("access", ["none", "search_only"])
def test_unreadable_graph_cache_dir_compiles_without_it_with_one_warning(base: Path, access: str) -> None:
    gc = base / "gc"
    gc.mkdir()
    # As root the child is another user: the "others" bits apply; else the owner's.
    os.chmod(gc, {"none": 0o700 if ROOT else 0o000, "search_only": 0o701 if ROOT else 0o100}[access])
    kc = _mine(base / "kc")
    result = _in_child(
        "compile_and_run_child",
        {"ge.op_compiler_cache_dir": str(kc), "ge.graph_compiler_cache_dir": str(gc)},
        {"ge.graph_key": "hostile", "ge.externalWeight": "1"},
    )
    assert result["error"] is None, result  # was: PermissionError on every run
    assert not any(hit for _, _, hit in result["value"]), result
    assert any(hits >= 1 for _, hits, _ in result["value"]), result  # the kernel cache still works
    warnings = result["warnings"]
    assert len(warnings) == 2, warnings  # once per graph (each graph's cache), not once per build: two graphs, four builds
    for w in warnings:
        assert "graph cache 'hostile'" in w and str(gc) in w and "compiling without it" in w, w


def cli_child(argv: list[str]) -> tuple[int, str]:
    import io as _io

    from aioge import cli

    err = _io.StringIO()
    old, sys.stderr = sys.stderr, err
    try:
        logging.getLogger().handlers.clear()  # main() configures logging onto this stderr
        code = cli.main(argv)
    finally:
        sys.stderr = old
    return code, err.getvalue()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["stats", "clear", "prune"])
def test_cli_cache_tools_on_a_root_without_permission_print_one_line(base: Path, command: str) -> None:
    root = _locked(base / "private") / "kc"
    result = _in_child("cli_child", ["cache", command, "--dir", str(root)])
    assert result["error"] is None, result
    code, err = result["value"]
    assert code != 0 and len(err.splitlines()) == 1, err
    assert str(root) in err and "Permission denied" in err and "Traceback" not in err, err


# -- the CLI, as a user runs it ---------------------------------------------------------------


def _aioge(*argv: str, env: dict[str, str | None]) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ)
    for k, v in env.items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = v
    return subprocess.run(
        [sys.executable, "-m", "aioge", *argv], env=full, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["under_a_file", "is_a_file", "name_too_long"])
@pytest.mark.parametrize("command", ["stats", "clear"])
def test_cli_cache_tools_on_an_unusable_dir_print_one_line(tmp_path: Path, case: str, command: str) -> None:
    root, problem = _bad_root(tmp_path, case)
    r = _aioge("cache", command, "--dir", root, env={})
    assert r.returncode != 0, (r.stdout, r.stderr)
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert root in r.stderr and problem in r.stderr, r.stderr
    assert (tmp_path / "afile").read_text() == "a user's file"


@pytest.mark.timeout(120)
def test_cli_cache_stats_with_an_unusable_default_root_prints_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home_is_a_file"
    home.write_text("")
    r = _aioge("cache", "stats", env={"HOME": str(home), "ASCEND_CACHE_PATH": None})
    assert r.returncode != 0 and len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert str(home / "atc_data") in r.stderr and "Not a directory" in r.stderr, r.stderr


@pytest.mark.timeout(120)
def test_cli_demo_with_an_unwritable_home_prints_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home_is_a_file"
    home.write_text("")
    r = _aioge("demo", "--model", "mlp", env={"HOME": str(home), "AIOGE_HOME": None, "ASCEND_CACHE_PATH": None})
    assert r.returncode != 0 and len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert str(home) in r.stderr and "Not a directory" in r.stderr and "--cache-dir" in r.stderr, r.stderr


# -- a crafted index ----------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_crafted_index_entries_cannot_delete_files_that_are_not_the_keys_own(tmp_path: Path) -> None:
    gc = tmp_path / "gc"
    gc.mkdir(mode=0o700)
    session = {"ge.op_compiler_cache_dir": str(tmp_path / "kc"), "ge.graph_compiler_cache_dir": str(gc)}
    await _compile_and_run(session, {"ge.graph_key": "other"})  # another key's files, other.idx among them
    await _compile_and_run(session, {"ge.graph_key": "victim"})
    precious = gc / "precious.txt"
    precious.write_text("a user's file")
    # aioge's own hit/miss counters (aioge.graph-stats, its lock) change with every lookup
    keep = {
        p.name: p.read_bytes() for p in gc.iterdir() if p.is_file() and not p.name.startswith(("victim", "aioge.graph-stats"))
    }
    cache = graph_cache.GraphCache(str(gc), "victim")
    entries, intact = cache.read_index_sync()
    assert intact and entries
    crafted = []
    for e in entries:  # valid entries in every respect but the file they name
        for name in ("precious.txt", "other.idx", next(n for n in keep if n.startswith("other_") and n.endswith(".om"))):
            crafted.append({**e, "cache_file_name": name})
    cache._publish_index(crafted)  # only the crafted ones: every lookup misses, recompiles and drops them
    stats = await _compile_and_run(session, {"ge.graph_key": "victim"})
    assert not any(s.graph_cache_hit for s in stats[:1])
    for name, data in keep.items():
        assert (gc / name).read_bytes() == data, f"{name} was changed or deleted"
    assert precious.read_text() == "a user's file"
    stats = await _compile_and_run(session, {"ge.graph_key": "other"})
    assert all(s.graph_cache_hit for s in stats)  # the other key's index and models are whole


def test_a_key_never_claims_another_keys_model_files(tmp_path: Path) -> None:
    # Key "a" must not take "a_<14 digits>"'s files for its own (to index or to remove).
    cache = graph_cache.GraphCache(str(tmp_path), "a")
    assert cache._om_re.fullmatch("a_20261203212205.om") and cache._om_re.fullmatch("a_20261203212205_9999.om")
    assert not cache._om_re.fullmatch("a_12345678901234_20261203212205.om")
    assert not cache._om_re.fullmatch("a_12345678901234_20261203212205_1.om")
