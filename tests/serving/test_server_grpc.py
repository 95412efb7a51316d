"""``aioge serve --grpc-port``: the KServe v2 gRPC service, spoken to by Triton's own gRPC client
(tritonclient.grpc) and by its raw stubs (typed ``contents``), against onnxruntime and the REST
answer of the same server; errors as gRPC status codes with messages; a geared model at its gears;
the command serving both fronts and draining on SIGTERM."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import grpc
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as triton
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from aioge.server import ServedModel, SessionBackend, create_app
from tests.serving.test_server import _free_port, _onnx_model, _reference, _wait_ready, running
from tests.serving.test_server_gears import _feeds


@contextlib.contextmanager
def both(paths: list[Path], backend: SessionBackend | None = None) -> Iterator[tuple[str, str]]:
    """A server on REST and gRPC (127.0.0.1, free ports), ready: (rest url, grpc url)."""
    gport = _free_port()
    app = create_app([str(p) for p in paths], backend, grpc=("127.0.0.1", gport), grpc_grace=5)
    with running(app) as (url, _, _):
        _wait_ready(url)
        yield url, f"127.0.0.1:{gport}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str]]:
    root = tmp_path_factory.mktemp("grpc")
    src = _onnx_model(root / "mlp.onnx")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASCEND_CACHE_PATH", str(root / "atc"))
        with both([src]) as (url, gurl):
            yield src, url, gurl


def _grpc_inputs(x: np.ndarray, y: np.ndarray) -> list[tgrpc.InferInput]:
    inputs = [tgrpc.InferInput("x", list(x.shape), "FP32"), tgrpc.InferInput("y", list(y.shape), "FP32")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(y)
    return inputs


def test_grpc_client_gets_onnxruntime_and_rest_outputs_and_metadata(served: tuple[Path, str, str]) -> None:
    src, url, gurl = served
    client = tgrpc.InferenceServerClient(url=gurl)
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("mlp")
    assert client.get_server_metadata(as_json=True)["name"] == "aioge"
    meta = client.get_model_metadata("mlp", as_json=True)
    assert {i["name"]: (i["datatype"], i["shape"]) for i in meta["inputs"]} == {
        "x": ("FP32", ["-1", "4"]),
        "y": ("FP32", ["-1", "3"]),
    }
    assert {o["name"]: o["datatype"] for o in meta["outputs"]} == {"out": "FP32", "total": "INT64"}
    config = client.get_model_config("mlp", as_json=True)["config"]
    assert config["name"] == "mlp" and [i["data_type"] for i in config["input"]] == ["TYPE_FP32", "TYPE_FP32"]
    assert [m["name"] for m in client.get_model_repository_index(as_json=True)["models"]] == ["mlp"]
    x, y = _feeds(5, 1)
    result = client.infer("mlp", _grpc_inputs(x, y), request_id="r1")
    assert result.get_response().id == "r1" and result.get_response().raw_output_contents  # binary out, as Triton
    ref = _reference(src, x, y)
    np.testing.assert_allclose(result.as_numpy("out"), ref["out"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(result.as_numpy("total"), ref["total"])
    # the REST front of the same server answers the very same arrays
    rest = triton.InferenceServerClient(url=url)
    inputs = [triton.InferInput("x", [5, 4], "FP32"), triton.InferInput("y", [5, 3], "FP32")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(y)
    answer = rest.infer("mlp", inputs)
    np.testing.assert_array_equal(answer.as_numpy("out"), result.as_numpy("out"))
    np.testing.assert_array_equal(answer.as_numpy("total"), result.as_numpy("total"))
    # one request path: the statistics count both fronts' requests
    stats = client.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
    assert int(stats["execution_count"]) >= 2 and int(stats["inference_stats"]["success"]["count"]) >= 2
    rest.close()
    client.close()


def test_typed_contents_and_requested_outputs_through_the_raw_stub(served: tuple[Path, str, str]) -> None:
    src, _, gurl = served
    x, y = _feeds(3, 2)
    request = service_pb2.ModelInferRequest(model_name="mlp")
    for name, a in (("x", x), ("y", y)):
        t = request.inputs.add(name=name, datatype="FP32", shape=a.shape)
        t.contents.fp32_contents.extend(a.ravel().tolist())
    request.outputs.add(name="total")
    with grpc.insecure_channel(gurl) as channel:
        reply = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert [o.name for o in reply.outputs] == ["total"] and list(reply.outputs[0].shape) == [3]
    assert reply.outputs[0].datatype == "INT64"
    total = np.frombuffer(reply.raw_output_contents[0], "<i8")
    np.testing.assert_array_equal(total, _reference(src, x, y)["total"])


@pytest.mark.parametrize(
    ("change", "code", "words"),
    [
        ({"model": "nope"}, "NOT_FOUND", ["no model 'nope'"]),
        ({"x_shape": [2, 5]}, "INVALID_ARGUMENT", ["'x' expects shape [-1, 4]", "[2, 5]"]),
        ({"x_dtype": "FP64"}, "INVALID_ARGUMENT", ["'x' is FP32", "FP64"]),
        ({"x_name": "z"}, "INVALID_ARGUMENT", ["no input 'z'", "['x', 'y']"]),
        ({"drop_y": True}, "INVALID_ARGUMENT", ["missing inputs ['y']"]),
        ({"output": "nah"}, "INVALID_ARGUMENT", ["no output 'nah'"]),
    ],
)
def test_bad_requests_are_grpc_errors_with_messages(
    served: tuple[Path, str, str], change: dict[str, object], code: str, words: list[str]
) -> None:
    _, _, gurl = served
    shape = change.get("x_shape", [2, 4])
    dtype = str(change.get("x_dtype", "FP32"))
    x = np.zeros(shape, np.float64 if dtype == "FP64" else np.float32)
    inputs = [tgrpc.InferInput(str(change.get("x_name", "x")), list(x.shape), dtype), tgrpc.InferInput("y", [2, 3], "FP32")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(np.zeros((2, 3), np.float32))
    outputs = [tgrpc.InferRequestedOutput(str(change["output"]))] if "output" in change else None
    client = tgrpc.InferenceServerClient(url=gurl)
    with pytest.raises(InferenceServerException) as info:
        client.infer(str(change.get("model", "mlp")), inputs[:1] if change.get("drop_y") else inputs, outputs=outputs)
    assert info.value.status() == f"StatusCode.{code}", info.value
    assert all(w in info.value.message() for w in words), info.value.message()
    with pytest.raises(InferenceServerException) as info:
        client.get_model_metadata("nope")
    assert info.value.status() == "StatusCode.NOT_FOUND"
    # raw bytes that do not fill the shape
    request = service_pb2.ModelInferRequest(model_name="mlp")
    request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    request.inputs.add(name="y", datatype="FP32", shape=[1, 3])
    request.raw_input_contents.extend([b"\0" * 16, b"\0" * 5])
    with grpc.insecure_channel(gurl) as channel, pytest.raises(grpc.RpcError) as err:
        service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "5 raw bytes" in str(err.value.details())
    assert client.is_server_live()  # and the server goes on
    client.close()


def test_a_geared_model_answers_at_its_gears_and_names_them_otherwise(tmp_path: Path) -> None:
    src = _onnx_model(tmp_path / "mlpg.onnx")
    backend = SessionBackend(graph_options={"ge.inputShape": "x:-1,4;y:-1,3", "ge.dynamicBatchSize": "1,2,4"})
    with both([src], backend) as (_, gurl):
        client = tgrpc.InferenceServerClient(url=gurl)
        meta = client.get_model_metadata("mlpg", as_json=True)
        assert [i["shape"] for i in meta["inputs"]] == [["-1", "4"], ["-1", "3"]]
        for rows in (2, 4):
            x, y = _feeds(rows, rows)
            result = client.infer("mlpg", _grpc_inputs(x, y))
            np.testing.assert_allclose(result.as_numpy("out"), _reference(src, x, y)["out"], rtol=1e-5, atol=1e-6)
        with pytest.raises(InferenceServerException) as info:
            client.infer("mlpg", _grpc_inputs(*_feeds(5, 0)))
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT" and "batch sizes [1, 2, 4]" in info.value.message()
        client.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_serve_command_serves_grpc_and_drains_on_sigterm_and_ctrl_c(tmp_path: Path, sig: signal.Signals) -> None:
    src = _onnx_model(tmp_path / "mlp.onnx")
    port, gport = _free_port(), _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "aioge", "-v", "serve", str(src), "--port", str(port), "--grpc-port", str(gport)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "ASCEND_CACHE_PATH": str(tmp_path / "atc")},
        start_new_session=True,
    )
    try:
        client = tgrpc.InferenceServerClient(url=f"127.0.0.1:{gport}")
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()
            with contextlib.suppress(InferenceServerException):
                if client.is_server_ready():
                    break
            assert time.monotonic() < deadline, "never ready over gRPC"
            time.sleep(0.05)
        x, y = _feeds(2, 3)
        np.testing.assert_allclose(
            client.infer("mlp", _grpc_inputs(x, y)).as_numpy("out"), _reference(src, x, y)["out"], rtol=1e-5, atol=1e-6
        )
        client.close()
        os.killpg(proc.pid, sig)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "requests drained, models closed" in err, err
        assert "Traceback" not in err and f"gRPC on 127.0.0.1:{gport}" in out
        # the access log (on by default) has a line per RPC too
        assert '"GRPC /inference.GRPCInferenceService/ModelInfer" OK' in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_serve_help_a_bad_grpc_port_and_a_busy_one(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from aioge.cli import main as aioge_main

    with pytest.raises(SystemExit):
        aioge_main(["serve", "--help"])
    assert "--grpc-port" in capsys.readouterr().out
    assert aioge_main(["serve", "x.onnx", "--grpc-port", "70000"]) != 0
    assert "--grpc-port 70000" in capsys.readouterr().err
    src = _onnx_model(tmp_path / "m.onnx")
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        assert aioge_main(["serve", str(src), "--port", str(_free_port()), "--grpc-port", str(port)]) == 1
    err = capsys.readouterr().err
    assert f"--grpc-port {port}: cannot listen on 127.0.0.1:{port}" in err and "Traceback" not in err, err


def test_large_binary_tensors_both_ways_and_the_size_limit(tmp_path: Path) -> None:
    src = _onnx_model(tmp_path / "big.onnx")
    gport = _free_port()
    app = create_app([str(src)], max_body_bytes=1 << 20, grpc=("127.0.0.1", gport), grpc_grace=5)
    with running(app) as (url, _, _):
        _wait_ready(url)
        client = tgrpc.InferenceServerClient(url=f"127.0.0.1:{gport}")
        x, y = _feeds(20_000, 4)  # 320 KB in, 240 KB out: decoded and encoded in worker threads
        result = client.infer("big", _grpc_inputs(x, y))
        ref = _reference(src, x, y)
        np.testing.assert_allclose(result.as_numpy("out"), ref["out"], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(result.as_numpy("total"), ref["total"])
        with pytest.raises(InferenceServerException) as info:
            client.infer("big", _grpc_inputs(*_feeds(60_000, 5)))  # 1.7 MB: over --max-body-bytes
        assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED", info.value
        assert client.is_server_live()
        client.close()


def test_shutdown_lets_an_in_flight_rpc_finish(tmp_path: Path) -> None:
    src = _onnx_model(tmp_path / "slow.onnx")
    gate, entered = threading.Event(), threading.Event()

    class SlowRun(SessionBackend):
        async def infer(self, model: ServedModel, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            entered.set()
            await anyio.to_thread.run_sync(gate.wait)
            return await super().infer(model, feeds)

    x, y = _feeds(2, 6)
    result: dict[str, object] = {}
    gport = _free_port()
    app = create_app([str(src)], SlowRun(), grpc=("127.0.0.1", gport), grpc_grace=10)
    with running(app) as (url, server, thread):
        _wait_ready(url)
        client = tgrpc.InferenceServerClient(url=f"127.0.0.1:{gport}")
        caller = threading.Thread(target=lambda: result.update(r=client.infer("slow", _grpc_inputs(x, y))))
        caller.start()
        assert entered.wait(10)
        server.should_exit = True  # what uvicorn's SIGTERM handler does
        time.sleep(0.3)
        assert thread.is_alive() and caller.is_alive()  # waiting for the RPC, not cut off
        gate.set()
        caller.join(10)
        thread.join(10)
        assert not thread.is_alive()
        client.close()
    answer = result["r"]
    assert isinstance(answer, tgrpc.InferResult)
    np.testing.assert_allclose(answer.as_numpy("out"), _reference(src, x, y)["out"], rtol=1e-5, atol=1e-6)


def test_a_model_that_fails_to_load_is_unavailable_with_its_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.om"
    broken.write_bytes(b"not an om")
    gport = _free_port()
    with running(create_app([str(broken)], grpc=("127.0.0.1", gport), grpc_grace=5)):
        client = tgrpc.InferenceServerClient(url=f"127.0.0.1:{gport}")
        deadline = time.monotonic() + 30
        while True:
            with pytest.raises(InferenceServerException) as info:
                client.infer("broken", _grpc_inputs(*_feeds(1, 0)))
            if "still compiling" not in info.value.message():
                break
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert info.value.status() == "StatusCode.UNAVAILABLE" and "broken.om" in info.value.message(), info.value
        assert not client.is_model_ready("broken") and not client.is_server_ready() and client.is_server_live()
        client.close()


def test_a_repository_models_versions_over_grpc_match_onnxruntime_and_rest(tmp_path: Path) -> None:
    """``model_version`` picks the version (empty: the latest ready); metadata, index, readiness,
    statistics and the answer's version are the real versions, as on the REST version routes."""
    from tests.serving.test_server_repository import _mlp, _ort

    root = tmp_path / "repo"
    for v in (1, 2):
        _mlp(root / "mlp" / str(v) / "model.onnx", v)
    (root / "mlp" / "config.toml").write_text('version_policy = "all"\n')
    gport = _free_port()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASCEND_CACHE_PATH", str(tmp_path / "atc"))
        app = create_app([], repository=str(root), grpc=("127.0.0.1", gport), grpc_grace=5)
        with running(app) as (url, _, _):
            _wait_ready(url)
            client = tgrpc.InferenceServerClient(url=f"127.0.0.1:{gport}")
            rest = triton.InferenceServerClient(url=url)
            assert client.is_server_ready() and client.is_model_ready("mlp", "1") and client.is_model_ready("mlp", "2")
            index = client.get_model_repository_index(as_json=True)["models"]
            assert sorted((m["name"], m["version"], m["state"]) for m in index) == [
                ("mlp", "1", "READY"),
                ("mlp", "2", "READY"),
            ]
            assert client.get_model_metadata("mlp", "1", as_json=True)["versions"] == ["1", "2"]
            x, y = _feeds(1, 7)  # a repository model without gears serves the shape it built (rows 1)
            answers = {}
            for version in ("1", "2", ""):
                result = client.infer("mlp", _grpc_inputs(x, y), model_version=version)
                assert result.get_response().model_version == (version or "2")
                answers[version] = result.as_numpy("out")
                inputs = [triton.InferInput("x", [1, 4], "FP32"), triton.InferInput("y", [1, 3], "FP32")]
                inputs[0].set_data_from_numpy(x)
                inputs[1].set_data_from_numpy(y)
                np.testing.assert_array_equal(rest.infer("mlp", inputs, model_version=version).as_numpy("out"), answers[version])
            for v in ("1", "2"):
                (ref,) = _ort(root / "mlp" / v / "model.onnx", {"x": x, "y": y})
                np.testing.assert_allclose(answers[v], ref, rtol=1e-5, atol=1e-6)
            assert not np.allclose(answers["1"], answers["2"])  # two versions, two weights
            np.testing.assert_array_equal(answers[""], answers["2"])
            stats = client.get_inference_statistics("mlp", as_json=True)["model_stats"]
            assert {s["version"]: int(s["execution_count"]) for s in stats} == {"1": 2, "2": 4}
            one = client.get_inference_statistics("mlp", "1", as_json=True)["model_stats"]
            assert [(s["version"], int(s["execution_count"])) for s in one] == [("1", 2)]
            with pytest.raises(InferenceServerException, match="version '3'") as info:
                client.infer("mlp", _grpc_inputs(x, y), model_version="3")
            assert info.value.status() == "StatusCode.NOT_FOUND"
            rest.close()
            client.close()
