"""What a user meets (issue 23): the public homes of save/load and of a model's inputs and outputs."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.errors import ModelFormatError
from aioge.ir import IOInfo

W = (np.arange(12, dtype=np.float32).reshape(4, 3) - 6) / 6
OPTS = {"aioge.tune_mode": "heuristic"}


def _graph() -> aioge.Graph:
    g = aioge.Graph("surface")
    x = g.input("x", ("N", 4))
    g.output(ops.relu(ops.matmul(x, g.constant(W, "w"))), names=["y"])
    return g


def test_graph_lists_its_inputs_and_outputs() -> None:
    g = _graph()
    assert g.get_inputs() == [IOInfo("x", ("N", 4), "float32")]
    (out,) = g.get_outputs()
    assert (out.name, out.dtype) == ("y", "float32")


@pytest.mark.anyio
async def test_compiled_model_saves_and_loads_through_public_names(tmp_path) -> None:
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    async with aioge.Session(OPTS) as s:
        await s.add_graph(1, _graph())
        model = await s.build_graph(1, {"x": (2, 4)})
        assert model.get_inputs() == [IOInfo("x", (2, 4), "float32")]
        assert model.get_outputs() == [IOInfo("y", (2, 3), "float32")]
        path = tmp_path / "m.om"
        old = os.umask(0o022)
        try:
            await model.save(path)
        finally:
            os.umask(old)
        # A file the user asked for is a deployment artefact: the umask decides (0644), not 0600.
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
    loaded = await aioge.load_model(path)
    assert loaded.get_inputs() == [IOInfo("x", (2, 4), "float32")] and loaded.fingerprint == model.fingerprint
    async with aioge.Session(OPTS) as s:
        gid = await s.load_model(path)
        y = (await s.run_graph(gid, {"x": x}))["y"]
    np.testing.assert_allclose(y, np.maximum(x @ W, 0), rtol=1e-6)


@pytest.mark.anyio
async def test_load_model_of_a_missing_file_is_a_model_format_error(tmp_path) -> None:
    with pytest.raises(ModelFormatError, match="nope.om"):
        await aioge.load_model(tmp_path / "nope.om")


@pytest.mark.anyio
async def test_session_lists_a_graphs_inputs_before_and_after_build() -> None:
    async with aioge.Session(OPTS) as s:
        await s.add_graph(7, _graph())
        assert s.get_inputs(7) == [IOInfo("x", ("N", 4), "float32")]
        await s.run_graph(7, {"x": np.zeros((5, 4), np.float32)})
        assert s.get_inputs(7) == [IOInfo("x", (5, 4), "float32")] and s.get_outputs(7) == [IOInfo("y", (5, 3), "float32")]


def test_compile_output_follows_the_umask_and_cache_files_stay_private(tmp_path) -> None:
    from aioge.cli import main

    src = tmp_path / "g.py"
    src.write_text(
        "import aioge\nfrom aioge import ops\n\ndef build():\n    g = aioge.Graph('u')\n"
        "    g.output(ops.relu(g.input('x', (2,))), names=['y'])\n    return g\n"
    )
    graphs = tmp_path / "graphs"
    graphs.mkdir(mode=0o700)
    old = os.umask(0o022)
    try:
        assert (
            main(
                [
                    "compile",
                    str(src),
                    "-o",
                    str(tmp_path / "m.om"),
                    "--quiet",
                    "--option",
                    "aioge.tune_mode=heuristic",
                    "--option",
                    f"ge.graph_compiler_cache_dir={graphs}",
                    "--option",
                    "ge.graph_key=u",
                ]
            )
            == 0
        )
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "m.om").stat().st_mode) == 0o644
    cached = list(graphs.glob("u_*.om"))
    assert cached and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in [*cached, graphs / "u.idx"])
