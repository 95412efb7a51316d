"""The model commands of the aioge CLI: compile (ATC), run, info, cache show-index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from aioge.cli import main

W = (np.arange(24, dtype=np.float32).reshape(6, 4) - 12) / 12

BUILDER = textwrap.dedent(
    """
    import numpy as np
    import aioge
    from aioge import ops

    W = (np.arange(24, dtype=np.float32).reshape(6, 4) - 12) / 12

    def build():
        g = aioge.Graph("cli_graph")
        x = g.input("x", (3, 6))
        h = ops.einsum(x, g.constant(W, "w"), equation="ni,ij->nj")
        g.output(ops.relu(ops.tanh(h) + ops.sigmoid(h)), names=["y"])
        return g

    def with_feeds():
        g = build()
        feeds = {"x": np.ones((3, 6), np.float32)}
        return g, feeds, lambda f: {"y": np.maximum(np.tanh(f["x"] @ W) + 1 / (1 + np.exp(-(f["x"] @ W))), 0)}
    """
)


def _ref(x: np.ndarray) -> np.ndarray:
    h = x @ W
    return np.maximum(np.tanh(h) + 1 / (1 + np.exp(-h)), 0)


@pytest.fixture
def builder(tmp_path) -> str:
    path = tmp_path / "graph.py"
    path.write_text(BUILDER)
    return str(path)


def _aioge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aioge", *args], capture_output=True, text=True, timeout=120)


def test_compile_info_run_roundtrip(builder, tmp_path, capsys) -> None:
    om = tmp_path / "out" / "model.om"
    assert main(["compile", builder, "-o", str(om), "--option", "aioge.tune_mode=heuristic"]) == 0
    assert f"-> {om}" in capsys.readouterr().out and om.is_file()
    assert not (tmp_path / "out" / "weight").exists()

    assert main(["info", str(om), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    from aioge.plan.serialize import load_model_sync

    model = load_model_sync(om)
    assert info["nodes"] == len(model.nodes) and info["arena_bytes"] == model.arena_bytes
    assert info["nodes_per_engine"] == {"AiCore": len(model.nodes)}  # every op here is float and AiCore-capable
    assert info["signature"] == [["x", [3, 6]]] and info["weights"] == "inline"
    assert info["compile"]["kernels_compiled"] == len(model.nodes) and info["versions"] == dict(model.versions)
    assert main(["info", str(om)]) == 0
    text = capsys.readouterr().out
    assert (
        f"graph 'cli_graph', {len(model.nodes)} nodes" in text and f"nodes per engine: {{'AiCore': {len(model.nodes)}}}" in text
    )
    assert f"arena {model.arena_bytes} B" in text and "versions: aioge" in text and "stream 0 (AiCore)" in text

    x = np.random.default_rng(5).standard_normal((3, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    res = tmp_path / "res"
    trace = tmp_path / "trace.json"
    assert main(["run", str(om), "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(res), "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "output y: float32[3, 4] min" in out and "random" not in out
    np.testing.assert_allclose(np.load(res / "y.npy"), _ref(x), rtol=1e-5, atol=1e-6)
    events = json.loads(trace.read_text())
    assert any(e.get("ph") == "X" for e in (events["traceEvents"] if isinstance(events, dict) else events))


def test_missing_inputs_are_random_with_a_fixed_seed(builder, tmp_path, capsys) -> None:
    om = tmp_path / "m.om"
    assert main(["compile", builder, "-o", str(om), "--option", "aioge.tune_mode=heuristic"]) == 0
    runs = []
    for i in range(2):
        assert main(["run", str(om), "--random-inputs", "--output-dir", str(tmp_path / f"r{i}")]) == 0
        assert "input x: not given, random float32[3, 6] (seed 0)" in capsys.readouterr().out
        runs.append(np.load(tmp_path / f"r{i}" / "y.npy"))
    np.testing.assert_array_equal(runs[0], runs[1])
    x = np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32)
    np.testing.assert_allclose(runs[0], _ref(x), rtol=1e-5, atol=1e-6)


def test_run_a_builder_with_its_feeds_and_reference(builder, capsys) -> None:
    assert main(["run", f"{builder}:with_feeds", "--option", "aioge.tune_mode=heuristic"]) == 0
    out = capsys.readouterr().out
    assert "input x: from the builder's example feeds [3, 6]" in out
    err = float(out.split("max |aioge - reference| = ")[1].split()[0])
    assert err < 1e-5


def test_external_weight_and_engine_options(builder, tmp_path, capsys) -> None:
    om = tmp_path / "ext.om"
    args = [
        "compile",
        builder,
        "-o",
        str(om),
        "--external-weight",
        "--exclude-engines",
        "AiCore",
        "--option",
        "aioge.tune_mode=heuristic",
    ]
    assert main(args) == 0
    capsys.readouterr()
    files = os.listdir(tmp_path / "weight")
    import hashlib

    assert files == ["weight_" + hashlib.sha256(W.tobytes()).hexdigest()]
    assert main(["info", str(om), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["weights"] == "external" and "AiCore" not in info["nodes_per_engine"]
    assert main(["run", str(om), "--random-inputs", "--output-dir", str(tmp_path / "r")]) == 0
    x = np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32)
    np.testing.assert_allclose(np.load(tmp_path / "r" / "y.npy"), _ref(x), rtol=1e-5, atol=1e-6)


def test_corrupt_om_is_a_clear_error_not_a_traceback(builder, tmp_path) -> None:
    om = tmp_path / "m.om"
    assert main(["compile", builder, "-o", str(om), "--option", "aioge.tune_mode=heuristic"]) == 0
    data = om.read_bytes()
    om.write_bytes(data[:-7] + bytes([data[-7] ^ 0x55]) + data[-6:])
    for cmd in ("info", "run"):
        r = _aioge(cmd, str(om))
        assert r.returncode == 1, r.stderr
        assert f"aioge: error: {om}: checksum mismatch" in r.stderr and "Traceback" not in r.stderr
    om.write_bytes(data[:50])
    r = _aioge("info", str(om))
    assert r.returncode == 1 and str(om) in r.stderr and "Traceback" not in r.stderr
    r = _aioge("info", str(tmp_path / "nope.om"))
    assert r.returncode == 1 and "nope.om" in r.stderr and "Traceback" not in r.stderr


def test_bad_arguments_are_clear_errors(builder, tmp_path, capsys) -> None:
    assert main(["compile", builder, "-o", str(tmp_path / "m.om"), "--input-shape", "x=3,6"]) == 1
    assert "expected NAME:D1,D2" in capsys.readouterr().err
    assert main(["compile", str(tmp_path / "nope.py"), "-o", str(tmp_path / "m.om")]) == 1
    assert "expected MODEL.onnx, GRAPH.py" in capsys.readouterr().err
    assert main(["compile", f"{builder}:nothing", "-o", str(tmp_path / "m.om")]) == 1
    assert "has no function nothing()" in capsys.readouterr().err
    assert main(["run", builder, "--input", "x"]) == 1
    assert "expected NAME=FILE.npy" in capsys.readouterr().err


def test_show_index_prints_the_index_as_json(tmp_path, capsys) -> None:
    import anyio

    import aioge
    from aioge import ops

    async def build() -> None:
        g = aioge.Graph("indexed")
        x = g.input("x", (2, 2))
        g.output(ops.relu(x), names=["y"])
        async with aioge.Session({"ge.graph_compiler_cache_dir": str(tmp_path), "aioge.tune_mode": "heuristic"}) as s:
            await s.add_graph(1, g, {"ge.graph_key": "shown"})
            await s.build_graph(1)

    anyio.run(build)
    assert main(["cache", "show-index", str(tmp_path / "shown.idx")]) == 0
    index = json.loads(capsys.readouterr().out)
    (entry,) = index["cache_file_list"]
    assert entry["graph_key"] == "shown" and entry["cache_file_name"].startswith("shown_") and entry["var_desc_file_name"] == ""
    (tmp_path / "bad.idx").write_bytes(b"junk")
    assert main(["cache", "show-index", str(tmp_path / "bad.idx")]) == 1
    assert "bad.idx" in capsys.readouterr().err


def test_compile_and_run_onnx_against_onnxruntime(tmp_path, capsys) -> None:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(7).standard_normal((5, 3)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"]),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("Add", ["r", "h"], ["y"]),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "tiny.onnx"
    onnx.save(model, path)
    om = tmp_path / "tiny.om"
    code = main(["compile", str(path), "-o", str(om), "--input-shape", "x:4,5", "--option", "aioge.tune_mode=heuristic"])
    assert code == 0, capsys.readouterr().err
    x = np.random.default_rng(8).standard_normal((4, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(om), "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path / "r")]) == 0
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(np.load(tmp_path / "r" / "y.npy"), expected, rtol=1e-5, atol=1e-5)


def test_demo_runs_every_example_and_loads_from_its_cache_the_second_time(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from aioge.examples import EXAMPLES

    home = tmp_path / "home" / "aioge"
    old = os.umask(0o002)  # a desktop umask: mkdir would make group-writable dirs the caches refuse
    try:
        assert main(["demo", "--cache-dir", str(home)]) == 0
        first = capsys.readouterr().out
        assert main(["demo", "--cache-dir", str(home)]) == 0
        second = capsys.readouterr().out
    finally:
        os.umask(old)
    for name in EXAMPLES:
        assert f"\n{name}: " in "\n" + first
    assert first.count("OK") == len(EXAMPLES) and "MISMATCH" not in first
    assert first.count("graph cache hit: False") == len(EXAMPLES)
    assert second.count("graph cache hit: True") == len(EXAMPLES)  # nothing refused as untrusted
    for d in (home.parent, home, home / "graph_cache"):
        assert d.stat().st_mode & 0o777 == 0o700, d
    assert sorted(p.name for p in (home / "graph_cache").glob("*.idx")) == sorted(f"demo_{n}.idx" for n in EXAMPLES)
