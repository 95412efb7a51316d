"""``aioge serve`` over real HTTP on 127.0.0.1: Triton's own client and plain httpx against
the KServe v2 routes, outputs checked against onnxruntime, errors, readiness, shutdown, metrics."""

from __future__ import annotations

import contextlib
import json
import os
import signal
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
import onnxruntime as ort
import pytest
import tritonclient.http as triton
import uvicorn
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

from aioge.cli import main as aioge_main
from aioge.errors import AiogeError
from aioge.server import ServedModel, SessionBackend, batch_stats, create_app

RNG = np.random.default_rng(7)
W = RNG.standard_normal((4, 3)).astype(np.float32)


def _onnx_model(path: Path) -> Path:
    """relu(x @ W + y), x: [N, 4] float32, y: [N, 3] float32 -> out [N, 3]; plus the row sum as int64 cast."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("Add", ["xw", "y"], ["s"]),
        helper.make_node("Relu", ["s"], ["out"]),
        helper.make_node("ReduceSum", ["out", "axes"], ["total_f"], keepdims=0),
        helper.make_node("Cast", ["total_f"], ["total"], to=TensorProto.INT64),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3]),
        ],
        [
            helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("total", TensorProto.INT64, ["N"]),
        ],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(np.array([1], np.int64), "axes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    src = _onnx_model(root / "mlp.onnx")
    om = root / "om" / "mlp2.om"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASCEND_CACHE_PATH", str(root / "atc"))
        assert aioge_main(["compile", str(src), "-o", str(om), "--input-shape", "x:2,4;y:2,3"]) == 0
    return {"onnx": src, "om": om}


def _reference(model: Path, x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    out, total = sess.run(None, {"x": x, "y": y})
    return {"out": out, "total": total}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running(app: object, graceful: int = 10) -> Iterator[tuple[str, uvicorn.Server, threading.Thread]]:
    """The app under a real uvicorn server on 127.0.0.1 in a thread; stopped (gracefully) on exit."""
    port = _free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        lifespan="on",
        log_level="warning",  # type: ignore[arg-type]
        timeout_graceful_shutdown=graceful,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    try:
        yield f"127.0.0.1:{port}", server, thread
    finally:
        server.should_exit = True
        thread.join(30)


def _wait_ready(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while httpx.get(f"http://{url}/v2/health/ready").status_code != 200:
        assert time.monotonic() < deadline, "server never became ready"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def server(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # Module-scoped, so set up before the per-test kernel-cache fixture: a cache dir of its own, restored after.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASCEND_CACHE_PATH", str(tmp_path_factory.mktemp("atc")))
        app = create_app([str(models["onnx"]), str(models["om"])], max_body_bytes=100_000)
        with running(app) as (url, _, _):
            _wait_ready(url)
            yield url


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("which", ["onnx", "om"])
def test_triton_client_gets_onnxruntime_outputs(server: str, models: dict[str, Path], which: str, binary: bool) -> None:
    client = triton.InferenceServerClient(url=server)
    assert client.is_server_live() and client.is_server_ready()
    name = models[which].stem
    assert client.is_model_ready(name)
    meta = client.get_model_metadata(name)
    assert {i["name"]: i["datatype"] for i in meta["inputs"]} == {"x": "FP32", "y": "FP32"}
    assert {o["name"]: o["datatype"] for o in meta["outputs"]} == {"out": "FP32", "total": "INT64"}
    rows = 2 if which == "om" else 5  # the .om was compiled for 2 rows; the .onnx takes any
    x = RNG.standard_normal((rows, 4)).astype(np.float32)
    y = RNG.standard_normal((rows, 3)).astype(np.float32)
    inputs = [triton.InferInput("x", list(x.shape), "FP32"), triton.InferInput("y", list(y.shape), "FP32")]
    inputs[0].set_data_from_numpy(x, binary_data=binary)
    inputs[1].set_data_from_numpy(y, binary_data=binary)
    outputs = [
        triton.InferRequestedOutput("out", binary_data=binary),
        triton.InferRequestedOutput("total", binary_data=not binary),
    ]
    result = client.infer(name, inputs, outputs=outputs, request_id="r1")
    ref = _reference(models["onnx"], x, y)
    np.testing.assert_allclose(result.as_numpy("out"), ref["out"], rtol=1e-5, atol=1e-6)
    assert result.as_numpy("total").dtype == np.int64
    np.testing.assert_array_equal(result.as_numpy("total"), ref["total"])
    assert result.get_response()["id"] == "r1"
    # No outputs named: every output comes back (Triton's client asks for them in binary).
    everything = client.infer(name, inputs)
    np.testing.assert_allclose(everything.as_numpy("out"), ref["out"], rtol=1e-5, atol=1e-6)
    client.close()


def test_plain_http_json_and_binary_bodies(server: str, models: dict[str, Path]) -> None:
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    y = RNG.standard_normal((3, 3)).astype(np.float32)
    ref = _reference(models["onnx"], x, y)
    body = {
        "id": "7",
        "inputs": [
            {"name": "x", "shape": [3, 4], "datatype": "FP32", "data": x.tolist()},
            {"name": "y", "shape": [3, 3], "datatype": "FP32", "data": y.reshape(-1).tolist()},
        ],
        "outputs": [{"name": "out"}],
    }
    r = httpx.post(f"http://{server}/v2/models/mlp/infer", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["model_name"] == "mlp" and got["id"] == "7" and [o["name"] for o in got["outputs"]] == ["out"]
    assert got["outputs"][0]["shape"] == [3, 3] and got["outputs"][0]["datatype"] == "FP32"
    np.testing.assert_allclose(np.array(got["outputs"][0]["data"], np.float32).reshape(3, 3), ref["out"], rtol=1e-5, atol=1e-6)
    # The binary extension by hand: JSON header, then x's and y's raw little-endian bytes.
    head = json.dumps(
        {
            "inputs": [
                {"name": "x", "shape": [3, 4], "datatype": "FP32", "parameters": {"binary_data_size": x.nbytes}},
                {"name": "y", "shape": [3, 3], "datatype": "FP32", "parameters": {"binary_data_size": y.nbytes}},
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    r = httpx.post(
        f"http://{server}/v2/models/mlp/versions/1/infer",
        content=head + x.tobytes() + y.tobytes(),
        headers={"Inference-Header-Content-Length": str(len(head))},
    )
    assert r.status_code == 200, r.text
    n = int(r.headers["Inference-Header-Content-Length"])
    meta = json.loads(r.content[:n])
    sizes = {o["name"]: o["parameters"]["binary_data_size"] for o in meta["outputs"]}
    assert sizes == {"out": 36, "total": 24} and len(r.content) == n + 60
    outs = dict(
        zip(
            [o["name"] for o in meta["outputs"]],
            np.split(np.frombuffer(r.content[n:], np.uint8), [sizes[meta["outputs"][0]["name"]]]),
        )
    )
    np.testing.assert_allclose(outs["out"].view("<f4").reshape(3, 3), ref["out"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(outs["total"].view("<i8"), ref["total"])


def _x(shape: list[int] = [1, 4], datatype: str = "FP32", name: str = "x", data: object = None) -> dict[str, object]:
    return {"name": name, "shape": shape, "datatype": datatype, "data": data if data is not None else [0.5] * int(np.prod(shape))}


_Y = {"name": "y", "shape": [1, 3], "datatype": "FP32", "data": [0.0, 1.0, 2.0]}


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/v2/models/nope/infer", {"inputs": [_x(), _Y]}, 404, ["nope", "mlp"]),
        ("/v2/models/mlp/versions/3/infer", {"inputs": [_x(), _Y]}, 404, ["version"]),
        ("/v2/models/mlp/infer", {"inputs": [_x(name="z"), _Y]}, 400, ["no input 'z'", "x"]),
        ("/v2/models/mlp/infer", {"inputs": [_x(shape=[1, 5]), _Y]}, 400, ["expects shape [-1, 4]", "[1, 5]"]),
        ("/v2/models/mlp/infer", {"inputs": [_x(shape=[4]), _Y]}, 400, ["expects shape"]),
        ("/v2/models/mlp2/infer", {"inputs": [_x(shape=[1, 4]), _Y]}, 400, ["expects shape [2, 4]"]),
        ("/v2/models/mlp/infer", {"inputs": [_x(datatype="INT64", data=[1, 2, 3, 4]), _Y]}, 400, ["FP32", "INT64"]),
        ("/v2/models/mlp/infer", {"inputs": [_x(data=[1.0, 2.0]), _Y]}, 400, ["2 data values", "(4)"]),
        ("/v2/models/mlp/infer", {"inputs": [_x(data=["a", "b", "c", "d"]), _Y]}, 400, ["not FP32"]),
        ("/v2/models/mlp/infer", {"inputs": [_x()]}, 400, ["missing inputs ['y']"]),
        ("/v2/models/mlp/infer", {"inputs": [_x(), _Y], "outputs": [{"name": "nah"}]}, 400, ["no output", "nah"]),
        (
            "/v2/models/mlp/infer",
            {"inputs": [_x(shape=[2, 4]), _Y]},
            400,
            ["graph", "y"],
        ),  # rows disagree: the Session's FeedError
        ("/v2/models/mlp/infer", b"{not json", 400, ["malformed JSON"]),
        ("/v2/models/mlp/infer", [1, 2], 400, ['"inputs"']),
        ("/v2/models/mlp/infer", b"x" * 100_001, 413, ["100000", "--max-body-bytes"]),
    ],
)
def test_bad_requests_get_4xx_and_a_json_error(server: str, path: str, body: object, status: int, words: list[str]) -> None:
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    r = httpx.post(f"http://{server}{path}", **kwargs)  # type: ignore[arg-type]
    assert r.status_code == status, r.text
    message = r.json()["error"]
    assert all(w in message for w in words), message
    assert httpx.get(f"http://{server}/v2/health/live").status_code == 200  # and the server lives on


def test_oversized_chunked_body_is_cut_off(server: str) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(50):
            yield b"y" * 4096

    r = httpx.post(f"http://{server}/v2/models/mlp/infer", content=chunks())
    assert r.status_code == 413 and "over the limit of 100000" in r.json()["error"]


def test_triton_client_sees_errors_and_metadata_of_unknown_models(server: str) -> None:
    client = triton.InferenceServerClient(url=server)
    with pytest.raises(InferenceServerException, match="no model 'nope'"):
        client.get_model_metadata("nope")
    bad = triton.InferInput("x", [1, 4], "FP64")
    bad.set_data_from_numpy(np.zeros((1, 4)), binary_data=True)
    y = triton.InferInput("y", [1, 3], "FP32")
    y.set_data_from_numpy(np.zeros((1, 3), np.float32))
    with pytest.raises(InferenceServerException, match="is FP32, got datatype 'FP64'"):
        client.infer("mlp", [bad, y])
    client.close()


def _scrape(url: str) -> dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """/metrics parsed by prometheus_client's own parser: family -> (sample name, labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    r = httpx.get(f"http://{url}/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {
        f.name: {(s.name, tuple(sorted(s.labels.items()))): s.value for s in f.samples}
        for f in text_string_to_metric_families(r.text)
    }


def test_metrics_count_requests_latency_rows_and_compiles(server: str) -> None:
    """Per model and version: success and failure counts and the duration histogram (buckets
    cumulative up to +Inf == _count, a positive _sum), after a real client's requests."""
    before = _scrape(server)
    client = triton.InferenceServerClient(url=server)
    x, y = (triton.InferInput(n, [4, k], "FP32") for n, k in (("x", 4), ("y", 3)))
    x.set_data_from_numpy(np.full((4, 4), 0.1, np.float32))
    y.set_data_from_numpy(np.full((4, 3), 0.1, np.float32))
    assert client.infer("mlp", [x, y]).as_numpy("out").shape == (4, 3)
    with pytest.raises(InferenceServerException, match="missing inputs"):
        client.infer("mlp", [x])
    with pytest.raises(InferenceServerException, match="no model 'nope'"):
        client.infer("nope", [x])
    client.close()
    after = _scrape(server)
    mv = (("model", "mlp"), ("version", "1"))

    def delta(family: str, sample: str, labels: tuple[tuple[str, str], ...]) -> float:
        key = (sample, labels)
        return after[family][key] - before.get(family, {}).get(key, 0.0)

    assert delta("aioge_request_success", "aioge_request_success_total", mv) == 1
    assert delta("aioge_request_failure", "aioge_request_failure_total", (("code", "400"), *mv)) == 1
    unknown = (("code", "404"), ("model", "unknown"), ("version", ""))
    assert delta("aioge_request_failure", "aioge_request_failure_total", unknown) == 1
    hist = after["aioge_request_duration_seconds"]
    buckets = sorted(
        (float(dict(labels)["le"]), v)
        for (name, labels), v in hist.items()
        if name.endswith("_bucket") and dict(labels)["model"] == "mlp" and dict(labels)["version"] == "1"
    )
    assert len(buckets) == 15 and buckets[-1][0] == float("inf")
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:]))  # cumulative
    count = hist[("aioge_request_duration_seconds_count", mv)]
    assert buckets[-1][1] == count and count >= 2 and hist[("aioge_request_duration_seconds_sum", mv)] > 0
    assert delta("aioge_request_duration_seconds", "aioge_request_duration_seconds_count", mv) == 2
    rows = after["aioge_request_batch_rows"]
    le = {dict(k[1])["le"]: v for k, v in rows.items() if k[0].endswith("_bucket") and dict(k[1])["model"] == "mlp"}
    assert le["4.0"] - le["2.0"] >= 1  # the 4-row request
    assert after["aioge_request_queue_seconds"][("aioge_request_queue_seconds_count", mv)] >= 1
    ready = after["aioge_model_ready"]
    assert ready[("aioge_model_ready", (("model", "mlp"),))] == 1 and ready[("aioge_model_ready", (("model", "mlp2"),))] == 1
    # The .onnx was compiled by this server: 5 nodes, each compiled or from the kernel cache.
    m = (("model", "mlp"),)
    compiled = after["aioge_model_kernels_compiled"][("aioge_model_kernels_compiled_total", m)]
    assert compiled + after["aioge_model_kernel_cache_hits"][("aioge_model_kernel_cache_hits_total", m)] >= 1
    assert after["aioge_model_compile_seconds"][("aioge_model_compile_seconds", m)] > 0
    kernel = after["aioge_kernel_cache_compiles"][("aioge_kernel_cache_compiles_total", ())]
    assert kernel + after["aioge_kernel_cache_hits"][("aioge_kernel_cache_hits_total", ())] >= 1


def test_batch_stats_are_read_only_when_the_session_has_them() -> None:
    class Plain:
        pass

    class Batching:
        def batch_stats(self, graph_id: int) -> dict[str, object]:
            return {"batches": 3, "mean_batch_size": 2.5, "queue_delay_p99_us": 800, "note": "x", "flag": True}

    assert batch_stats(Plain(), 1) == {}
    assert batch_stats(Batching(), 1) == {"batches": 3.0, "mean_batch_size": 2.5, "queue_delay_p99_us": 800.0}


def test_ready_only_after_the_compile(models: dict[str, Path]) -> None:
    gate, entered = threading.Event(), threading.Event()

    class SlowCompile(SessionBackend):
        async def load(self, model: ServedModel) -> None:
            import anyio

            entered.set()
            await anyio.to_thread.run_sync(gate.wait)
            await super().load(model)

    with running(create_app([str(models["onnx"])], SlowCompile())) as (url, _, _):
        assert entered.wait(10)
        client = triton.InferenceServerClient(url=url)
        assert client.is_server_live()
        assert not client.is_server_ready() and not client.is_model_ready("mlp")
        r = httpx.post(f"http://{url}/v2/models/mlp/infer", json={"inputs": [_x(), _Y]})
        assert r.status_code == 503 and "still compiling" in r.json()["error"]
        gate.set()
        _wait_ready(url)
        assert client.is_model_ready("mlp")
        assert 'aioge_model_ready{model="mlp"} 1.0' in httpx.get(f"http://{url}/metrics").text
        client.close()


def test_a_model_that_fails_to_load_stays_not_ready_with_its_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.om"
    broken.write_bytes(b"not an om")
    with running(create_app([str(broken)])) as (url, _, _):
        deadline = time.monotonic() + 30
        while "error" not in (meta := httpx.get(f"http://{url}/v2/models/broken").json()):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert "broken.om" in meta["error"]
        assert httpx.get(f"http://{url}/v2/models/broken/ready").status_code == 503
        assert httpx.get(f"http://{url}/v2/health/ready").status_code == 503


def test_shutdown_finishes_in_flight_requests(models: dict[str, Path]) -> None:
    gate, entered = threading.Event(), threading.Event()

    class SlowRun(SessionBackend):
        async def infer(self, model: ServedModel, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            import anyio

            entered.set()
            await anyio.to_thread.run_sync(gate.wait)
            return await super().infer(model, feeds)

    x = np.ones((1, 4), np.float32)
    y = np.zeros((1, 3), np.float32)
    result: dict[str, httpx.Response] = {}
    with running(create_app([str(models["onnx"])], SlowRun())) as (url, server, thread):
        _wait_ready(url)
        body = {"inputs": [_x(data=x.tolist()), {**_Y, "data": y.tolist()}]}
        client = threading.Thread(
            target=lambda: result.update(r=httpx.post(f"http://{url}/v2/models/mlp/infer", json=body, timeout=30))
        )
        client.start()
        assert entered.wait(10)
        server.should_exit = True  # what uvicorn's SIGTERM handler does
        time.sleep(0.3)
        assert thread.is_alive() and client.is_alive()  # waiting for the request, not cut off
        gate.set()
        client.join(10)
        thread.join(10)
        assert not thread.is_alive()
    r = result["r"]
    assert r.status_code == 200, r.text
    out = next(o for o in r.json()["outputs"] if o["name"] == "out")
    np.testing.assert_allclose(
        np.array(out["data"], np.float32).reshape(1, 3), _reference(models["onnx"], x, y)["out"], rtol=1e-5
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_aioge_serve_command_serves_and_stops_on_sigterm_and_ctrl_c(
    models: dict[str, Path], tmp_path: Path, sig: signal.Signals
) -> None:
    port = _free_port()
    env = {**os.environ, "ASCEND_CACHE_PATH": str(tmp_path / "atc")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aioge",
            "-v",
            "serve",
            str(models["onnx"]),
            str(models["om"]),
            "--port",
            str(port),
            "--option",
            "ge.exec.disableReuseMemory=1",
            # Ctrl-C: a terminal signals the whole process group, here with a device process in it
            *(["--option", "aioge.exec_devices=1"] if sig == signal.SIGINT else []),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        url = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://{url}/v2/health/ready").status_code == 200:
                    break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        client = triton.InferenceServerClient(url=url)
        x = RNG.standard_normal((2, 4)).astype(np.float32)
        y = RNG.standard_normal((2, 3)).astype(np.float32)
        for name in ("mlp", "mlp2"):
            inputs = [triton.InferInput("x", [2, 4], "FP32"), triton.InferInput("y", [2, 3], "FP32")]
            inputs[0].set_data_from_numpy(x)
            inputs[1].set_data_from_numpy(y)
            np.testing.assert_allclose(
                client.infer(name, inputs).as_numpy("out"), _reference(models["onnx"], x, y)["out"], rtol=1e-5, atol=1e-6
            )
        client.close()
        os.killpg(proc.pid, sig)
        out, err = proc.communicate(timeout=30)
        # uvicorn drains, runs the lifespan exit (which closes the Session), and the command exits 0.
        assert proc.returncode == 0 and "requests drained, models closed" in err, err
        assert "Traceback" not in err and "KeyboardInterrupt" not in err
        assert f"mlp, mlp2 on http://127.0.0.1:{port}" in out
        # the access log (on by default): one line per request, with its status
        assert '"POST /v2/models/mlp2/infer HTTP/1.1" 200' in err and '"GET /v2/health/ready HTTP/1.1" 200' in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.onnx"], "no such model file"),
        (["model.txt"], "takes .onnx or .om"),
        (["{onnx}", "--option", "ge.bogus=1"], "ge.bogus"),
        (["{onnx}", "--batch-max-rows", "abc"], "invalid int value"),
    ],
)
def test_serve_command_rejects_bad_arguments_before_binding(
    models: dict[str, Path], tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "model.txt").write_text("x")
    argv = [a.format(onnx=models["onnx"]) for a in args]
    proc = subprocess.run(
        [sys.executable, "-m", "aioge", "serve", *argv, "--port", str(_free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_serve_flags_become_options_only_when_given() -> None:
    from aioge.cli import _serve_options, build_parser

    def split(*argv: str) -> tuple[dict[str, str], dict[str, str]]:
        return _serve_options(build_parser().parse_args(["serve", "m.onnx", *argv]))

    assert split() == ({}, {})
    session, graph = split(
        "--option", "ge.graph_key=k1", "--option", "EXCLUDE_ENGINES=AiCpu", "--option", "ge.op_compiler_cache_dir=/tmp/c"
    )
    assert session == {"EXCLUDE_ENGINES": "AiCpu", "ge.op_compiler_cache_dir": "/tmp/c"} and graph == {"ge.graph_key": "k1"}
    session, graph = split(
        "--batch-max-rows", "64", "--batch-max-delay-us", "500", "--option", "aioge.batch_preferred_sizes=8,16"
    )
    assert {**session, **graph} == {
        "aioge.batch_max_rows": "64",
        "aioge.batch_max_delay_us": "500",
        "aioge.batch_preferred_sizes": "8,16",
    }


def test_graph_only_options_with_an_om_are_a_clear_model_error(models: dict[str, Path]) -> None:
    app = create_app([str(models["om"])], SessionBackend(graph_options={"ge.graph_key": "k1"}))
    with running(app) as (url, _, _):
        deadline = time.monotonic() + 30
        while "error" not in (meta := httpx.get(f"http://{url}/v2/models/mlp2").json()):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert "graph options other than aioge.batch_* apply to .onnx models" in meta["error"]
        r = httpx.post(f"http://{url}/v2/models/mlp2/infer", json={"inputs": [_x(shape=[2, 4]), _Y]})
        assert r.status_code == 503 and "graph options" in r.json()["error"]


def test_metrics_report_the_real_batch_stats(models: dict[str, Path]) -> None:
    backend = SessionBackend(graph_options={"aioge.batch_max_rows": "8", "aioge.batch_preferred_sizes": "1,2,4,8"})
    with running(create_app([str(models["onnx"])], backend)) as (url, _, _):
        _wait_ready(url)
        x = RNG.standard_normal((2, 4)).astype(np.float32)
        y = RNG.standard_normal((2, 3)).astype(np.float32)
        body = {
            "inputs": [
                {"name": "x", "shape": [2, 4], "datatype": "FP32", "data": x.ravel().tolist()},
                {"name": "y", "shape": [2, 3], "datatype": "FP32", "data": y.ravel().tolist()},
            ]
        }
        for _ in range(3):
            r = httpx.post(f"http://{url}/v2/models/mlp/infer", json=body)
            assert r.status_code == 200, r.text
            out = next(o for o in r.json()["outputs"] if o["name"] == "out")
            np.testing.assert_allclose(
                np.array(out["data"], np.float32).reshape(2, 3), _reference(models["onnx"], x, y)["out"], rtol=1e-5, atol=1e-6
            )
        stats = backend.session.batch_stats(1)  # the session's own figures, as /metrics must show them
        text = httpx.get(f"http://{url}/metrics").text
    samples = {
        line.split("stat=", 1)[1].split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('aioge_batch{model="mlp"')
    }
    assert samples["requests"] == 3 and samples["rows"] == 6 and samples["batches"] == stats.batches >= 1
    assert samples["queue_delay_p99"] == pytest.approx(stats.queue_delay_p99)


def test_triton_repository_config_and_statistics_endpoints(models: dict[str, Path], tmp_path: Path) -> None:
    broken = tmp_path / "broken.om"
    broken.write_bytes(b"not an om")
    with running(create_app([str(models["onnx"]), str(models["om"]), str(broken)])) as (url, _, _):
        client = triton.InferenceServerClient(url=url)
        deadline = time.monotonic() + 60
        while {m["name"]: m["state"] for m in client.get_model_repository_index()}.get("mlp2") != "READY":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert {n: (m["version"], m["state"]) for n, m in index.items()} == {
            "mlp": ("1", "READY"),
            "mlp2": ("1", "READY"),
            "broken": ("1", "UNAVAILABLE"),
        }
        assert "broken.om" in index["broken"]["reason"]
        ready_only = httpx.post(f"http://{url}/v2/repository/index", json={"ready": True}).json()
        assert sorted(m["name"] for m in ready_only) == ["mlp", "mlp2"]

        config = client.get_model_config("mlp")
        assert config["name"] == "mlp" and config["max_batch_size"] == 0
        assert {t["name"]: (t["data_type"], t["dims"]) for t in config["input"]} == {
            "x": ("TYPE_FP32", [-1, 4]),
            "y": ("TYPE_FP32", [-1, 3]),
        }
        assert {t["name"]: t["data_type"] for t in config["output"]} == {"out": "TYPE_FP32", "total": "TYPE_INT64"}
        assert [t["dims"] for t in client.get_model_config("mlp2", "1")["input"]] == [[2, 4], [2, 3]]

        x = RNG.standard_normal((3, 4)).astype(np.float32)
        y = RNG.standard_normal((3, 3)).astype(np.float32)

        def infer() -> np.ndarray:
            inputs = [triton.InferInput("x", [3, 4], "FP32"), triton.InferInput("y", [3, 3], "FP32")]
            inputs[0].set_data_from_numpy(x)
            inputs[1].set_data_from_numpy(y)
            return client.infer("mlp", inputs).as_numpy("out")

        for _ in range(2):
            np.testing.assert_allclose(infer(), _reference(models["onnx"], x, y)["out"], rtol=1e-5, atol=1e-6)
        assert httpx.post(f"http://{url}/v2/models/mlp/infer", json={"inputs": []}).status_code == 400
        stats = client.get_inference_statistics("mlp")["model_stats"]
        assert [s["name"] for s in stats] == ["mlp"]
        s = stats[0]
        assert s["inference_count"] == 6 and s["execution_count"] == 2 and s["last_inference"] > 0
        phases = s["inference_stats"]
        assert phases["success"]["count"] == 2 and phases["fail"]["count"] == 1 and phases["compute_infer"]["count"] == 2
        assert phases["success"]["ns"] >= phases["compute_infer"]["ns"] > 0
        every = client.get_inference_statistics()["model_stats"]
        assert sorted(m["name"] for m in every) == ["broken", "mlp", "mlp2"]

        client.unload_model("mlp")
        assert {m["name"]: m["state"] for m in client.get_model_repository_index()}["mlp"] == "UNAVAILABLE"
        assert not client.is_model_ready("mlp")
        r = httpx.post(f"http://{url}/v2/models/mlp/infer", json={"inputs": [_x(), _Y]})
        assert r.status_code == 503 and "unloaded" in r.json()["error"]
        client.load_model("mlp")
        assert client.is_model_ready("mlp")
        np.testing.assert_allclose(infer(), _reference(models["onnx"], x, y)["out"], rtol=1e-5, atol=1e-6)

        with pytest.raises(InferenceServerException, match="no model 'nope'"):
            client.load_model("nope")
        with pytest.raises(InferenceServerException, match="no model 'nope'"):
            client.unload_model("nope")
        with pytest.raises(InferenceServerException, match="no model 'nope'"):
            client.get_model_config("nope")
        with pytest.raises(InferenceServerException, match="no model 'nope'"):
            client.get_inference_statistics("nope")
        with pytest.raises(InferenceServerException, match="takes no"):
            client.load_model("mlp", config='{"max_batch_size": 8}')
        with pytest.raises(InferenceServerException, match="did not load"):
            client.load_model("broken")
        client.close()
        # errors are JSON everywhere, also for routes and methods the server does not have
        for method, path, status in [("GET", "/v2/nothing", 404), ("GET", "/v2/models/mlp/infer", 405)]:
            r = httpx.request(method, f"http://{url}{path}")
            assert r.status_code == status and r.json()["error"], r.text


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--read-timeout", "0"), ("--keep-alive-timeout", "-1"), ("--max-decoding", "0"), ("--max-body-bytes", "0")],
)
def test_serve_refuses_bad_limits_before_binding(
    models: dict[str, Path], flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert aioge_main(["serve", str(models["onnx"]), flag, value, "--port", str(_free_port())]) == 1
    assert f"{flag} {value}" in capsys.readouterr().err


def test_serve_help_documents_the_limits_timeouts_and_access_log(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        aioge_main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for words in (
        "--keep-alive-timeout SECONDS close a connection idle this long",
        "--read-timeout SECONDS close a connection whose request line and headers",
        "--max-decoding",
        "--no-access-log",
        "before they are read",
    ):
        assert words in text, words


def test_explicit_model_control_loads_only_the_named_models(models: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(AiogeError, match="--load-model nope: no such model"):
        create_app([str(models["onnx"])], load=["nope"])
    assert aioge_main(["serve", str(models["onnx"]), "--load-model", "mlp"]) == 1
    assert "--load-model goes with --model-control-mode explicit" in capsys.readouterr().err
    with running(create_app([str(models["onnx"]), str(models["om"])], load=["mlp2"])) as (url, _, _):
        _wait_ready(url)  # ready: the models it was asked to load are
        client = triton.InferenceServerClient(url=url)
        states = {m["name"]: m["state"] for m in client.get_model_repository_index()}
        assert states == {"mlp": "UNAVAILABLE", "mlp2": "READY"}
        r = httpx.post(f"http://{url}/v2/models/mlp/infer", json={"inputs": [_x(), _Y]})
        assert r.status_code == 503 and "unloaded" in r.json()["error"]
        client.load_model("mlp")
        x = np.full((1, 4), 0.5, np.float32)
        y = np.array([[0.0, 1.0, 2.0]], np.float32)
        r = httpx.post(f"http://{url}/v2/models/mlp/infer", json={"inputs": [_x(), _Y]})
        assert r.status_code == 200, r.text
        out = next(o for o in r.json()["outputs"] if o["name"] == "out")
        np.testing.assert_allclose(
            np.array(out["data"], np.float32).reshape(1, 3), _reference(models["onnx"], x, y)["out"], rtol=1e-5
        )
        client.close()


@pytest.mark.anyio
async def test_wait_loaded_starts_after_the_models_load_and_fails_on_one_that_does_not(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """``create_app(wait_loaded=True)`` (a Ray Serve replica): start-up returns with every model
    ready, and raises naming a model that did not load (Ray then fails the replica)."""
    app = create_app([str(models["onnx"])], wait_loaded=True)
    async with app.router.lifespan_context(app):
        assert app.state.models["mlp"].ready  # loaded before start-up returned, not in the background
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx file")
    app = create_app([str(models["onnx"]), str(broken)], wait_loaded=True)
    with pytest.raises(AiogeError, match="model broken version 1: "):
        async with app.router.lifespan_context(app):
            pass
