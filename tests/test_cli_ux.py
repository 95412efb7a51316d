"""The aioge command as a new user meets it (issue 23): version, help, options, latency, errors."""

from __future__ import annotations

import json
import os
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
    out = capsys.readouterr().out.strip()  # and the compiled tier's state (tests/engines/test_native.py)
    assert exc.value.code == 0 and out.startswith(f"aioge {aioge.__version__} (compiled kernels: ")


def test_cache_alone_prints_the_cache_help(capsys) -> None:
    assert main(["cache"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("usage: aioge cache") and "stats" in out and "show-index" in out


def test_compile_takes_graph_level_options(builder, tmp_path, capsys) -> None:
    graphs = tmp_path / "graphs"
    graphs.mkdir(mode=0o700)
    code = main(
        [
            "compile",
            builder,
            "-o",
            str(tmp_path / "m.om"),
            "--option",
            "aioge.tune_mode=heuristic",
            "--option",
            f"ge.graph_compiler_cache_dir={graphs}",
            "--option",
            "ge.graph_key=ux",
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert (graphs / "ux.idx").is_file() and list(graphs.glob("ux_*.om"))


@pytest.mark.anyio
async def test_graph_key_without_a_cache_dir_warns() -> None:
    g = aioge.Graph("g")
    g.output(ops.relu(g.input("x", (2,))), names=["y"])
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        with pytest.warns(
            UserWarning, match="ge.graph_key 'k' has no effect without the session option ge.graph_compiler_cache_dir"
        ):
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
    code = main(
        [
            "run",
            builder,
            "--input",
            f"x={tmp_path / 'x.npy'}",
            "--iterations",
            "7",
            "--warmup",
            "2",
            "--json",
            "--output-dir",
            str(tmp_path / "out"),
            "--option",
            "aioge.tune_mode=heuristic",
        ]
    )
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


# -- the caches: one default location, stats with hit ratio and since, zero, graph tier ----


async def _compile_twice(root, graphs) -> int:
    """Build one graph in two sessions (kernel misses, then hits; one graph cache entry)."""
    g = aioge.Graph("cached")
    x = g.input("x", (2, 3))
    g.output(ops.tanh(ops.relu(x) + 1.0), names=["y"])
    opts = {"ge.op_compiler_cache_dir": str(root), "ge.graph_compiler_cache_dir": str(graphs), "aioge.tune_mode": "heuristic"}
    for _ in range(2):
        async with aioge.Session(opts) as s:
            await s.add_graph(1, g, {"ge.graph_key": "cached"})
            model = await s.build_graph(1)
    return len(model.nodes)


def _stats(*args: str) -> dict:
    from aioge.cli import build_parser, cache_stats_report

    return cache_stats_report(build_parser().parse_args(["cache", "stats", *args]))


@pytest.mark.anyio
async def test_cache_stats_cover_both_tiers_and_counters_survive_clear(tmp_path, capsys) -> None:
    root, graphs = tmp_path / "root", tmp_path / "root" / "graph_cache"
    graphs.mkdir(parents=True, mode=0o700)
    root.chmod(0o700)
    await _compile_twice(root, graphs)
    tiers = _stats("--dir", str(root))
    (soc,) = tiers["kernel"]["socs"]
    # The second session's graph came from the graph cache: the kernel counters saw one compile.
    assert soc["misses"] > 0 and soc["hit_ratio"] == soc["hits"] / (soc["hits"] + soc["misses"])
    assert soc["since"] and abs(soc["since"] - __import__("time").time()) < 120
    graph = tiers["graph"]
    assert graph["dir"] == str(graphs) and graph["keys"][0]["key"] == "cached" and graph["keys"][0]["entries"] == 1
    assert graph["bytes"] == sum(p.stat().st_size for p in graphs.iterdir() if p.suffix in (".om", ".idx"))
    assert main(["cache", "stats", "--dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"hit ratio {100 * soc['hit_ratio']:.1f}%" in out and "since 20" in out and "cached: 1 entries, 1 models" in out
    # The graph tier counts its lookups: the first session missed, the second hit.
    assert (graph["hits"], graph["misses"], graph["hit_ratio"]) == (1, 1, 0.5) and graph["keys"][0]["hits"] == 1
    assert "hits 1, misses 1, hit ratio 50.0%" in out

    assert main(["cache", "clear", "--dir", str(root)]) == 0
    assert f"{graphs}: removed 3 files" in capsys.readouterr().out  # the .idx, the .om and the .lock
    assert sorted(p.name for p in graphs.iterdir()) == [".aioge.graph-stats.lock", "aioge.graph-stats"]
    after = _stats("--dir", str(root))
    assert not list(graphs.glob("cached*")) and after["graph"]["entries"] == 0
    assert (after["graph"]["hits"], after["graph"]["misses"]) == (1, 1)  # the counters survive a clear
    (soc2,) = after["kernel"]["socs"]
    assert soc2["entries"] == 0 and (soc2["hits"], soc2["misses"], soc2["since"]) == (soc["hits"], soc["misses"], soc["since"])

    assert main(["cache", "stats", "--dir", str(root), "--zero", "--json"]) == 0
    (soc3,) = json.loads(capsys.readouterr().out)["kernel"]["socs"]
    assert (soc3["hits"], soc3["misses"], soc3["compiles"], soc3["hit_ratio"]) == (0, 0, 0, None) and soc3["since"] >= soc[
        "since"
    ]
    assert _stats("--dir", str(root))["graph"]["hits"] == 0


def test_cache_commands_refuse_a_missing_dir(tmp_path, capsys) -> None:
    for cmd in ("stats", "prune", "clear"):
        for flag in ("--dir", "--graph-dir"):
            assert main(["cache", cmd, flag, str(tmp_path / "nope")]) == 1
            err = capsys.readouterr().err.strip().splitlines()
            assert err == [f"aioge: error: {flag} {tmp_path / 'nope'}: no such directory"]


def test_prune_drops_only_old_unindexed_graph_models(tmp_path) -> None:
    from aioge.cache.graph_tools import prune_graph_cache
    from aioge.plan.io import MAGIC

    (tmp_path / "k.idx").write_bytes(b"broken index")  # names nothing: every model of k is unindexed
    old, fresh, foreign = tmp_path / "k_20260101000000.om", tmp_path / "k_20260101000001.om", tmp_path / "k_20260101000002.om"
    for p in (old, fresh):
        p.write_bytes(MAGIC + b"rest")
    foreign.write_bytes(b"not ours")
    for p in (old, foreign):
        os.utime(p, (1000.0, 1000.0))
    assert prune_graph_cache(tmp_path, now=2000.0) == [str(old)]
    assert fresh.exists() and foreign.exists() and not old.exists()


def test_demo_uses_the_library_default_cache(tmp_path, monkeypatch, capsys) -> None:
    from aioge.cli import default_cache_dir

    monkeypatch.setenv("ASCEND_CACHE_PATH", str(tmp_path))
    tmp_path.chmod(0o700)
    assert default_cache_dir() == tmp_path
    assert main(["demo", "--model", "mlp", "--repeat", "2"]) == 0
    assert f"kernels in {tmp_path / 'kernel_cache'}, graphs in {tmp_path / 'graph_cache'}" in capsys.readouterr().out
    session = aioge.Session()
    assert session.kernel_cache.soc_dir.parent == tmp_path / "kernel_cache"  # the library's default is the same
    tiers = _stats()  # no --dir: the same default
    assert tiers["kernel"]["socs"][0]["entries"] > 0 and tiers["graph"]["entries"] == 1


def test_info_lists_inputs_and_outputs_with_dtypes(builder, tmp_path, capsys) -> None:
    om = tmp_path / "m.om"
    assert main(["compile", builder, "-o", str(om), "-q", "--option", "aioge.tune_mode=heuristic"]) == 0
    capsys.readouterr()
    assert main(["info", str(om)]) == 0
    out = capsys.readouterr().out
    assert "  inputs: x float32[2, 3]\n" in out and "  outputs: y float32[2, 3]\n" in out
    assert main(["info", str(om), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["inputs"] == [{"name": "x", "shape": [2, 3], "dtype": "float32"}]
    assert info["outputs"] == [{"name": "y", "shape": [2, 3], "dtype": "float32"}]
