"""Native programs: a one-thread plan of kernels with C forms runs as one C call, alone or
grouped with the turn's other callers, bit-equal to the step-by-step run."""

from __future__ import annotations

import math

import anyio
import anyio.lowlevel
import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.errors import ExecutionError
from aioge.examples import EXAMPLES
from aioge.kernels import native
from aioge.runtime.executor import _Pending
from aioge.runtime.native_program import NativeProgram

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(not native.available(), reason="needs the compiled kernels")]


def _kernels(exe: object) -> list[str]:
    """The plan's kernels, for a failure's message (tuning chose them in this test's process)."""
    return [f"{p.op_type}:{p.kernel.impl}(alt {p.kernel.native_alt or '-'})" for p in exe.model.nodes]  # type: ignore[attr-defined]


def _feeds(name: str, seed: int) -> dict[str, np.ndarray]:
    _, feeds, _ = EXAMPLES[name](batch=1)  # type: ignore[call-arg]
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in feeds.items()}


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
async def test_the_examples_run_as_native_programs_bit_equal_to_their_steps(name: str, tmp_path) -> None:
    graph, feeds, reference = EXAMPLES[name](batch=1)  # type: ignore[call-arg]
    async with aioge.Session() as s:
        await s.add_graph(1, graph)
        for _ in range(3):
            got = await s.run_graph(1, feeds)
        exe = s.executable(1)
        assert exe.native_runs >= 3, f"every kernel of the example has a C form: {_kernels(exe)}"
        # a traced run goes step by step through the kernels' Python paths
        steps = await s.run_graph(1, feeds, trace=tmp_path / "trace.json")
    for k, want in reference(feeds).items():
        np.testing.assert_allclose(got[k], want, rtol=1e-4, atol=1e-5)
        assert np.array_equal(got[k], steps[k]), f"{k}: the program and the steps disagree"
        assert got[k].flags.writeable and got[k].flags.owndata


async def test_concurrent_callers_are_grouped_and_each_gets_its_own_rows(tmp_path) -> None:
    graph, _, _ = EXAMPLES["cnn"](batch=1)  # type: ignore[call-arg]
    feeds = [_feeds("cnn", seed) for seed in range(24)]
    async with aioge.Session() as s:
        await s.add_graph(1, graph)
        alone = [await s.run_graph(1, f, trace=tmp_path / "t.json") for f in feeds]
        got: dict[int, dict[str, np.ndarray]] = {}

        async def caller(i: int) -> None:
            for _ in range(3):
                got[i] = await s.run_graph(1, feeds[i])

        async with anyio.create_task_group() as tg:
            for i in range(len(feeds)):
                tg.start_soon(caller, i)
        exe = s.executable(1)
        assert exe.grouped_runs > 0, f"callers in the same turn of the loop run as groups: {_kernels(exe)}"
        assert not exe._pending
    for i, want in enumerate(alone):
        assert np.array_equal(got[i]["logits"], want["logits"]), f"caller {i} got another's rows"


async def test_a_cancelled_caller_leaves_its_group_and_the_others_finish() -> None:
    graph, feeds, reference = EXAMPLES["mlp"](batch=1)  # type: ignore[call-arg]
    async with aioge.Session() as s:
        await s.add_graph(1, graph)
        for _ in range(3):
            await s.run_graph(1, feeds)
        exe = s.executable(1)
        exe._contended_until = math.inf  # every caller joins a group
        hold = _Pending(None)  # type: ignore[arg-type]  # a group that has not run yet: everyone waits
        exe._pending.append(hold)
        results: dict[str, dict[str, np.ndarray]] = {}
        scope = anyio.CancelScope()

        async def caller(tag: str) -> None:
            results[tag] = await s.run_graph(1, feeds)

        async def cancelled() -> None:
            with scope:
                results["b"] = await s.run_graph(1, feeds)

        before = exe.grouped_runs
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller, "a")
            tg.start_soon(cancelled)
            tg.start_soon(caller, "c")
            await anyio.wait_all_tasks_blocked()
            assert len(exe._pending) == 4
            scope.cancel()
            await anyio.wait_all_tasks_blocked()
            assert len(exe._pending) == 3, "b left the group it waited for"
            exe._pending.remove(hold)
            exe._pass_on()
        assert scope.cancelled_caught and "b" not in results
        assert exe.grouped_runs - before == 2 and not exe._pending
        want = reference(feeds)["probs"]
        for tag in ("a", "c"):
            np.testing.assert_allclose(results[tag]["probs"], want, rtol=1e-5, atol=1e-6)


async def test_a_caller_cancelled_after_a_group_took_the_first_ones_is_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from aioge.runtime import executor

    monkeypatch.setattr(executor, "GROUP_MAX", 2)  # groups of two: a and b, then c alone
    graph, feeds, reference = EXAMPLES["mlp"](batch=1)  # type: ignore[call-arg]
    async with aioge.Session() as s:
        await s.add_graph(1, graph)
        for _ in range(3):
            await s.run_graph(1, feeds)
        exe = s.executable(1)
        exe._contended_until = math.inf
        hold = _Pending(None)  # type: ignore[arg-type]
        exe._pending.append(hold)
        pass_on = exe._pass_on
        results: dict[str, dict[str, np.ndarray]] = {}
        scope = anyio.CancelScope()

        async def caller(tag: str) -> None:
            results[tag] = await s.run_graph(1, feeds)

        async def cancelled() -> None:
            with scope:
                results["d"] = await s.run_graph(1, feeds)

        before = exe.grouped_runs
        async with anyio.create_task_group() as tg:
            for tag in "abc":  # joined in this order (trio would run them in any)
                tg.start_soon(caller, tag)
                await anyio.wait_all_tasks_blocked()
            tg.start_soon(cancelled)
            await anyio.wait_all_tasks_blocked()
            exe._pending.remove(hold)
            monkeypatch.setattr(exe, "_pass_on", lambda: None)  # the group of a and b names no next runner
            pass_on()
            await anyio.wait_all_tasks_blocked()
            assert exe.grouped_runs - before == 2 and len(exe._pending) == 2, "c and d wait"
            scope.cancel()
            await anyio.wait_all_tasks_blocked()
            monkeypatch.setattr(exe, "_pass_on", pass_on)
            pass_on()
        assert scope.cancelled_caught and "d" not in results
        assert exe.grouped_runs - before == 3, "d's program did not run after it left"
        for tag in "abc":
            np.testing.assert_allclose(results[tag]["probs"], reference(feeds)["probs"], rtol=1e-5, atol=1e-6)


async def test_a_failing_job_fails_only_its_own_program_in_a_group() -> None:
    graph, feeds, reference = EXAMPLES["mlp"](batch=1)  # type: ignore[call-arg]
    async with aioge.Session() as s:
        await s.add_graph(1, graph)
        await s.run_graph(1, feeds)
        exe = s.executable(1)
        ctxs = [exe._acquire(False) for _ in range(2)]
        progs = [exe._native_program(c) for c in ctxs]
        assert all(isinstance(p, NativeProgram) for p in progs), _kernels(exe)
        bad, good = progs
        bad._keep[0][0] = 999  # no such job: the C side refuses it
        for p in progs:
            p.stage(feeds)
        NativeProgram.run_group([bad, good], True)
        with pytest.raises(ExecutionError) as err:
            bad.finish()
        assert err.value.node == exe.model.nodes[0].name and "unknown job" in str(err.value)
        np.testing.assert_allclose(good.finish()["probs"], reference(feeds)["probs"], rtol=1e-5, atol=1e-6)


async def test_plans_with_a_numpy_kernel_or_several_threads_run_step_by_step() -> None:
    g = aioge.Graph("no_form")
    x = g.input("x", (4, 8))
    g.output(ops.tanh(ops.add(x, 1.0)), names=["y"])  # Tanh has no C form
    async with aioge.Session() as s:
        await s.add_graph(1, g)
        for _ in range(3):
            out = await s.run_graph(1, {"x": np.ones((4, 8), np.float32)})
        assert s.executable(1).native_runs == 0 and s.executable(1)._native_ok is False
    np.testing.assert_allclose(out["y"], np.tanh(2.0), rtol=1e-6)


async def test_a_wrong_feed_is_still_refused_before_a_native_run() -> None:
    graph, feeds, _ = EXAMPLES["mlp"](batch=1)  # type: ignore[call-arg]
    async with aioge.Session() as s:
        await s.add_graph(1, graph)
        await s.run_graph(1, feeds)
        name = next(iter(feeds))
        with pytest.raises(aioge.errors.FeedError):
            await s.run_graph(1, {name: feeds[name].astype(np.float64)})
        with pytest.raises(aioge.errors.FeedError):
            await s.run_graph(1, {name: feeds[name][:, :-1]})
