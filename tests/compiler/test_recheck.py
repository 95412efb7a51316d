"""Tuning robust to noise: a cached close call is re-timed against its runner-up on a hit;
the runner-up takes over when it is faster now, a drifted choice is tuned again, and an
entry is re-timed a bounded number of times."""

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
from aioge.compiler.tuning import RECHECK_MARGIN, RECHECKS, close_call, recheck
from aioge.ir.desc import TensorDesc
from aioge.ops.schema import ALL_ENGINES, KernelImpl, OpSchema
from aioge.plan.kernel import KernelDesc

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


def test_only_close_calls_are_rechecked_and_only_a_few_times() -> None:
    assert close_call(True, "b", 1.05, 0) and close_call(True, "b", 0.97, 0)  # a tie kept for preference, too
    assert not close_call(True, "b", RECHECK_MARGIN + 0.01, 0)  # a clear win
    assert not close_call(True, "b", 1.05, RECHECKS)  # settled
    assert not close_call(True, "", 0.0, 0)  # no runner-up
    assert not close_call(False, "b", 1.05, 0)  # chosen by rule


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


def _plant(root: Path, desc: KernelDesc) -> None:
    cache = KernelCache(root, "AiogeSim")
    cache.store_sync(desc, cache.open_view_sync(force=False))


async def _tuned_conv(root: Path) -> KernelDesc:
    conv = _conv(await _build(root))
    assert conv.tuned and conv.runner_up and conv.tuned_ms > 0 and conv.margin > 0  # tuning saw a runner-up
    assert _entry(root, conv.key) == conv  # ... and the cache keeps it
    return conv


async def test_a_hit_on_a_close_call_re_times_it_and_writes_back_what_it_learnt(tmp_path: Path) -> None:
    conv = await _tuned_conv(tmp_path)
    _plant(tmp_path, dataclasses.replace(conv, margin=1.01, checks=0, tuned_ms=1e3))
    model = await _build(tmp_path)
    assert model.stats.kernel_cache_hits == len(model.nodes) and model.stats.kernels_compiled == 0
    assert model.stats.kernels_rechecked == 1
    after = _entry(tmp_path, conv.key)
    assert after is not None and after.checks == 1 and after == _conv(model)
    # a choice is a kernel and its parameters: the kernel and its runner-up may be one kernel
    # with two parameter sets (conv_direct_native's row panels in blocks of 6 or of 8 rows)
    pair = {_choice(conv.impl, conv.params), _choice(conv.runner_up, conv.runner_up_params)}
    assert {_choice(after.impl, after.params), _choice(after.runner_up, after.runner_up_params)} == pair  # kept, or switched
    assert model.stats.kernels_retuned == ((after.impl, after.params) != (conv.impl, conv.params))
    assert after.tuned_ms < 1e3 and after.margin > 0  # the re-timing's figures


async def test_a_settled_or_clear_choice_is_not_re_timed(tmp_path: Path) -> None:
    conv = await _tuned_conv(tmp_path)
    for planted in (
        dataclasses.replace(conv, margin=1.01, checks=RECHECKS, tuned_ms=1e3),
        dataclasses.replace(conv, margin=RECHECK_MARGIN * 2, checks=0, tuned_ms=1e-6),
    ):
        _plant(tmp_path, planted)
        model = await _build(tmp_path)
        assert model.stats.kernels_rechecked == 0 and _conv(model) == planted == _entry(tmp_path, conv.key)
    # heuristic mode never times anything, close call or not
    _plant(tmp_path, dataclasses.replace(conv, margin=1.01, checks=0))
    model = await _build(tmp_path, mode="heuristic")
    assert model.stats.kernels_rechecked == 0


async def test_a_drifted_close_call_is_tuned_again(tmp_path: Path) -> None:
    conv = await _tuned_conv(tmp_path)
    _plant(tmp_path, dataclasses.replace(conv, margin=1.01, checks=0, tuned_ms=1e-6))  # it ran a million times faster once
    model = await _build(tmp_path)
    assert model.stats.kernels_rechecked == 1 and model.stats.kernels_compiled == 0
    after = _entry(tmp_path, conv.key)
    assert after is not None and after == _conv(model)
    assert after.checks == 0 and after.tuned_ms > 1e-3  # a fresh tune: its own time, its own count


async def test_an_entry_whose_runner_up_is_not_a_candidate_is_recompiled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conv = await _tuned_conv(tmp_path)
    _plant(tmp_path, dataclasses.replace(conv, runner_up="conv_im2col", runner_up_params={"block": 7}))
    with caplog.at_level(logging.WARNING):
        model = await _build(tmp_path)
    assert model.stats.kernels_compiled == 1
    assert any("runner-up 'conv_im2col'" in r.getMessage() and "not a candidate" in r.getMessage() for r in caplog.records)
    _plant(tmp_path, dataclasses.replace(conv, margin=-1.0))
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
    assert conv.checks == 1 or (conv.checks == 0 and conv.tuned_ms > 0)  # re-timed, or re-tuned after a drift
    warm = await _build(tmp_path)
    assert warm.stats.kernel_cache_hits == len(warm.nodes)
    assert warm.stats.kernels_rechecked == (conv.checks == 0)  # a settled choice is not re-timed on a hit
