"""The fused kernels (aioge.kernels.fused, aioge.ops.fused) against the unfused ops' own kernels.

FusedElementwise programs are checked step by step against a reference that runs each op's
registered kernel on whole arrays; block sizes are forced small so chunk tails, broadcast
inputs and register reuse are all exercised. Tolerance: 0 for float64/float32 programs
built from ufuncs (the same ufuncs run in the same order). Erf (and the erf Gelu) in float32 programs use a
rational approximation evaluated in float32 (within 7 float32 ulps of the true erf) where the unfused op sums a float64
series: there the tolerance is rtol 1e-5, atol 1e-6 (a chain after it may scale the
difference up a little).
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aioge.ir.desc import TensorDesc
from aioge.kernels import native, parallel
from aioge.kernels.fused import EW_OPS, activation_runner, build_fused_elementwise, check_program, coalesce
from aioge.ops.registry import get_schema

UNARY = [n for n, op in EW_OPS.items() if op.arity == 1 and op.nparams == 0 and n not in ("Acosh", "Atanh", "Asin", "Acos")]
BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min"]


def _params_for(name: str) -> tuple[float, ...]:
    return {"LeakyRelu": (0.1,), "HardSigmoid": (0.2, 0.5), "Clip": (-0.5, 0.75), "Gelu": (0.0,), "Swish": (1.5,)}.get(name, ())


def _reference(ops: list[str], operands: list[int], params: list[float], inputs: list[np.ndarray]) -> np.ndarray:
    """Evaluate a program with each op's registered kernel on whole arrays."""
    results: list[np.ndarray] = []
    oi = pi = 0
    for name in ops:
        op = EW_OPS[name]
        args = [inputs[r] if r >= 0 else results[-1 - r] for r in operands[oi : oi + op.arity]]
        pars = params[pi : pi + op.nparams]
        oi += op.arity
        pi += op.nparams
        attrs: dict[str, object] = {}
        if name in ("LeakyRelu", "Swish"):
            attrs = {"alpha": pars[0]}
        elif name == "HardSigmoid":
            attrs = {"alpha": pars[0], "beta": pars[1]}
        elif name == "Gelu":
            attrs = {"approximate": "tanh" if pars[0] else "none"}
        elif name == "Clip":
            args = [args[0], np.asarray(pars[0], args[0].dtype), np.asarray(pars[1], args[0].dtype)]
        scalar = all(a.ndim == 0 for a in args)
        if scalar:  # kernels.elementwise.clip fails on 0-d arrays (numpy 2 copy=False): run on (1,)
            args = [a.reshape(1) for a in args]
        schema = get_schema(name)
        attrs = schema.normalise_attrs(attrs)
        shape = np.broadcast_shapes(*(a.shape for a in args))
        descs = [TensorDesc.of(a.shape, a.dtype) for a in args]
        run = schema.impls[0].build(attrs, {}, descs, [TensorDesc.of(shape, args[0].dtype)])
        res = np.asarray(run(args, None)[0])
        results.append(res.reshape(()) if scalar else res)
    return results[-1]


def _tol(ops: list[str], dtype: object) -> dict[str, float]:
    if np.dtype(dtype) != np.float64 and any(op in ("Erf", "Gelu") for op in ops):
        return {"rtol": 1e-5, "atol": 1e-6}
    return {"rtol": 0, "atol": 0}


def _run(ops, operands, params, inputs, block_bytes=None, out=None):  # type: ignore[no-untyped-def]
    shape = np.broadcast_shapes(*(x.shape for x in inputs))
    attrs = {"ops": tuple(ops), "operands": tuple(operands), "params": tuple(params)}
    kparams = {} if block_bytes is None else {"block_bytes": block_bytes}
    run = build_fused_elementwise(
        attrs, kparams, [TensorDesc.of(x.shape, x.dtype) for x in inputs], [TensorDesc.of(shape, inputs[0].dtype)]
    )
    return run(inputs, None if out is None else [out])[0]


def test_coalesce_merges_dims_that_broadcast_alike() -> None:
    assert coalesce((8, 16, 5, 5), [(8, 16, 5, 5), (16, 1, 1)]) == ((8, 16, 25), [(8, 16, 25), (1, 16, 1)])
    assert coalesce((4, 3, 2), [(4, 3, 2), (4, 3, 2)]) == ((24,), [(24,), (24,)])
    assert coalesce((1, 7, 1), [(7, 1), ()]) == ((7,), [(7,), (1,)])
    assert coalesce((), [(), ()]) == ((1,), [(1,), (1,)])


def test_check_program_names_the_fault() -> None:
    assert check_program(("Add",), (0, 1), (), 2) is None
    assert "cannot be fused" in check_program(("Conv",), (0,), (), 1)  # type: ignore[operator]
    assert "not computed yet" in check_program(("Neg", "Add"), (-2, 0, 1), (), 2)  # type: ignore[operator]
    assert "reads input 2" in check_program(("Add",), (0, 2), (), 2)  # type: ignore[operator]
    assert "left over" in check_program(("Neg",), (0, 0), (), 1)  # type: ignore[operator]


@pytest.mark.parametrize("block", [64, 1000, None])
def test_chain_with_broadcast_matches_unfused_kernels(block: int | None) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 7, 9)).astype(np.float32)
    bias = rng.standard_normal((5, 1, 1)).astype(np.float32)
    row = rng.standard_normal((9,)).astype(np.float32)
    ops = ["Add", "Mul", "Sigmoid", "Gelu", "Sub", "Tanh", "LeakyRelu", "Clip", "Max", "HardSigmoid", "Add"]
    operands = [0, 1, -1, 2, -2, -3, -4, 0, -5, -6, -7, -8, 1, -9, -10, -3]
    params = [0.0, 1.7, -0.5, 0.75, 0.2, 0.5]
    got = _run(ops, operands, params, [x, bias, row], block)
    want = _reference(ops, operands, params, [x, bias, row])
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, want, **_tol(ops, np.float32))


def test_writes_into_the_given_output_and_handles_non_contiguous_ones() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 6, 10)), rng.standard_normal((2, 6, 10))
    out = np.empty((2, 6, 10))
    res = _run(["Mul", "Exp"], [0, 1, -1], [], [a, b], 256, out)
    assert res is out
    np.testing.assert_array_equal(out, np.exp(a * b))
    wide = np.zeros((2, 6, 20))
    view = wide[:, :, ::2]
    _run(["Mul", "Exp"], [0, 1, -1], [], [a, b], 256, view)
    np.testing.assert_array_equal(wide[:, :, ::2], np.exp(a * b))
    assert not wide[:, :, 1::2].any()


def test_non_contiguous_inputs_and_zero_size() -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((8, 12))[:, ::3]
    np.testing.assert_array_equal(_run(["Neg", "Abs"], [0, -1], [], [a], 16), np.abs(-a))
    empty = np.zeros((0, 4), np.float32)
    assert _run(["Neg", "Relu"], [0, -1], [], [empty]).shape == (0, 4)


def test_diamond_reuses_registers_correctly() -> None:
    # y = (a + b) * tanh(a + b) - (a + b) / 2: one value read three times, registers shared.
    rng = np.random.default_rng(3)
    a, b, two = rng.standard_normal((50, 33)), rng.standard_normal((33,)), np.asarray(2.0)
    ops = ["Add", "Tanh", "Mul", "Div", "Sub"]
    operands = [0, 1, -1, -1, -2, -1, 2, -3, -4]
    got = _run(ops, operands, [], [a, b, two], 128)
    s = a + b
    np.testing.assert_array_equal(got, s * np.tanh(s) - s / 2.0)


def test_concurrent_runs_do_not_share_scratch() -> None:
    rng = np.random.default_rng(4)
    attrs = {"ops": ("Mul", "Sigmoid", "Add"), "operands": (0, 0, -1, -2, 0), "params": ()}
    desc = TensorDesc.of((64, 256), "float64")
    run = build_fused_elementwise(attrs, {"block_bytes": 2048}, [desc], [desc])
    xs = [rng.standard_normal((64, 256)) for _ in range(4)]
    want = [_reference(list(attrs["ops"]), list(attrs["operands"]), [], [x]) for x in xs]
    errors: list[str] = []

    def worker(i: int) -> None:
        for _ in range(20):
            got = run([xs[i]], None)[0]
            if not np.array_equal(got, want[i]):
                errors.append(f"worker {i} got a wrong result")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.parametrize("name", ["Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Swish", "Clip", "Tanh", "Gelu"])
def test_activation_runner_matches_the_op(name: str) -> None:
    rng = np.random.default_rng(5)
    y = (rng.standard_normal((3, 20000)) * 4).astype(np.float32)
    params = _params_for(name)
    want = _reference([name], [0], list(params), [y])
    act = activation_runner(name, params, np.float32)
    assert act is not None
    act(y)
    np.testing.assert_allclose(y, want, **_tol([name], np.float32))
    assert activation_runner("", (), np.float32) is None
    with pytest.raises(ValueError, match="unknown activation"):
        activation_runner("Softmax", (), np.float32)
    with pytest.raises(ValueError, match="takes"):
        activation_runner("LeakyRelu", (), np.float32)


def test_gelu_tanh_and_leaky_alpha_outside_unit_interval() -> None:
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((40, 41)) * 3).astype(np.float32)
    for ops, params in ((["Gelu"], [1.0]), (["LeakyRelu"], [-2.5]), (["LeakyRelu"], [3.0])):
        np.testing.assert_allclose(_run(ops, [0], params, [x], 512), _reference(ops, [0], params, [x]), rtol=0, atol=0)


def test_float32_erf_is_within_a_few_ulps_of_the_true_erf() -> None:
    # Evaluated in float32 (Eigen's float erf): within 8 float32 ulps of 1 everywhere, within
    # 2e-7 below |x| = 1; float16 programs evaluate it in float64.
    x = np.linspace(-6, 6, 240001, dtype=np.float32)
    exact = np.array([math.erf(v) for v in x.astype(np.float64)])
    err = np.abs(_run(["Erf"], [0], [], [x], 4096).astype(np.float64) - exact)
    assert err.max() < 8 * np.spacing(np.float32(1)) / 2 and err[np.abs(x) < 1].max() < 2e-7
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(100_000) * 2).astype(np.float32)
    exact = np.array([math.erf(v) for v in x.astype(np.float64)])
    assert np.abs(_run(["Erf"], [0], [], [x], 4096).astype(np.float64) - exact).max() < 4.77e-7
    x64 = x.astype(np.float64)
    gelu = 0.5 * x64 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x64]))
    got = _run(["Gelu"], [0], [0.0], [x], 4096).astype(np.float64)
    assert np.all(np.abs(got - gelu) <= 3e-7 * np.abs(x64) + 1e-7)
    h = x.astype(np.float16)
    assert np.abs(_run(["Erf"], [0], [], [h], 4096).astype(np.float64) - [math.erf(v) for v in h.astype(np.float64)]).max() < 1e-3
    x64 = x.astype(np.float64)  # float64 programs keep kernels.elementwise.erf, bit for bit
    np.testing.assert_array_equal(_run(["Erf"], [0], [], [x64]), _reference(["Erf"], [0], [], [x64]))


def test_sigmoid_is_overflow_free() -> None:
    x = np.array([-1e4, -100.0, 0.0, 100.0, 1e4], np.float32)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        got = _run(["Sigmoid", "Neg"], [0, -1], [], [x])
    np.testing.assert_array_equal(got, _reference(["Sigmoid", "Neg"], [0, -1], [], [x]))
    np.testing.assert_allclose(-got, [0.0, 0.0, 0.5, 1.0, 1.0], atol=1e-30)


def test_sigmoid_is_accurate_over_the_float_range() -> None:
    from aioge.kernels.elementwise import sigmoid

    for dtype, tiny in ((np.float32, 1.2e-38), (np.float64, 1e-300)):
        x = np.linspace(-800, 800, 200001).astype(dtype)
        exact = 1 / (1 + np.exp(-x.astype(np.longdouble)))
        with np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
            for got in (sigmoid(x), _run(["Sigmoid"], [0], [], [x], 4096)):
                assert got.dtype == dtype
                normal = exact > tiny
                rel = np.abs(got[normal] - exact[normal]) / exact[normal]
                assert rel.max() < 4 * np.finfo(dtype).eps, dtype
                assert np.abs(got[~normal] - exact[~normal]).max() < tiny


# -- property tests ---------------------------------------------------------------------

_dims = st.integers(1, 6)


@st.composite
def _programs(draw: st.DrawFn) -> tuple[list[str], list[int], list[float], list[np.ndarray], int]:
    rank = draw(st.integers(0, 4))
    shape = tuple(draw(_dims) for _ in range(rank))
    n_in = draw(st.integers(1, 3))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    inputs = []
    for i in range(n_in):
        # The first input has the full shape; the others broadcast onto it (size-1 dims, lower rank).
        if i == 0:
            s = shape
        else:
            drop = draw(st.integers(0, rank))
            s = tuple(d if draw(st.booleans()) else 1 for d in shape[drop:])
        inputs.append(rng.uniform(0.2, 2.0, s).astype(dtype))  # positive: Sqrt/Log stay defined
    ops: list[str] = []
    operands: list[int] = []
    params: list[float] = []
    for i in range(draw(st.integers(1, 8))):
        refs = list(range(n_in)) + [-1 - j for j in range(i)]
        if draw(st.booleans()):
            name = draw(st.sampled_from(BINARY))
            a, b = draw(st.sampled_from(refs)), draw(st.sampled_from(refs))
            if name == "Div" and b >= 0:
                pass  # inputs are positive
            elif name == "Div":
                name = "Mul"  # a computed divisor may be 0
            operands += [a, b]
        else:
            name = draw(
                st.sampled_from(
                    [
                        "Neg",
                        "Abs",
                        "Tanh",
                        "Exp",
                        "Relu",
                        "Sigmoid",
                        "Sin",
                        "Floor",
                        "LeakyRelu",
                        "HardSigmoid",
                        "HardSwish",
                        "Swish",
                        "Clip",
                        "Erf",
                    ]
                )
            )
            operands.append(draw(st.sampled_from(refs)))
            params += list(_params_for(name))
        ops.append(name)
    block = draw(st.sampled_from([8, 64, 4096, 32768]))
    return ops, operands, params, inputs, block


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_programs())
def test_random_programs_match_the_unfused_ops(case: tuple[list[str], list[int], list[float], list[np.ndarray], int]) -> None:
    ops, operands, params, inputs, block = case
    with np.errstate(over="ignore", invalid="ignore"):
        want = _reference(ops, operands, params, inputs)
        got = _run(ops, operands, params, inputs, block)
    # The node's output is the broadcast of all its inputs (the pass only fuses groups
    # whose every value has that shape); a program may not read every input at the end.
    want = np.broadcast_to(want, np.broadcast_shapes(*(x.shape for x in inputs)))
    assert got.shape == want.shape and got.dtype == want.dtype
    # Exp of a chain may overflow to inf; inf == inf and nan == nan count as equal.
    np.testing.assert_allclose(got, want, equal_nan=True, **_tol(ops, got.dtype))


@pytest.mark.parametrize(
    ("ops", "operands", "params"),
    [
        (["Mul", "Add", "Mul", "Add", "Relu"], [0, 1, -1, 2, -2, 3, -3, 3, -4], []),  # DenseNet's unfolded BN + ReLU
        (["Sub", "Div", "Mul", "Add"], [0, 1, -1, 2, -2, 3, -3, 4], []),
        (["Mul", "Add", "Clip"], [1, 0, 2, -1, -2], [0.0, 6.0]),  # the data second in a commutative op
        (["Add", "Swish"], [0, 3, -1], [1.0]),
        (["Mul", "HardSwish"], [0, 4, -1], []),  # a scalar operand
    ],
)
def test_a_chain_of_per_channel_constants_runs_in_c_bit_equal_to_the_ops(ops, operands, params) -> None:
    """Steps ``v op k[c]`` then an activation: one C pass per plane and step
    (``_ChannelChain``), bit for bit the unfused ops, NaN included, whole or split."""
    from aioge.kernels import fused as kf

    if not native.available():
        pytest.skip("needs the compiled tier")
    rng = np.random.default_rng(len(ops))
    x = (rng.standard_normal((2, 24, 13, 11)) * 4).astype(np.float32)
    x[0, 3, 2, 2] = np.nan
    inputs = [x, *(rng.standard_normal((24, 1, 1)).astype(np.float32) + 1.5 for _ in range(3)), np.full((1,), 0.75, np.float32)]
    attrs = {"ops": tuple(ops), "operands": tuple(operands), "params": tuple(params)}
    steps = kf._parse(ops, operands, params, len(inputs))
    assert kf._ChannelChain.of(steps, [a.shape for a in inputs], x.shape, np.dtype(np.float32)) is not None
    run = build_fused_elementwise(attrs, {}, [TensorDesc.of(a.shape, a.dtype) for a in inputs], [TensorDesc.of(x.shape, x.dtype)])
    got = run(inputs, None)[0]
    np.testing.assert_array_equal(got, _reference(ops, operands, params, inputs))
    with parallel.cpu_tokens(threading.Semaphore(1)):
        (split,) = run(inputs, [np.full(x.shape, 7.0, np.float32)])
    np.testing.assert_array_equal(split, got)


def test_programs_that_are_not_a_chain_of_per_channel_constants_keep_the_numpy_kernel() -> None:
    from aioge.kernels import fused as kf

    shapes = [(2, 24, 13, 11), (24, 1, 1), (2, 24, 13, 11), (2, 24, 1, 1)]
    for ops, operands in (
        (["Sub"], [1, 0]),  # the data second in a subtraction
        (["Mul"], [0, 2]),  # a full-size second operand
        (["Add"], [0, 3]),  # a constant per sample and channel
        (["Mul", "Add"], [0, 1, 1, 1]),  # the second step does not read the first's result
    ):
        steps = kf._parse(ops, operands, [], len(shapes))
        assert kf._ChannelChain.of(steps, shapes, shapes[0], np.dtype(np.float32)) is None, ops
    steps = kf._parse(["Mul"], [0, 1], [], 2)
    assert kf._ChannelChain.of(steps, shapes[:2], shapes[0], np.dtype(np.float64)) is None
