"""The compiled convolutions apply a FusedConv's activation to each output tile before it is
stored (``KernelImpl.activations``, ``native_rows.epilogue``): bit for bit what the second pass
over the whole output gave, and onnxruntime's Conv then the activation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aioge.ir.desc import TensorDesc
from aioge.kernels import native, native_rows
from aioge.kernels.fused import with_activation
from aioge.ops.registry import get_schema
from tests.ops.conftest import ort_run, rand

pytestmark = pytest.mark.skipif(not native.available(), reason="needs the compiled tier (pip install builds it)")

# (activation, its params, what onnxruntime runs after the Conv)
ACTIVATIONS = [
    ("Relu", (), lambda y: ort_run("Relu", [y])[0]),
    ("LeakyRelu", (0.1,), lambda y: ort_run("LeakyRelu", [y], {"alpha": 0.1})[0]),
    ("LeakyRelu", (-1.5,), lambda y: ort_run("LeakyRelu", [y], {"alpha": -1.5})[0]),
    ("Clip", (0.0, 6.0), lambda y: ort_run("Clip", [y, np.array(0.0, np.float32), np.array(6.0, np.float32)])[0]),
    ("Clip", (-math.inf, 0.25), lambda y: ort_run("Clip", [y, None, np.array(0.25, np.float32)])[0]),
    ("Sigmoid", (), lambda y: ort_run("Sigmoid", [y])[0]),
    ("Swish", (1.0,), lambda y: y * ort_run("Sigmoid", [y])[0]),
    ("HardSigmoid", (0.2, 0.5), lambda y: ort_run("HardSigmoid", [y], {"alpha": 0.2, "beta": 0.5})[0]),
    ("HardSwish", (), lambda y: ort_run("HardSwish", [y])[0]),
    ("Gelu", (0.0,), lambda y: ort_run("Gelu", [y])[0]),
    ("Gelu", (1.0,), lambda y: ort_run("Gelu", [y], {"approximate": "tanh"})[0]),
    ("Tanh", (), lambda y: ort_run("Tanh", [y])[0]),
]
NATIVE = ["conv_depthwise_native", "conv_direct_native", "conv_direct_t_native", "conv_grouped_native"]


def test_every_activation_a_fused_conv_takes_is_applied_in_the_compiled_kernels() -> None:
    # Tanh too, since its C form (ACT_TANH): it was the one a Gemm's epilogue lacked (BERT's pooler)
    from aioge.ops.fused import ACTIVATIONS as FUSABLE

    assert set(FUSABLE) - native_rows.EPILOGUES == {""}
    assert {a for a, _, _ in ACTIVATIONS} == native_rows.EPILOGUES
    impls = {i.name: i for i in get_schema("FusedConv", "aioge").impls}
    for name in NATIVE:
        assert impls[name].activations == native_rows.EPILOGUES
    with pytest.raises(ValueError, match="Erf"):
        native_rows.epilogue("Erf")


def _case(impl: str, seed: int, n: int, c: int, size: int, stride: int, bias: bool, rows: bool):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    depthwise, grouped = impl == "conv_depthwise_native", impl == "conv_grouped_native"
    group = c if depthwise else 2 if grouped else 1
    c = 2 * c if grouped else c  # two groups of c channels, each with c + 1 outputs
    m = c if depthwise else c + 2 if grouped else 2 * c + 3
    x = rand(rng, n, c, size, size) * 3  # past HardSigmoid's and Clip's bounds both ways
    x[0, 0, 0, 0] = np.nan  # propagates through every activation as numpy's steps propagate it
    w = rand(rng, m, c // group, 3, 3)
    w.setflags(write=False)
    inputs = [x, w] + ([rand(rng, m)] if bias else [])
    attrs = {"kernel_shape": [3, 3], "strides": [stride, stride], "pads": [1, 1, 1, 1], "group": group}
    params = {"rows": 1} if rows and impl != "conv_direct_t_native" else {}
    params = ({"t": 1} if rows else {}) if grouped else params  # the grouped conv's two kernels
    return inputs, attrs, params


@pytest.mark.parametrize("impl", NATIVE)
@pytest.mark.parametrize(("act", "act_params", "reference"), ACTIVATIONS)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 2),
    c=st.integers(1, 20),
    size=st.integers(1, 30),
    stride=st.integers(1, 2),
    bias=st.booleans(),
    rows=st.booleans(),
)
@settings(max_examples=8, deadline=None)
def test_the_tile_epilogue_equals_the_second_pass_and_onnxruntime(
    impl, act, act_params, reference, seed, n, c, size, stride, bias, rows
) -> None:
    inputs, attrs, params = _case(impl, seed, n, c, size, stride, bias, rows)
    descs = [TensorDesc(a.shape, "float32") for a in inputs]
    fused = next(i for i in get_schema("FusedConv", "aioge").impls if i.name == impl)
    plain = next(i for i in get_schema("Conv").impls if i.name == impl)
    run = fused.build({**attrs, "activation": act, "activation_params": act_params}, params, descs, descs[:1])
    (got,) = run(inputs, None)
    # before: the conv, then the activation as a pass of its own over the whole output
    (before,) = with_activation(plain.build(attrs, params, descs, descs[:1]), act, act_params, "float32")(inputs, None)
    np.testing.assert_array_equal(got, before)
    (conv,) = ort_run("Conv", inputs, attrs)
    want = reference(conv)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)
    out = np.full(got.shape, 7.0, np.float32)  # a reused arena buffer
    (again,) = run(inputs, [out])
    np.testing.assert_array_equal(again, got)


def test_without_the_tier_a_stored_native_choice_applies_its_activation_in_numpy(monkeypatch) -> None:
    inputs, attrs, params = _case("conv_direct_native", 5, 1, 4, 9, 1, True, False)
    descs = [TensorDesc(a.shape, "float32") for a in inputs]
    (conv,) = ort_run("Conv", inputs, attrs)
    want = ort_run("Clip", [conv, np.array(0.0, np.float32), np.array(6.0, np.float32)])[0]
    monkeypatch.setattr(native, "function", lambda *a, **k: None)
    monkeypatch.setattr(native, "par_run", lambda: None)
    monkeypatch.setattr(native, "gemm_tile", lambda: None)
    for impl in get_schema("FusedConv", "aioge").impls:
        if impl.name in ("conv_direct_native", "conv_direct_t_native"):
            run = impl.build({**attrs, "activation": "Clip", "activation_params": (0.0, 6.0)}, params, descs, descs[:1])
            (got,) = run(inputs, None)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    dw_inputs, dw_attrs, _ = _case("conv_depthwise_native", 5, 1, 4, 9, 1, False, False)
    dw_descs = [TensorDesc(a.shape, "float32") for a in dw_inputs]
    (dw_conv,) = ort_run("Conv", dw_inputs, dw_attrs)
    dw = next(i for i in get_schema("FusedConv", "aioge").impls if i.name == "conv_depthwise_native")
    (got,) = dw.build({**dw_attrs, "activation": "Relu", "activation_params": ()}, {}, dw_descs, dw_descs[:1])(dw_inputs, None)
    np.testing.assert_allclose(got, ort_run("Relu", [dw_conv])[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("act", "act_params", "reference"), [("", (), lambda y: y)] + ACTIVATIONS[:1] + ACTIVATIONS[5:9])
@given(
    seed=st.integers(0, 2**16),
    # K in one block, past KC = 160 up to 256 (AVX2), or up to PW_KMAX = 1024 and past it
    c=st.one_of(st.integers(1, 24), st.integers(161, 256), st.integers(257, 1100)),
    m=st.integers(1, 100),
    h=st.integers(1, 40),
    k=st.integers(1, 4),
    odd=st.booleans(),
)
@settings(max_examples=8, deadline=None)
def test_a_1x1_convs_straight_tiles_take_each_activation_as_the_pass_does(
    act, act_params, reference, seed, c, m, h, k, odd
) -> None:
    # a 1x1 conv at stride 1 whose positions fill whole 16-position panels (h * w a multiple of
    # 16, odd sides included; with ``odd`` any h * w, read from a phase image) stores its tiles
    # from the registers, a short last panel masked, each common activation a constant of its
    # own there (csrc/conv_direct.c's DOUT), the last block's rows past m (m not a multiple of 6)
    # computed and not stored
    rng = np.random.default_rng(seed)
    x = rand(rng, 1, c, h, 16 // math.gcd(h, 16) * k + odd) * 3
    x[0, 0, 0, 0] = np.nan
    inputs = [x, rand(rng, m, c, 1, 1), rand(rng, m)]
    inputs[1].setflags(write=False)
    descs = [TensorDesc(a.shape, "float32") for a in inputs]
    attrs = {"kernel_shape": [1, 1], "strides": [1, 1], "pads": [0, 0, 0, 0], "group": 1}
    plain = next(i for i in get_schema("Conv").impls if i.name == "conv_direct_native")
    fused = next(i for i in get_schema("FusedConv", "aioge").impls if i.name == "conv_direct_native")
    build = fused.build if act else plain.build
    (got,) = build({**attrs, "activation": act, "activation_params": act_params} if act else attrs, {}, descs, descs[:1])(
        inputs, None
    )
    (conv,) = ort_run("Conv", inputs, attrs)
    np.testing.assert_allclose(got, reference(conv), rtol=1e-4, atol=2e-5 * max(1, c / 24))  # sums of up to 1100 terms
    if act:
        (before,) = with_activation(plain.build(attrs, {}, descs, descs[:1]), act, act_params, "float32")(inputs, None)
        np.testing.assert_array_equal(got, before)
