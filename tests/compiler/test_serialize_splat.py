"""Splat constants in an .om (issue 23): stored as one value and a shape, materialised at load."""

from __future__ import annotations

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.plan.serialize import decode_model, encode_model

OPTS = {"aioge.tune_mode": "heuristic"}
HALF = np.full((512, 256), 0.5, np.float32)  # 512 KB of one value
RAMP = np.linspace(-1, 1, 256 * 4, dtype=np.float32).reshape(256, 4)  # 4 KB, not a splat


def _graph() -> aioge.Graph:
    g = aioge.Graph("splat")
    x = g.input("x", (2, 512))
    h = ops.matmul(x, g.constant(HALF, "half"))
    g.output(ops.matmul(h, g.constant(RAMP, "ramp")) + g.constant(np.full((4,), np.nan, np.float32), "nan4"), names=["y"])
    return g


@pytest.mark.anyio
@pytest.mark.parametrize("external", [False, True])
async def test_a_splat_constant_is_stored_small_and_loads_whole(tmp_path, external) -> None:
    async with aioge.Session(OPTS) as s:
        await s.add_graph(1, _graph())
        model = await s.build_graph(1)
        await model.save(tmp_path / "m.om", external=external)
    size = (tmp_path / "m.om").stat().st_size
    weights = sorted((tmp_path / "weight").iterdir()) if external else []
    # The 512 KB splat takes a few bytes; the 4 KB ramp and the 16-byte NaNs (too small to
    # bother) are stored as they are (inline, or a weight file each).
    assert size + sum(w.stat().st_size for w in weights) < 64 * 1024
    assert sorted(w.stat().st_size for w in weights) == ([16, RAMP.nbytes] if external else [])
    loaded = await aioge.load_model(tmp_path / "m.om")
    half = loaded.graph.constants["half"].data
    assert half.shape == HALF.shape and half.dtype == np.float32 and np.array_equal(half, HALF) and not half.flags.writeable
    assert np.array_equal(loaded.graph.constants["ramp"].data, RAMP)
    x = np.linspace(-2, 2, 1024, dtype=np.float32).reshape(2, 512)
    async with aioge.Session(OPTS) as s:
        gid = await s.load_model(tmp_path / "m.om")
        y = (await s.run_graph(gid, {"x": x}))["y"]
    np.testing.assert_allclose(y, (x @ HALF) @ RAMP + np.nan, rtol=1e-5, equal_nan=True)
    assert np.isnan(y).all()  # the NaN splat (bitwise one value) came back as NaN


@pytest.mark.anyio
async def test_a_tampered_splat_is_a_model_format_error(tmp_path) -> None:
    from aioge.errors import ModelFormatError

    async with aioge.Session(OPTS) as s:
        await s.add_graph(1, _graph())
        model = await s.build_graph(1)
    data, _ = encode_model(model)
    assert decode_model(data).graph.constants["half"].data[0, 0] == 0.5
    one = np.float32(0.5).tobytes()
    # The splat value is the 4 bytes of 0.5 after the "~s" key: claim 3 bytes instead (msgpack bin8 length).
    tampered = data.replace(b"\xa2~s\xc4\x04" + one, b"\xa2~s\xc4\x03" + one[:3] + b"\xc0", 1)
    assert tampered != data
    with pytest.raises(ModelFormatError):
        decode_model(tampered)
