"""Tuning: candidates timed on real shapes, verified against the reference, fastest wins;
heuristic mode picks by rule. The candidate kernels agree with the references."""

from __future__ import annotations

import time

import numpy as np
import pytest

from aioge.compiler.tuning import MAX_SAMPLES, choose_heuristic, make_inputs, select_kernel
from aioge.ir.desc import TensorDesc
from aioge.kernels import conv as kconv
from aioge.kernels import nn as knn
from aioge.kernels import reduce as kreduce
from aioge.kernels.conv_algos import CONV_ALGOS, NATIVE_CONV_ALGOS
from aioge.kernels.matmul_algos import GEMM_ALGOS, MATMUL_ALGOS
from aioge.kernels.norm_algos import BATCHNORM_ALGOS, LAYERNORM_ALGOS, SOFTMAX_ALGOS
from aioge.kernels.pool_algos import GLOBAL_AVG_ALGOS, GLOBAL_MAX_ALGOS, POOL_AVG_ALGOS, POOL_MAX_ALGOS, reduce_algos
from aioge.ops.schema import ALL_ENGINES, KernelImpl, OpSchema
from aioge.plan.kernel import candidates_of

D = TensorDesc.of


def _impl(name, fn, delay=0.0, applies=None, candidates=None):
    def build(attrs, params, ins, outs):
        def run(inputs, outputs):
            if delay:
                time.sleep(delay * params.get("slow", 1))
            res = fn(*inputs)
            np.copyto(outputs[0], res)
            return outputs

        return run

    kw = {}
    if applies:
        kw["applies"] = applies
    if candidates:
        kw["candidates"] = candidates
    return KernelImpl(name, build, **kw)


def _schema(*impls):
    return OpSchema("Toy", lambda ctx: [ctx.inputs[0]], tuple(impls), ALL_ENGINES)


DESCS = [D((8, 8), "float32")]
OUTS = [D((8, 8), "float32")]


def test_tune_keeps_the_fastest_verified_candidate() -> None:
    schema = _schema(
        _impl("reference", lambda x: x * 2, delay=0.004),
        _impl("wrong_but_fast", lambda x: x * 3),
        _impl("fast", lambda x: x + x, delay=0.0005),
        _impl("raises", lambda x: 1 / 0),
    )
    choice = select_kernel(schema, DESCS, OUTS, {}, [None], mode="tune", budget_ms=200)
    assert choice is not None and choice.impl == "fast" and choice.tuned
    assert set(choice.timings_ms) == {"reference", "fast"}
    assert "differs" in choice.rejected["wrong_but_fast"] and "ZeroDivisionError" in choice.rejected["raises"]
    assert choice.timings_ms["fast"] < choice.timings_ms["reference"]


def test_an_eager_candidate_is_timed_after_the_reference_spent_the_budget() -> None:
    # a numpy reference slower than the whole budget (ConvNeXt's 96x56x56 7x7 depthwise conv on
    # a busy machine) no longer hides the compiled kernel behind "budget spent"
    from dataclasses import replace

    schema = _schema(
        _impl("reference", lambda x: x * 2, delay=0.03),
        _impl("numpy_alt", lambda x: x + x),
        replace(_impl("compiled", lambda x: x + x), eager=True),
    )
    choice = select_kernel(schema, DESCS, OUTS, {}, [None], mode="tune", budget_ms=10)
    assert choice is not None and choice.impl == "compiled"
    assert "budget" in choice.rejected["numpy_alt"] and "compiled" in choice.timings_ms


def test_an_eager_candidate_is_timed_after_its_first_call_packs_its_weight() -> None:
    """A compiled kernel packs its weight on its first call (ResNet's 9.4 MB 512x512x3x3: a
    first call 7 ms, the next ones 1.1): tuning times the second call, even with one sample."""
    from dataclasses import replace

    calls = []

    def packs_once(x):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.05)
        return x + x

    schema = _schema(
        _impl("reference", lambda x: x * 2, delay=0.01),
        _impl("numpy_alt", lambda x: x * 2, delay=0.04),  # spends the budget
        replace(_impl("compiled", packs_once), eager=True),
    )
    choice = select_kernel(schema, DESCS, OUTS, {}, [None], mode="tune", budget_ms=5)
    assert choice is not None and choice.impl == "compiled" and choice.timings_ms["compiled"] < 10
    assert len(calls) == 2


def test_every_timed_run_follows_an_untimed_run_of_the_same_candidate() -> None:
    """A run's kernels come back to back, the C helper still spinning from the last split and
    the operands in cache; round-robin timing left the helper asleep for each candidate and
    ranked a kernel that splits by its wake-up (MLP's 32x784x256 Gemm: 132 us against 79)."""
    order: list[str] = []

    def logged(name):  # type: ignore[no-untyped-def]
        def fn(x):  # type: ignore[no-untyped-def]
            order.append(name)
            return x * 2

        return fn

    schema = _schema(_impl("reference", logged("a")), _impl("other", logged("b")))
    choice = select_kernel(schema, DESCS, OUTS, {}, [None], mode="tune", budget_ms=50)
    assert choice is not None and len(choice.timings_ms) == 2
    sampled = order[-16:]  # the last 8 samples, in (untimed, timed) pairs
    assert len(order) >= 18
    assert all(sampled[i] == sampled[i + 1] for i in range(0, len(sampled), 2)), order
    assert set(sampled[0::2]) == {"a", "b"}


def test_a_second_opinion_on_the_fastest_undoes_a_burst_of_load_over_one_candidates_samples() -> None:
    """A candidate slowed over all of its first samples (a burst of load on the core it splits
    onto) is timed again beside the fastest others once sampling ends, and wins when it is
    the fastest after all."""
    calls = [0]

    def burst(x):  # type: ignore[no-untyped-def]
        calls[0] += 1
        time.sleep(0.003 if calls[0] <= 1 + 2 * (MAX_SAMPLES - 1) else 0.0002)  # slow through every first sample
        return x + x

    schema = _schema(_impl("reference", lambda x: x * 2, delay=0.001), _impl("compiled", burst))
    choice = select_kernel(schema, DESCS, OUTS, {}, [None], mode="tune", budget_ms=500)
    assert choice is not None and calls[0] > 1 + 2 * (MAX_SAMPLES - 1), "timed again after sampling"
    assert choice.impl == "compiled" and choice.timings_ms["compiled"] < 1.0


def test_candidates_a_process_does_not_offer_are_not_tuned_but_stay_valid_when_stored() -> None:
    from dataclasses import replace

    schema = _schema(_impl("reference", lambda x: x * 2), replace(_impl("compiled", lambda x: x + x), offered=lambda: False))
    assert [impl.name for impl, _ in candidates_of(schema, DESCS, {})] == ["reference"]
    assert [impl.name for impl, _ in candidates_of(schema, DESCS, {}, stored=True)] == ["reference", "compiled"]
    choice = select_kernel(schema, DESCS, OUTS, {}, [None], mode="tune", budget_ms=50)
    assert choice is not None and choice.impl == "reference" and "compiled" not in choice.timings_ms


@pytest.mark.parametrize(("cores", "load", "idle"), [(4, 0.5, 3), (4, 3.9, 3), (2, 1.0, 1), (4, 4.0, 0), (2, 6.2, 0)])
def test_candidates_are_timed_able_to_split_over_the_idle_cores(cores, load, idle, monkeypatch) -> None:
    """A run at batch 1 lets kernels take the idle cores (``split_range``), so tuning times
    them that way: a kernel that splits well is not ranked by its one-core time. On a busy
    machine (a load average of at least the cores) none are idle: candidates are timed whole."""
    from aioge.compiler import tuning
    from aioge.kernels import parallel

    monkeypatch.setattr(tuning.os, "cpu_count", lambda: cores)
    monkeypatch.setattr(tuning, "_load_average", lambda: load)

    seen: list[int] = []

    def counts(x):
        tokens = parallel._tokens.get()
        taken = 0
        while tokens is not None and tokens.acquire(blocking=False):
            taken += 1
        for _ in range(taken):
            tokens.release()  # type: ignore[union-attr]
        seen.append(taken)
        return x * 2

    schema = _schema(_impl("reference", counts), _impl("other", lambda x: x + x))
    select_kernel(schema, DESCS, OUTS, {}, [None], mode="tune", budget_ms=20)
    assert seen and set(seen) == {idle}
    assert parallel._tokens.get() is None  # and none are left behind


@pytest.mark.parametrize(("load", "winner"), [(0.0, "spins"), (8.0, "sleeps")])
def test_on_a_busy_machine_candidates_are_timed_by_cpu_time(load, winner, monkeypatch) -> None:
    """Whole on a busy machine, each sample is the process's CPU time: the time other
    processes hold the core is no part of a kernel's cost. A candidate that sleeps 30 ms (wall
    time, no CPU) loses to one that spins 1 ms by the wall clock and wins by the CPU clock."""
    from aioge.compiler import tuning

    monkeypatch.setattr(tuning.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(tuning, "_load_average", lambda: load)

    def spin(seconds):
        t = time.process_time()
        while time.process_time() - t < seconds:
            pass

    def sleeps(x):
        time.sleep(0.03)
        return x * 2

    reference = _impl("reference", lambda x: spin(3e-3) or x * 2)  # slower than "spins" by either clock
    schema = _schema(reference, _impl("spins", lambda x: spin(1e-3) or x * 2), _impl("sleeps", sleeps))
    choice = select_kernel(schema, DESCS, OUTS, {}, [None], mode="tune", budget_ms=400)
    assert choice is not None and choice.impl == winner, choice.timings_ms


def test_tune_explores_parameter_sets() -> None:
    schema = _schema(
        _impl("reference", lambda x: x * 2, delay=0.003),
        _impl("blocked", lambda x: x * 2, delay=0.001, candidates=lambda d, a: [{"slow": 3}, {"slow": 0.2}]),
    )
    choice = select_kernel(schema, DESCS, OUTS, {}, [None], mode="tune", budget_ms=200)
    assert choice is not None and (choice.impl, dict(choice.params)) == ("blocked", {"slow": 0.2})
    assert "blocked(slow=3)" in choice.timings_ms


def test_heuristic_is_the_first_applicable_without_timing() -> None:
    calls = []
    schema = _schema(
        _impl("never", lambda x: x, applies=lambda d, a: False),
        _impl("first", lambda x: calls.append(1) or x),
        _impl("second", lambda x: x),
    )
    choice = select_kernel(schema, DESCS, OUTS, {}, [None], mode="heuristic", budget_ms=200)
    assert choice is not None and choice.impl == "first" and not choice.tuned and not calls
    assert choose_heuristic(schema, DESCS, {}).impl == "first"  # type: ignore[union-attr]
    assert (
        select_kernel(
            _schema(_impl("never", lambda x: x, applies=lambda d, a: False)), DESCS, OUTS, {}, [None], mode="tune", budget_ms=10
        )
        is None
    )


def test_budget_bounds_tuning_but_the_reference_always_runs() -> None:
    schema = _schema(
        _impl("reference", lambda x: x * 2, delay=0.03),
        _impl("a", lambda x: x * 2, delay=0.001),
        _impl("b", lambda x: x * 2, delay=0.001),
    )
    t0 = time.perf_counter()
    choice = select_kernel(schema, DESCS, OUTS, {}, [None], mode="tune", budget_ms=5)
    assert time.perf_counter() - t0 < 0.5
    assert choice is not None and choice.impl == "reference" and not choice.tuned
    assert "budget" in choice.rejected["a"]


def test_inputs_use_constants_and_refuse_unknown_integers() -> None:
    c = np.arange(4, dtype=np.float32)
    ins = make_inputs([D((4,), "float32"), D((4,), "float32"), None], [c, None, None], seed=1)
    assert ins is not None and ins[1].shape == (4,) and not ins[1].flags.writeable and ins[2] is None
    # a writeable constant comes as a read-only view, as constants run: kernels keep what they derive
    assert ins[0] is not c and np.shares_memory(ins[0], c) and not ins[0].flags.writeable and c.flags.writeable
    frozen = np.arange(3, dtype=np.float32)
    frozen.setflags(write=False)
    assert make_inputs([D((3,), "float32")], [frozen], seed=1)[0] is frozen  # type: ignore[index]
    assert make_inputs([D((4,), "int64")], [None], seed=1) is None


def test_a_candidate_writing_into_its_inputs_is_rejected() -> None:
    def build(attrs, params, ins, outs):
        def run(inputs, outputs):
            inputs[0] *= 2  # the tuner's inputs are read-only: this raises
            np.copyto(outputs[0], inputs[0])
            return outputs

        return run

    schema = _schema(_impl("reference", lambda x: x * 2), KernelImpl("inplace", build))
    choice = select_kernel(schema, DESCS, OUTS, {}, [None], mode="tune", budget_ms=50)
    assert choice is not None and choice.impl == "reference" and "inplace" in choice.rejected


# -- the candidate kernels agree with their references ---------------------------------------


def _check(reference, algos, attrs, arrays, out_count=1):
    descs = [None if a is None else D(a.shape, a.dtype) for a in arrays]
    ref = reference(attrs, {}, descs, [None] * out_count)(arrays, None)
    tried = 0
    for impl in algos:
        if not impl.applies(descs, attrs):
            continue
        for params in impl.candidates(descs, attrs):
            outs = [np.full(r.shape, np.nan, r.dtype) for r in ref]
            got = impl.build(attrs, params, descs, [D(r.shape, r.dtype) for r in ref])(arrays, outs)
            for g, r in zip(got, ref):
                np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4, err_msg=f"{impl.name} {params} {attrs}")
            tried += 1
    return tried


RNG = np.random.default_rng(0)


def _f32(*shape):
    a = RNG.standard_normal(shape).astype(np.float32)
    a.setflags(write=False)
    return a


@pytest.mark.parametrize(
    ("x", "w", "attrs", "expect"),
    [
        ((2, 5, 9, 7), (6, 5, 3, 3), {"pads": (1, 1, 1, 1)}, 7),  # direct x2, direct_t, nhwc x2 blocks, winograd, kn2row
        ((1, 5, 8, 8), (6, 5, 3, 3), {"pads": (0, 2, 1, 0)}, 6),  # direct x2, direct_t, winograd, kn2row, uneven pads
        ((3, 16, 10, 9), (1, 16, 3, 3), {"pads": (1, 1, 1, 1)}, 7),  # direct x2, direct_t, one filter (DuplicateFilterPass's)
        ((1, 4, 13, 12), (5, 4, 5, 5), {"strides": (2, 2), "pads": (2, 1, 2, 1)}, 5),  # direct x2, direct_t, nhwc, kn2row
        ((1, 4, 9, 9), (3, 4, 3, 1), {"auto_pad": "SAME_UPPER"}, 4),  # direct, direct_t, a 3x1 kernel
        ((1, 4, 7, 7), (3, 4, 2, 2), {"auto_pad": "SAME_LOWER", "strides": (2, 2)}, 4),  # direct, direct_t
        ((2, 8, 6, 6), (4, 8, 1, 1), {}, 5),  # direct, direct_t, 1x1 GEMM
        ((1, 8, 7, 7), (4, 8, 1, 1), {"strides": (2, 2)}, 4),  # direct, direct_t, strided 1x1
        # depthwise, planes x3, native; mult 2
        ((2, 6, 7, 7), (12, 1, 3, 3), {"group": 6, "pads": (1, 1, 1, 1), "strides": (2, 2)}, 5),
        ((1, 8, 6, 6), (8, 2, 3, 3), {"group": 4, "pads": (1, 1, 1, 1)}, 4),  # grouped, grouped_native x2, _t
        ((2, 8, 5, 5), (12, 2, 1, 1), {"group": 4}, 3),  # grouped 1x1: GEMMs on the input in place; native, _t
        ((2, 8, 9, 9), (8, 2, 3, 3), {"group": 4, "strides": (2, 2), "pads": (1, 1, 1, 1)}, 4),  # strided, 2 images
        ((1, 12, 14, 14), (12, 3, 1, 1), {"group": 4}, 3),  # 14x14: phases for native (196 % 16), in place for _t
        ((1, 8, 11, 11), (4, 4, 3, 3), {"group": 2, "dilations": (2, 2), "pads": (2, 2, 2, 2)}, 4),
        ((1, 3, 11, 11), (4, 3, 3, 3), {"dilations": (2, 2), "strides": (1, 2)}, 5),  # direct x2, direct_t
    ],
)
def test_conv_algorithms_agree_with_im2col(x, w, attrs, expect) -> None:
    arrays = [_f32(*x), _f32(*w), _f32(w[0])]
    assert _check(kconv.build_conv_im2col, NATIVE_CONV_ALGOS + CONV_ALGOS, attrs, arrays) == expect


def test_grouped_native_convs_without_a_bias_and_again_on_the_same_weight() -> None:
    for x, w, attrs in (
        ((2, 8, 5, 5), (12, 2, 1, 1), {"group": 4}),
        ((1, 8, 6, 6), (8, 4, 3, 3), {"group": 2, "pads": (1, 1, 1, 1)}),
    ):
        arrays = [_f32(*x), _f32(*w)]
        assert _check(kconv.build_conv_im2col, NATIVE_CONV_ALGOS, attrs, arrays) >= 2
        assert _check(kconv.build_conv_im2col, NATIVE_CONV_ALGOS, attrs, arrays) >= 2


def test_winograd_in_float64_and_transformed_weights_reuse() -> None:
    x, w = RNG.standard_normal((1, 3, 6, 6)), RNG.standard_normal((2, 3, 3, 3))
    w.setflags(write=False)
    assert _check(kconv.build_conv_im2col, CONV_ALGOS, {"pads": (1, 1, 1, 1)}, [x, w]) >= 1
    wino = next(i for i in CONV_ALGOS if i.name == "conv_winograd_f23")
    descs = [D(x.shape, "float64"), D(w.shape, "float64")]
    run = wino.build({}, {}, descs, [None])
    first = run([x, w], None)[0].copy()
    w2 = np.array(w) * 2  # a new (writable) weight array is transformed anew, not served stale
    np.testing.assert_allclose(run([x, w2], None)[0], 2 * first, rtol=1e-10)


@pytest.mark.parametrize(
    ("a", "b"), [((2, 3, 4, 5), (5, 6)), ((2, 3, 4, 5), (2, 3, 5, 6)), ((4, 5), (5, 6)), ((3, 4, 5), (1, 5, 2))]
)
def test_matmul_algorithms_agree(a, b) -> None:
    assert _check(knn.build_matmul, MATMUL_ALGOS, {}, [_f32(*a), _f32(*b)]) >= 2


@pytest.mark.parametrize("attrs", [{"transA": 1, "transB": 1, "alpha": 2.0, "beta": 0.5}, {"transB": 1}, {}])
def test_gemm_algorithms_agree(attrs) -> None:
    a = _f32(5, 4) if attrs.get("transA") else _f32(4, 5)
    b = _f32(6, 5) if attrs.get("transB") else _f32(5, 6)
    assert _check(knn.build_gemm, GEMM_ALGOS, attrs, [a, b, _f32(6)]) == len(GEMM_ALGOS)


def test_gemm_candidates_keep_equal_weight_columns_bit_for_bit_equal() -> None:
    """Why no candidate packs B for BLAS (kernels.matmul_algos): light/ AlexNet's equal fc8 logits must stay equal."""
    a = (RNG.random((1, 4096)) * 1e3).astype(np.float32)
    b = np.full((1000, 4096), 0.37, np.float32)
    b.setflags(write=False)
    attrs = {"transB": 1}
    descs = [D(a.shape, a.dtype), D(b.shape, b.dtype)]
    for impl in (KernelImpl("numpy", knn.build_gemm), *GEMM_ALGOS):
        y = impl.build(attrs, {}, descs, [D((1, 1000), np.float32)])([a, b], None)[0]
        assert np.unique(y).size == 1, impl.name


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)},
        {"kernel_shape": (2, 2), "strides": (2, 2)},
        {"kernel_shape": (3, 2), "strides": (2, 1), "pads": (1, 0, 1, 1), "ceil_mode": 1},
        {"kernel_shape": (3, 3), "dilations": (2, 1), "auto_pad": "SAME_UPPER"},
        {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "count_include_pad": 1},
    ],
)
def test_pool_algorithms_agree(attrs) -> None:
    x = _f32(2, 3, 8, 7)
    # pool_native, then the tap loops
    assert _check(kconv.build_max_pool, POOL_MAX_ALGOS, attrs, [x]) == 2
    assert _check(kconv.build_average_pool, POOL_AVG_ALGOS, attrs, [x]) == 2


def test_global_pool_and_reduce_algorithms_agree() -> None:
    x = _f32(2, 3, 5, 4)
    assert _check(kconv.build_global_pool("mean"), GLOBAL_AVG_ALGOS, {}, [x]) == 3  # native, rows, gemv
    assert _check(kconv.build_global_pool("max"), GLOBAL_MAX_ALGOS, {}, [x]) == 2  # native, rows
    for reducer in ("sum", "mean", "max", "min", "prod"):
        for axes in (np.array([1, 3]), np.array([0]), np.array([-1])):
            for keepdims in (0, 1):
                # ReduceMean's third: reduce_mean_native (the global-average job over H and W, else the rows)
                want = 3 if reducer == "mean" else 2
                assert _check(kreduce.build_reduce(reducer), reduce_algos(reducer), {"keepdims": keepdims}, [x, axes]) == want


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax_and_layernorm_algorithms_agree(axis) -> None:
    x = _f32(3, 4, 5)
    # softmax_native takes the last axis only; layernorm_native any axis (rows of the trailing axes)
    assert _check(knn.build_softmax, SOFTMAX_ALGOS, {"axis": axis}, [x]) == (3 if axis == -1 else 2)
    scale_shape = x.shape[axis % 3 :]
    assert _check(knn.build_layer_norm, LAYERNORM_ALGOS, {"axis": axis}, [x, _f32(*scale_shape), _f32(*scale_shape)]) == 2


def test_batchnorm_folded_agrees() -> None:
    x = _f32(2, 3, 4, 4)
    stats = [_f32(3), _f32(3), _f32(3), np.abs(_f32(3)) + 0.5]
    assert _check(knn.build_batch_norm, BATCHNORM_ALGOS, {"epsilon": 1e-5}, [x, *stats]) == 1


def test_tuning_real_conv_candidates_picks_a_verified_one() -> None:
    from aioge.ops.registry import get_schema

    schema = get_schema("Conv")
    x, w = _f32(1, 8, 12, 12), _f32(8, 8, 3, 3)
    descs = [D(x.shape, "float32"), D(w.shape, "float32")]
    attrs = schema.normalise_attrs({"pads": (1, 1, 1, 1)})
    assert len(candidates_of(schema, descs, attrs)) >= 2
    choice = select_kernel(schema, descs, [D((1, 8, 12, 12), "float32")], attrs, [None, w], mode="tune", budget_ms=30)
    assert choice is not None and choice.impl in {i.name for i in schema.impls} and choice.tuned
    assert not choice.rejected or all("budget" in r for r in choice.rejected.values())


def test_registered_ops_offer_their_candidates_after_the_reference() -> None:
    from aioge.ops.registry import get_schema

    expect = {
        "Conv": ("im2col", {"conv_im2col_nhwc", "conv_gemm_1x1", "conv_depthwise", "conv_grouped", "conv_winograd_f23"}),
        "MatMul": ("numpy", {"matmul_fold_2d", "matmul_packed_bt", "matmul_batch_loop", "matmul_einsum"}),
        "Gemm": ("numpy", {"gemm_dot"}),
        "MaxPool": ("separable", {"maxpool_taps"}),
        "AveragePool": ("separable", {"avgpool_taps"}),
        "GlobalAveragePool": ("numpy", {"globalpool_rows", "globalavg_gemv"}),
        "Softmax": ("numpy", {"softmax_unfused", "softmax_rows"}),
        "LayerNormalization": ("numpy", {"layernorm_fused"}),
        "BatchNormalization": ("numpy", {"batchnorm_folded"}),
        "ReduceMean": ("numpy", {"reduce_rows", "reduce_stepwise"}),
    }
    for op, (reference, mine) in expect.items():
        names = [i.name for i in get_schema(op).impls]
        assert names[0] == reference and mine <= set(names), (op, names)


def test_random_inputs_outside_the_domain_do_not_warn() -> None:
    import warnings

    from aioge.ops.registry import get_schema

    schema = get_schema("BatchNormalization")
    d = [D((2, 3, 4, 4), "float32"), *[D((3,), "float32")] * 4]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a negative random variance must not surface as a RuntimeWarning
        choice = select_kernel(schema, d, [d[0]], schema.normalise_attrs({}), [None] * 5, mode="tune", budget_ms=20)
    assert choice is not None
    from aioge.compiler.tuning import make_inputs, tune

    inputs = make_inputs(d, [None] * 5, seed=3)
    assert inputs is not None and (inputs[4] < 0).any()  # the premise: a negative variance in the random data
    with warnings.catch_warnings(), pytest.raises(RuntimeWarning):
        warnings.simplefilter("error")
        tune(
            schema,
            candidates_of(schema, d, schema.normalise_attrs({})),
            d,
            [d[0]],
            schema.normalise_attrs({}),
            inputs,
            budget_ms=5,
        )


def test_near_equal_candidates_keep_the_preferred_one_and_report_the_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    from aioge.compiler import tuning

    # A fake clock: each candidate's run takes the time its name says; "later" is 2% faster
    # than "reference" (within the margin), "much_later" 30% faster than both.
    now = [0.0]
    cost = {"reference": 1.00, "later": 0.98}

    def impl(name: str) -> KernelImpl:
        def build(attrs, params, ins, outs):
            def run(inputs, outputs):
                now[0] += cost[name] * 1e-3
                np.copyto(outputs[0], inputs[0] * 2)
                return outputs

            return run

        return KernelImpl(name, build)

    clock = lambda: now[0]  # noqa: E731
    x = np.ones((8, 8), np.float32)
    schema = _schema(impl("reference"), impl("later"))
    cands = candidates_of(schema, DESCS, {})
    choice = tuning.tune(schema, cands, DESCS, OUTS, {}, [x], budget_ms=100, clock=clock)
    assert choice.impl == "reference" and choice.runner_up == "later"
    assert choice.margin == pytest.approx(0.98)  # the runner-up is faster, but within TIE_MARGIN
    cost["much_later"] = 0.70
    schema = _schema(impl("reference"), impl("later"), impl("much_later"))
    choice = tuning.tune(schema, candidates_of(schema, DESCS, {}), DESCS, OUTS, {}, [x], budget_ms=100, clock=clock)
    assert choice.impl == "much_later" and choice.runner_up == "later"
    assert choice.margin == pytest.approx(0.98 / 0.70)


def test_a_tie_between_the_direct_convs_goes_to_the_channels_in_lanes_one() -> None:
    """conv_direct_t_native computes no junk columns (nor rows past M, 64 here) where
    conv_direct_native's flattened panels do: within TIE_MARGIN it is the one kept."""
    from aioge.compiler import tuning
    from aioge.kernels import native
    from aioge.ops.registry import get_schema

    if not native.available():
        pytest.skip("no compiled tier")
    schema = get_schema("Conv")
    descs = [TensorDesc((1, 64, 9, 9), "float32"), TensorDesc((64, 64, 3, 3), "float32")]
    attrs = schema.normalise_attrs({"pads": [1, 1, 1, 1]})
    cands = [c for c in candidates_of(schema, descs, attrs) if c[0].name in ("conv_direct_native", "conv_direct_t_native")]
    assert len(cands) >= 2
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(d.shape).astype(np.float32) for d in descs]
    ticks = iter(range(10**6))  # every timed run takes one tick: all tied
    choice = tuning.tune(
        schema, cands, descs, [TensorDesc((1, 64, 9, 9), "float32")], attrs, inputs, budget_ms=50, cost=lambda: next(ticks)
    )
    assert choice.impl == "conv_direct_t_native"
