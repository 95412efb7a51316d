"""Tuning records the fastest kernel with a native form beside its choice, and a one-thread
plan takes those alternatives when that makes every kernel native at a small cost."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.compiler import tuning
from aioge.compiler.graph import NATIVE_EXTRA, NATIVE_SPLIT_EXTRA, native_extra, prefer_native
from aioge.ir.desc import TensorDesc
from aioge.keys import signature_of
from aioge.plan.kernel import KernelDesc, TuningRecord, check_kernel, desc_from_plain, desc_to_plain
from tests.compiler.test_recheck import _toy

D = TensorDesc.of
DESCS, OUTS = [D((8, 8), "float32")], [D((8, 8), "float32")]


def _tune(cost: dict[str, float], native: set[str]) -> tuning.Choice:
    now = [0.0]
    schema = _toy(cost, now, native=frozenset(native))
    cands = tuning.candidates_of(schema, DESCS, {})
    return tuning.tune(schema, cands, DESCS, OUTS, {}, [np.ones((8, 8), np.float32)], budget_ms=100, clock=lambda: now[0])


def test_tuning_names_the_fastest_native_candidate_when_the_choice_is_not_one() -> None:
    choice = _tune({"a": 1.0, "b": 0.5, "c": 0.8, "d": 0.7}, {"c", "d"})
    assert choice.impl == "b" and choice.native_alt is not None
    impl, params, ms = choice.native_alt
    assert (impl, dict(params)) == ("d", {}) and ms == pytest.approx(0.7)
    assert _tune({"a": 1.0, "b": 0.5, "c": 0.8}, {"b"}).native_alt is None, "the choice is native itself"
    assert _tune({"a": 1.0, "b": 0.5}, set()).native_alt is None


def _with(desc: KernelDesc, **history: object) -> KernelDesc:
    """``desc`` with fields of its tuning history replaced."""
    return dataclasses.replace(desc, history=dataclasses.replace(desc.history, **history))  # type: ignore[arg-type]


def _plan(cost: dict[str, tuple[str, float, str, float]]) -> tuple[list, dict[str, KernelDesc]]:
    """A MatMul -> Add -> Sin graph's nodes and descs: per op type (impl, tuned ms, native alt, its ms)."""
    g = aioge.Graph("pref")
    x = g.input("x", (4, 8))
    y = ops.sin(ops.add(ops.matmul(x, g.constant(np.ones((8, 8), np.float32))), 1.0))
    g.output(y, names=["y"])
    kernels = {}
    for node in g.nodes:
        impl, ms, alt, alt_ms = cost[node.op_type]
        ins, outs = signature_of(node)
        kernels[node.name] = KernelDesc(
            "k",
            node.op_type,
            node.domain,
            "AiCore",
            ins,
            outs,
            impl,
            {},
            0,
            True,
            TuningRecord(ms, native_alt=alt, native_ms=alt_ms),
        )
    return list(g.nodes), kernels


def test_a_plan_takes_its_native_alternatives_when_they_cost_little() -> None:
    nodes, kernels = _plan(
        {"MatMul": ("numpy", 0.010, "matmul_blas", 0.011), "Add": ("numpy", 0.001, "", 0.0), "Sin": ("numpy", 0.001, "", 0.0)}
    )
    # Sin has no native kernel: nothing changes
    assert prefer_native(nodes, kernels) is kernels
    nodes, kernels = _plan(
        {"MatMul": ("numpy", 0.010, "matmul_blas", 0.011), "Add": ("numpy", 0.001, "", 0.0), "Sin": ("numpy", 0.001, "", 0.0)}
    )
    sin = next(n for n in nodes if n.op_type == "Sin")
    del kernels[sin.name]
    nodes = [n for n in nodes if n is not sin]
    got = prefer_native(nodes, kernels)
    mm = next(n.name for n in nodes if n.op_type == "MatMul")
    h = got[mm].history
    assert got[mm].impl == "matmul_blas" and h.runner_up == "numpy" and h.tuned_ms == pytest.approx(0.011)
    assert h.native_alt == "" and h.margin == pytest.approx(0.010 / 0.011, rel=1e-3)
    # dearer than the budget's share of the plan's time (and the slack): kept as tuned
    dear = {n: _with(d, native_ms=d.history.tuned_ms * (2 + native_extra()) + 0.01) for n, d in kernels.items()}
    assert prefer_native(nodes, dear) is dear


def test_a_kernel_that_packs_a_fed_weight_is_not_taken_as_native() -> None:
    # gemm_native packs its weight once; over a weight fed per run (aioge.torch's parameters)
    # its form declines, so swapping it in would cost tuned time for no program.
    for weight, swapped in (("fed", False), ("constant", True)):
        g = aioge.Graph("w")
        x = g.input("x", (4, 8))
        w = g.input("w", (8, 8)) if weight == "fed" else g.constant(np.ones((8, 8), np.float32))
        g.output(ops.gemm(x, w, g.constant(np.ones(8, np.float32))), names=["y"])
        (node,) = g.nodes
        ins, outs = signature_of(node)
        kernels = {
            node.name: KernelDesc(
                "k",
                "Gemm",
                "",
                "AiCore",
                ins,
                outs,
                "numpy",
                {},
                0,
                True,
                TuningRecord(0.010, native_alt="gemm_native", native_ms=0.0105),
            )
        }
        got = prefer_native([node], kernels)
        assert (got is not kernels) is swapped, weight
        assert got[node.name].impl == ("gemm_native" if swapped else "numpy")


def test_a_stored_native_alternative_round_trips_and_is_checked() -> None:
    nodes, kernels = _plan(
        {"MatMul": ("numpy", 0.010, "matmul_blas", 0.011), "Add": ("numpy", 0.001, "", 0.0), "Sin": ("numpy", 0.001, "", 0.0)}
    )
    mm = next(n for n in nodes if n.op_type == "MatMul")
    desc = kernels[mm.name]
    assert desc_from_plain(desc_to_plain(desc)) == desc
    assert check_kernel(desc, mm, "AiCore") == ""
    assert "native alternative 'nope'" in check_kernel(_with(desc, native_alt="nope"), mm, "AiCore")
    assert "negative" in check_kernel(_with(desc, native_ms=-1.0), mm, "AiCore")


def test_a_desc_stored_with_the_old_flat_tuning_fields_is_refused_by_name() -> None:
    # Before TuningRecord a desc carried tuned_ms, runner_up, ... itself: such an entry (a kernel
    # cache file from an older aioge) is a clean ValueError naming the field (a miss, recompiled),
    # never a desc with its history silently lost. (.om files: the layout digest differs too.)
    _, kernels = _plan({"MatMul": ("numpy", 0.010, "", 0.0), "Add": ("numpy", 0.001, "", 0.0), "Sin": ("numpy", 0.001, "", 0.0)})
    plain = desc_to_plain(next(iter(kernels.values())))
    fields = plain["~dc"][1]
    old = {k: v for k, v in fields.items() if k != "history"} | {"tuned_ms": 0.01, "runner_up": "", "margin": 0.0}
    with pytest.raises(ValueError, match="tuned_ms|history"):
        desc_from_plain({"~dc": ["kernel.KernelDesc", old]})


def test_the_slack_grows_with_the_steps_a_program_saves() -> None:
    """NATIVE_SLACK_MS is per node: a plan of many small steps saves a Python dispatch on each,
    so it may take native kernels dearer by that much more than a plan of one."""
    from aioge.compiler.graph import NATIVE_SLACK_MS

    nodes, kernels = _plan(
        {"MatMul": ("numpy", 0.010, "matmul_blas", 0.011), "Add": ("numpy", 0.001, "", 0.0), "Sin": ("numpy", 0.001, "", 0.0)}
    )
    sin = next(n for n in nodes if n.op_type == "Sin")
    del kernels[sin.name]
    nodes = [n for n in nodes if n is not sin]  # MatMul (swappable) and Add (native already)
    mm = next(n.name for n in nodes if n.op_type == "MatMul")
    total = sum(d.history.tuned_ms for d in kernels.values())
    # dearer than one node's slack, within two nodes': taken
    extra = native_extra() * total + 1.5 * NATIVE_SLACK_MS
    swapped = {**kernels, mm: _with(kernels[mm], native_ms=kernels[mm].history.tuned_ms + extra)}
    assert prefer_native(nodes, swapped)[mm].impl == "matmul_blas"
    extra = native_extra() * total + 2.5 * NATIVE_SLACK_MS  # past both nodes' slack: kept
    kept = {**kernels, mm: _with(kernels[mm], native_ms=kernels[mm].history.tuned_ms + extra)}
    assert prefer_native(nodes, kept) is kept


@pytest.mark.parametrize("cores", [1, 2])
def test_a_second_core_buys_the_native_plan_a_larger_budget(cores: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tuning times candidates on one thread; only a program splits its jobs over a second core
    (ResNet-50 on the AVX2 tier: native kernels 13.7% dearer in tuning, 68 -> 49 ms a run as a
    program). A plan 25% dearer in native kernels is taken with two cores, kept with one."""
    from aioge.compiler import graph
    from aioge.kernels import native

    if native.par_run() is None:
        pytest.skip("the compiled tier is not built")  # no program without it: nothing to prefer
    monkeypatch.setattr(graph.parallel, "CORES", cores)
    monkeypatch.setattr(graph, "NATIVE_SLACK_MS", 0.0)
    assert native_extra() == pytest.approx(NATIVE_EXTRA + (NATIVE_SPLIT_EXTRA if cores > 1 else 0.0))
    nodes, kernels = _plan(
        {"MatMul": ("numpy", 0.010, "matmul_blas", 0.0125), "Add": ("numpy", 0.001, "", 0.0), "Sin": ("numpy", 0.001, "", 0.0)}
    )
    sin = next(n for n in nodes if n.op_type == "Sin")
    del kernels[sin.name]
    nodes = [n for n in nodes if n is not sin]
    mm = next(n.name for n in nodes if n.op_type == "MatMul")
    got = prefer_native(nodes, kernels)
    assert (got[mm].impl == "matmul_blas") is (cores > 1), got[mm].impl


@pytest.mark.anyio
@pytest.mark.parametrize("numpy_branch", [False, True])
async def test_a_branchy_plan_whose_kernels_are_all_native_runs_in_one_thread(numpy_branch: bool, monkeypatch) -> None:
    """Issue 41 (NASNetMobile): the thread planner put its branches on 5 threads, which run step
    by step; a plan every kernel of which has a native form takes one thread and runs as one
    program. A kernel without one (Sin) keeps the planner's threads."""
    from aioge.kernels import native

    if not native.available():
        pytest.skip("the compiled tier is not built")
    monkeypatch.setattr("aioge.compiler.graph.NATIVE_SLACK_MS", float("inf"))
    monkeypatch.setattr("aioge.compiler.graph.plan_threads", lambda order, plan, *_: tuple((s.id,) for s in plan.streams))
    rng = np.random.default_rng(0)
    g = aioge.Graph("branches")
    x = g.input("x", (1, 8, 9, 9))
    ws = [g.constant(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2) for _ in range(3)]
    branches = [ops.relu(ops.conv(x, w, pads=[1, 1, 1, 1])) for w in ws]
    if numpy_branch:
        branches[0] = ops.sin(branches[0])
    g.output(ops.concat(*branches, ops.max_pool(x, kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]), axis=1), names=["y"])
    feeds = {"x": rng.standard_normal((1, 8, 9, 9)).astype(np.float32)}
    async with aioge.Session() as s:
        await s.add_graph(1, g)
        for _ in range(3):
            got = (await s.run_graph(1, feeds))["y"]
        exe = s.executable(1)
        assert exe.model.streams.num_streams > 1
        assert (len(exe.model.threads) == 1) is not numpy_branch, exe.model.threads
        assert (exe.native_runs >= 3) is not numpy_branch
    t = _branches_reference(feeds["x"], [np.asarray(w.data) for w in ws], numpy_branch)
    np.testing.assert_allclose(got, t, rtol=1e-4, atol=1e-5)


def _branches_reference(x: np.ndarray, ws: list[np.ndarray], sin: bool) -> np.ndarray:
    """The branches' concat in numpy (float64)."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # (1, 8, 9, 9, 3, 3)
    outs = [np.maximum(np.einsum("nchwij,mcij->nmhw", win, w), 0) for w in ws]
    if sin:
        outs[0] = np.sin(outs[0])
    mp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    outs.append(np.lib.stride_tricks.sliding_window_view(mp, (3, 3), axis=(2, 3)).max(axis=(4, 5)))
    return np.concatenate(outs, axis=1)


@pytest.mark.anyio
async def test_a_hit_refusing_the_native_plan_re_times_the_stale_native_time_once(tmp_path) -> None:
    """A native time recorded under load (or by older code) kept mobilenet_v3_small off its
    native plan on every hit: a hit whose plan refuses its native alternatives on their cost
    re-times them (once in the entry's life) and writes the new times back."""
    from aioge.kernels import native
    from aioge.plan.kernel import candidates_of
    from tests.compiler.test_recheck import _build, _conv, _entry, _plant

    if not native.available():
        pytest.skip("the compiled tier is not built")
    model = await _build(tmp_path)
    conv = _conv(model)
    node = next(n for n in model.graph.nodes if n.name == model.nodes[0].name)
    from aioge.ops.registry import get_schema

    schema = get_schema(conv.op_type, conv.domain)
    ins = [v.desc if v is not None else None for v in node.inputs]
    impl, params = next((i, p) for i, p in candidates_of(schema, ins, node.attrs) if not i.native)
    record = TuningRecord(conv.history.tuned_ms, native_alt=conv.impl, native_alt_params=dict(conv.params), native_ms=1e3)
    stale = dataclasses.replace(conv, impl=impl.name, params=params, history=record)
    _plant(tmp_path, stale)
    fixed = await _build(tmp_path)
    assert fixed.stats.kernel_cache_hits == len(fixed.nodes) and fixed.stats.kernels_compiled == 0
    assert (_conv(fixed).impl, _conv(fixed).params) == (conv.impl, conv.params)  # the native plan
    after = _entry(tmp_path, conv.key)
    assert after is not None and (after.impl, after.history.native_alt) == (impl.name, conv.impl)
    assert after.history.native_checks == 1 and 0 < after.history.native_ms < 1.0 and after.history.tuned_ms > 0
    # once in the entry's life: a record re-timed already is trusted, and the plan stays as it says
    _plant(tmp_path, _with(stale, native_checks=tuning.NATIVE_RECHECKS))
    kept = await _build(tmp_path)
    assert _conv(kept).impl == impl.name and _entry(tmp_path, conv.key) == _with(stale, native_checks=tuning.NATIVE_RECHECKS)
