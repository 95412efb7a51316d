"""DynamicQuantizeMatMulFusionPass: the chain ``quantize_dynamic`` writes for a MatMul
(DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul by a_scale * w_scale [-> Add bias])
becomes one com.microsoft DynamicQuantizeMatMul, run by the int8 GEMM with a float32 output.

Equivalence: bit for bit against the unfused chain (the integer product is exact and the fused
kernel rounds as Cast, Mul and Add do, in that order) and within 1e-6 of onnxruntime, which runs
the same chain (it fuses it too).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import aioge
from tests.passes.switching import compare, without

pytestmark = pytest.mark.anyio

OFF = without("DynamicQuantizeMatMulFusionPass")


def _chain(
    k: int, n: int, *, per_col: bool, bias: str, w_dtype: Any = np.int8, shape: tuple[int, ...] = (2, 5), extra_use: bool = False
) -> Any:
    """x (shape + (k,)) through the quantize_dynamic chain; ``bias``: "const", "input" or "none"."""
    rng = np.random.default_rng(k * n)
    # 7-bit int8 weights (symmetric, as quantize_dynamic writes them): onnxruntime's u8 x s8
    # kernel saturates int16 sums with full-range ones (aioge's GEMM does not: test_qgemm.py)
    wz = rng.integers(-20, 20, n if per_col else 1) + 128 if w_dtype == np.uint8 else np.zeros(n if per_col else 1, int)
    w = (wz + rng.integers(-64, 64, (k, n))).astype(w_dtype)
    wz = wz.astype(w_dtype)
    ws = (rng.random(n if per_col else 1) * 0.01 + 1e-3).astype(np.float32)
    inits = {
        "w": w,
        "ws": ws if per_col else ws.reshape(()),
        "wz": wz if per_col else wz.reshape(()),
        "b": rng.standard_normal(n).astype(np.float32),
    }
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
        helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["acc"]),
        helper.make_node("Mul", ["xs", "ws"], ["s"]),
        helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["accf", "s"], ["m" if bias != "none" else "y"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [*shape, k])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*shape, n])]
    if bias != "none":
        nodes.append(helper.make_node("Add", ["b", "m"], ["y"]))
        if bias == "input":
            del inits["b"]
            inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [n]))
    if extra_use:  # the int32 product is an output too: the chain cannot go
        outputs.append(helper.make_tensor_value_info("acc", TensorProto.INT32, [*shape, n]))
    graph = helper.make_graph(nodes, "dq", inputs, outputs, [numpy_helper.from_array(v, name) for name, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(model: Any, k: int, n: int, shape: tuple[int, ...] = (2, 5)) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    feeds = {"x": (rng.standard_normal((*shape, k)) * 3).astype(np.float32)}
    if any(i.name == "b" for i in model.graph.input):
        feeds["b"] = rng.standard_normal(n).astype(np.float32)
    return feeds


@pytest.mark.parametrize("per_col", [False, True], ids=["per_tensor", "per_column"])
@pytest.mark.parametrize("bias", ["const", "none"])
@pytest.mark.parametrize("w_dtype", [np.int8, np.uint8])
async def test_the_chain_fuses_and_equals_it_bit_for_bit(per_col: bool, bias: str, w_dtype: Any) -> None:
    k, n = 70, 37
    model = _chain(k, n, per_col=per_col, bias=bias, w_dtype=w_dtype)
    feeds = _feeds(model, k, n)
    on, off, out = await compare(aioge.load_onnx(model), feeds, "", OFF, rtol=0, atol=0)
    assert on["DynamicQuantizeMatMul"] == 1 and not {"MatMulInteger", "Cast", "DynamicQuantizeLinear"} & set(on)
    assert off["MatMulInteger"] == 1 and "DynamicQuantizeMatMul" not in off
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(out["y"], want, rtol=1e-6, atol=1e-6)


async def test_a_fed_bias_stays_an_add_and_a_shared_product_keeps_the_chain() -> None:
    k, n = 33, 20
    model = _chain(k, n, per_col=True, bias="input")
    on, _, out = await compare(aioge.load_onnx(model), _feeds(model, k, n), "", OFF, rtol=0, atol=0)
    assert on["DynamicQuantizeMatMul"] == 1 and on["Add"] == 1
    model = _chain(k, n, per_col=True, bias="const", extra_use=True)
    on, _, _ = await compare(aioge.load_onnx(model), _feeds(model, k, n), "", OFF, rtol=0, atol=0)
    assert "DynamicQuantizeMatMul" not in on and on["MatMulInteger"] == 1


async def test_the_fused_op_runs_without_the_compiled_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    from aioge.kernels import native

    k, n = 40, 24
    model = _chain(k, n, per_col=True, bias="const", shape=(3,))
    feeds = _feeds(model, k, n, (3,))
    _, _, with_tier = await compare(aioge.load_onnx(model), feeds, "", OFF, rtol=0, atol=0)
    monkeypatch.setattr(native, "function", lambda *a, **kw: None)
    monkeypatch.setattr(native, "par_run", lambda: None)
    on, _, without_tier = await compare(aioge.load_onnx(model), feeds, "", OFF, rtol=0, atol=0)
    assert on["DynamicQuantizeMatMul"] == 1
    np.testing.assert_array_equal(with_tier["y"], without_tier["y"])
