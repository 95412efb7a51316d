"""``aioge serve --workers N``: worker processes on one port, one compile through the shared
graph cache, a clean drain on SIGTERM, and a worker that dies stops the command non-zero."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
import pytest

from aioge.cache.graph_tools import read_graph_stats
from aioge.cli import main as aioge_main

from .test_server import _free_port, _onnx_model, _reference


def _start(model: Path, tmp_path: Path, port: int, *extra: str) -> subprocess.Popen[str]:
    (tmp_path / "graphs").mkdir(exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "aioge", "-v", "serve", str(model), "--port", str(port), "--workers", "2", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "ASCEND_CACHE_PATH": str(tmp_path / "atc")},
        start_new_session=True,
    )


def _wait_ready(proc: subprocess.Popen[str], port: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, proc.communicate()
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"http://127.0.0.1:{port}/v2/health/ready").status_code == 200:
                return
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@contextlib.contextmanager
def _serving(model: Path, tmp_path: Path, port: int, *extra: str) -> Iterator[tuple[subprocess.Popen[str], list[int]]]:
    """``aioge serve --workers 2`` ready on ``port``: the command and its two workers; the whole
    group is killed on the way out if the test left it running."""
    proc = _start(model, tmp_path, port, *extra)
    try:
        _wait_ready(proc, port)
        workers = _children(proc.pid)
        assert len(workers) == 2
        yield proc, workers
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        else:  # the parent is gone; a worker it left would still be in the group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.parametrize("ctrl_c", [False, True])
def test_workers_share_the_port_compile_once_and_drain_on_sigterm(tmp_path: Path, ctrl_c: bool) -> None:
    model = _onnx_model(tmp_path / "mlp.onnx")
    port = _free_port()
    graphs = tmp_path / "graphs"
    with _serving(model, tmp_path, port, "--option", f"ge.graph_compiler_cache_dir={graphs}", "--option", "ge.graph_key=mlp") as (
        proc,
        workers,
    ):
        # both must be ready, not only the one that answered the probe: each compiles or loads at start
        deadline = time.monotonic() + 60
        while sum(read_graph_stats(graphs)["keys"].get("mlp", {}).values()) < 2:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        assert read_graph_stats(graphs)["keys"]["mlp"] == {"hits": 1, "misses": 1}  # one compiled, one loaded it
        rng = np.random.default_rng(3)
        cases = [
            (rng.standard_normal((2, 4)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)) for _ in range(48)
        ]

        def infer(case: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
            x, y = case
            body = {
                "inputs": [
                    {"name": "x", "shape": [2, 4], "datatype": "FP32", "data": x.ravel().tolist()},
                    {"name": "y", "shape": [2, 3], "datatype": "FP32", "data": y.ravel().tolist()},
                ],
                "outputs": [{"name": "out"}],
            }
            with httpx.Client() as client:  # a connection each: the kernel spreads them over the workers
                r = client.post(f"http://127.0.0.1:{port}/v2/models/mlp/infer", json=body)
            assert r.status_code == 200, r.text
            return np.array(r.json()["outputs"][0]["data"], np.float32).reshape(2, 3)

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            results = list(pool.map(infer, cases))
        for (x, y), got in zip(cases, results, strict=True):
            np.testing.assert_allclose(got, _reference(model, x, y)["out"], rtol=1e-5, atol=1e-6)
        # two rows are a new shape: both workers answered, so one compiled it and the other loaded it
        assert read_graph_stats(graphs)["keys"]["mlp"] == {"hits": 2, "misses": 2}
        if ctrl_c:  # a terminal's Ctrl-C signals the whole group: the workers see SIGINT, then the parent's SIGTERM
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "Traceback" not in err and "KeyboardInterrupt" not in err
        assert f"mlp on http://127.0.0.1:{port} (metrics at /metrics), 2 workers" in out
        answered = re.findall(r"\[worker (\d+)\]: \S+ \"POST /v2/models/mlp/infer HTTP/1.1\" 200", err)
        assert len(answered) == len(cases) and {int(p) for p in answered} == set(workers), err
        assert err.count("requests drained, models closed") == 2, err
        for pid in workers:  # none left behind
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)


def test_a_worker_that_dies_stops_the_others_and_exits_1(tmp_path: Path) -> None:
    model = _onnx_model(tmp_path / "mlp.onnx")
    port = _free_port()
    with _serving(model, tmp_path, port) as (proc, workers):
        os.kill(workers[0], signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 1, err
        assert f"(pid {workers[0]}) exited with status -9" in err and "Traceback" not in err
        with pytest.raises(ProcessLookupError):
            os.kill(workers[1], 0)


def _wait_gone(workers: list[int], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    for pid in workers:
        while not _gone(pid):
            assert time.monotonic() < deadline, f"worker {pid} still serving after its parent was killed"
            time.sleep(0.1)


def _gone(pid: int) -> bool:
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text(errors="replace")
    except FileNotFoundError:
        return True


def test_workers_stop_when_the_parent_is_killed(tmp_path: Path) -> None:
    model = _onnx_model(tmp_path / "mlp.onnx")
    port = _free_port()
    with _serving(model, tmp_path, port) as (proc, workers):
        proc.kill()  # no chance to stop them: each sees its parent gone and drains
        proc.communicate()
        _wait_gone(workers, 30)


def test_workers_stop_when_the_parent_is_killed_while_they_load(tmp_path: Path) -> None:
    # Killed as soon as its workers exist (they are still importing, long before they serve):
    # each knows its parent by pid from the command line, so it drains and exits on its first
    # tick. It had asked getppid() once its models were loaded, got init, and served on for good.
    model = _onnx_model(tmp_path / "mlp.onnx")
    proc = _start(model, tmp_path, _free_port())
    try:
        deadline = time.monotonic() + 30
        while len(workers := _children(proc.pid)) < 2:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
        proc.kill()
        proc.communicate()
        _wait_gone(workers, 60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.communicate()


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--workers", "0"], "--workers 0: expected 1 or more"), (["--workers", "2", "--grpc-port", "8001"], "--grpc-port")],
)
def test_workers_bad_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str) -> None:
    model = _onnx_model(tmp_path / "mlp.onnx")
    assert aioge_main(["serve", str(model), *extra]) != 0
    assert message in capsys.readouterr().err
