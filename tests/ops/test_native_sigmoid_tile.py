"""The C Sigmoid/Swish (``csrc/mathf.h``'s sigmoid8): a lane's value whatever its neighbours (the
short form for |alpha x| <= 80, the wide one for the rest), and the 1x1 convs' tiles applying it
in their registers bit for bit as the pass over the whole output does, near onnxruntime's."""

from __future__ import annotations

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


@pytest.mark.parametrize(("name", "params"), [("Sigmoid", ()), ("Swish", (1.0,)), ("Swish", (1.702,))])
def test_a_sigmoid_lane_is_the_same_whatever_its_neighbours(name: str, params: tuple[float, ...]) -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(4001) * 30).astype(np.float32)  # about a third past |80|: short and wide forms mixed
    x[rng.integers(0, x.size, 40)] = np.array([np.nan, np.inf, -np.inf, 0.0], np.float32).repeat(10)
    whole = native_rows.unary(name, x, params)
    assert whole is not None
    for shift in range(1, 8):  # every value in every lane of a vector of 8, and in the padded tail
        part = native_rows.unary(name, x[shift:].copy(), params)
        assert part is not None
        np.testing.assert_array_equal(part, whole[shift:])
    t = (np.float32(params[0] if params else 1.0) * x).astype(np.float64)  # alpha x rounded as the C code rounds it
    with np.errstate(over="ignore", invalid="ignore"):
        want = 1 / (1 + np.exp(-t))
        want = want * x if params else want
    np.testing.assert_allclose(whole, want, rtol=4e-7, atol=1e-40)


@pytest.mark.parametrize("act", [("Sigmoid", ()), ("Swish", (1.0,))])
@given(
    seed=st.integers(0, 2**16),
    c=st.integers(1, 40),
    m=st.integers(1, 40),
    h=st.integers(1, 24),
    w=st.integers(1, 40),
    bias=st.booleans(),
)
@settings(max_examples=10, deadline=None)
def test_a_1x1_conv_applies_sigmoid_in_its_tile_as_the_pass_does(act, seed, c, m, h, w, bias) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    x = rand(rng, 1, c, h, w) * 40  # outputs past |80| as well
    x[0, 0, 0, 0] = np.nan
    inputs = [x, rand(rng, m, c, 1, 1)] + ([rand(rng, m) * 20] if bias else [])
    descs = [TensorDesc(a.shape, "float32") for a in inputs]
    attrs = {"kernel_shape": [1, 1], "strides": [1, 1], "pads": [0, 0, 0, 0], "group": 1}
    for impl in ("conv_direct_native", "conv_direct_t_native"):
        fused = next(i for i in get_schema("FusedConv", "aioge").impls if i.name == impl)
        plain = next(i for i in get_schema("Conv").impls if i.name == impl)
        (got,) = fused.build({**attrs, "activation": act[0], "activation_params": act[1]}, {}, descs, descs[:1])(inputs, None)
        (before,) = with_activation(plain.build(attrs, {}, descs, descs[:1]), *act, "float32")(inputs, None)
        np.testing.assert_array_equal(got, before)
        (conv,) = ort_run("Conv", inputs, attrs)
        sig = ort_run("Sigmoid", [conv])[0]
        np.testing.assert_allclose(got, sig if act[0] == "Sigmoid" else conv * sig, rtol=1e-4, atol=2e-5)
