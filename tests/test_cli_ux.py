"""The aioge command as a new user meets it (issue 23): version, help, options, latency, errors."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.cli import main
from aioge.errors import GraphIdError

BUILDER = textwrap.dedent(
    """
    import numpy as np
    import aioge
    from aioge import ops

    def build():
        g = aioge.Graph("ux_graph")
        x = g.input("x", (2, 3))
        g.output(ops.relu(x) * 2.0, names=["y"])
        return g
    """
)


@pytest.fixture
def builder(tmp_path) -> str:
    path = tmp_path / "graph.py"
    path.write_text(BUILDER)
    return str(path)


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"aioge {aioge.__version__}"


def test_cache_alone_prints_the_cache_help(capsys) -> None:
    assert main(["cache"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("usage: aioge cache") and "stats" in out and "show-index" in out


def test_compile_takes_graph_level_options(builder, tmp_path, capsys) -> None:
    graphs = tmp_path / "graphs"
    graphs.mkdir(mode=0o700)
    code = main(["compile", builder, "-o", str(tmp_path / "m.om"), "--option", "aioge.tune_mode=heuristic",
                 "--option", f"ge.graph_compiler_cache_dir={graphs}", "--option", "ge.graph_key=ux"])
    assert code == 0, capsys.readouterr().err
    assert (graphs / "ux.idx").is_file() and list(graphs.glob("ux_*.om"))


@pytest.mark.anyio
async def test_graph_key_without_a_cache_dir_warns() -> None:
    g = aioge.Graph("g")
    g.output(ops.relu(g.input("x", (2,))), names=["y"])
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        with pytest.warns(UserWarning, match="ge.graph_key 'k' has no effect without the session option ge.graph_compiler_cache_dir"):
            await s.add_graph(1, g, {"ge.graph_key": "k"})
        y = await s.run_graph(1, {"x": np.array([-1.0, 2.0], np.float32)})
    np.testing.assert_array_equal(y["y"], [0.0, 2.0])


@pytest.mark.anyio
@pytest.mark.parametrize("bad", ["model", 1.0, True, -1, 2**32])
async def test_graph_ids_are_uint32(bad) -> None:
    g = aioge.Graph("g")
    g.output(ops.relu(g.input("x", (2,))), names=["y"])
    async with aioge.Session() as s:
        with pytest.raises(GraphIdError, match=r"expected an int in \[0, 2\*\*32\)") as exc:
            await s.add_graph(bad, g)
        assert isinstance(exc.value, TypeError)
        await s.add_graph(2**32 - 1, g)  # the largest uint32 is fine


@pytest.mark.anyio
async def test_a_misspelt_feed_names_the_unknown_key_and_the_missing_input() -> None:
    from aioge.errors import FeedError

    g = aioge.Graph("g")
    g.output(ops.relu(g.input("image", (2,))), names=["y"])
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        with pytest.raises(FeedError, match=r"missing feeds for inputs image: .*unknown inputs \['imgae'\]"):
            await s.run(g, {"imgae": np.zeros(2, np.float32)})


def test_cli_misspelt_input_names_the_missing_one_too(builder, tmp_path, capsys) -> None:
    np.save(tmp_path / "x.npy", np.zeros((2, 3), np.float32))
    assert main(["run", builder, "--input", f"z={tmp_path / 'x.npy'}", "--option", "aioge.tune_mode=heuristic"]) == 1
    err = capsys.readouterr().err
    assert "--input z: the model has no such input; its inputs are: x (not given: x)" in err


def test_a_mistyped_option_suggests_the_closest_key() -> None:
    from aioge.errors import OptionError

    with pytest.raises(OptionError, match="did you mean 'ge.graph_key'"):
        aioge.Session({"ge.grpah_key": "k"})
    with pytest.raises(OptionError, match="did you mean 'aioge.tune_mode'"):
        aioge.Session({"aioge.tunemode": "heuristic"})


def test_info_on_an_onnx_file_says_it_is_not_an_om(tmp_path, capsys) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x08\x07\x12\x04onnx")
    assert main(["info", str(path)]) == 1
    err = capsys.readouterr().err
    assert "not an .om file" in err and f"aioge compile {path} -o MODEL.om" in err and "bad magic" not in err


def test_shape_errors_have_no_stray_prefix(tmp_path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from aioge.errors import GraphError

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]))
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(GraphError) as exc:
        aioge.load_onnx(str(tmp_path / "m.onnx"), shapes={"x": (2, 3, 4)})
    assert "shapes=:" not in str(exc.value) and "input 'x' has rank 2" in str(exc.value)


def test_run_reports_latency_percentiles_as_json(builder, tmp_path, capsys) -> None:
    x = np.array([[-1, 0, 1], [2, -3, 4]], np.float32)
    np.save(tmp_path / "x.npy", x)
    code = main(["run", builder, "--input", f"x={tmp_path / 'x.npy'}", "--iterations", "7", "--warmup", "2", "--json",
                 "--output-dir", str(tmp_path / "out"), "--option", "aioge.tune_mode=heuristic"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)  # stdout is the JSON document alone
    lat = report["latency_ms"]
    assert lat["iterations"] == 7 and lat["warmup"] == 2
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"] and lat["min"] <= lat["mean"] <= lat["max"]
    assert report["outputs"]["y"] == {"dtype": "float32", "shape": [2, 3], "file": str(tmp_path / "out" / "y.npy")}
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), np.maximum(x, 0) * 2)
    assert "latency over 7 run(s) after 2 warm-up" in captured.err


def test_latency_summary_matches_numpy() -> None:
    from aioge.cli import latency_summary

    s = [0.001 * i for i in range(1, 101)]
    got = latency_summary(s, 3)
    assert got["min"] == pytest.approx(1.0) and got["max"] == pytest.approx(100.0) and got["mean"] == pytest.approx(50.5)
    assert got["p50"] == pytest.approx(50.5) and got["p90"] == pytest.approx(90.1) and got["p99"] == pytest.approx(99.01)


def test_run_refuses_zero_iterations(builder, capsys) -> None:
    assert main(["run", builder, "--random-inputs", "--iterations", "0"]) == 1
    assert "expected at least 1 iteration" in capsys.readouterr().err
