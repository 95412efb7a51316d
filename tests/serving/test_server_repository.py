"""``aioge serve --model-repository DIR``: Triton's layout (one folder per model, version
folders, a config.toml each), every version served and checked against onnxruntime, gears from
the config built at load (never on a request), per-model options, config errors naming file
and field, ``--strict``, and a model that fails to load leaving the others ready."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.http as triton
from onnx import TensorProto, helper, numpy_helper

import aioge.session
from aioge.cli import main as aioge_main
from aioge.errors import ConfigError
from aioge.server import create_app
from aioge.serving.repository import read_config, read_repository
from tests.serving.test_server import _free_port, _wait_ready, running

MLP_CONFIG = """
max_batch_size = 4
version_policy = "all"

[[input]]
name = "x"
dims = [-1, 4]

[[input]]
name = "y"
dims = [-1, 3]

[dynamic_batching]
max_delay_us = 200

[options]
"ge.exec.disableReuseMemory" = "1"
"""

SCALE_CONFIG = """
version_policy = { latest = 2 }

[[input]]
name = "a"
dims = [1, -1]

[gears]
dims = [[2], [5]]
"""


def _mlp(path: Path, seed: int) -> Path:
    """out = relu(x @ W + y), x [N, 4], y [N, 3], W of the seed."""
    w = np.random.default_rng(seed).standard_normal((4, 3)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "y"], ["s"])]
    nodes.append(helper.make_node("Relu", ["s"], ["out"]))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(w, "W")],
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _scale(path: Path, k: float) -> Path:
    """b = a * k, a [1, L]."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["a", "k"], ["b"])],
        "scale",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, "L"])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, "L"])],
        [numpy_helper.from_array(np.array(k, np.float32), "k")],
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _ort(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return list(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds))


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """mlp: 1/model.onnx, 2/model.om (batch gears 1,2,4 compiled in); scale: versions 1-3, latest 2 served."""
    root = tmp_path_factory.mktemp("repo")
    refs = tmp_path_factory.mktemp("refs")
    _mlp(root / "mlp" / "1" / "model.onnx", 1)
    _mlp(refs / "mlp2.onnx", 2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASCEND_CACHE_PATH", str(refs / "atc"))
        om = root / "mlp" / "2" / "model.om"
        om.parent.mkdir()
        gears = ["--input-shape", "x:-1,4;y:-1,3", "--dynamic-batch-size", "1,2,4", "-q"]
        assert aioge_main(["compile", str(refs / "mlp2.onnx"), "-o", str(om), *gears]) == 0
    (root / "mlp" / "config.toml").write_text(MLP_CONFIG)
    for k in (1, 2, 3):
        _scale(root / "scale" / str(k) / "model.onnx", float(k))
    (root / "scale" / "config.toml").write_text(SCALE_CONFIG)
    return {"root": root, "mlp1": root / "mlp" / "1" / "model.onnx", "mlp2": refs / "mlp2.onnx"}


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Every compile the session starts, by signature."""
    seen: list[object] = []
    real = aioge.session.compile_graph

    async def counting(graph, signature, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(signature)
        return await real(graph, signature, *args, **kwargs)

    monkeypatch.setattr(aioge.session, "compile_graph", counting)
    yield seen


def _mlp_inputs(rows: int, seed: int) -> tuple[list[triton.InferInput], dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal((rows, 4)).astype(np.float32), "y": rng.standard_normal((rows, 3)).astype(np.float32)}
    inputs = [triton.InferInput(n, list(a.shape), "FP32") for n, a in feeds.items()]
    for i, a in zip(inputs, feeds.values()):
        i.set_data_from_numpy(a)
    return inputs, feeds


def test_a_repository_serves_every_version_with_onnxruntime_outputs_and_never_compiles_a_request(
    repo: dict[str, Path], compiles: list[object]
) -> None:
    app = create_app([], repository=str(repo["root"]))
    with running(app) as (url, _, _):
        _wait_ready(url)
        compiles.clear()  # declared shapes and gears compiled at load; from here on nothing may compile
        client = triton.InferenceServerClient(url=url)
        index = client.get_model_repository_index()
        assert [(m["name"], m["version"], m["state"]) for m in index] == [
            ("mlp", "1", "READY"),
            ("mlp", "2", "READY"),
            ("scale", "2", "READY"),
            ("scale", "3", "READY"),
        ]
        # mlp: every version at every batch gear (max_batch_size 4), unversioned = the latest
        for version, ref in (("1", repo["mlp1"]), ("2", repo["mlp2"]), ("", repo["mlp2"])):
            assert client.is_model_ready("mlp", version)
            meta = client.get_model_metadata("mlp", version)
            assert meta["versions"] == ["1", "2"] and {i["name"]: i["shape"] for i in meta["inputs"]} == {
                "x": [-1, 4],
                "y": [-1, 3],
            }
            for rows in (1, 2, 3, 4):
                inputs, feeds = _mlp_inputs(rows, rows)
                result = client.infer("mlp", inputs, model_version=version)
                assert result.get_response()["model_version"] == (version or "2")
                np.testing.assert_allclose(result.as_numpy("out"), _ort(ref, feeds)[0], rtol=1e-5, atol=1e-6)
        config = client.get_model_config("mlp", "1")
        assert config["max_batch_size"] == 4 and config["version_policy"] == {"all": {}}
        assert [i["dims"] for i in config["input"]] == [[4], [3]] and config["dynamic_batching"][
            "max_queue_delay_microseconds"
        ] == 200
        # scale: latest 2 of 3 versions, each gear of its dims gears
        for version, k in (("2", 2.0), ("3", 3.0), ("", 3.0)):
            for length in (2, 5):
                a = np.linspace(-1, 1, length, dtype=np.float32).reshape(1, length)
                inp = triton.InferInput("a", [1, length], "FP32")
                inp.set_data_from_numpy(a)
                b = client.infer("scale", [inp], model_version=version).as_numpy("b")
                np.testing.assert_allclose(b, a * k, rtol=1e-6)
        stats = client.get_inference_statistics("scale")["model_stats"]
        assert [(s["version"], s["execution_count"]) for s in stats] == [("2", 2), ("3", 4)]
        client.close()
        # a version the policy leaves out, and shapes outside what is served: 4xx naming what is
        r = httpx.get(f"http://{url}/v2/models/scale/versions/1/ready")
        assert r.status_code == 404 and "'scale': ['2', '3']" in r.json()["error"]
        body = {"inputs": [{"name": "a", "shape": [1, 3], "datatype": "FP32", "data": [1.0, 2.0, 3.0]}]}
        r = httpx.post(f"http://{url}/v2/models/scale/versions/2/infer", json=body)
        assert r.status_code == 400 and "a[1, 2]; a[1, 5]" in r.json()["error"], r.text
        feeds = {"x": np.zeros((5, 4), np.float32).ravel().tolist(), "y": np.zeros((5, 3), np.float32).ravel().tolist()}
        body = {"inputs": [{"name": n, "shape": [5, len(v) // 5], "datatype": "FP32", "data": v} for n, v in feeds.items()]}
        for route in ("mlp/versions/1", "mlp"):
            r = httpx.post(f"http://{url}/v2/models/{route}/infer", json=body)
            assert r.status_code == 400 and "batch sizes [1, 2, 4]" in r.json()["error"], r.text
        # [dynamic_batching] reached the .om version too: its 8 requests (4 by version, 4 unversioned) batched
        text = httpx.get(f"http://{url}/metrics").text
        assert 'aioge_batch{model="mlp",stat="requests"} 8.0' in text
        # /metrics per version: scale 2 answered 2 (and refused the [1, 3] request), scale 3 answered 4
        assert 'aioge_request_success_total{model="scale",version="2"} 2.0' in text
        assert 'aioge_request_success_total{model="scale",version="3"} 4.0' in text
        assert 'aioge_request_failure_total{code="400",model="scale",version="2"} 1.0' in text
        assert 'aioge_request_failure_total{code="400",model="mlp",version="1"} 1.0' in text  # the 5-row request
        assert 'aioge_request_duration_seconds_count{model="scale",version="3"} 4.0' in text
        # per-model options: mlp's [options] and input shapes reached mlp alone
        session = app.state.backend.session
        options = {(m.name, m.version): session.compiled(m.handle).options for m in app.state.entries}
    assert compiles == [], "a request compiled"
    assert options[("mlp", "1")]["ge.exec.disableReuseMemory"] == "1"
    assert options[("mlp", "1")]["ge.inputShape"] == "x:-1,4;y:-1,3" and options[("mlp", "1")]["ge.dynamicBatchSize"] == "1,2,4"
    assert all(options[("scale", v)]["ge.exec.disableReuseMemory"] == "0" for v in ("2", "3"))
    assert options[("mlp", "1")]["aioge.batch_max_rows"] == "4"  # [dynamic_batching]: max_rows is max_batch_size
    assert all(options[("scale", v)]["aioge.batch_max_rows"] == "0" for v in ("2", "3"))
    assert all(options[("scale", v)]["ge.inputShape"] == "a:1,-1" for v in ("2", "3"))


def _write(root: Path, config: str) -> Path:
    _scale(root / "m" / "1" / "model.onnx", 1.0)
    (root / "m" / "config.toml").write_text(config)
    return root / "m" / "config.toml"


@pytest.mark.parametrize(
    ("config", "field", "words"),
    [
        ("max_batch_size = 4\n[[input]]\nname = 'a'\ndims = [1, 4", "(file)", "not valid TOML"),
        ("max_batch_sise = 4", "max_batch_sise", "unknown field"),
        ("max_batch_size = 'four'", "max_batch_size", "expected an int >= 0"),
        ("[[input]]\nname = 'a'\ndims = [1, 0]", "input[0].dims", "dims > 0 or -1"),
        ("[[input]]\nname = 'a'\ndims = [1, -1]", "input", "needs gears"),
        ("max_batch_size = 2\n[[input]]\nname = 'a'\ndims = [1, 4]", "input[0].dims", "must be -1"),
        ("[gears]\nbatch_sizes = [1, 2]", "gears.batch_sizes", "declare them"),
        ("[[input]]\nname = 'a'\ndims = [1, -1]\n[gears]\ndims = [[2, 3], [4, 5]]", "gears.dims", "each gear gives 2 dims"),
        ("version_policy = { newest = 1 }", "version_policy", '"all", { latest = N }'),
        ("version_policy = { specific = [7] }", "version_policy", "serves none of the versions on disk [1]"),
        ("[options]\n'ge.bogus' = '1'", "options.ge.bogus", "ge.bogus"),
        ("[options]\n'ge.inputShape' = 'a:1,2'", "options.ge.inputShape", "config's input field"),
        ("[dynamic_batching]\nmax_rows = 4", "dynamic_batching", "needs max_batch_size"),
        (
            "max_batch_size = 2\n[[input]]\nname = 'a'\ndims = [-1, 4]\n[dynamic_batching]\nmax_delay_us = -5",
            "dynamic_batching.max_delay_us",
            "-5",
        ),
    ],
)
def test_config_errors_name_the_file_and_the_field(tmp_path: Path, config: str, field: str, words: str) -> None:
    path = _write(tmp_path, config)
    with pytest.raises(ConfigError) as info:
        read_repository(tmp_path)
    assert str(info.value).startswith(f"{path}: {field}: ") and words in str(info.value), str(info.value)


def test_repository_layout_errors_and_the_default_policy(tmp_path: Path) -> None:
    _scale(tmp_path / "m" / "1" / "model.onnx", 1.0)
    _scale(tmp_path / "m" / "3" / "model.onnx", 3.0)
    assert [(v.name, v.version) for v in read_repository(tmp_path)] == [("m", 3)]  # no config: latest 1, as Triton
    assert read_config("m", _write(tmp_path, 'version_policy = "all"')).choose([1, 3]) == [1, 3]
    (tmp_path / "m" / "v2").mkdir()
    with pytest.raises(ConfigError, match="v2: \\(version folder\\): version folders are positive integers"):
        read_repository(tmp_path)
    (tmp_path / "m" / "v2").rmdir()
    _scale(tmp_path / "m" / "1" / "model.om", 1.0)
    with pytest.raises(ConfigError, match="expected one of model.onnx or model.om, found 2"):
        read_repository(tmp_path)
    with pytest.raises(ConfigError, match="no such model repository folder"):
        read_repository(tmp_path / "nowhere")


def _broken_repo(root: Path, wrong: bool = False) -> Path:
    _scale(root / "good" / "1" / "model.onnx", 2.0)
    (root / "bad" / "1").mkdir(parents=True)
    (root / "bad" / "1" / "model.om").write_bytes(b"not an om")
    if wrong:  # a config that reads well but does not fit its model: it has no input x
        _write(root, SCALE_CONFIG.replace('"a"', '"x"'))  # model m
    return root


@pytest.mark.parametrize("layout", ["repository", "files"])
def test_a_model_that_fails_to_load_leaves_the_others_serving_and_the_server_ready(tmp_path: Path, layout: str) -> None:
    root = _broken_repo(tmp_path, wrong=layout == "repository")
    if layout == "repository":
        app = create_app([], repository=str(root))
    else:  # aioge serve good.onnx bad.om
        (root / "good" / "1" / "model.onnx").rename(root / "good.onnx")
        (root / "bad" / "1" / "model.om").rename(root / "bad.om")
        app = create_app([str(root / "good.onnx"), str(root / "bad.om")])
    with running(app) as (url, _, _):
        _wait_ready(url)  # ready: bad's failure does not hold it back
        index = httpx.post(f"http://{url}/v2/repository/index").json()
        states = {m["name"]: (m["state"], m["reason"]) for m in index}
        assert states["good"] == ("READY", "") and states["bad"][0] == "UNAVAILABLE" and ".om" in states["bad"][1]
        body = {"inputs": [{"name": "a", "shape": [1, 1], "datatype": "FP32", "data": [-3.0]}]}
        r = httpx.post(f"http://{url}/v2/models/good/infer", json=body)
        assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [-6.0], r.text
        if layout == "repository":
            reason = states["m"][1]  # the wrong config's model, named by its folder
            assert states["m"][0] == "UNAVAILABLE" and reason.startswith(f"{root / 'm' / 'config.toml'}: input: ")
            assert "names no input 'x'" in reason, reason
        if layout == "repository":  # no config: the file's shapes (a dynamic dim built as 1), never compiled on a request
            body = {"inputs": [{"name": "a", "shape": [1, 2], "datatype": "FP32", "data": [1.0, -3.0]}]}
            r = httpx.post(f"http://{url}/v2/models/good/infer", json=body)
            assert r.status_code == 400 and "expects shape [1, 1]" in r.json()["error"], r.text
        assert httpx.get(f"http://{url}/v2/models/bad/ready").status_code == 503


def _serve(*argv: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aioge", "serve", *argv, "--port", str(_free_port())],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
    )


def test_strict_exits_non_zero_when_a_model_fails_and_config_errors_exit_without_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "ASCEND_CACHE_PATH": str(tmp_path / "atc")}
    proc = _serve("--model-repository", str(_broken_repo(tmp_path / "r")), "--strict", cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr
    assert "--strict: stopped, a model failed to load: bad version 1" in proc.stderr and "Traceback" not in proc.stderr
    path = _write(tmp_path / "c", "max_batch_size = -1")
    proc = _serve("--model-repository", str(tmp_path / "c"), cwd=tmp_path, env=env)
    assert proc.returncode == 1 and f"aioge: error: {path}: max_batch_size: expected an int >= 0" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = _serve("--model-repository", str(tmp_path / "c"), "--option", "ge.graph_key=k", cwd=tmp_path, env=env)
    assert proc.returncode == 1 and "go in each model's config.toml" in proc.stderr, proc.stderr


def test_config_fields_become_each_versions_graph_options(tmp_path: Path) -> None:
    config = read_config("m", _write(tmp_path, MLP_CONFIG))
    assert config.graph_options("m/1/model.onnx") == {
        "ge.exec.disableReuseMemory": "1",
        "aioge.batch_max_delay_us": "200",
        "aioge.batch_max_rows": "4",
        "ge.inputShape": "x:-1,4;y:-1,3",
        "ge.dynamicBatchSize": "1,2,4",
    }
    assert config.graph_options("m/2/model.om") == {"aioge.batch_max_delay_us": "200", "aioge.batch_max_rows": "4"}
    assert config.static_shapes() == {} and config.triton_policy() == {"all": {}}
    one = read_config("m", _write(tmp_path, "max_batch_size = 1\n[[input]]\nname = 'x'\ndims = [-1, 4]"))
    assert one.static_shapes() == {"x": (1, 4)} and one.graph_options("model.onnx") == {"ge.inputShape": "x:1,4"}
    assert one.triton_policy() == {"latest": {"num_versions": 1}}


def test_serve_takes_files_or_a_repository(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path, "")
    model = str(tmp_path / "m" / "1" / "model.onnx")
    assert aioge_main(["serve", model, "--model-repository", str(tmp_path), "--port", str(_free_port())]) == 1
    assert "give model files or --model-repository, not both" in capsys.readouterr().err
    assert aioge_main(["serve", "--port", str(_free_port())]) == 1
    assert "give MODEL.onnx / MODEL.om files or --model-repository DIR" in capsys.readouterr().err


def test_plain_serve_takes_options_for_one_model_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``aioge serve mlp.onnx scale.onnx --option mlp:ge.inputShape=...``: mlp's gears, and scale
    (no input x) still loads; before, every graph option went to every model."""
    from aioge.cli import _serve_model_options, _serve_options, build_parser
    from aioge.server import SessionBackend

    mlp, scale = _mlp(tmp_path / "mlp.onnx", 1), _scale(tmp_path / "scale.onnx", 2.0)
    args = build_parser().parse_args(
        [
            "serve",
            str(mlp),
            str(scale),
            "--option",
            "mlp:ge.inputShape=x:-1,4;y:-1,3",
            "--option",
            "mlp:ge.dynamicBatchSize=1,2,4",
        ]
    )
    per_model = _serve_model_options(args)
    assert per_model == {"mlp": {"ge.inputShape": "x:-1,4;y:-1,3", "ge.dynamicBatchSize": "1,2,4"}}
    assert _serve_options(args) == ({}, {})
    with running(create_app([str(mlp), str(scale)], SessionBackend(model_options=per_model))) as (url, _, _):
        _wait_ready(url)
        client = triton.InferenceServerClient(url=url)
        assert [(m["name"], m["state"]) for m in client.get_model_repository_index()] == [("mlp", "READY"), ("scale", "READY")]
        assert {i["name"]: i["shape"] for i in client.get_model_metadata("mlp")["inputs"]} == {"x": [-1, 4], "y": [-1, 3]}
        inputs, feeds = _mlp_inputs(3, 3)
        np.testing.assert_allclose(client.infer("mlp", inputs).as_numpy("out"), _ort(mlp, feeds)[0], rtol=1e-5, atol=1e-6)
        client.close()
    assert aioge_main(["serve", str(mlp), "--option", "nope:ge.graph_key=k", "--port", str(_free_port())]) == 1
    assert "--option nope:KEY=VALUE: no model 'nope'; served: ['mlp']" in capsys.readouterr().err


def test_load_and_unload_act_on_every_version_of_a_repository_model(tmp_path: Path) -> None:
    for k in (1, 2):
        _scale(tmp_path / "scale" / str(k) / "model.onnx", float(k))
    (tmp_path / "scale" / "config.toml").write_text(SCALE_CONFIG)
    with running(create_app([], repository=str(tmp_path), load=[])) as (url, _, _):  # explicit mode, nothing loaded
        _wait_ready(url)
        client = triton.InferenceServerClient(url=url)
        assert [(m["version"], m["state"]) for m in client.get_model_repository_index()] == [
            ("1", "UNAVAILABLE"),
            ("2", "UNAVAILABLE"),
        ]
        client.load_model("scale")
        assert client.is_model_ready("scale", "1") and client.is_model_ready("scale", "2")
        a = np.array([[1.0, -2.0]], np.float32)
        inp = triton.InferInput("a", [1, 2], "FP32")
        inp.set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("scale", [inp], model_version="1").as_numpy("b"), a)
        np.testing.assert_array_equal(client.infer("scale", [inp]).as_numpy("b"), 2 * a)  # the latest
        client.unload_model("scale")
        assert not client.is_model_ready("scale", "1") and not client.is_model_ready("scale", "2")
        assert client.is_server_ready()  # unloaded on purpose: still ready, as Triton
        client.close()


def test_a_bug_in_one_models_load_leaves_the_others_serving(tmp_path: Path) -> None:
    """Before, an exception other than AiogeError/OSError/ValueError in a load ended the loading
    task group: no model after it loaded and the server never became ready."""
    from aioge.server import ServedModel, SessionBackend

    class Buggy(SessionBackend):
        async def load(self, model: ServedModel) -> None:
            if model.name == "a":
                raise RuntimeError("boom")
            await super().load(model)

    a, b = _scale(tmp_path / "a.onnx", 1.0), _scale(tmp_path / "b.onnx", 3.0)
    with running(create_app([str(a), str(b)], Buggy())) as (url, _, _):
        _wait_ready(url)
        index = {m["name"]: (m["state"], m["reason"]) for m in httpx.post(f"http://{url}/v2/repository/index").json()}
        assert index == {"a": ("UNAVAILABLE", "internal error: RuntimeError: boom"), "b": ("READY", "")}
