"""Gears end to end: a geared .om (or an .onnx served with gear options) answers at every gear
from ``aioge run``, ``aioge serve`` and the Python API, ``aioge info`` lists the gears, KServe
metadata shows -1 for a geared dim, a shape no gear fits is a 400 naming the gears, nothing
compiles on the request path; and ``ge.dynamicDims`` fills the -1s in ``ge.inputShape`` order."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
import tritonclient.http as triton
from onnx import TensorProto, helper

import aioge
import aioge.session
from aioge.cli import main as aioge_main
from aioge.errors import FeedError
from aioge.server import SessionBackend, create_app
from tests.serving.test_server import _onnx_model, _reference, _wait_ready, running

GEARS = ["--input-shape", "x:-1,4;y:-1,3", "--dynamic-batch-size", "1,2,4"]


@pytest.fixture(scope="module")
def geared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("geared")
    src = _onnx_model(root / "mlp.onnx")
    om = root / "mlpg.om"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASCEND_CACHE_PATH", str(root / "atc"))
        assert aioge_main(["compile", str(src), "-o", str(om), *GEARS, "-q"]) == 0
    return {"onnx": src, "om": om}


def _feeds(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, 4)).astype(np.float32), rng.standard_normal((rows, 3)).astype(np.float32)


def _aioge(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``aioge ARGV`` run in this process (in ``cwd``): its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = aioge_main(list(argv))
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def test_aioge_run_takes_every_gear_and_names_them_otherwise(geared: dict[str, Path], tmp_path: Path) -> None:
    for rows in (1, 2, 3, 4):
        x, y = _feeds(rows, rows)
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "y.npy", y)
        run = _aioge("run", str(geared["om"]), "--input", "x=x.npy", "--input", "y=y.npy", "--output-dir", "out", cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        ref = _reference(geared["onnx"], x, y)
        np.testing.assert_allclose(np.load(tmp_path / "out" / "out.npy"), ref["out"], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(np.load(tmp_path / "out" / "total.npy"), ref["total"])
    x, y = _feeds(5, 0)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    run = _aioge("run", str(geared["om"]), "--input", "x=x.npy", "--input", "y=y.npy", cwd=tmp_path)
    assert run.returncode == 1 and "batch sizes [1, 2, 4]" in run.stderr and "Traceback" not in run.stderr, run.stderr


def test_aioge_info_lists_the_gears_with_minus_one_for_the_geared_dim(geared: dict[str, Path], tmp_path: Path) -> None:
    info = json.loads(_aioge("info", "--json", str(geared["om"]), cwd=tmp_path).stdout)
    assert info["gears"] == [{"x": [b, 4], "y": [b, 3]} for b in (1, 2, 4)]
    assert {v["name"]: v["shape"] for v in info["inputs"]} == {"x": [-1, 4], "y": [-1, 3]}
    assert {v["name"]: v["shape"] for v in info["outputs"]} == {"out": [-1, 3], "total": [-1]}
    text = _aioge("info", str(geared["om"]), cwd=tmp_path).stdout
    assert "gears (3): x[1, 4], y[1, 3]; x[2, 4], y[2, 3]; x[4, 4], y[4, 3]" in text


@pytest.mark.parametrize("which", ["om", "onnx"])
def test_served_gears_answer_at_every_gear_and_never_compile(
    geared: dict[str, Path], which: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiles: list[object] = []
    real = aioge.session.compile_graph

    async def counting(graph, signature, *args, **kwargs):  # type: ignore[no-untyped-def]
        compiles.append(signature)
        return await real(graph, signature, *args, **kwargs)

    monkeypatch.setattr(aioge.session, "compile_graph", counting)
    options = {} if which == "om" else {"ge.inputShape": "x:-1,4;y:-1,3", "ge.dynamicBatchSize": "1,2,4"}
    name = geared[which].stem
    with running(create_app([str(geared[which])], SessionBackend(graph_options=options))) as (url, _, _):
        _wait_ready(url)
        compiles.clear()  # the gears compiled at load; from here on nothing may compile
        client = triton.InferenceServerClient(url=url)
        meta = client.get_model_metadata(name)
        assert {i["name"]: i["shape"] for i in meta["inputs"]} == {"x": [-1, 4], "y": [-1, 3]}
        assert {o["name"]: o["shape"] for o in meta["outputs"]} == {"out": [-1, 3], "total": [-1]}
        for rows in (1, 3, 2, 4):
            x, y = _feeds(rows, 10 + rows)
            inputs = [triton.InferInput("x", [rows, 4], "FP32"), triton.InferInput("y", [rows, 3], "FP32")]
            inputs[0].set_data_from_numpy(x)
            inputs[1].set_data_from_numpy(y)
            result = client.infer(name, inputs)
            ref = _reference(geared["onnx"], x, y)
            np.testing.assert_allclose(result.as_numpy("out"), ref["out"], rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(result.as_numpy("total"), ref["total"])
        client.close()
        x, y = _feeds(5, 0)
        body = {
            "inputs": [
                {"name": "x", "shape": [5, 4], "datatype": "FP32", "data": x.ravel().tolist()},
                {"name": "y", "shape": [5, 3], "datatype": "FP32", "data": y.ravel().tolist()},
            ]
        }
        r = httpx.post(f"http://{url}/v2/models/{name}/infer", json=body)
        assert r.status_code == 400 and "batch sizes [1, 2, 4]" in r.json()["error"], r.text
    assert compiles == [], "a geared model compiled on the request path"


def _two_inputs(path: Path) -> Path:
    """ox = relu(x), oy = -y: x [1, A], y [1, B] independent, so each gear's dims show."""
    nodes = [helper.make_node("Relu", ["x"], ["ox"]), helper.make_node("Neg", ["y"], ["oy"])]
    graph = helper.make_graph(
        nodes,
        "two",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "A"]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "B"]),
        ],
        [
            helper.make_tensor_value_info("ox", TensorProto.FLOAT, [1, "A"]),
            helper.make_tensor_value_info("oy", TensorProto.FLOAT, [1, "B"]),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


# ge.dynamicDims "2,3;4,5" fills the -1s in ge.inputShape's order (GE's rule), whatever the graph's order.
ORDERS = [
    ("y:1,-1;x:1,-1", [{"x": [1, 3], "y": [1, 2]}, {"x": [1, 5], "y": [1, 4]}]),
    ("x:1,-1;y:1,-1", [{"x": [1, 2], "y": [1, 3]}, {"x": [1, 4], "y": [1, 5]}]),
]


@pytest.mark.parametrize(("input_shape", "gears"), ORDERS)
@pytest.mark.anyio
async def test_dynamic_dims_follow_the_input_shape_order_in_the_api(
    tmp_path: Path, input_shape: str, gears: list[dict[str, list[int]]]
) -> None:
    graph = aioge.load_onnx(str(_two_inputs(tmp_path / "two.onnx")))
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, graph, {"ge.inputShape": input_shape, "ge.dynamicDims": "2,3;4,5"})
        for gear in gears:
            x = np.linspace(-1, 1, gear["x"][1], dtype=np.float32).reshape(gear["x"])
            y = np.linspace(-2, 2, gear["y"][1], dtype=np.float32).reshape(gear["y"])
            out = await s.run_graph(1, {"x": x, "y": y})
            np.testing.assert_array_equal(out["ox"], np.maximum(x, 0))
            np.testing.assert_array_equal(out["oy"], -y)
        swapped = {"x": np.zeros(gears[0]["y"], np.float32), "y": np.zeros(gears[0]["x"], np.float32)}
        with pytest.raises(FeedError, match="fit none of the graph's dims gears"):
            await s.run_graph(1, swapped)


@pytest.mark.parametrize(("input_shape", "gears"), ORDERS)
def test_dynamic_dims_follow_the_input_shape_order_from_the_cli(
    tmp_path: Path, input_shape: str, gears: list[dict[str, list[int]]]
) -> None:
    _two_inputs(tmp_path / "two.onnx")
    run = _aioge(
        "compile", "two.onnx", "-o", "two.om", "--input-shape", input_shape, "--dynamic-dims", "2,3;4,5", "-q", cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    info = json.loads(_aioge("info", "--json", "two.om", cwd=tmp_path).stdout)
    assert info["gears"] == gears


def test_an_om_whose_gears_disagree_with_its_options_is_refused(tmp_path: Path) -> None:
    """An .om of an aioge that filled ge.dynamicDims in graph order: its stored gears are not the
    ones its options now give, so it is stale (never run against the wrong gear)."""
    import dataclasses

    from aioge.errors import ModelFormatError
    from aioge.plan.serialize import load_model_sync
    from aioge.serving.gears import gear_set_of_model

    _two_inputs(tmp_path / "two.onnx")
    run = _aioge(
        "compile", "two.onnx", "-o", "two.om", "--input-shape", "y:1,-1;x:1,-1", "--dynamic-dims", "2,3;4,5", "-q", cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    model = load_model_sync(tmp_path / "two.om")
    assert gear_set_of_model(model) is not None
    old = dataclasses.replace(model, options={**model.options, "ge.inputShape": "x:1,-1;y:1,-1"})
    with pytest.raises(ModelFormatError, match="compile it again"):
        gear_set_of_model(old)


def test_a_served_dims_geared_om_answers_each_gear_and_names_them_otherwise(tmp_path: Path) -> None:
    _two_inputs(tmp_path / "two.onnx")
    run = _aioge(
        "compile", "two.onnx", "-o", "two.om", "--input-shape", "y:1,-1;x:1,-1", "--dynamic-dims", "2,3;4,5", "-q", cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    with running(create_app([str(tmp_path / "two.om")])) as (url, _, _):
        _wait_ready(url)
        meta = httpx.get(f"http://{url}/v2/models/two").json()
        assert {i["name"]: i["shape"] for i in meta["inputs"]} == {"x": [1, -1], "y": [1, -1]}
        for gear in ORDERS[0][1]:  # y[1,2] x[1,3], then y[1,4] x[1,5]
            x = np.linspace(-1, 1, gear["x"][1], dtype=np.float32)
            y = np.linspace(-2, 2, gear["y"][1], dtype=np.float32)
            body = {
                "inputs": [
                    {"name": "x", "shape": gear["x"], "datatype": "FP32", "data": x.tolist()},
                    {"name": "y", "shape": gear["y"], "datatype": "FP32", "data": y.tolist()},
                ]
            }
            r = httpx.post(f"http://{url}/v2/models/two/infer", json=body)
            assert r.status_code == 200, r.text
            outs = {o["name"]: np.array(o["data"], np.float32) for o in r.json()["outputs"]}
            np.testing.assert_array_equal(outs["ox"], np.maximum(x, 0))
            np.testing.assert_array_equal(outs["oy"], -y)
        body = {
            "inputs": [
                {"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [0.0, 1.0]},
                {"name": "y", "shape": [1, 3], "datatype": "FP32", "data": [0.0, 1.0, 2.0]},
            ]
        }
        r = httpx.post(f"http://{url}/v2/models/two/infer", json=body)
        assert r.status_code == 400 and "x[1, 3], y[1, 2]; x[1, 5], y[1, 4]" in r.json()["error"], r.text


def test_a_served_geared_om_batches_concurrent_requests_to_its_gears(geared: dict[str, Path]) -> None:
    """`aioge serve mlpg.om --batch-max-rows 4`: batching takes an .om's batch gears."""
    import threading

    backend = SessionBackend(graph_options={"aioge.batch_max_rows": "4"})
    results: dict[int, httpx.Response] = {}
    with running(create_app([str(geared["om"])], backend)) as (url, _, _):
        _wait_ready(url)

        def post(i: int) -> None:
            x, y = _feeds(1, 100 + i)
            body = {
                "inputs": [
                    {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": x.ravel().tolist()},
                    {"name": "y", "shape": [1, 3], "datatype": "FP32", "data": y.ravel().tolist()},
                ]
            }
            results[i] = httpx.post(f"http://{url}/v2/models/mlpg/infer", json=body, timeout=30)

        threads = [threading.Thread(target=post, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        text = httpx.get(f"http://{url}/metrics").text
    for i, r in results.items():
        assert r.status_code == 200, r.text
        x, y = _feeds(1, 100 + i)
        out = next(o for o in r.json()["outputs"] if o["name"] == "out")
        np.testing.assert_allclose(
            np.array(out["data"], np.float32).reshape(1, 3), _reference(geared["onnx"], x, y)["out"], rtol=1e-5, atol=1e-6
        )
    assert len(results) == 6 and 'aioge_batch{model="mlpg",stat="requests"} 6.0' in text
