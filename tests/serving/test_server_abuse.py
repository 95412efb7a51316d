"""``aioge serve`` against abuse, over real sockets to a real ``aioge serve`` process: huge
bodies refused before decoding (with the server's peak RSS measured), every malformed request
a 400 JSON error on a connection that stays usable (a hypothesis test over request bodies),
idle and partial connections closed by the read and keep-alive timeouts."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import aioge.server
from aioge.cli import main as aioge_main
from aioge.server import create_app
from tests.serving.test_server import _free_port, _onnx_model, _reference, _wait_ready, running


def _ints_model(path: Path) -> Path:
    """twice = i + i, i: INT64 [N]."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["i", "i"], ["twice"])],
        "ints",
        [helper.make_tensor_value_info("i", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("twice", TensorProto.INT64, ["N"])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, subprocess.Popen[str], dict[str, Path]]]:
    """A real ``aioge serve`` with short timeouts: mlp (x [N,4], y [N,3]), mlp2 (static [2,4], [2,3]), ints."""
    root = tmp_path_factory.mktemp("abuse")
    src = _onnx_model(root / "mlp.onnx")
    env = {**os.environ, "ASCEND_CACHE_PATH": str(root / "atc")}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASCEND_CACHE_PATH", env["ASCEND_CACHE_PATH"])
        assert aioge_main(["compile", str(src), "-o", str(root / "mlp2.om"), "-q", "--input-shape", "x:2,4;y:2,3"]) == 0
    port = _free_port()
    argv = [sys.executable, "-m", "aioge", "serve", str(src), str(root / "mlp2.om"), str(_ints_model(root / "ints.onnx"))]
    argv += ["--port", str(port), "--keep-alive-timeout", "0.5", "--read-timeout", "1.5", "--max-decoding", "1"]
    # stderr to a file: the access log writes a line a request, more than a pipe holds unread
    log = (root / "stderr.txt").open("w")
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, text=True, env=env)
    url = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (root / "stderr.txt").read_text()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://{url}/v2/health/ready").status_code == 200:
                    break
            assert time.monotonic() < deadline, "server never became ready"
            time.sleep(0.05)
        yield url, server, {"onnx": src}
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
        err = (root / "stderr.txt").read_text()
        assert server.returncode == 0 and "Traceback" not in err, err
        assert '"POST /v2/models/mlp/infer HTTP/1.1" 400' in err  # the access log, on by default


def _peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM) in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak RSS is read from /proc")
def test_a_huge_json_body_is_refused_before_decoding_and_rss_stays_flat(
    proc: tuple[str, subprocess.Popen[str], dict[str, Path]],
) -> None:
    url, server, _ = proc
    before = _peak_rss(server.pid)
    # 60 MiB of JSON for a 4-value input: decoding it took ~8x its size (a float object per value).
    values = b"0.5," * (15 << 20)
    body = b'{"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [' + values + b"0.5]}]}"
    r = httpx.post(f"http://{url}/v2/models/mlp/infer", content=body, timeout=60)
    assert r.status_code == 413 and "binary_data_size" in r.json()["error"], r.text
    grown = _peak_rss(server.pid) - before
    assert grown < 3 * len(body), f"peak RSS grew {grown >> 20} MiB for a {len(body) >> 20} MiB body"
    # a big request whose JSON nests every value in lists of its own is not refused
    rows = 5000
    x = np.random.default_rng(1).standard_normal((rows, 4)).astype(np.float32)
    y = np.random.default_rng(2).standard_normal((rows, 3)).astype(np.float32)
    nested = {
        "inputs": [
            {"name": "x", "shape": [rows, 4], "datatype": "FP32", "data": x[..., None].tolist()},
            {"name": "y", "shape": [rows, 3], "datatype": "FP32", "data": y.tolist()},
        ],
        "outputs": [{"name": "out"}],
    }
    r = httpx.post(f"http://{url}/v2/models/mlp/infer", json=nested, timeout=60)
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(
        np.array(r.json()["outputs"][0]["data"], np.float32).reshape(rows, 3),
        _reference(proc[2]["onnx"], x, y)["out"],
        rtol=1e-5,
        atol=1e-5,
    )


def test_a_body_over_the_limit_is_refused_from_its_content_length_unread(proc: tuple[str, object, object]) -> None:
    url, _, _ = proc
    host, port = url.split(":")
    for path, length, words in [
        ("/v2/models/mlp/infer", 100 << 20, "over the limit of 67108864 (--max-body-bytes)"),
        # a model with static inputs takes 64 KiB + 40 B a value (14 values)
        ("/v2/models/mlp2/infer", 1 << 20, f"over the limit of {(64 << 10) + 40 * 14} (model 'mlp2' takes at most"),
        ("/v2/repository/index", 1 << 20, "over the limit of 65536 (a control request)"),
        ("/v2/repository/models/mlp/load", 1 << 20, "over the limit of 65536 (a control request)"),
    ]:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode())
            head, _, rest = _read_response(sock)
            assert head.startswith(b"HTTP/1.1 413") and b"connection: close" in head.lower(), head
            assert words in json.loads(rest)["error"]


def _read_response(sock: socket.socket) -> tuple[bytes, int, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed mid-response: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk
        rest += chunk
    return head, length, rest


def test_decoding_is_limited_to_max_decoding_at_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    active, peak, lock = [0], [0], threading.Lock()
    real = aioge.server._decode_request

    def slow_decode(*args: object) -> object:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.2)
        with lock:
            active[0] -= 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(aioge.server, "_decode_request", slow_decode)
    src = _onnx_model(tmp_path / "mlp.onnx")
    rows = 3000  # about 200 KB of JSON: decoded in a worker thread
    x = np.full((rows, 4), 0.25, np.float32)
    y = np.full((rows, 3), 0.5, np.float32)
    body = {
        "inputs": [
            {"name": "x", "shape": [rows, 4], "datatype": "FP32", "data": x.ravel().tolist()},
            {"name": "y", "shape": [rows, 3], "datatype": "FP32", "data": y.ravel().tolist()},
        ],
        "outputs": [{"name": "out"}],
    }
    results: list[httpx.Response] = []
    with running(create_app([str(src)], max_decoding=1)) as (url, _, _):
        _wait_ready(url)
        threads = [
            threading.Thread(
                target=lambda: results.append(httpx.post(f"http://{url}/v2/models/mlp/infer", json=body, timeout=30))
            )
            for _ in range(3)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert [r.status_code for r in results] == [200, 200, 200]
    ref = _reference(src, x, y)["out"]
    np.testing.assert_allclose(np.array(results[0].json()["outputs"][0]["data"]).reshape(rows, 3), ref, rtol=1e-5)
    assert peak[0] == 1, f"{peak[0]} bodies decoded at once with --max-decoding 1"


_X = {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [0.5, 0.5, 0.5, 0.5]}
_Y = {"name": "y", "shape": [1, 3], "datatype": "FP32", "data": [0.0, 1.0, 2.0]}
_I = {"name": "i", "shape": [2], "datatype": "INT64", "data": [1, 2]}

MALFORMED = [
    ("mlp", {"inputs": [_X, _Y], "parameters": [1]}, '"parameters" must be a JSON object'),
    ("mlp", {"inputs": [{**_X, "parameters": "binary"}, _Y]}, "input 'x'"),
    ("mlp", {"inputs": [_X, _Y], "outputs": [{"name": "out", "parameters": 3}]}, "output 'out'"),
    ("mlp", {"inputs": [_X, _Y], "outputs": [{"name": ["out"]}]}, "has no output"),
    ("mlp", {"inputs": [_X, _Y], "outputs": [{"name": {"a": 1}}]}, "has no output"),
    ("mlp", {"inputs": [_X, _Y], "outputs": {"name": "out"}}, '"outputs" must be a list'),
    ("mlp", {"inputs": [_X, _Y], "outputs": 7}, '"outputs" must be a list'),
    ("ints", {"inputs": [{**_I, "data": [2**63, 1]}]}, "not INT64 values"),
    ("ints", {"inputs": [{**_I, "data": [-(2**63) - 1, 1]}]}, "not INT64 values"),
    ("mlp", {"inputs": [{**_X, "data": [1e400, 1, 1, 1]}, _Y]}, ""),  # inf in FP32: fine, a 200
    ("mlp", {"inputs": [{**_X, "data": [10**400, 1, 1, 1]}, _Y]}, "not FP32 values"),
    ("mlp", {"inputs": [{**_X, "data": None}, _Y]}, "data must be a list"),
    ("mlp", {"inputs": [{**_X, "data": {"a": 1}}, _Y]}, "data must be a list"),
    ("mlp", {"inputs": [{**_X, "data": [[1, 2], [3]]}, _Y]}, "not FP32 values"),
    ("mlp", {"inputs": [{**_X, "parameters": {"binary_data_size": True}}, _Y]}, "binary_data_size"),
    ("mlp", {"inputs": [{**_X, "name": ["x"]}, _Y]}, '"name" string'),
    ("mlp", {"inputs": [_X, _Y], "id": {"nested": [1, 2]}}, '"id" must be a string'),
    ("mlp", {"inputs": [_X, _Y], "id": "r1"}, ""),
]


@pytest.mark.parametrize(("model", "body", "words"), MALFORMED)
def test_malformed_requests_get_400_json_on_a_connection_that_stays(
    proc: tuple[str, object, object], model: str, body: object, words: str
) -> None:
    url, _, _ = proc
    host, port = url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        status, payload = _post(conn, f"/v2/models/{model}/infer", json.dumps(body).encode())
        if words:
            assert status == 400 and words in payload["error"], payload
        else:
            assert status == 200, payload
        assert _post(conn, "/v2/models/mlp/infer", json.dumps({"inputs": [_X, _Y]}).encode())[0] == 200
    finally:
        conn.close()


def test_deeply_nested_json_is_a_400(proc: tuple[str, object, object]) -> None:
    url, _, _ = proc
    host, port = url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        for nested in (b"[" * 100_000 + b"]" * 100_000, b'{"inputs": [' + b"[" * 50_000 + b"]" * 50_000 + b"]}"):
            status, payload = _post(conn, "/v2/models/mlp/infer", nested)
            assert status in (400, 413) and ("nested too deeply" in payload["error"] or "items" in payload["error"]), payload
        status, payload = _post(conn, "/v2/models/mlp/infer", b'{"inputs": [{"name": "x", "shape": [1 4]}]}')
        assert status == 400 and "malformed JSON" in payload["error"], payload
        assert _post(conn, "/v2/models/mlp/infer", json.dumps({"inputs": [_X, _Y]}).encode())[0] == 200
    finally:
        conn.close()


def _post(conn: http.client.HTTPConnection, path: str, body: bytes) -> tuple[int, dict[str, object]]:
    """One request on ``conn``: the connection must stay the same socket (no close, no reconnect)."""
    sock = conn.sock
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    payload = r.read()
    assert r.getheader("content-type", "").startswith("application/json"), payload
    assert sock is None or conn.sock is sock, "the server closed the connection"
    assert (r.getheader("connection") or "").lower() != "close" or r.status == 413, payload
    return r.status, json.loads(payload)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
_names = st.sampled_from(["x", "y", "i", "out", "total", "twice", ""]) | _json
_datatypes = st.sampled_from(["FP32", "INT64", "FP16", "BOOL", "BYTES"]) | _json
_input = st.fixed_dictionaries(
    {},
    optional={
        "name": _names,
        "shape": st.lists(st.integers(-2, 5), max_size=3) | _json,
        "datatype": _datatypes,
        "data": st.lists(st.integers(-(2**65), 2**65) | st.floats() | st.booleans(), max_size=12) | _json,
        "parameters": st.fixed_dictionaries({}, optional={"binary_data_size": _json, "binary_data": _json}) | _json,
    },
)
_output = st.fixed_dictionaries({}, optional={"name": _names, "parameters": _json}) | _json
_request = st.fixed_dictionaries(
    {},
    optional={
        "inputs": st.lists(_input, max_size=3) | _json,
        "outputs": st.lists(_output, max_size=3) | _json,
        "parameters": st.fixed_dictionaries({}, optional={"binary_data_output": _json}) | _json,
        "id": _json,
    },
)


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(model=st.sampled_from(["mlp", "mlp2", "ints"]), request=_request | _json)
def test_no_request_body_gets_a_500(proc: tuple[str, object, object], model: str, request: object) -> None:
    url, _, _ = proc
    host, port = url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        status, payload = _post(conn, f"/v2/models/{model}/infer", json.dumps(request).encode())
        assert status in (200, 400), (status, payload)
        assert status == 200 or isinstance(payload.get("error"), str)
        # the connection stays usable
        assert _post(conn, "/v2/models/mlp/infer", json.dumps({"inputs": [_X, _Y]}).encode())[0] == 200
    finally:
        conn.close()


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` (EOF or reset) within ``seconds``, reading what it sends."""
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


@pytest.mark.parametrize(
    "sent",
    [
        b"",  # connected, sent nothing (keep-alive timeout, 0.5 s)
        b"POST /v2/models/mlp/inf",  # half a request line (read timeout, 1.5 s)
        b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Le",  # half the headers
        b'POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"inputs": [',  # part of a body
    ],
)
def test_idle_and_partial_connections_are_closed(proc: tuple[str, object, object], sent: bytes) -> None:
    url, _, _ = proc
    host, port = url.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(sent)
        assert _closed_within(sock, 15), f"still open after sending {sent!r}"
    assert httpx.get(f"http://{url}/v2/health/live").status_code == 200


def test_a_keep_alive_connection_is_closed_when_idle_and_trickling_does_not_hold_it(proc: tuple[str, object, object]) -> None:
    url, _, _ = proc
    host, port = url.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        head, _, body = _read_response(sock)
        assert head.startswith(b"HTTP/1.1 200") and json.loads(body) == {"live": True}
        assert _closed_within(sock, 15)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        # a byte every 0.3 s: each byte stops uvicorn's keep-alive timer, the head's read timeout still holds
        closed = False
        for byte in b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n":
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            if _closed_within(sock, 0.3):
                closed = True
                break
        assert closed, "a trickled request line was held open"


def test_a_request_the_http_parser_refuses_gets_a_json_400(proc: tuple[str, object, object]) -> None:
    url, _, _ = proc
    host, port = url.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"GET /v2 HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n")
        head, _, body = _read_response(sock)
        assert head.startswith(b"HTTP/1.1 400") and b"application/json" in head, head
        assert "Invalid HTTP request" in json.loads(body)["error"]
