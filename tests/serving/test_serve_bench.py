"""``aioge bench --serve``: both servers answer every request correctly and the figures are written."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aioge.cli import main


@pytest.mark.timeout(300)  # two server processes start, compile and take 8 clients' requests
def test_bench_serve_runs_both_arms_and_writes_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "bench",
        "--serve",
        "--serve-clients",
        "8",
        "--serve-total",
        "40",
        "--serve-workloads",
        "mlp",
        "--serve-workers",
        "1",
        "--output-dir",
        str(tmp_path),
    ]
    assert main(argv) == 0
    rows = json.loads((tmp_path / "serve.json").read_text())
    assert [r["arm"] for r in rows] == ["aioge serve", "onnxruntime (64 threads)"]
    for r in rows:
        assert r["workload"] == "mlp" and r["clients"] == 8
        assert r["requests"] == 40 and r["errors"] == 0
        assert r["max_abs_err"] < 1e-5  # the softmax of the last response vs the numpy reference
        assert 0 < r["p50_ms"] <= r["p99_ms"] and r["rps"] > 0 and r["client_cpu_pct"] > 0
        assert r["client_procs"] == 4 and r["client_us_per_request"] > 0 and isinstance(r["client_bound"], bool)
        assert r["server_cpu_pct"] >= 0  # measured from /proc (NaN fails), at the clock tick's resolution
    md = (tmp_path / "SERVE.md").read_text()
    assert "| mlp | aioge serve | 8 | 40 | 0 |" in md
    assert "MLServer arms skipped: no --mlserver-python" in md  # said, not silently left out
    assert "wrote" in capsys.readouterr().out


def test_bench_serve_rejects_unknown_workloads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from aioge.benchmarks.serve_bench import ServeBenchConfig, run_serve_bench

    with pytest.raises(ValueError, match="unknown serving workloads"):
        run_serve_bench(ServeBenchConfig(workloads=("nope",)))
    for flag in ("--serve-client-procs", "--serve-clients"):  # from the command line: one line naming the flag
        assert main(["bench", "--serve", flag, "0", "--output-dir", str(tmp_path)]) == 1
        assert f"Value 0 for parameter '{flag}' is invalid. Reason: expected 1 or more" in capsys.readouterr().err


def test_mlserver_folder_holds_the_runtime_and_its_batching(tmp_path: Path) -> None:
    """The folder the MLServer arms start from: its port, the runtime (valid Python, naming
    the class model-settings.json implements) and adaptive batching on or off."""
    import ast

    from aioge.benchmarks.serve_bench import mlserver_folder, mlserver_usable

    for batch in (None, (64, 0.002)):
        folder = tmp_path / str(batch is not None)
        argv = mlserver_folder(str(folder), "mlp", "/models/mlp.onnx", 18123, batch=batch)
        assert argv == ["-m", "mlserver.cli.main", "start", str(folder)]
        settings = json.loads((folder / "settings.json").read_text())
        assert settings["http_port"] == 18123 and settings["host"] == "127.0.0.1"
        model = json.loads((folder / "mlp" / "model-settings.json").read_text())
        assert model["implementation"] == "ort_runtime.OrtRuntime" and model["parameters"]["uri"] == "/models/mlp.onnx"
        tree = ast.parse((folder / "ort_runtime.py").read_text())
        assert "OrtRuntime" in [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
        if batch is None:
            assert "max_batch_size" not in model and "max_batch_time" not in model
        else:
            assert (model["max_batch_size"], model["max_batch_time"]) == batch
    assert "cannot import mlserver" in (mlserver_usable(str(tmp_path / "no-python")) or "")


MLSERVER_PYTHON = os.environ.get("AIOGE_MLSERVER_PYTHON")


@pytest.mark.skipif(not MLSERVER_PYTHON, reason="AIOGE_MLSERVER_PYTHON: a python with mlserver and onnxruntime")
@pytest.mark.timeout(400)
def test_bench_serve_runs_mlserver_beside_aioge(tmp_path: Path) -> None:
    from aioge.benchmarks.serve_bench import ServeBenchConfig, run_serve_bench

    cfg = ServeBenchConfig(workloads=("mlp",), clients=4, total=20, warmup=8, mlserver_python=MLSERVER_PYTHON)
    rows = run_serve_bench(cfg)
    arms = [r["arm"] for r in rows]
    assert arms[-3:] == ["aioge serve (JSON)", "MLServer, batching off", "MLServer, batching on (64 rows, 2 ms)"]
    for r in rows:
        assert r["requests"] == 20 and r["errors"] == 0 and r["max_abs_err"] < 1e-5


@pytest.mark.timeout(180)  # one aioge serve process starts and compiles a tiny model; four load runs of a second or so
def test_load_generator_counts_requests_errors_and_latencies(tmp_path: Path) -> None:
    """The multi-process load generator against a real ``aioge serve``: every request it
    counts the server counted too (the model's Triton statistics, success and fail), 400s are
    errors, and each latency lies within the run."""
    import httpx
    import numpy as np

    from aioge.benchmarks.loadgen import http_request, run_load
    from aioge.benchmarks.serve_bench import _free_port, _request, _server

    from .test_server import _onnx_model

    model = _onnx_model(tmp_path / "mlp.onnx")
    port = _free_port()
    env = {**os.environ, "ASCEND_CACHE_PATH": str(tmp_path / "atc")}
    good = _request({"x": np.ones((1, 4), np.float32), "y": np.ones((1, 3), np.float32)})
    bad = _request({"x": np.ones((1, 5), np.float32), "y": np.ones((1, 3), np.float32)})  # x has 4 columns: a 400
    with _server(["-m", "aioge", "serve", str(model), "--no-access-log", "--port", str(port)], port, env) as (url, pid):
        path = "/v2/models/mlp/infer"
        runs = [(good, 3, 2, 23, 4), (good, 2, 4, 8, 0), (bad, 3, 2, 11, 3)]  # (request, clients, procs, total, warmup)
        for (body, headers), clients, procs, total, warmup in runs:
            request = http_request("127.0.0.1", port, path, body, headers)
            kw = {"clients": clients, "procs": procs, "total": total, "warmup": warmup}
            got = run_load("127.0.0.1", port, request, seconds=60, server_pid=pid, **kw)
            assert got["procs"] == min(clients, procs)  # a process holds one connection or more
            assert got["requests"] == total and len(got["latencies"]) == total and got["transport_errors"] == []
            assert got["errors"] == (total if body is bad[0] else 0)
            assert got["error_statuses"] == ({"400": total} if body is bad[0] else {})
            assert all(0 < x <= got["seconds"] for x in got["latencies"])
            assert got["client_cpu_s"] > 0 and 0 < got["client_max_pct"] and got["server_cpu_s"] >= 0
        stats = httpx.get(f"{url}/v2/models/mlp/stats").json()["model_stats"][0]["inference_stats"]
    assert stats["success"]["count"] == 23 + 4 + 8 and stats["fail"]["count"] == 11 + 3  # warm-ups included
    with pytest.raises(RuntimeError, match="load generator process failed"):  # nothing listens there any more
        run_load("127.0.0.1", port, request, clients=2, procs=2, total=4, seconds=5, warmup=0)


def test_format_rows_marks_a_client_bound_row() -> None:
    from aioge.benchmarks.serve_bench import format_rows

    row = {"workload": "mlp", "arm": "aioge serve", "clients": 50, "requests": 2000, "errors": 0, "rps": 300.0}
    row |= {"p50_ms": 80.0, "p99_ms": 1000.0, "client_cpu_pct": 97.0, "client_us_per_request": 3100.0, "max_abs_err": 0.0}
    row["server_cpu_pct"] = 55.0
    quiet = format_rows([row | {"client_bound": False}])
    assert "| 97 | 3100 | 55 |" in quiet and "CLIENT-BOUND" not in quiet
    bound = format_rows([row | {"client_bound": True}])
    assert "| 97 CLIENT-BOUND | 3100 | 55 |" in bound and "is the client's limit, not the server's" in bound


@pytest.mark.timeout(300)
def test_bench_serve_runs_each_client_process_count_on_one_server() -> None:
    from aioge.benchmarks.serve_bench import ServeBenchConfig, run_serve_bench

    cfg = ServeBenchConfig(workloads=("mlp",), clients=5, total=17, warmup=4, workers=(1,), client_procs=(1, 3))
    rows = run_serve_bench(cfg)
    arms = ["aioge serve", "onnxruntime (64 threads)"]
    assert [(r["arm"], r["client_procs"]) for r in rows] == [(f"{a}, {p} client procs", p) for a in arms for p in (1, 3)]
    for r in rows:
        assert r["requests"] == 17 and r["errors"] == 0 and r["max_abs_err"] < 1e-5


@contextlib.contextmanager
def _tiny_http(drop_every: int = 0) -> Iterator[int]:
    """A keep-alive HTTP/1.1 server in threads answering every POST with a 2-byte 200; every
    ``drop_every``-th request it closes the connection instead. Yields its port."""
    import re
    import socketserver
    import threading

    seen = [0]
    lock = threading.Lock()

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = self.request.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = int(re.search(rb"Content-Length: (\d+)", head)[1])  # type: ignore[index]
                while len(buf) < length:
                    buf += self.request.recv(65536)
                buf = buf[length:]
                with lock:
                    seen[0] += 1
                    drop = drop_every and seen[0] % drop_every == 0
                if drop:
                    return  # the connection closes unanswered
                self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    socketserver.ThreadingTCPServer.daemon_threads = True
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield server.server_address[1]
        finally:
            server.shutdown()


def test_load_generator_counts_dropped_connections_and_goes_on() -> None:
    from aioge.benchmarks.loadgen import http_request, run_load

    with _tiny_http(drop_every=5) as port:
        request = http_request("127.0.0.1", port, "/x", b"{}", {})
        got = run_load("127.0.0.1", port, request, clients=2, procs=1, total=20, seconds=60, warmup=0)
    assert got["requests"] == 16 and len(got["latencies"]) == 16  # requests 5, 10, 15 and 20 were dropped
    assert got["errors"] == 4 and got["error_statuses"] == {"dropped": 4} and got["transport_errors"]


def test_load_generator_result_line_survives_a_late_reader() -> None:
    """A worker's result line longer than a pipe's 64 KiB, read only after the worker finished
    (uvloop's run once left sys.stdout cutting it there)."""
    import base64
    import subprocess
    import sys

    from aioge.benchmarks import loadgen

    with _tiny_http() as port:
        request = base64.b64encode(loadgen.http_request("127.0.0.1", port, "/x", b"{}", {})).decode()
        spec = {"host": "127.0.0.1", "port": port, "request": request, "seconds": 60, "clients": 4, "total": 5000, "warmup": 0}
        with subprocess.Popen(
            [sys.executable, "-P", loadgen.__file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        ) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(spec) + "\n")
            proc.stdin.flush()
            assert proc.stdout.readline() == "ready\n"
            proc.stdin.write("go\n")
            proc.stdin.flush()
            time.sleep(3)  # the worker is done (or blocked on the full pipe) before this reads
            line = proc.stdout.readline()
    assert len(line) > 65536 and len(json.loads(line)["latencies"]) == 5000
