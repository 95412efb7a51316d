"""Tuning robust to noise: a cached close call is re-timed against its runner-up on a hit;
the runner-up takes over when it is faster now, a drifted choice is tuned again, and an
entry is re-timed a bounded number of times; every such decision is ``tuning.revisit``'s."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.cache.kernel_cache import KernelCache
from aioge.compiler import tuning
from aioge.compiler.tuning import RECHECK_MARGIN, RECHECKS, close_call, recheck, revisit
from aioge.ir.desc import TensorDesc
from aioge.ops.schema import ALL_ENGINES, KernelImpl, OpSchema
from aioge.plan.kernel import KernelDesc, TuningRecord

pytestmark = pytest.mark.anyio

D = TensorDesc.of
DESCS, OUTS = [D((8, 8), "float32")], [D((8, 8), "float32")]


def _toy(cost: dict[str, float], now: list[float], wrong: str = "", native: frozenset[str] = frozenset()) -> OpSchema:
    """Candidates whose runs advance a fake clock by the time ``cost`` says (ms); those named
    in ``native`` declare native forms."""

    def impl(name: str) -> KernelImpl:
        def build(attrs, params, ins, outs):
            def run(inputs, outputs):
                now[0] += cost[name] * 1e-3
                np.copyto(outputs[0], inputs[0] * (3 if name == wrong else 2))
                return outputs

            return run

        return KernelImpl(name, build, native=name in native)

    return OpSchema("Toy", lambda ctx: [ctx.inputs[0]], tuple(impl(n) for n in cost), ALL_ENGINES)


def _recheck(cost: dict[str, float], tuned_ms: float, wrong: str = "", runner: str = "b") -> tuning.Recheck:
    now = [0.0]
    schema = _toy(cost, now, wrong)
    return recheck(schema, DESCS, OUTS, {}, [None], ("a", {}), (runner, {}), tuned_ms, budget_ms=100, clock=lambda: now[0])


def test_the_runner_up_takes_over_only_beyond_the_tie_margin() -> None:
    found = _recheck({"a": 1.0, "b": 0.80}, tuned_ms=1.0)
    assert (found.outcome, found.chosen_ms, found.runner_ms) == ("switched", pytest.approx(1.0), pytest.approx(0.8))
    assert _recheck({"a": 1.0, "b": 0.98}, tuned_ms=1.0).outcome == "kept"  # within TIE_MARGIN: the choice holds
    assert _recheck({"a": 1.0, "b": 1.30}, tuned_ms=1.0).outcome == "kept"


def test_a_choice_slower_than_when_tuned_is_tuned_again() -> None:
    assert _recheck({"a": 1.0, "b": 1.1}, tuned_ms=0.5).outcome == "drifted"  # 2x its tuned time
    assert _recheck({"a": 1.0, "b": 1.1}, tuned_ms=0.8).outcome == "kept"  # 1.25x: noise, not drift
    # a microsecond kernel's timer noise is not drift
    assert _recheck({"a": 0.004, "b": 0.005}, tuned_ms=0.002).outcome == "kept"


def test_a_pair_that_cannot_be_timed_here_is_skipped() -> None:
    found = _recheck({"a": 1.0, "b": 0.5}, tuned_ms=1.0, wrong="b")
    assert found.outcome == "skipped" and "disagrees" in found.why
    found = _recheck({"a": 1.0, "b": 0.5}, tuned_ms=1.0, runner="gone")
    assert found.outcome == "skipped" and "not offered" in found.why


def _desc(tuned: bool, runner_up: str, margin: float, checks: int, **more: Any) -> KernelDesc:
    record = TuningRecord(1.0, runner_up, {}, margin, checks, **more)
    return KernelDesc("k", "Toy", "", "AiCore", ((None, "float32", "ND"),), ((None, "float32", "ND"),), "a", {}, 0, tuned, record)


def test_only_close_calls_are_rechecked_and_only_a_few_times() -> None:
    assert close_call(_desc(True, "b", 1.05, 0)) and close_call(_desc(True, "b", 0.97, 0))  # a tie kept for preference, too
    assert not close_call(_desc(True, "b", RECHECK_MARGIN + 0.01, 0))  # a clear win
    assert not close_call(_desc(True, "b", 1.05, RECHECKS))  # settled
    assert not close_call(_desc(True, "", 0.0, 0))  # no runner-up
    assert not close_call(_desc(False, "b", 1.05, 0))  # chosen by rule


def _never() -> Any:
    raise AssertionError("revisit timed or tuned what it should have left alone")


def test_revisit_decides_every_stage_from_the_record() -> None:
    # a hit on a clear win, a settled choice or a rule's pick: nothing timed, nothing changed
    for desc in (_desc(True, "b", 2.0, 0), _desc(True, "b", 1.05, RECHECKS), _desc(False, "b", 1.05, 0)):
        for stage in ("hit", "fresh"):
            assert revisit(desc, stage, retime=_never, retune=_never) == (desc, "")  # type: ignore[arg-type]
    close = _desc(True, "b", 1.05, 0, native_alt="n", native_ms=1.5)
    # a hit: the runner-up takes over with the re-timing's figures; kept keeps the best time seen
    got, outcome = revisit(close, "hit", retime=lambda: tuning.Recheck("switched", 1.2, 0.9), retune=_never)
    assert outcome == "switched" and (got.impl, got.history.runner_up) == ("b", "a")
    assert got.history == TuningRecord(0.9, "a", {}, round(1.2 / 0.9, 4), 1, "n", {}, 1.5)
    got, outcome = revisit(close, "hit", retime=lambda: tuning.Recheck("kept", 1.1, 1.3), retune=_never)
    assert (
        outcome == "kept" and got.impl == "a" and got.history == TuningRecord(1.0, "b", {}, round(1.3 / 1.1, 4), 1, "n", {}, 1.5)
    )
    got, outcome = revisit(close, "hit", retime=lambda: tuning.Recheck("skipped", why="gone"), retune=_never)
    assert (got, outcome) == (close, "skipped")
    fresh = _desc(True, "c", 1.5, 0)
    assert revisit(close, "hit", retime=lambda: tuning.Recheck("drifted", 3.0, 3.1), retune=lambda: fresh) == (fresh, "drifted")
    # the compile's second opinion: tuned again, counted as one check
    got, outcome = revisit(close, "fresh", retune=lambda: fresh)
    assert outcome == "retuned" and got.history == dataclasses.replace(fresh.history, checks=1)
    # a native plan: the native alternative taken, the choice its runner-up
    got, outcome = revisit(close, "native")
    assert outcome == "native" and got.impl == "n" and got.history == TuningRecord(1.5, "a", {}, round(1.0 / 1.5, 4), 0)
    assert revisit(_desc(True, "b", 1.05, 0), "native") == (_desc(True, "b", 1.05, 0), "")
    with pytest.raises(ValueError, match="needs retune"):
        revisit(close, "hit")


def test_tuning_records_the_best_time_and_the_runner_up() -> None:
    now = [0.0]
    schema = _toy({"a": 1.0, "b": 0.6, "c": 0.7}, now)
    cands = tuning.candidates_of(schema, DESCS, {})
    choice = tuning.tune(schema, cands, DESCS, OUTS, {}, [np.ones((8, 8), np.float32)], budget_ms=100, clock=lambda: now[0])
    assert choice.impl == "b" and choice.best_ms == pytest.approx(0.6)
    assert choice.alternative == ("c", {}) and choice.margin == pytest.approx(0.7 / 0.6)


# -- through the kernel cache ------------------------------------------------------------------

RNG = np.random.default_rng(3)
W = RNG.standard_normal((16, 8, 3, 3)).astype(np.float32)


@pytest.fixture(autouse=True)
def _no_native_swap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan keeps the kernels the cache holds: the compiler's preference for native programs
    would swap in a kernel's native alternative when the tuned figures favour it (a planted entry
    with tuned_ms=1e3 always does, wherever tuning did not pick the C conv itself, as on an
    AVX2-only core), and these tests are about the kernel cache's entries."""
    monkeypatch.setattr("aioge.compiler.graph.NATIVE_SLACK_MS", float("-inf"))


def _graph() -> aioge.Graph:
    g = aioge.Graph("recheck")
    x = g.input("x", (2, 8, 14, 14), "float32")
    g.output(ops.relu(ops.conv2d(x, g.constant(W, "w"), pads=(1, 1, 1, 1))), names=["y"])
    return g


def _opts(root: Path, mode: str = "tune") -> dict[str, str]:
    return {"ge.op_compiler_cache_dir": str(root), "aioge.tune_mode": mode, "aioge.tune_budget_ms": "20"}


X = RNG.standard_normal((2, 8, 14, 14)).astype(np.float32)


async def _build(root: Path, mode: str = "tune"):
    async with aioge.Session(_opts(root, mode)) as s:
        await s.add_graph(1, _graph())
        model = await s.build_graph(1)
        y = (await s.run_graph(1, {"x": X}))["y"]
    ref = (await _reference())["y"]
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    return model


async def _reference():
    async with aioge.Session({"aioge.tune_mode": "heuristic", "ge.op_compiler_cache_mode": "disable"}) as s:
        await s.add_graph(1, _graph())
        return await s.run_graph(1, {"x": X})


def _conv(model) -> KernelDesc:
    return next(n.kernel for n in model.nodes if n.op_type in ("Conv", "FusedConv"))


def _entry(root: Path, key: str) -> KernelDesc | None:
    cache = KernelCache(root, "AiogeSim")
    return cache.load_sync(key, cache.open_view_sync(force=False)).desc


def _choice(impl: str, params: Mapping[str, Any]) -> tuple[str, tuple[tuple[str, Any], ...]]:
    return impl, tuple(sorted(params.items()))


def _with(desc: KernelDesc, **history: Any) -> KernelDesc:
    """``desc`` with fields of its tuning history replaced."""
    return dataclasses.replace(desc, history=dataclasses.replace(desc.history, **history))


def _plant(root: Path, desc: KernelDesc) -> None:
    cache = KernelCache(root, "AiogeSim")
    cache.store_sync(desc, cache.open_view_sync(force=False))


async def _tuned_conv(root: Path) -> KernelDesc:
    conv = _conv(await _build(root))
    h = conv.history
    assert conv.tuned and h.runner_up and h.tuned_ms > 0 and h.margin > 0  # tuning saw a runner-up
    assert _entry(root, conv.key) == conv  # ... and the cache keeps it
    return conv


async def test_a_hit_on_a_close_call_re_times_it_and_writes_back_what_it_learnt(tmp_path: Path) -> None:
    conv = await _tuned_conv(tmp_path)
    _plant(tmp_path, _with(conv, margin=1.01, checks=0, tuned_ms=1e3))
    model = await _build(tmp_path)
    assert model.stats.kernel_cache_hits == len(model.nodes) and model.stats.kernels_compiled == 0
    assert model.stats.kernels_rechecked == 1
    after = _entry(tmp_path, conv.key)
    assert after is not None and after.history.checks == 1 and after == _conv(model)
    # a choice is a kernel and its parameters: the kernel and its runner-up may be one kernel
    # with two parameter sets (conv_direct_native's row panels in blocks of 6 or of 8 rows)
    pair = {_choice(conv.impl, conv.params), _choice(conv.history.runner_up, conv.history.runner_up_params)}
    assert {_choice(after.impl, after.params), _choice(after.history.runner_up, after.history.runner_up_params)} == pair
    assert model.stats.kernels_retuned == ((after.impl, after.params) != (conv.impl, conv.params))
    assert after.history.tuned_ms < 1e3 and after.history.margin > 0  # the re-timing's figures


async def test_a_settled_or_clear_choice_is_not_re_timed(tmp_path: Path) -> None:
    conv = await _tuned_conv(tmp_path)
    for planted in (
        _with(conv, margin=1.01, checks=RECHECKS, tuned_ms=1e3),
        _with(conv, margin=RECHECK_MARGIN * 2, checks=0, tuned_ms=1e-6),
    ):
        _plant(tmp_path, planted)
        model = await _build(tmp_path)
        assert model.stats.kernels_rechecked == 0 and _conv(model) == planted == _entry(tmp_path, conv.key)
    # heuristic mode never times anything, close call or not
    _plant(tmp_path, _with(conv, margin=1.01, checks=0))
    model = await _build(tmp_path, mode="heuristic")
    assert model.stats.kernels_rechecked == 0


async def test_a_drifted_close_call_is_tuned_again(tmp_path: Path) -> None:
    conv = await _tuned_conv(tmp_path)
    _plant(tmp_path, _with(conv, margin=1.01, checks=0, tuned_ms=1e-6))  # it ran a million times faster once
    model = await _build(tmp_path)
    assert model.stats.kernels_rechecked == 1 and model.stats.kernels_compiled == 0
    after = _entry(tmp_path, conv.key)
    assert after is not None and after == _conv(model)
    assert after.history.checks == 0 and after.history.tuned_ms > 1e-3  # a fresh tune: its own time, its own count


async def test_an_entry_whose_runner_up_is_not_a_candidate_is_recompiled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conv = await _tuned_conv(tmp_path)
    _plant(tmp_path, _with(conv, runner_up="conv_im2col", runner_up_params={"block": 7}))
    with caplog.at_level(logging.WARNING):
        model = await _build(tmp_path)
    assert model.stats.kernels_compiled == 1
    assert any("runner-up 'conv_im2col'" in r.getMessage() and "not a candidate" in r.getMessage() for r in caplog.records)
    _plant(tmp_path, _with(conv, margin=-1.0))
    with caplog.at_level(logging.WARNING):
        model = await _build(tmp_path)
    assert model.stats.kernels_compiled == 1 and any("negative tuning figures" in r.getMessage() for r in caplog.records)


async def test_a_compile_re_times_the_close_calls_it_tuned_once_more_and_a_hit_does_not_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tuning, "RECHECK_MARGIN", 100.0)  # every tuned choice with a runner-up is a close call
    cold = await _build(tmp_path)
    conv = _conv(cold)
    assert cold.stats.kernels_compiled == len(cold.nodes) and cold.stats.kernels_rechecked == 1
    assert _entry(tmp_path, conv.key) == conv  # the second opinion is what the cache keeps
    h = conv.history
    assert h.checks == 1 or (h.checks == 0 and h.tuned_ms > 0)  # re-timed, or re-tuned after a drift
    warm = await _build(tmp_path)
    assert warm.stats.kernel_cache_hits == len(warm.nodes)
    assert warm.stats.kernels_rechecked == (h.checks == 0)  # a settled choice is not re-timed on a hit
