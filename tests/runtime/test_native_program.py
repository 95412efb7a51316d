"""Native programs: a one-thread plan of kernels with C forms runs as one C call, alone or
grouped with the turn's other callers, bit-equal to the step-by-step run."""

from __future__ import annotations

import contextlib
import threading
from typing import Any, AsyncIterator

import anyio
import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.errors import ExecutionError
from aioge.examples import EXAMPLES
from aioge.kernels import native
from aioge.runtime import executor
from aioge.runtime.native_program import NativeProgram
from aioge.runtime.program_queue import ProgramQueue
from aioge.runtime.schedule import Placement, Strategy

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(not native.available(), reason="needs the compiled kernels")]


@pytest.fixture
def native_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans whose every kernel has a native alternative take them, however their tuned times
    compare: whether a program exists is tuning's call, which timing noise under a loaded
    machine can flip (the compiler's NATIVE_EXTRA budget), and these tests are about the run."""
    monkeypatch.setattr("aioge.compiler.graph.NATIVE_SLACK_MS", float("inf"))


def _kernels(exe: object) -> list[str]:
    """The plan's kernels, for a failure's message (tuning chose them in this test's process)."""
    return [f"{p.op_type}:{p.kernel.impl}(alt {p.kernel.history.native_alt or '-'})" for p in exe.model.nodes]  # type: ignore[attr-defined]


async def _program_equals_steps(g: aioge.Graph, feeds: dict, tmp_path: Any) -> tuple[np.ndarray, dict[str, str]]:
    """Output ``y`` of three runs that must each be a native program, checked bit-equal to a
    traced (step-by-step) run; and the kernel each op type got."""
    async with aioge.Session() as sess:
        await sess.add_graph(1, g)
        for _ in range(3):
            got = (await sess.run_graph(1, feeds))["y"]
        exe = sess.executable(1)
        assert exe.native_runs >= 3, f"every kernel has a C form: {_kernels(exe)}"
        steps = (await sess.run_graph(1, feeds, trace=tmp_path / "trace.json"))["y"]
    assert np.array_equal(got, steps), "the program and the steps disagree"
    return got, {p.op_type: p.kernel.impl for p in exe.model.nodes}


@contextlib.asynccontextmanager
async def _live_programs(g: aioge.Graph, feeds: dict) -> AsyncIterator[list[NativeProgram]]:
    """The native programs of ``g`` (their staged x of the feed's shape) in a session that has
    run it once, while the session is open."""
    import gc

    async with aioge.Session() as sess:
        await sess.add_graph(1, g)
        await sess.run_graph(1, feeds)
        gc.collect()
        # type(), not isinstance: that asks every object its __class__, and torch's deprecated module
        # attributes warn (an error here) once torch is imported
        yield [p for p in gc.get_objects() if type(p) is NativeProgram and p._staging[0][1].shape == feeds["x"].shape]


@contextlib.asynccontextmanager
async def _mlp_ran_once() -> AsyncIterator[tuple[aioge.Session, Any, dict, Any]]:
    """A session with the batch-1 MLP example run once: the session, its executable, the feeds
    and the reference."""
    graph, feeds, reference = EXAMPLES["mlp"](batch=1)  # type: ignore[call-arg]
    async with aioge.Session() as s:
        await s.add_graph(1, graph)
        await s.run_graph(1, feeds)
        yield s, s.executable(1), feeds, reference


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
async def test_the_examples_run_as_native_programs_bit_equal_to_their_steps(name: str, tmp_path, native_plans: None) -> None:
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


async def test_a_failing_job_fails_only_its_own_program_in_a_queue(native_plans: None) -> None:
    async with _mlp_ran_once() as (s, exe, feeds, reference):
        ctxs = [exe._acquire(False) for _ in range(2)]
        progs = [exe._native_program(c) for c in ctxs]
        assert all(isinstance(p, NativeProgram) for p in progs), _kernels(exe)
        bad, good = progs
        bad._keep[0][0] = 999  # no such job: the C side refuses it
        queue = ProgramQueue(1)
        try:
            waiters = []
            for p in progs:
                p.stage(feeds)
                waiters.append(queue.submit(p))
            for w in waiters:
                assert w is not None
                await queue.wait(w)
        finally:
            queue.close()
        with pytest.raises(ExecutionError) as err:
            bad.finish()
        assert err.value.node == exe.model.nodes[0].name and "unknown job" in str(err.value)
        np.testing.assert_allclose(good.finish()["probs"], reference(feeds)["probs"], rtol=1e-5, atol=1e-6)


async def test_a_program_a_closed_queue_refuses_runs_in_the_caller_on_what_it_staged(native_plans: None) -> None:
    async with _mlp_ran_once() as (s, exe, feeds, reference):
        prog = exe._native_program(exe._acquire(False))
        assert isinstance(prog, NativeProgram), _kernels(exe)
        queue = ProgramQueue(1)
        queue.close()
        got = await exe._run_queued(queue, prog, feeds)
    np.testing.assert_allclose(got["probs"], reference(feeds)["probs"], rtol=1e-5, atol=1e-6)


async def test_a_lone_callers_long_program_runs_in_the_c_runner_splitting_and_gives_every_token_back(
    monkeypatch, native_plans: None
) -> None:
    # Runs over schedule.INLINE_US go off the loop: a lone caller's to the program queue's
    # runner with split set (no lane thread: NativeProgram.run, the lanes' entry, never runs).
    monkeypatch.setattr("aioge.runtime.schedule.INLINE_US", 0.0)
    submitted: list[bool] = []
    real_submit = ProgramQueue.submit

    def submit(self: ProgramQueue, prog: NativeProgram, split: bool = False) -> Any:
        submitted.append(split)
        return real_submit(self, prog, split)

    def on_a_lane(*_: Any) -> None:
        raise AssertionError("a lone caller's long run went to a lane")

    monkeypatch.setattr(ProgramQueue, "submit", submit)
    async with _mlp_ran_once() as (s, exe, feeds, reference):
        monkeypatch.setattr(NativeProgram, "run", on_a_lane)
        for _ in range(4):
            got = await s.run_graph(1, feeds)
            np.testing.assert_allclose(got["probs"], reference(feeds)["probs"], rtol=1e-5, atol=1e-6)
        workers = s._engines.workers
        assert workers.cpu.idle() == workers.cpu_slots, "every CPU token back"
        assert exe.queued_runs >= 4 and submitted[-4:] == [True] * 4 and s._engines.workers.program_queue().taken == 0
        assert exe._run_us is not None and exe._run_us > 0  # the runner's time is observed
        name = next(iter(feeds))
        with pytest.raises(aioge.errors.FeedError):  # a wrong feed: refused as before
            await s.run_graph(1, {name: feeds[name].astype(np.float64)})
        assert workers.cpu.idle() == workers.cpu_slots


async def test_a_failing_job_of_a_split_queued_program_raises_naming_its_node(monkeypatch, native_plans: None) -> None:
    monkeypatch.setattr("aioge.runtime.schedule.INLINE_US", 0.0)
    async with _mlp_ran_once() as (s, exe, feeds, reference):
        (ctx,) = exe._pool
        table = ctx.native._keep[0]
        table[0] = 999  # the first job: no such job, the C side refuses it
        queued = exe.queued_runs
        with pytest.raises(ExecutionError) as err:
            await s.run_graph(1, feeds)
        assert err.value.node == exe.model.nodes[0].name and "unknown job" in str(err.value)
        workers = s._engines.workers
        assert workers.cpu.idle() == workers.cpu_slots and exe.queued_runs == queued + 1  # the queue ran it


async def test_a_split_program_a_closed_queue_refuses_runs_on_a_lane(monkeypatch, native_plans: None) -> None:
    monkeypatch.setattr("aioge.runtime.schedule.INLINE_US", 0.0)
    async with _mlp_ran_once() as (s, exe, feeds, reference):
        workers = s._engines.workers
        workers.program_queue().close()
        runs, queued = exe.native_runs, exe.queued_runs
        got = await s.run_graph(1, feeds)
        assert exe.native_runs == runs + 1 and exe.queued_runs == queued
        assert workers.cpu.idle() == workers.cpu_slots
    np.testing.assert_allclose(got["probs"], reference(feeds)["probs"], rtol=1e-5, atol=1e-6)


async def test_the_loops_thread_never_takes_a_split_program_from_the_queue(native_plans: None) -> None:
    # Past HELP_DEPTH the pushing thread runs the oldest program itself; a split one (a lone
    # caller's long program) it leaves to the runner, so the loop is never held for its run.
    graph, feeds, reference = EXAMPLES["cnn"]()  # type: ignore[call-arg]
    async with aioge.Session() as s:
        await s.add_graph(1, graph)
        await s.run_graph(1, feeds)
        exe = s.executable(1)
        progs = [exe._native_program(exe._acquire(False)) for _ in range(12)]
        assert all(isinstance(p, NativeProgram) for p in progs), _kernels(exe)
        queue = ProgramQueue(1)
        try:
            waiters = []
            for p in progs:
                p.stage(feeds)
                waiters.append(queue.submit(p, split=True))
            for w in waiters:
                assert w is not None
                await queue.wait(w)
        finally:
            queue.close()
        assert queue.taken == 0
        want = next(iter(reference(feeds).values()))
        for p in progs:
            np.testing.assert_allclose(next(iter(p.finish().values())), want, rtol=1e-4, atol=1e-5)


async def test_runs_kept_off_the_loop_run_whole_on_lanes_of_their_own(monkeypatch, native_plans: None) -> None:
    # batches that others overlap (placement=Placement.LANE_WHOLE): one lane and one core each, not queued on
    # the first lane splitting their jobs (the second batch then waited out the first)
    async with _mlp_ran_once() as (s, exe, feeds, reference):
        workers = s._engines.workers
        seen: list[tuple[str, bool]] = []
        real = NativeProgram.run
        both = threading.Barrier(2, timeout=10)  # broken (the test fails) unless the two run at once

        def run(self: NativeProgram, feeds: dict, split: bool) -> dict:
            seen.append((threading.current_thread().name, split))
            both.wait()
            return real(self, feeds, split)

        monkeypatch.setattr(NativeProgram, "run", run)
        got = []

        async def one() -> None:
            got.append(await exe.run(feeds, workers=workers, placement=Placement.LANE_WHOLE))

        async with anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(one)
    assert len({name for name, _ in seen}) == 2 and not any(split for _, split in seen), seen
    for out in got:
        np.testing.assert_allclose(out["probs"], reference(feeds)["probs"], rtol=1e-5, atol=1e-6)


async def test_a_lane_run_splits_only_while_no_other_lane_run_is_in_flight(monkeypatch, native_plans: None) -> None:
    # A burst's first run found both tokens idle and split, then its followers waited it out:
    # a lane run splits only when it is the only lane run handed out (EngineWorkers.lane_runs).
    async with _mlp_ran_once() as (s, exe, feeds, reference):
        workers = s._engines.workers
        seen: list[bool] = []
        real = NativeProgram.run

        def run(self: NativeProgram, feeds: dict, split: bool) -> dict:
            seen.append(split)
            return real(self, feeds, split)

        monkeypatch.setattr(NativeProgram, "run", run)
        alone = await exe.run(feeds, workers=workers, placement=Placement.LANE_SPLIT)
        workers.lane_runs += 1  # another caller's run handed to a lane, not yet done
        try:
            beside = await exe.run(feeds, workers=workers, placement=Placement.LANE_SPLIT)
        finally:
            workers.lane_runs -= 1
    assert seen == [True, False]
    for out in (alone, beside):
        np.testing.assert_allclose(out["probs"], reference(feeds)["probs"], rtol=1e-5, atol=1e-6)


async def test_plans_with_a_numpy_kernel_or_several_threads_run_step_by_step() -> None:
    g = aioge.Graph("no_form")
    x = g.input("x", (4, 8))
    g.output(ops.sin(ops.add(x, 1.0)), names=["y"])  # Sin has no C form (Tanh has one now)
    async with aioge.Session() as s:
        await s.add_graph(1, g)
        for _ in range(3):
            out = await s.run_graph(1, {"x": np.ones((4, 8), np.float32)})
        assert s.executable(1).native_runs == 0 and s.executable(1).native_ok is False
    np.testing.assert_allclose(out["y"], np.sin(2.0), rtol=1e-6)


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


async def test_weights_fed_as_inputs_are_read_by_every_run(monkeypatch) -> None:
    # torch.compile feeds a module's parameters as graph inputs. A compiled Conv or Gemm packs
    # a constant weight once; a program built over a fed one ran every later call with the
    # packing of whatever its staging buffer held when it was built (NaN in one CI run).
    from aioge.compiler import tuning
    from aioge.examples.cnn import _conv_ref

    chosen = {"Conv": "conv_direct_native", "FusedConv": "conv_direct_native", "Gemm": "gemm_native"}
    select = tuning.select_kernel

    def packing_kernels(schema, *args, **kwargs):  # the kernels that pack their weight, whatever tuning finds
        impl = chosen.get(schema.name)
        return tuning.Choice(impl, {}, False) if impl else select(schema, *args, **kwargs)

    monkeypatch.setattr(tuning, "select_kernel", packing_kernels)
    g = aioge.Graph("fed")
    x = g.input("x", (2, 3, 6, 6), "float32")
    w = g.input("w", (4, 3, 3, 3), "float32")
    fw = g.input("fw", (4, 5), "float32")
    h = ops.relu(ops.conv2d(x, w, g.constant(np.zeros(4, np.float32)), pads=(1, 1, 1, 1)))
    h = ops.flatten(ops.global_average_pool(h), axis=1)
    g.output(ops.softmax(ops.gemm(h, fw, g.constant(np.full(5, 0.5, np.float32)))), names=["y"])
    rng = np.random.default_rng(3)
    shapes = {"x": (2, 3, 6, 6), "w": (4, 3, 3, 3), "fw": (4, 5)}
    async with aioge.Session() as s:
        await s.add_graph(1, g)
        for _ in range(4):
            feeds = {k: rng.standard_normal(shape).astype(np.float32) for k, shape in shapes.items()}
            got = (await s.run_graph(1, feeds))["y"]
            z = np.maximum(_conv_ref(feeds["x"], feeds["w"], np.zeros(4, np.float32), 1), 0).mean(axis=(2, 3))
            z = z @ feeds["fw"] + 0.5
            e = np.exp(z - z.max(axis=1, keepdims=True))
            np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
        assert {p.kernel.impl for p in s.executable(1).model.nodes} >= set(chosen.values())


@pytest.mark.parametrize("name", ["mlp", "transformer"])
async def test_lowered_plans_run_as_native_programs_bit_equal_to_their_steps(name: str, tmp_path, native_plans: None) -> None:
    """Issue 39: a bf16 plan's kernels (the C lowp GEMM, the float32 kernels over operands
    rounded by a C job) carry native forms too."""
    graph, feeds, reference = EXAMPLES[name](batch=1)  # type: ignore[call-arg]
    async with aioge.Session({"ge.exec.precision_mode": "allow_fp32_to_bf16"}) as s:
        await s.add_graph(1, graph)
        for _ in range(3):
            got = await s.run_graph(1, feeds)
        exe = s.executable(1)
        assert "bf16" in exe.model.summary()["precision"]
        assert exe.native_runs >= 3, f"every kernel has a C form: {_kernels(exe)}"
        steps = await s.run_graph(1, feeds, trace=tmp_path / "trace.json")
    for k, want in reference(feeds).items():
        np.testing.assert_allclose(got[k], want, rtol=0.05, atol=0.05)
        assert np.array_equal(got[k], steps[k]), f"{k}: the program and the steps disagree"


async def test_squeeze_excite_and_a_batch_1_classifier_run_in_native_programs(monkeypatch, tmp_path, native_plans: None) -> None:
    """MobileNetV3's and EfficientNet's plans ran step by step: their SE blocks and their
    batch-1 classifiers (Gemm with transB, a GEMV over the weight as it is) had no C form.
    Both have one now, bit-equal to their steps."""
    from aioge.compiler import tuning
    from aioge.examples.cnn import _conv_ref

    chosen = {"SqueezeExcite": "squeeze_excite_native", "Gemm": "gemm_native"}
    chosen |= {"Conv": "conv_direct_native", "FusedConv": "conv_direct_native"}
    select = tuning.select_kernel

    def native_kernels(schema, *args, **kwargs):  # whatever tuning finds on a busy machine
        impl = chosen.get(schema.name)
        return tuning.Choice(impl, {}, False) if impl else select(schema, *args, **kwargs)

    monkeypatch.setattr(tuning, "select_kernel", native_kernels)
    rng = np.random.default_rng(7)
    w = {k: (rng.standard_normal(shape) * 0.3).astype(np.float32) for k, shape in _SE_NET.items()}
    g = aioge.Graph("se_classifier")
    x = g.input("x", (1, 3, 12, 12), "float32")
    c = {k: g.constant(v) for k, v in w.items()}
    h = ops.relu(ops.conv2d(x, c["conv"], c["conv_b"], pads=(1, 1, 1, 1)))
    s = ops.relu(ops.conv2d(ops.global_average_pool(h), c["w1"], c["b1"]))
    s = ops.hard_sigmoid(ops.conv2d(s, c["w2"], c["b2"]), alpha=1 / 6, beta=0.5)
    pooled = ops.flatten(ops.global_average_pool(ops.mul(h, s)), axis=1)
    g.output(ops.gemm(pooled, c["fc"], c["fc_b"], transB=1), names=["y"])
    feeds = {"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)}
    got, impls = await _program_equals_steps(g, feeds, tmp_path)
    assert impls.get("SqueezeExcite") == "squeeze_excite_native", impls
    hr = np.maximum(_conv_ref(feeds["x"], w["conv"], w["conv_b"], 1), 0)
    sq = np.maximum(w["w1"].reshape(8, 24) @ hr.mean(axis=(2, 3))[0] + w["b1"], 0)
    gate = np.clip((w["w2"].reshape(24, 8) @ sq + w["b2"]) / 6 + 0.5, 0, 1)
    want = (hr[0] * gate[:, None, None]).mean(axis=(1, 2)) @ w["fc"].T + w["fc_b"]
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-5)


_SE_NET = {"conv": (24, 3, 3, 3), "conv_b": (24,), "w1": (8, 24, 1, 1), "b1": (8,), "w2": (24, 8, 1, 1), "b2": (24,)}
_SE_NET |= {"fc": (10, 24), "fc_b": (10,)}


@pytest.mark.parametrize("batch", [1, 2])
async def test_a_shufflenet_like_plan_runs_as_a_native_program(batch: int, monkeypatch, tmp_path, native_plans: None) -> None:
    """ShuffleNet's plans ran step by step: its channel splits (Slice, Split), joins (Concat)
    and its head (ReduceMean over H and W) had no C form. They have now, bit-equal to their
    steps and equal to numpy."""
    from aioge.compiler import tuning
    from aioge.examples.cnn import _conv_ref

    chosen = {"ReduceMean": "reduce_mean_native", "Gemm": "gemm_native"}
    chosen |= {"Conv": "conv_direct_native", "FusedConv": "conv_direct_native"}
    select = tuning.select_kernel

    def native_kernels(schema, *args, **kwargs):
        impl = chosen.get(schema.name)
        return tuning.Choice(impl, {}, False) if impl else select(schema, *args, **kwargs)

    monkeypatch.setattr(tuning, "select_kernel", native_kernels)
    rng = np.random.default_rng(3)
    shapes = {"conv": (8, 3, 3, 3), "conv_b": (8,), "pw": (4, 4, 1, 1), "pw_b": (4,), "fc": (5, 8), "fc_b": (5,)}
    w = {k: (rng.standard_normal(s) * 0.3).astype(np.float32) for k, s in shapes.items()}
    g = aioge.Graph("shuffle")
    x = g.input("x", (batch, 3, 10, 10), "float32")
    c = {k: g.constant(v) for k, v in w.items()}
    i64 = lambda *v: g.constant(np.array(v, np.int64))  # noqa: E731
    h = ops.relu(ops.conv2d(x, c["conv"], c["conv_b"], pads=(1, 1, 1, 1)))
    left = ops.slice(h, i64(0), i64(4), i64(1))
    right = ops.relu(ops.conv2d(ops.slice(h, i64(4), i64(8), i64(1)), c["pw"], c["pw_b"]))
    joined = ops.concat(left, right, axis=1)
    shuffled = ops.reshape(
        ops.transpose(ops.reshape(joined, i64(batch, 2, 4, 10, 10)), perm=(0, 2, 1, 3, 4)), i64(batch, 8, 10, 10)
    )
    a, b = ops.split(shuffled, i64(3, 5), axis=1)
    pooled = ops.reduce_mean(ops.concat(b, a, axis=1), i64(2, 3), keepdims=0)
    g.output(ops.gemm(pooled, c["fc"], c["fc_b"], transB=1), names=["y"])
    feeds = {"x": rng.standard_normal((batch, 3, 10, 10)).astype(np.float32)}
    got, impls = await _program_equals_steps(g, feeds, tmp_path)
    assert impls.get("ReduceMean") == "reduce_mean_native", impls
    assert {"Slice", "Concat", "Split", "ChannelShuffle"} <= set(impls), impls  # the join and shuffle: one node
    hr = np.maximum(_conv_ref(feeds["x"], w["conv"], w["conv_b"], 1), 0)
    rr = np.maximum(np.einsum("oc,nchw->nohw", w["pw"][:, :, 0, 0], hr[:, 4:]) + w["pw_b"][:, None, None], 0)
    sh = np.concatenate([hr[:, :4], rr], 1).reshape(batch, 2, 4, 10, 10).transpose(0, 2, 1, 3, 4).reshape(batch, 8, 10, 10)
    want = np.concatenate([sh[:, 3:], sh[:, :3]], 1).mean(axis=(2, 3)) @ w["fc"].T + w["fc_b"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


async def test_a_transformers_mask_and_embedding_ops_run_in_a_native_program(tmp_path, native_plans: None) -> None:
    """Issue 41: Gather, Cast, GatherND, And, Expand, Where, Concat and a broadcast Mul/Add chain (a
    BERT's embeddings and attention mask) had no C form, so its plan ran step by step. They
    run in one program now, bit-equal to the steps; an index outside the table is an
    ExecutionError naming the Gather, from the program as from the steps."""
    rng = np.random.default_rng(3)
    table, pos = rng.standard_normal((10, 8)).astype(np.float32), rng.standard_normal((1, 5, 8)).astype(np.float32)
    g = aioge.Graph("masks")
    ids, mask = g.input("ids", (2, 5), "int64"), g.input("mask", (2, 5), "int64")
    emb = ops.add(ops.gather(g.constant(table), ids), g.constant(pos))
    keep = ops.gather_nd(ops.cast(mask, to="bool"), g.constant(np.array([[[0, 1], [1, 4]]], np.int64)))
    both = ops.expand(
        ops.and_(ops.reshape(keep, g.constant(np.array([1, 2, 1], np.int64))), ops.cast(mask, to="bool")),
        g.constant(np.array([3, 2, 5], np.int64)),
    )
    bias = ops.where(both, g.constant(np.float32(0.0)), g.constant(np.float32(-1e4)))
    g.output(
        emb,
        ops.add(ops.mul(bias, g.constant(np.float32(0.5))), ops.gather(emb, g.constant(np.int64(-1)), axis=2)),
        ops.concat(ops.cast(mask, to="float32"), ops.cast(ids, to="float32"), axis=1),
        names=["emb", "att", "cat"],
    )
    m = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int64)
    feeds = {"ids": np.array([[1, 2, 3, -1, 0], [9, 8, 7, 6, 5]], np.int64), "mask": m}
    async with aioge.Session() as s:
        await s.add_graph(1, g)
        for _ in range(3):
            got = await s.run_graph(1, feeds)
        exe = s.executable(1)
        assert exe.native_runs >= 3, f"every kernel has a C form: {_kernels(exe)}"
        kinds = {p.op_type for p in exe.model.nodes}
        assert kinds >= {"Gather", "Cast", "GatherND", "And", "Expand", "Where", "FusedElementwise", "Concat"}, kinds
        steps = await s.run_graph(1, feeds, trace=tmp_path / "trace.json")
        with pytest.raises(ExecutionError, match="Gather"):
            await s.run_graph(1, {**feeds, "ids": np.full((2, 5), 10, np.int64)})
        with pytest.raises(ExecutionError, match="Gather"):
            await s.run_graph(1, {**feeds, "ids": np.full((2, 5), -11, np.int64)}, trace=tmp_path / "t2.json")
    e = table[feeds["ids"]] + pos
    keep_ref = m.astype(bool)[[0, 1], [1, 4]].reshape(1, 2, 1) & m.astype(bool)
    want = np.where(np.broadcast_to(keep_ref, (3, 2, 5)), np.float32(0), np.float32(-1e4)) * np.float32(0.5) + e[:, :, -1]
    np.testing.assert_array_equal(got["emb"], e)
    np.testing.assert_array_equal(got["att"], want)
    np.testing.assert_array_equal(got["cat"], np.concatenate([m, feeds["ids"]], axis=1).astype(np.float32))
    for k in got:
        assert np.array_equal(got[k], steps[k]), f"{k}: the program and the steps disagree"


async def test_comparisons_and_not_run_in_the_program(tmp_path, native_plans: None) -> None:
    """An embedding's index checks (Keras: ``Less(ids, 0)``; a padding mask ``Not(Equal(ids, 0))``)
    and a float comparison no longer keep the plan step by step: Less, Equal, Greater, Not have C forms."""
    g = aioge.Graph("masks")
    ids = g.input("ids", (2, 6), "int64")
    x = g.input("x", (2, 6), "float32")
    neg = ops.less(ids, g.constant(np.int64(0)))
    keep = ops.not_(ops.equal(ids, g.constant(np.int64(0))))
    pos = ops.greater(x, g.constant(np.float32(0.25)))
    picked = ops.where(ops.and_(keep, pos), x, g.constant(np.float32(-1.0)))
    g.output(ops.concat(picked, ops.cast(neg, to="float32"), axis=1), names=["y"])
    feeds = {"ids": np.array([[3, 0, -2, 5, 0, 1], [0, 7, 8, -1, 2, 0]], np.int64)}
    feeds["x"] = np.random.default_rng(3).standard_normal((2, 6)).astype(np.float32)
    got, impls = await _program_equals_steps(g, feeds, tmp_path)
    assert {"Less", "Equal", "Greater", "Not"} <= set(impls), impls
    i, v = feeds["ids"], feeds["x"]
    want = np.concatenate([np.where((i != 0) & (v > 0.25), v, -1.0), (i < 0).astype(np.float32)], axis=1)
    np.testing.assert_array_equal(got, want.astype(np.float32))


async def test_lstm_gates_run_as_c_steps_in_the_program(tmp_path, native_plans: None) -> None:
    """An LSTM cell's gates, fused into FusedElementwise programs of Sigmoid, Tanh, Mul and Add,
    run as a C job a step (in the program and on the step path alike: the same bits)."""
    g = aioge.Graph("gates")
    i, f, c, o, prev = (g.input(n, (1, 64), "float32") for n in ("i", "f", "c", "o", "prev"))
    cell = ops.add(ops.mul(ops.sigmoid(f), prev), ops.mul(ops.sigmoid(i), ops.tanh(c)))
    g.output(ops.mul(ops.sigmoid(o), ops.tanh(cell)), names=["y"])
    rng = np.random.default_rng(4)
    feeds = {n: (rng.standard_normal((1, 64)) * 3).astype(np.float32) for n in ("i", "f", "c", "o", "prev")}
    got, impls = await _program_equals_steps(g, feeds, tmp_path)
    assert impls.get("FusedElementwise"), impls

    def sig(v: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-v.astype(np.float64)))

    cell_ref = sig(feeds["f"]) * feeds["prev"] + sig(feeds["i"]) * np.tanh(feeds["c"].astype(np.float64))
    np.testing.assert_allclose(got, sig(feeds["o"]) * np.tanh(cell_ref), rtol=2e-6, atol=1e-6)


async def test_tanh_after_a_gemm_and_alone_runs_in_a_native_program(tmp_path, native_plans: None) -> None:
    """Issue 41: a Gemm's Tanh (BERT's pooler) had no C form, so the plan ran step by step. It is
    the Gemm's epilogue (activation code Tanh) and a lone Tanh's activation job now: one program,
    bit-equal to the steps, within a few ulp of float64."""
    rng = np.random.default_rng(4)
    w, b = rng.standard_normal((16, 16)).astype(np.float32) * 0.5, rng.standard_normal(16).astype(np.float32)
    g = aioge.Graph("pooler")
    x = g.input("x", (3, 16), "float32")
    g.output(ops.tanh(ops.tanh(ops.gemm(x, g.constant(w), g.constant(b), transB=1))), names=["y"])
    feeds = {"x": rng.standard_normal((3, 16)).astype(np.float32)}
    got, impls = await _program_equals_steps(g, feeds, tmp_path)
    assert "FusedGemm" in impls and "Tanh" in impls and "Gemm" not in impls, impls  # one Tanh fused, one alone
    want = np.tanh(np.tanh(feeds["x"].astype(np.float64) @ w.T.astype(np.float64) + b))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


async def test_position_ids_and_an_end_token_argmax_run_in_a_native_program(tmp_path, native_plans: None) -> None:
    """Issue 41: RoBERTa's position ids (``cumsum(ids != pad) * mask + pad``, token types picked
    by GatherElements) and CLIP's pooled token (ArgMax over int ids, a Gather) had no C form,
    so both models ran step by step. CumSum, GatherElements and ArgMax are C jobs now: one
    program, bit-equal to the steps; an index outside its axis fails the program as the step."""
    pad, rng = 1, np.random.default_rng(7)
    table = rng.standard_normal((16, 4)).astype(np.float32)
    g = aioge.Graph("positions")
    ids = g.input("ids", (2, 7), "int64")
    mask = ops.cast(ops.not_(ops.equal(ids, g.constant(np.int64(pad)))), to="int32")
    pos = ops.add(ops.mul(ops.cum_sum(mask, g.constant(np.int64(1))), mask), g.constant(np.int32(pad)))
    types = ops.gather_elements(g.constant(np.arange(16, dtype=np.int64).reshape(2, 8)), pos, axis=-1)
    end = ops.arg_max(ops.cast(ids, to="int32"), axis=-1, keepdims=0)
    g.output(
        ops.gather(g.constant(table), pos),
        types,
        end,
        ops.arg_min(ops.cast(pos, to="float32"), axis=0),
        names=["emb", "types", "end", "first"],
    )
    feeds = {"ids": np.array([[0, 5, 9, 9, 2, 1, 1], [3, 1, 4, 1, 5, 9, 2]], np.int64)}
    async with aioge.Session() as s:
        await s.add_graph(1, g)
        for _ in range(3):
            got = await s.run_graph(1, feeds)
        exe = s.executable(1)
        assert exe.native_runs >= 3, f"every kernel has a C form: {_kernels(exe)}"
        assert {p.op_type for p in exe.model.nodes} >= {"CumSum", "GatherElements", "ArgMax", "ArgMin"}
        steps = await s.run_graph(1, feeds, trace=tmp_path / "trace.json")
        with pytest.raises(ExecutionError, match="GatherElements"):  # no padding: position 8 of 8 token types
            await s.run_graph(1, {"ids": np.full((2, 7), 2, np.int64)})
    m = (feeds["ids"] != pad).astype(np.int32)
    p = np.cumsum(m, 1).astype(np.int32) * m + pad
    np.testing.assert_array_equal(got["emb"], table[p])
    np.testing.assert_array_equal(got["types"], np.arange(16).reshape(2, 8)[np.arange(2)[:, None], p])
    np.testing.assert_array_equal(got["end"], [2, 5])
    np.testing.assert_array_equal(got["first"], np.argmin(p, 0, keepdims=True))
    for k in got:
        assert np.array_equal(got[k], steps[k]), f"{k}: the program and the steps disagree"


@pytest.mark.parametrize("seed", range(4))
async def test_constant_pads_and_crops_run_in_a_native_program(seed: int, tmp_path, native_plans: None) -> None:
    """Issue 41 (NASNetMobile): a constant Pad, negative pads cropping (Keras' ZeroPadding2D then
    Cropping2D), over odd sizes, some axes or all, any fill, is a fill and a strided copy in the
    program: bit-equal to the steps and to numpy's pad of the cropped input."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in rng.integers(1, 8, 4))
    pads = rng.integers(-1, 3, 8)
    pads[4:] = np.maximum(pads[4:], -np.array(shape) + np.maximum(-pads[:4], 0) + 1)  # keep one value an axis
    axes = None if seed % 2 else np.array([2, 3, 0, 1])
    value = np.float32(rng.standard_normal()) if seed % 3 else None
    g = aioge.Graph("pad")
    x = g.input("x", shape, "float32")
    widths = [(int(pads[i]), int(pads[i + 4])) for i in range(4)]
    given = pads if axes is None else np.array([pads[a] for a in axes] + [pads[a + 4] for a in axes])
    args = [x, g.constant(given.astype(np.int64)), None if value is None else g.constant(value)]
    if axes is not None:
        args.append(g.constant(axes.astype(np.int64)))
    g.output(ops.relu(ops.pad(*args)), names=["y"])
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    got, impls = await _program_equals_steps(g, feeds, tmp_path)
    cropped = feeds["x"][tuple(slice(max(-b, 0), d - max(-e, 0)) for (b, e), d in zip(widths, shape))]
    want = np.pad(cropped, [(max(b, 0), max(e, 0)) for b, e in widths], constant_values=value or 0)
    np.testing.assert_array_equal(got, np.maximum(want, 0))


def test_the_pad_form_is_none_without_the_compiled_tier(monkeypatch) -> None:
    from aioge.kernels.image import pad_form

    x, y = np.ones((1, 2, 3, 3), np.float32), np.empty((1, 2, 4, 4), np.float32)
    pads = np.array([0, 0, 1, 1, 0, 0, 0, 0], np.int64)
    pads.flags.writeable = False
    assert pad_form({})([x, pads], [y]) is not None
    assert pad_form({"mode": "reflect"})([x, pads], [y]) is None
    assert pad_form({})([x, pads.copy()], [y]) is None  # pads a run may change
    monkeypatch.setattr(native, "available", lambda: False)
    assert pad_form({})([x, pads], [y]) is None


async def test_an_nhwc_affine_relu_and_a_mean_over_h_w_run_in_a_native_program(tmp_path, native_plans: None) -> None:
    """Issue 41 (NASNetMobile): a per-channel Mul, Add and Relu over NHWC (a FusedElementwise too
    large for a job a step) runs as a chain with its Relu in place, and ReduceMean over H and W of
    NHWC (GlobalAveragePooling2D) as a strided copy and the row mean: one program."""
    rng = np.random.default_rng(7)
    scale, shift = rng.standard_normal(22).astype(np.float32), rng.standard_normal(22).astype(np.float32)
    g = aioge.Graph("nhwc")
    x = g.input("x", (1, 24, 24, 22), "float32")
    h = ops.relu(ops.add(ops.mul(x, g.constant(scale)), g.constant(shift)))
    g.output(ops.reduce_mean(h, g.constant(np.array([1, 2], np.int64)), keepdims=0), names=["y"])
    feeds = {"x": rng.standard_normal((1, 24, 24, 22)).astype(np.float32)}
    got, impls = await _program_equals_steps(g, feeds, tmp_path)
    assert impls.get("FusedElementwise") and impls["ReduceMean"] == "reduce_mean_native", impls
    want = np.maximum(feeds["x"].astype(np.float64) * scale + shift, 0).mean(axis=(1, 2))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


async def test_a_chain_of_thousands_of_activations_builds_its_program(tmp_path, native_plans: None) -> None:
    """A FusedElementwise chain's last activation runs on its output in place; finding it once,
    not by recursing per step: a 1,500-Relu chain hit Python's recursion limit in the program's
    build (CI's 100k-node chain test timed out on it)."""
    g = aioge.Graph("relus")
    h = x = g.input("x", (4, 8), "float32")
    h = ops.mul(x, g.constant(np.float32(0.5)))
    for _ in range(1500):
        h = ops.relu(h)
    g.output(h, names=["y"])
    v = np.random.default_rng(5).standard_normal((4, 8)).astype(np.float32)
    got, impls = await _program_equals_steps(g, {"x": v}, tmp_path)
    assert list(impls) == ["FusedElementwise"], impls
    np.testing.assert_array_equal(got, np.maximum(v * np.float32(0.5), 0))


async def test_gpt2s_isnan_mask_runs_in_the_program(tmp_path, native_plans: None) -> None:
    """Issue 42: GPT-2's attention checks its scores with IsNaN before a Where; IsNaN had no C
    form, so the whole plan ran step by step."""
    g = aioge.Graph("isnan_mask")
    x = g.input("x", (2, 3, 40), "float32")
    masked = ops.where(ops.is_na_n(x), g.constant(np.float32(0.0)), x)
    g.output(ops.add(masked, g.constant(np.float32(1.0))), names=["y"])
    v = np.random.default_rng(4).standard_normal((2, 3, 40)).astype(np.float32)
    v[0, 1, ::3] = np.nan
    got, impls = await _program_equals_steps(g, {"x": v}, tmp_path)
    assert "IsNaN" in impls
    np.testing.assert_array_equal(got, np.where(np.isnan(v), 0.0, v).astype(np.float32) + 1)


@pytest.mark.parametrize("name", ["mlp", "transformer"])
async def test_a_device_run_is_the_native_program_bit_equal_to_its_steps(name: str, tmp_path, native_plans: None) -> None:
    """``run_sync`` (a device process's run) takes the native program as in-process runs do;
    a plan without one (Sin) still runs step by step there."""
    from aioge.runtime.workers import EngineWorkers

    graph, feeds, reference = EXAMPLES[name](batch=1)  # type: ignore[call-arg]
    async with aioge.Session() as s:
        await s.add_graph(1, graph)
        steps = await s.run_graph(1, feeds, trace=tmp_path / "trace.json")
        exe = aioge.runtime.executor.Executable(s.executable(1).model)
    workers = EngineWorkers(min_lanes=1, cpu_slots=1)
    try:
        got = await anyio.to_thread.run_sync(lambda: exe.run_sync(feeds, workers=workers))
        assert exe.native_runs == 1, _kernels(exe)
        for k, want in reference(feeds).items():
            np.testing.assert_allclose(got[k], want, rtol=1e-4, atol=1e-5)
            assert np.array_equal(got[k], steps[k]) and got[k].flags.writeable and got[k].flags.owndata
        g = aioge.Graph("no_form")
        g.output(ops.sin(g.input("x", (4, 8))), names=["y"])
        async with aioge.Session() as s:
            await s.add_graph(1, g)
            await s.run_graph(1, {"x": np.ones((4, 8), np.float32)})
            sin = aioge.runtime.executor.Executable(s.executable(1).model)
        out = sin.run_sync({"x": np.ones((4, 8), np.float32)}, workers=workers)
        assert sin.native_runs == 0
        np.testing.assert_allclose(out["y"], np.sin(1.0), rtol=1e-6)
    finally:
        workers.close()


async def test_a_failing_job_in_a_device_run_raises_execution_error_naming_its_node(native_plans: None) -> None:
    from aioge.runtime.workers import EngineWorkers

    async with _mlp_ran_once() as (s, exe, feeds, reference):
        ctx = exe._acquire(False)
        prog = exe._native_program(ctx)
        assert isinstance(prog, NativeProgram), _kernels(exe)
        prog._keep[0][0] = 999  # no such job: the C side refuses it
        exe._release(ctx)  # run_sync takes this context, and its broken program, from the pool
        workers = EngineWorkers(min_lanes=1, cpu_slots=1)
        try:
            with pytest.raises(ExecutionError) as err:
                exe.run_sync(feeds, workers=workers)
        finally:
            workers.close()
        assert err.value.node == exe.model.nodes[0].name and "unknown job" in str(err.value)


async def test_long_programs_of_concurrent_callers_run_whole_beside_each_other_each_its_own_rows(
    monkeypatch, native_plans: None
) -> None:
    # Not short (INLINE_US 0): a lone caller's runs split, queued for the C runner; once another
    # lane or split queued run is in flight the next go whole to the shared whole-run lanes, two at
    # once, and every caller gets its own feeds' rows back in the order it asked for them.
    graph, feeds, reference = EXAMPLES["cnn"](batch=1)  # type: ignore[call-arg]
    monkeypatch.setattr("aioge.runtime.schedule.INLINE_US", 0.0)
    rng = np.random.default_rng(0)
    many = [{k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in feeds.items()} for _ in range(48)]
    chosen: list[Any] = []
    real_choose = executor.choose

    def spy(*args: Any, **kwargs: Any) -> Any:
        chosen.append(real_choose(*args, **kwargs))
        return chosen[-1]

    monkeypatch.setattr(executor, "choose", spy)
    async with aioge.Session() as s:
        await s.add_graph(1, graph)
        for f in many[:3]:  # one caller at a time: split by the C runner
            np.testing.assert_allclose((await s.run_graph(1, f))["logits"], reference(f)["logits"], rtol=1e-4, atol=1e-5)
        assert chosen and set(chosen) == {Strategy.NATIVE_QUEUE_SPLIT}, chosen
        chosen.clear()
        got: dict[int, list[np.ndarray]] = {i: [] for i in range(len(many))}

        async def caller(i: int) -> None:
            for k in range(3):
                got[i].append((await s.run_graph(1, many[(i + k) % len(many)]))["logits"])

        async with anyio.create_task_group() as tg:
            for i in range(len(many)):
                tg.start_soon(caller, i)
        assert s._engines.workers.lane_runs == 0
    assert chosen.count(Strategy.NATIVE_LANE_WHOLE) > len(chosen) // 2, chosen
    assert Strategy.NATIVE_LANE_SPLIT not in chosen, chosen  # a split queued run counts among the lane runs
    for i, outs in got.items():
        for k, logits in enumerate(outs):
            np.testing.assert_allclose(logits, reference(many[(i + k) % len(many)])["logits"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layout", ["contiguous", "strided", "read-only", "fortran"])
async def test_a_feed_is_copied_in_by_the_programs_first_job_from_the_callers_array(layout: str, native_plans: None) -> None:
    # NativeProgram.stage points the program's first job (a C copy, split with the big jobs) at
    # the caller's array instead of copying it in Python; another layout goes through a spare.
    g = aioge.Graph("fed_copy")
    x = g.input("x", (1, 4, 128, 128), "float32")  # 64K values: the copy splits (native.ROWS_SPLIT)
    g.output(ops.relu(ops.mul(ops.add(x, 1.0), 2.0)), names=["y"])
    rng = np.random.default_rng(5)
    async with aioge.Session() as s:
        await s.add_graph(1, g)
        await s.run_graph(1, {"x": np.zeros((1, 4, 128, 128), np.float32)})
        exe = s.executable(1)
        prog = exe._native_program(exe._acquire(False))
        assert isinstance(prog, NativeProgram), _kernels(exe)
        assert prog._keep[0][0] == native.JOB_STRIDED and prog._keep[0][3] == 1, "the first job copies the feed, split"
        for i in range(3):  # a new array each run: each run reads its own
            base = rng.standard_normal((1, 4, 128, 256) if layout == "strided" else (1, 4, 128, 128)).astype(np.float32)
            f = {"strided": base[..., ::2], "fortran": np.asfortranarray(base)}.get(layout, base)
            f.flags.writeable = layout != "read-only"
            kept = f.copy()
            want = np.maximum((f + 1.0) * 2.0, 0)
            got = prog.run({"x": f}, split=bool(i % 2))["y"]
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(f, kept)  # the caller's array is only read
            got = (await s.run_graph(1, {"x": f}))["y"]
            np.testing.assert_array_equal(got, want)
        with pytest.raises(TypeError):
            prog.stage({"x": kept.astype(np.float64)})


@pytest.mark.parametrize(("batch", "size", "shared"), [(1, 13, False), (1, 9, True), (2, 7, False), (1, 1, False)])
async def test_a_fire_modules_expand_convs_write_into_the_concat_in_place(batch, size, shared, tmp_path, native_plans) -> None:
    """SqueezeNet's fire modules, whose expand convs may write their slices of the Concat's
    output (batch 1, where the arena allows); not an expand output something else reads as well
    (``shared``), nor at batch 2 (a channel slice is not one block). Whole and split, equal to
    numpy in float64 and bit-equal to the steps."""

    from aioge.examples.cnn import _conv_ref

    rng = np.random.default_rng(size)
    shapes = {"nx": (4, 16, 1, 1), "nx_b": (4,)}
    for f, cin in (("a", 6), ("b", 16)):
        shapes |= {f + "sq": (5, cin, 1, 1), f + "sq_b": (5,), f + "e1": (7, 5, 1, 1), f + "e1_b": (7,)}
        shapes |= {f + "e3": (9, 5, 3, 3), f + "e3_b": (9,)}
    w = {k: (rng.standard_normal(s) * 0.4).astype(np.float32) for k, s in shapes.items()}
    wd = {k: v.astype(np.float64) for k, v in w.items()}
    g = aioge.Graph("fire")
    x = g.input("x", (batch, 6, size, size), "float32")
    c = {k: g.constant(v) for k, v in w.items()}
    feeds = {"x": rng.standard_normal((batch, 6, size, size)).astype(np.float32)}
    h, ref = x, feeds["x"].astype(np.float64)
    for f in "ab":
        s = ops.relu(ops.conv2d(h, c[f + "sq"], c[f + "sq_b"]))
        e1 = ops.relu(ops.conv2d(s, c[f + "e1"], c[f + "e1_b"]))
        h = ops.concat(e1, ops.relu(ops.conv2d(s, c[f + "e3"], c[f + "e3_b"], pads=(1, 1, 1, 1))), axis=1)
        sr = np.maximum(_conv_ref(ref, wd[f + "sq"], wd[f + "sq_b"], 0), 0)
        e1r, e3r = (
            np.maximum(_conv_ref(sr, wd[f + "e1"], wd[f + "e1_b"], 0), 0),
            np.maximum(_conv_ref(sr, wd[f + "e3"], wd[f + "e3_b"], 1), 0),
        )
        ref = np.concatenate([e1r, e3r], 1)
    y = ops.conv2d(h, c["nx"], c["nx_b"])  # the next squeeze reads the join
    g.output(ops.add(y, ops.reduce_mean(e1, g.constant(np.array([1], np.int64)), keepdims=1)) if shared else y, names=["y"])
    got, impls = await _program_equals_steps(g, feeds, tmp_path)
    want = _conv_ref(ref, wd["nx"], wd["nx_b"], 0) + (e1r.mean(axis=1, keepdims=True) if shared else 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    async with _live_programs(g, feeds) as progs:
        assert progs, impls
        for p in progs:
            steps = p._ctx.layout.steps
            second = max(i for i in p._nodes if steps[i].op_type == "Concat")
            copies = sum(n == second for n in p._nodes)  # in place where the arena allows (test below)
            assert copies >= (2 if batch == 2 else 1 if shared else 0), impls
            for split in (False, True):
                np.testing.assert_allclose(p.run(feeds, split)["y"], want, rtol=1e-4, atol=1e-4)


def test_concat_inputs_are_bound_to_their_slices_of_its_output_only_where_no_other_value_has_its_bytes() -> None:
    """``_concat_in_place`` on a plan of steps (slots: 0 x, 1 s, 2 e1, 3 e3, 4 the join, 5 z):
    e1 and e3 become views of the join's channel slices; not when s (read by the convs that
    make them) shares the join's bytes, nor e1 when another step reads it, nor at batch 2."""
    from types import SimpleNamespace

    from aioge.runtime.native_program import _concat_in_place

    def plan(batch: int, s_on_join: bool, e1_readers: int) -> list[np.ndarray]:
        arena = np.zeros(4096, np.float32)
        join = arena[: batch * 12 * 5].reshape(batch, 12, 5)
        s = (arena[: batch * 10] if s_on_join else arena[2000 : 2000 + batch * 10]).reshape(batch, 2, 5)
        env = [np.zeros((batch, 3, 5), np.float32), s, np.zeros((batch, 4, 5), np.float32), np.zeros((batch, 8, 5), np.float32)]
        env += [join, np.zeros((batch, 4, 5), np.float32)]
        step = lambda op, i, o: SimpleNamespace(op_type=op, inputs=i, outputs=o)  # noqa: E731
        steps = [step("Conv", (0,), (1,)), step("Conv", (1,), (2,)), step("Conv", (1,), (3,)), step("Concat", (2, 3), (4,))]
        steps += [step("Conv", (4,) + (2,) * e1_readers, (5,))]
        _concat_in_place(SimpleNamespace(steps=steps), range(5), env, {5})
        return env

    env = plan(1, False, 0)
    assert np.shares_memory(env[2], env[4][:, :4]) and np.shares_memory(env[3], env[4][:, 4:])
    assert env[2].shape == (1, 4, 5) and env[3].shape == (1, 8, 5) and not np.shares_memory(env[2], env[3])
    env = plan(1, True, 0)
    assert not any(np.shares_memory(e, env[4]) for e in env[2:4])
    env = plan(1, False, 1)
    assert not np.shares_memory(env[2], env[4]) and np.shares_memory(env[3], env[4])
    env = plan(2, False, 0)
    assert not np.shares_memory(env[2], env[4]) and not np.shares_memory(env[3], env[4])


async def test_a_concat_of_view_ops_outputs_gets_their_values(tmp_path, native_plans) -> None:
    """Concat inputs that are view ops' outputs (Unsqueeze: the input's bytes, a step that copies
    nothing) are not bound to the join's slices: nothing would write them there (Scan-8's
    unrolled steps came out as stale arena bytes)."""
    g = aioge.Graph("views")
    x = g.input("x", (4, 3), "float32")
    axes = g.constant(np.array([0], np.int64))
    rows = [ops.unsqueeze(ops.tanh(ops.mul(x, g.constant(np.float32(k + 1)))), axes) for k in range(6)]
    parts = [ops.unsqueeze(ops.concat(*rows[k : k + 2], axis=0), axes) for k in (0, 2, 4)]  # a join of joins, as Scan unrolls
    g.output(ops.concat(*parts, axis=0), names=["y"])
    feeds = {"x": np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32)}
    got, _ = await _program_equals_steps(g, feeds, tmp_path)
    each = [np.tanh(feeds["x"].astype(np.float64) * (k + 1)) for k in range(6)]
    want = np.stack([np.stack(each[k : k + 2]) for k in (0, 2, 4)])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("batch", "size", "layers"), [(1, 9, 3), (1, 5, 1), (2, 6, 2), (1, 7, 4)])
async def test_a_dense_blocks_joins_are_laid_over_its_last_one(batch, size, layers, tmp_path, native_plans) -> None:
    """DenseNet's dense block: layer i joins the block's input and the features of the layers
    before it (a Concat whose inputs begin the next one's), then BatchNormalization and ReLU
    (one JOB_CHAIN pass) and its convs. At batch 1 every join is a view of the start of the
    block's last one, each feature written there by its conv: no Concat copies anything; at
    batch 2 (a channel slice is not one block) they copy. Whole and split, close to numpy in
    float64 and bit-equal to the steps."""

    from aioge.examples.cnn import _conv_ref

    rng = np.random.default_rng(size * 10 + layers)
    g = aioge.Graph("dense")
    x = g.input("x", (batch, 3, size, size), "float32")
    feeds = {"x": rng.standard_normal((batch, 3, size, size)).astype(np.float32)}
    const = lambda *s: (rng.standard_normal(s) * 0.4).astype(np.float32)  # noqa: E731
    w0 = const(6, 3, 3, 3)
    h = ops.relu(ops.conv2d(x, g.constant(w0), pads=(1, 1, 1, 1)))
    ref = np.maximum(_conv_ref(feeds["x"].astype(np.float64), w0.astype(np.float64), np.zeros(6), 1), 0)
    feats, refs = [h], [ref]
    for i in range(layers + 1):
        cat, cref = ops.concat(*feats, axis=1), np.concatenate(refs, 1)
        c = 6 + 4 * i
        sc, sh, w1, w3 = np.abs(const(c)) + 0.5, const(c), const(5, c, 1, 1), const(4, 5, 3, 3)
        bn = ops.batch_normalization(cat, *(g.constant(v) for v in (sc, sh, np.zeros(c, np.float32), np.ones(c, np.float32))))
        a = np.maximum(cref * (sc / np.sqrt(1 + 1e-5))[:, None, None] + sh[:, None, None], 0)
        if i == layers:  # the block's output: its last join, through BN + ReLU into a 1x1 conv
            g.output(ops.conv2d(ops.relu(bn), g.constant(w1)), names=["y"])
            want = _conv_ref(a, w1.astype(np.float64), np.zeros(5), 0)
            break
        b = ops.relu(ops.conv2d(ops.relu(bn), g.constant(w1)))
        feats.append(ops.conv2d(b, g.constant(w3), pads=(1, 1, 1, 1)))
        bref = np.maximum(_conv_ref(a, w1.astype(np.float64), np.zeros(5), 0), 0)
        refs.append(_conv_ref(bref, w3.astype(np.float64), np.zeros(4), 1))
    got, impls = await _program_equals_steps(g, feeds, tmp_path)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    async with _live_programs(g, feeds) as progs:
        assert progs, impls
        for p in progs:
            steps = p._ctx.layout.steps
            copies = sum(steps[i].op_type == "Concat" for i in p._nodes)
            assert (copies > 0) == (batch == 2), impls
            chains = sum(c.job == native.JOB_CHAIN for c in p._keep[1])
            assert chains == layers + 1, impls  # each BatchNormalization and its ReLU one pass
            for split in (False, True):
                np.testing.assert_allclose(p.run(feeds, split)["y"], want, rtol=1e-3, atol=1e-3)


def test_a_chain_of_joins_is_laid_over_the_last_only_where_nothing_else_needs_them() -> None:
    """``_concat_in_place`` on a dense block's plan (slots: 0 x, 1 f0, 2 join A = (f0), 3 a, 4 f1,
    5 join B = (f0, f1), 6 b, 7 f2, 8 join C = (f0, f1, f2), 9 z): A and B become views of the start of
    C, f0 .. f2 of their slices; C gets bytes of its own where the arena gave its bytes to a (read in
    between); no chain when f1 is read by another step too, nor when join B is read after C, nor
    when B is an output."""
    from types import SimpleNamespace

    from aioge.runtime.native_program import _concat_in_place

    def plan(c_on_a: bool = False, f1_reader: bool = False, b_late: bool = False, outs: tuple[int, ...] = (9,)) -> list:
        arena = np.zeros(8192, np.float32)
        env = [np.zeros((1, 3, 5), np.float32)] + [None] * 9
        shapes = {1: 2, 2: 2, 3: 2, 4: 3, 5: 5, 6: 2, 7: 4, 8: 9, 9: 2}
        at = 0
        for s, c in shapes.items():
            env[s] = arena[at : at + c * 5].reshape(1, c, 5)
            at += 64
        if c_on_a:
            env[8] = arena[2 * 64 : 2 * 64 + 45].reshape(1, 9, 5)  # C's bytes from a's start
        step = lambda op, i, o: SimpleNamespace(op_type=op, inputs=i, outputs=o)  # noqa: E731
        steps = [step("Conv", (0,), (1,)), step("Concat", (1,), (2,)), step("Conv", (2,), (3,)), step("Conv", (3,), (4,))]
        steps += [step("Concat", (1, 4), (5,)), step("Conv", (5,), (6,)), step("Conv", (6,) + (4,) * f1_reader, (7,))]
        steps += [step("Concat", (1, 4, 7), (8,)), step("Conv", (8,) + (5,) * b_late, (9,))]
        _concat_in_place(SimpleNamespace(steps=steps), range(len(steps)), env, set(outs))
        return env

    def chained(env: list) -> bool:
        c = env[8]
        views = [(1, 0, 2), (4, 2, 5), (7, 5, 9), (2, 0, 2), (5, 0, 5)]
        return all(
            np.shares_memory(env[s], c)
            and env[s].shape == c[:, lo:hi].shape
            and env[s].__array_interface__["data"][0] == c[:, lo:hi].__array_interface__["data"][0]
            for s, lo, hi in views
        )

    assert chained(plan())
    env = plan(c_on_a=True)
    assert chained(env) and not np.shares_memory(env[8], env[3])
    assert not chained(plan(f1_reader=True))
    assert not chained(plan(b_late=True))
    assert not chained(plan(outs=(5, 9)))
