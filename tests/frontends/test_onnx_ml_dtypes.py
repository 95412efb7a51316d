"""The ml_dtypes types (bfloat16, float8, float4, int4, int2) through load_onnx, the Session, the .om and the cache codec."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import aioge
from aioge.ir.desc import DTYPES, ML_DTYPES, numpy_dtype
from aioge.plan import codec, io, serialize

pytestmark = pytest.mark.anyio

OPTIONS = {"aioge.tune_mode": "heuristic"}


def _model(nodes, inputs, outputs, initializers=(), opset=23):
    graph = helper.make_graph(nodes, "m", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


async def _run(model, feeds):
    async with aioge.Session(OPTIONS) as s:
        return await s.run(aioge.load_onnx(model), feeds)


async def test_bfloat16_matmul_softmax_computes_in_float32() -> None:
    """bfloat16 ops run widened to float32 and round once per op (within ONNX's two-ulp bfloat16 tolerance)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 16)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((16, 8)).astype(ml_dtypes.bfloat16)
    bf = TensorProto.BFLOAT16
    model = _model(
        [helper.make_node("MatMul", ["a", "b"], ["m"]), helper.make_node("Softmax", ["m"], ["y"], axis=-1)],
        [helper.make_tensor_value_info("a", bf, a.shape)],
        [helper.make_tensor_value_info("y", bf, (4, 8))],
        [numpy_helper.from_array(b, "b")],
    )
    y = (await _run(model, {"a": a}))["y"]
    assert y.dtype == np.dtype(ml_dtypes.bfloat16)
    m = (a.astype(np.float32) @ b.astype(np.float32)).astype(ml_dtypes.bfloat16).astype(np.float32)
    e = np.exp(m - m.max(-1, keepdims=True))
    np.testing.assert_allclose(y.astype(np.float32), e / e.sum(-1, keepdims=True), rtol=2**-7, atol=0)


async def test_packed_int4_initializer_and_float8_input() -> None:
    """A packed int4 initializer (two per byte in the file) dequantised, added to a float8 input cast up."""
    w = np.array([[-8, -1, 0, 7, 3], [1, 2, -3, 4, 5]], ml_dtypes.int4)  # an odd count: a half-used last byte
    t = numpy_helper.from_array(w, "w")
    assert len(t.raw_data) == 5 or len(t.int32_data) == 5  # packed storage
    x = np.array([[0.5, -448, 1e-3, 3.0, 2.0], [-0.0, 1.75, 6.0, -2.5, 448]], np.float32).astype(ml_dtypes.float8_e4m3fn)
    model = _model(
        [
            helper.make_node("DequantizeLinear", ["w", "s"], ["d"]),
            helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["d", "xf"], ["y"]),
            helper.make_node("Cast", ["y"], ["y8"], to=TensorProto.FLOAT8E5M2, saturate=1),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, x.shape)],
        [helper.make_tensor_value_info("y8", TensorProto.FLOAT8E5M2, x.shape)],
        [t, numpy_helper.from_array(np.array(0.5, np.float32), "s")],
    )
    got = (await _run(model, {"x": x}))["y8"]
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert got.dtype == want.dtype == np.dtype(ml_dtypes.float8_e5m2)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


async def test_om_roundtrip_keeps_narrow_constants_and_inputs(tmp_path) -> None:
    """A bfloat16 constant and a float8 input survive build -> .om -> load_model -> run."""
    g = aioge.Graph("narrow")
    x = g.input("x", (6,), "float8_e5m2")
    c = g.constant(np.linspace(-3, 3, 6).astype(ml_dtypes.bfloat16), "c")
    xf = aioge.ops.cast(x, to="float32")
    cf = aioge.ops.cast(c, to="float32")
    g.output(aioge.ops.cast(xf * cf, to="bfloat16"), names=["y"])
    feed = np.array([1, -2, 0.5, 4, -0.25, 8], np.float32).astype(ml_dtypes.float8_e5m2)
    want = (feed.astype(np.float32) * np.linspace(-3, 3, 6).astype(ml_dtypes.bfloat16).astype(np.float32)).astype(
        ml_dtypes.bfloat16
    )
    async with aioge.Session(OPTIONS) as s:
        await s.add_graph(1, g)
        model = await s.build_graph(1, {"x": (6,)})
        path = tmp_path / "narrow.om"
        serialize.save_model_sync(path, model)
        gid = await s.load_model(path)
        got = (await s.run_graph(gid, {"x": feed}))["y"]
    assert got.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("name", sorted(ML_DTYPES))
def test_cache_codec_carries_every_narrow_dtype(name: str) -> None:
    """The one dtype allow-list (ir.desc.DTYPES -> plan.codec.ARRAY_DTYPES) admits each type, bytes intact."""
    assert name in DTYPES and name in codec.ARRAY_DTYPES
    dtype = numpy_dtype(name)
    a = np.arange(6 * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(2, 3)  # any bits travel, NaN codes too
    back = io.unpack(io.pack({"a": a}))["a"]
    assert back.dtype == dtype and back.shape == (2, 3)
    assert back.tobytes() == a.tobytes()


async def test_device_processes_carry_narrow_dtypes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device wire format takes the same allow-list: float8 in, bfloat16 out, as in this process."""
    from aioge.runtime import schedule

    monkeypatch.setattr(schedule, "INLINE_US", 0.0)  # small runs would otherwise stay in this process
    g = aioge.Graph("narrow_wire")
    x = g.input("x", (4, 8), "float8_e4m3fn")
    g.output(aioge.ops.cast(aioge.ops.cast(x, to="float32") * 3.0, to="bfloat16"), names=["y"])
    feed = np.linspace(-4, 4, 32, dtype=np.float32).reshape(4, 8).astype(ml_dtypes.float8_e4m3fn)
    want = (feed.astype(np.float32) * 3).astype(ml_dtypes.bfloat16)
    async with aioge.Session({**OPTIONS, "aioge.exec_devices": "1"}) as s:
        await s.add_graph(1, g)
        got = (await s.run_graph(1, {"x": feed}))["y"]
        assert s._devices is not None and sum(s._devices.completed) == 1
    assert got.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
