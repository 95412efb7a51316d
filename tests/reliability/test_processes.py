"""Child processes: what they import, and what a dead one leaves behind.

Device processes (``aioge.exec_devices``) were started with ``python -c``, which puts the
current directory first on ``sys.path``: a ``msgpack.py`` where the server was started ran
inside every device. They are started with ``-P`` now (not ``-I``: that would also drop
``PYTHONPATH``, which a source-tree run needs), and so is every other interpreter the package
and its benchmarks start. Each device killed and replaced also left its writer thread and the
pipe to its stdin open.
"""

from __future__ import annotations

import ast
import os
import signal
import sys
import threading
import time
from pathlib import Path

import anyio
import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.errors import ExecutionError
from aioge.runtime import schedule

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
OPTS = {"aioge.tune_mode": "heuristic", "aioge.exec_devices": "1"}


@pytest.fixture(autouse=True)
def _runs_go_to_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """These graphs are small; runs under a millisecond would stay in this process."""
    monkeypatch.setattr(schedule, "INLINE_US", 0.0)


def _graph() -> aioge.Graph:
    g = aioge.Graph("dev")
    x = g.input("x", (16, 16))
    g.output(ops.tanh(ops.mul(x, 0.5)), names=["y"])
    return g


def _x(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((16, 16)).astype(np.float32)


_HOSTILE = """\
import os
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "{marker}"), "w").write(str(os.getpid()))
raise SystemExit("hostile {name} imported")
"""


async def test_a_hostile_module_in_the_current_directory_does_not_run_in_a_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("msgpack", "numpy", "aioge"):
        (tmp_path / f"{name}.py").write_text(_HOSTILE.format(marker=f"ran-{name}", name=name))
    monkeypatch.chdir(tmp_path)
    x = _x()
    async with aioge.Session(OPTS) as s:
        await s.add_graph(1, _graph())
        out = await s.run_graph(1, {"x": x})
        pool = s._devices
        assert pool is not None and sum(pool.completed) == 1, "the run did not go to the device"
    np.testing.assert_allclose(out["y"], np.tanh(x * 0.5), rtol=1e-6)
    assert not list(tmp_path.glob("ran-*")), "a module from the current directory ran inside a device"


def _interpreter_commands() -> list[tuple[str, int, ast.List]]:
    """Every literal argv list that starts with sys.executable in the package and bench/."""
    found = []
    for base in (ROOT / "src" / "aioge", ROOT / "bench"):
        for path in sorted(base.rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.List)
                    and node.elts
                    and isinstance(node.elts[0], ast.Attribute)
                    and ast.unparse(node.elts[0]) == "sys.executable"
                ):
                    found.append((str(path.relative_to(ROOT)), node.lineno, node))
    return found


def test_every_interpreter_the_package_and_benchmarks_start_is_safe_path() -> None:
    commands = _interpreter_commands()
    assert len(commands) >= 3, commands  # devices, the two benchmark children
    unsafe = [
        f"{p}:{line}: {ast.unparse(n)}"
        for p, line, n in commands
        if len(n.elts) < 2 or not (isinstance(n.elts[1], ast.Constant) and n.elts[1].value == "-P")
    ]
    assert not unsafe, "started without -P (the current or script directory first on sys.path):\n" + "\n".join(unsafe)
    # multiprocessing's spawn children get the parent's sys.path, not -P: the package uses none.
    for base in (ROOT / "src" / "aioge", ROOT / "bench"):
        for path in base.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                )
                assert not any(n.split(".")[0] == "multiprocessing" for n in names), f"{path}:{node.lineno}"


def test_a_benchmark_child_ignores_a_hostile_module_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The benchmarks' fresh-process helper, end to end: its child runs, the module does not."""
    import subprocess

    (tmp_path / "msgpack.py").write_text(_HOSTILE.format(marker="ran-msgpack", name="msgpack"))
    monkeypatch.chdir(tmp_path)
    from aioge.benchmarks import child, measure

    captured: list[list[str]] = []
    real_run = subprocess.run

    def spy(cmd, *a, **kw):  # type: ignore[no-untyped-def]
        captured.append(list(cmd))
        # The same interpreter flags, a child that imports what the benchmark child imports.
        probe = [*cmd[: cmd.index(child.__file__)], "-c", "import aioge.plan.io, json; print(json.dumps({'ok': 1}))"]
        return real_run(probe, *a, **kw)

    monkeypatch.setattr(measure.subprocess, "run", spy)
    # (An empty PYTHONPATH entry would mean the current directory again.)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)}
    assert measure.fresh_process("aioge", {}, env=env, timeout=120) == {"ok": 1}
    assert captured and captured[0][:2] == [sys.executable, "-P"]
    assert not (tmp_path / "ran-msgpack").exists()


def _device_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("aioge-device-")]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _settle(want_threads: int, want_fds: int) -> tuple[int, int]:
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        threads, fds = len(_device_threads()), _fds()
        if threads <= want_threads and fds <= want_fds:
            break
        await anyio.sleep(0.02)
    return len(_device_threads()), _fds()


async def test_killed_and_replaced_devices_leak_no_threads_or_file_descriptors() -> None:
    kills = 3
    x = _x()
    want = np.tanh(x * 0.5)
    async with aioge.Session(OPTS) as s:
        await s.add_graph(1, _graph())
        np.testing.assert_allclose((await s.run_graph(1, {"x": x}))["y"], want, rtol=1e-6)
        pool = s._devices
        assert pool is not None
        threads0, fds0 = len(_device_threads()), _fds()
        assert threads0 == 2  # one device: its writer and its reader
        for _ in range(kills):
            (device,) = [d for d in pool._devices if d is not None]
            os.kill(device.proc.pid, signal.SIGKILL)
            with anyio.fail_after(10):
                while device.dead is None:  # its reader saw the end of the pipe
                    await anyio.sleep(0.01)
            with pytest.raises(ExecutionError, match="is gone"):
                device.submit(-1, 0, {"x": x})
            out = await s.run_graph(1, {"x": x})  # on a new device
            np.testing.assert_allclose(out["y"], want, rtol=1e-6)
        assert len(set(pool.pids)) == 1 and device.proc.pid not in pool.pids
        threads, fds = await _settle(threads0, fds0)
        assert (threads, fds) == (threads0, fds0), (
            f"after {kills} devices were killed and replaced: {threads - threads0} more device threads, "
            f"{fds - fds0} more open file descriptors; threads: {[t.name for t in _device_threads()]}"
        )
        assert len(pool._started) == 1, "the pool still references the dead devices"
