"""GE's dynamic gears: options, every gear compiled when the graph is added (one model, one
.om, one graph-cache entry), runs padded to the smallest gear, FeedError naming the gears."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import aioge
import aioge.session
from aioge import ops
from aioge.errors import FeedError, OptionError
from aioge.options import canonical_key, check_options, resolve_options
from aioge.plan.serialize import decode_meta, load_model_sync, save_model

pytestmark = pytest.mark.anyio

W = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
B = np.random.default_rng(1).standard_normal(8).astype(np.float32)
GEARS = {"ge.inputShape": "x:-1,16", "ge.dynamicBatchSize": "1,2,4,8"}


def _mlp(static_batch: bool = False) -> aioge.Graph:
    g = aioge.Graph("mlp")
    x = g.input("x", (1 if static_batch else "N", 16), "float32")
    g.output(ops.relu(ops.add(ops.matmul(x, g.constant(W)), g.constant(B))), names=["y"])
    return g


def _ref(x: np.ndarray) -> np.ndarray:
    return np.maximum(x @ W + B, 0)


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every compile_graph call the session makes."""
    calls: list[object] = []
    real = aioge.session.compile_graph

    async def counting(graph, signature, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(signature)
        return await real(graph, signature, *args, **kwargs)

    monkeypatch.setattr(aioge.session, "compile_graph", counting)
    return calls


def test_gear_options_take_ge_keys_and_ir_option_aliases() -> None:
    assert canonical_key("INPUT_SHAPE") == "ge.inputShape"
    assert canonical_key("DYNAMIC_BATCH_SIZE") == "ge.dynamicBatchSize"
    assert canonical_key("DYNAMIC_DIMS") == "ge.dynamicDims"
    opts = resolve_options({}, check_options({"INPUT_SHAPE": "x:-1,16", "DYNAMIC_BATCH_SIZE": "8,1,4,"}, "graph"))
    assert opts.dynamic_batch_size == (1, 4, 8) and opts.input_shape == {"x": (-1, 16)}
    dims = resolve_options({}, check_options({"ge.inputShape": "a:1,-1;b:-1,2", "ge.dynamicDims": "4,1;8,2"}, "graph"))
    assert dims.dynamic_dims == ((4, 1), (8, 2))


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"ge.dynamicBatchSize": "4"}, "from 2 to 100 gears"),
        ({"ge.dynamicBatchSize": ",".join(map(str, range(1, 102)))}, "from 2 to 100 gears"),
        ({"ge.dynamicBatchSize": "1,2,2"}, "each batch size once"),
        ({"ge.dynamicBatchSize": "1,x"}, "batch sizes of at least 1"),
        ({"ge.dynamicDims": "4;8,1"}, "same number of dims"),
        ({"ge.inputShape": "x:-2,16"}, "-1 for a dim"),
        ({"aioge.batch_max_rows": "-1"}, "an integer from 0"),
        ({"aioge.batch_preferred_sizes": "1,0"}, "from 1 to 1048576"),
    ],
)
def test_bad_gear_and_batch_values_are_rejected(options: dict[str, str], match: str) -> None:
    with pytest.raises(OptionError, match=match):
        check_options(options, "graph")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"ge.dynamicBatchSize": "1,2"}, "needs ge.inputShape"),
        ({**GEARS, "ge.dynamicDims": "1;2"}, "exclude each other"),
        ({"ge.inputShape": "x:-1,-1", "ge.dynamicBatchSize": "1,2"}, "only as the first"),
        ({"ge.inputShape": "x:-1,-1", "ge.dynamicDims": "1;2"}, "gives 1 dims"),
        ({"ge.inputShape": "x:-1,16"}, "with ge.dynamicBatchSize or ge.dynamicDims"),
    ],
)
def test_gear_options_must_agree(options: dict[str, str], match: str) -> None:
    with pytest.raises(OptionError, match=match):
        resolve_options({}, check_options(options, "graph"))


async def test_every_gear_is_built_when_added_and_runs_never_compile(compiles: list[object]) -> None:
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _mlp(), GEARS)
        assert sorted(sig[0][1][0] for sig in compiles) == [1, 2, 4, 8]  # type: ignore[index]
        model = s.compiled(1)
        assert [m.signature for m in model.all_gears()] == [(("x", (b, 16)),) for b in (1, 2, 4, 8)]
        compiles.clear()
        rng = np.random.default_rng(2)
        for n in (1, 3, 5, 8, 2, 7):
            x = rng.standard_normal((n, 16)).astype(np.float32)
            y = (await s.run_graph(1, {"x": x}))["y"]
            assert y.shape == (n, 8)
            np.testing.assert_allclose(y, _ref(x), rtol=1e-5, atol=1e-5)
        assert compiles == [], "a geared graph never compiles on the run path"
        with pytest.raises(FeedError, match=r"9 rows fits none of the graph's gears: batch sizes \[1, 2, 4, 8\]"):
            await s.run_graph(1, {"x": np.zeros((9, 16), np.float32)})
        with pytest.raises(FeedError, match=r"input 'x' has shape \[2, 15\]"):
            await s.run_graph(1, {"x": np.zeros((2, 15), np.float32)})
        with pytest.raises(OptionError, match="names no input 'z'"):
            await s.add_graph(2, _mlp(), {"ge.inputShape": "z:-1,16", "ge.dynamicBatchSize": "1,2"})


async def test_a_static_batch_of_the_model_gives_way_to_the_gears() -> None:
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _mlp(static_batch=True), GEARS)
        x = np.random.default_rng(3).standard_normal((6, 16)).astype(np.float32)
        np.testing.assert_allclose((await s.run_graph(1, {"x": x}))["y"], _ref(x), rtol=1e-5, atol=1e-5)


async def test_dims_gears_run_the_matching_gear_or_name_them() -> None:
    g = aioge.Graph("dims")
    x = g.input("x", (2, "L"), "float32")
    g.output(ops.tanh(ops.mul(x, 2.0)), names=["y"])
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, g, {"ge.inputShape": "x:2,-1", "ge.dynamicDims": "4;8;16"})
        for n in (4, 16, 8):
            x = np.linspace(-1, 1, 2 * n, dtype=np.float32).reshape(2, n)
            np.testing.assert_allclose((await s.run_graph(1, {"x": x}))["y"], np.tanh(2 * x), rtol=1e-6)
        with pytest.raises(FeedError, match=r"fit none of the graph's dims gears: x\[2, 4\]; x\[2, 8\]; x\[2, 16\]"):
            await s.run_graph(1, {"x": np.zeros((2, 5), np.float32)})


async def test_all_gears_travel_in_one_om(tmp_path: Path, compiles: list[object]) -> None:
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, _mlp(), GEARS)
        await save_model(tmp_path / "m.om", await s.build_graph(1))
    assert [p.name for p in tmp_path.iterdir()] == ["m.om"]
    meta = decode_meta((tmp_path / "m.om").read_bytes())
    assert meta["signature"] == [["x", [1, 16]]] and meta["gears"] == [[["x", [b, 16]]] for b in (2, 4, 8)]
    loaded = load_model_sync(tmp_path / "m.om")
    assert len(loaded.gears) == 3
    # the constants are stored once for all gears
    assert (tmp_path / "m.om").stat().st_size < 2 * W.nbytes + 16 * 1024
    compiles.clear()
    async with aioge.Session() as s:
        gid = await s.load_model(tmp_path / "m.om")
        x = np.random.default_rng(4).standard_normal((3, 16)).astype(np.float32)
        np.testing.assert_allclose((await s.run_graph(gid, {"x": x}))["y"], _ref(x), rtol=1e-5, atol=1e-5)
        with pytest.raises(FeedError, match=r"batch sizes \[1, 2, 4, 8\]"):
            await s.run_graph(gid, {"x": np.zeros((10, 16), np.float32)})
    assert compiles == []


async def test_one_graph_cache_entry_holds_every_gear(tmp_path: Path, compiles: list[object]) -> None:
    session = {"ge.graph_compiler_cache_dir": str(tmp_path), "aioge.tune_mode": "heuristic"}
    options = {**GEARS, "ge.graph_key": "mlp"}
    async with aioge.Session(session) as s:
        await s.add_graph(1, _mlp(), options)
    assert len(compiles) == 4
    assert len(list(tmp_path.glob("*.om"))) == 1
    compiles.clear()
    async with aioge.Session(session) as s:
        await s.add_graph(1, _mlp(), options)
        assert compiles == [] and s.compiled(1).stats.graph_cache_hit
        x = np.ones((5, 16), np.float32)
        np.testing.assert_allclose((await s.run_graph(1, {"x": x}))["y"], _ref(x), rtol=1e-5, atol=1e-5)
    assert compiles == [], "every gear came from the one cache entry"


def test_aioge_compile_writes_the_gears_into_one_om(tmp_path: Path) -> None:
    src = tmp_path / "g.py"
    src.write_text(
        "import numpy as np\nimport aioge\nfrom aioge import ops\n"
        "def build():\n"
        "    g = aioge.Graph('tiny')\n"
        "    x = g.input('x', (1, 4), 'float32')\n"
        "    g.output(ops.mul(x, 3.0), names=['y'])\n"
        "    return g\n"
    )
    out = tmp_path / "g.om"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "aioge",
            "compile",
            str(src),
            "-o",
            str(out),
            "--input-shape",
            "x:-1,4",
            "--dynamic-batch-size",
            "1,4,16",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "3 gears" in run.stdout
    model = load_model_sync(out)
    assert [m.signature for m in model.all_gears()] == [(("x", (b, 4)),) for b in (1, 4, 16)]
    bad = subprocess.run(
        [sys.executable, "-m", "aioge", "compile", str(src), "-o", str(out), "--input-shape", "x:-1,4", "--dynamic-dims", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "from 2 to 100 gears" in bad.stderr and "Traceback" not in bad.stderr


async def test_a_gear_that_does_not_compile_fails_the_add_with_its_error() -> None:
    g = aioge.Graph("baked")
    x = g.input("x", (1, 4), "float32")
    g.output(ops.reshape(ops.relu(x), g.constant(np.array([1, 4], np.int64))), names=["y"])  # the batch is baked in
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        with pytest.raises(aioge.errors.GraphError, match="(?i)reshape"):
            await s.add_graph(1, g, {"ge.inputShape": "x:-1,4", "ge.dynamicBatchSize": "1,2"})
        with pytest.raises(aioge.errors.GraphError, match="no graph with id 1"):
            s.compiled(1)
        await s.add_graph(1, g)  # the id is free again
