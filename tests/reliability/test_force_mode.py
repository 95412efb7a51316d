"""``force`` mode in hostile and busy kernel-cache dirs (issue 16).

- An untrusted soc dir (writable by others, or owned by another user) is neither read nor
  written, in force mode as in enable mode: one warning, and the compile goes on without the
  cache (what ccache does with a cache dir it cannot use), leaving the dir as it was.
- Force frees disk: every older generation that no compile holds is reclaimed when the force
  compile's kernels are done, and a dead generation a compile still holds is reclaimed when
  that compile lets go.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import anyio
import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.cache.kernel_cache import KernelCache

pytestmark = pytest.mark.anyio

W = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
X = np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)
REF = np.tanh(np.maximum(X @ W, 0) + 1.0)
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
FOREIGN = 54321
UNFUSED = "ActivationFusionPass:off;ElementwiseFusionPass:off;MatMulAddFusionPass:off"


def _graph() -> aioge.Graph:
    g = aioge.Graph("forced")
    x = g.input("x", (4, 8), "float32")
    g.output(ops.tanh(ops.relu(ops.apply("MatMul", [x, g.constant(W, "w")])[0]) + 1.0), names=["y"])
    return g


def _opts(root: Path, mode: str = "force") -> dict[str, str]:
    return {
        "ge.op_compiler_cache_dir": str(root),
        "ge.op_compiler_cache_mode": mode,
        "aioge.tune_mode": "heuristic",
        "ge.optimizationSwitch": UNFUSED,
    }


async def _build(root: Path, mode: str = "force") -> aioge.CompiledModel:
    async with aioge.Session(_opts(root, mode)) as s:
        await s.add_graph(1, _graph())
        y = (await s.run_graph(1, {"x": X}))["y"]
        np.testing.assert_allclose(y, REF, rtol=1e-5, atol=1e-6)
        return s.compiled(1)


def _soc(root: Path) -> Path:
    return root / "kernel_cache" / "AiogeSim"


def _generations(root: Path) -> set[str]:
    return {p.name.rsplit(".g", 1)[1].split(".")[0] for p in _soc(root).glob("*.aiok")}


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("aioge")]


# -- untrusted dirs ----------------------------------------------------------------------------


def _other_writable(soc: Path) -> str:
    os.chmod(soc, 0o777)
    return "writable by others"


def _foreign(soc: Path) -> str:
    os.chown(soc, FOREIGN, -1)
    return f"owned by uid {FOREIGN}"


UNTRUSTED = {"soc dir 0777": _other_writable}
if ROOT:
    UNTRUSTED["soc dir owned by another user"] = _foreign


@pytest.mark.parametrize("mode", ["force", "enable"])
@pytest.mark.parametrize("case", sorted(UNTRUSTED))
async def test_an_untrusted_soc_dir_is_not_written_in_any_mode(
    case: str, mode: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    soc = _soc(tmp_path)
    soc.mkdir(parents=True, mode=0o700)
    os.chmod(tmp_path / "kernel_cache", 0o700)
    os.chmod(tmp_path, 0o700)
    reason = UNTRUSTED[case](soc)
    with caplog.at_level(logging.WARNING):
        first = await _build(tmp_path, mode)
        second = await _build(tmp_path, mode)
    assert sorted(os.listdir(soc)) == []  # no entry, generation, statistics or lock was written there
    for model in (first, second):
        assert model.stats.kernels_compiled == len(model.nodes) and model.stats.kernel_cache_hits == 0
    warnings = _warnings(caplog)
    assert len(warnings) == 2, warnings  # one per session, each naming the dir and why
    assert all(
        "not trusted" in w and "neither loaded from it nor written to it" in w and str(soc) in w and reason in w for w in warnings
    ), warnings


async def test_a_trusted_shared_soc_dir_is_written_in_force_mode(tmp_path: Path) -> None:
    soc = _soc(tmp_path)
    soc.mkdir(parents=True, mode=0o700)
    os.chmod(soc, 0o770)  # group-writable: trusted when the cache is shared
    async with aioge.Session({**_opts(tmp_path), "aioge.cache_shared": "1"}) as s:
        await s.add_graph(1, _graph())
        await s.run_graph(1, {"x": X})
        n = len(s.compiled(1).nodes)
    assert len(list(soc.glob("*.aiok"))) == n
    assert not any(os.lstat(p).st_mode & stat.S_IWOTH for p in soc.rglob("*"))


# -- reclaiming dead generations ---------------------------------------------------------------


async def test_force_compiles_in_a_row_leave_only_the_current_generation(tmp_path: Path) -> None:
    seeded = await _build(tmp_path, "enable")
    assert _generations(tmp_path) == {"0"} and len(list(_soc(tmp_path).glob("*.aiok"))) == len(seeded.nodes)
    seen = set()
    for _ in range(4):
        model = await _build(tmp_path)
        current = KernelCache(tmp_path, "AiogeSim").generation_sync()
        assert current not in seen
        seen.add(current)
        assert _generations(tmp_path) == {current}  # the root generation and every older force's are gone
        assert len(list(_soc(tmp_path).glob("*.aiok"))) == len(model.nodes)
        gen_locks = {p.name for p in (_soc(tmp_path) / ".locks").glob("gen-*.lock")}
        assert gen_locks <= {f"gen-{current}.lock"}, gen_locks
    later = await _build(tmp_path, "enable")  # what is left is what later compiles read
    assert later.stats.kernels_compiled == 0 and later.stats.kernel_cache_hits == len(later.nodes)
    stats = KernelCache(tmp_path, "AiogeSim").read_stats_sync()
    assert stats["bytes_estimate"] == sum(p.stat().st_size for p in _soc(tmp_path).glob("*.aiok"))


async def test_a_generation_a_reader_holds_is_not_reclaimed_until_it_lets_go(tmp_path: Path) -> None:
    await _build(tmp_path, "enable")
    reader = KernelCache(tmp_path, "AiogeSim")
    view = reader.open_view_sync(force=False)  # a compile in another process, reading generation 0
    assert view is not None and view.generation == "0"
    held = sorted(_soc(tmp_path).glob("*.g0.aiok"))
    assert held
    await _build(tmp_path)
    await _build(tmp_path)
    current = reader.generation_sync()
    assert _generations(tmp_path) == {"0", current}  # the held one stays, the unheld older force's went
    assert all(p.exists() for p in held)
    assert all(reader.load_sync(p.name.split(".")[0], view).status == "hit" for p in held)  # still readable
    reader.close_view_sync(view)  # the reader lets go of a dead generation: it is reclaimed
    assert _generations(tmp_path) == {current}


async def test_a_reader_in_another_process_keeps_its_generation(tmp_path: Path) -> None:
    await _build(tmp_path, "enable")
    script = (
        "import sys, time\n"
        "from aioge.cache.kernel_cache import KernelCache\n"
        "c = KernelCache(sys.argv[1], 'AiogeSim')\n"
        "v = c.open_view_sync(force=False)\n"
        "print(v.generation, v.hold is not None, flush=True)\n"
        "sys.stdin.readline()\n"
        "c.close_view_sync(v)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-I", "-c", script, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None and child.stdin is not None
        try:
            with anyio.fail_after(60):
                line = await anyio.to_thread.run_sync(child.stdout.readline)
            assert line.split() == ["0", "True"], line
            await _build(tmp_path)
            assert "0" in _generations(tmp_path)  # held across processes
            child.stdin.write("\n")
            child.stdin.flush()
            assert await anyio.to_thread.run_sync(child.wait, 60) == 0
        finally:
            if child.poll() is None:
                child.kill()
    assert "0" not in _generations(tmp_path)  # the child let go of a dead generation and reclaimed it
