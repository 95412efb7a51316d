"""The benchmark suite: a small real run end to end, the target checks, the report and the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest

from aioge.benchmarks.measure import geomean, percentile
from aioge.benchmarks.suite import TARGETS, SuiteConfig, evaluate_targets, render_markdown, run_suite, write_results
from aioge.benchmarks.workloads import Workload, add_chain, load_workloads, to_onnx
from aioge.cli import main
from aioge.examples import build_mlp


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    graph, _, _ = build_mlp(batch=1)
    path = tmp_path_factory.mktemp("model") / "mlp.onnx"
    onnx.save(to_onnx(graph), str(path))
    cfg = SuiteConfig(
        workloads=["mlp", "add_chain"],
        rounds=1,
        runs=2,
        concurrency=(1, 3),
        concurrency_workloads=["mlp"],
        concurrency_rounds=1,
        startup_models=[str(path)],
        blas_variant=False,
        chain=40,
        devices=2,
        serving_workloads=["mlp"],
        serving_clients=8,
        serving_requests=3,
        serving_rounds=1,
    )
    return run_suite(cfg)


def test_small_run_measures_every_side(small_run: dict) -> None:
    rows = {r["workload"]: r for r in small_run["rows"]}
    assert set(rows) == {"mlp", "add_chain"}
    mlp = rows["mlp"]
    for side in ("aioge", "ort", "ort_cores", "numpy", "onnx_reference"):
        assert mlp[side] > 0, side
    assert mlp["aioge_vs_ort"] == pytest.approx(mlp["aioge"] / mlp["ort"])
    assert mlp["reference_vs_aioge"] == pytest.approx(mlp["onnx_reference"] / mlp["aioge"])
    assert mlp["max_abs_err"] < 1e-4 and mlp["ort_max_abs_err"] < 1e-4
    assert mlp["arena_bytes"] > 0 and mlp["rss_peak_bytes"] >= mlp["rss_start_bytes"] > 0
    # In-process at each level, then the top level again on 2 device processes.
    assert [(c["concurrency"], c["devices"]) for c in mlp["concurrency"]] == [(1, 0), (3, 0), (3, 2)]
    for c in mlp["concurrency"]:
        assert (
            c["aioge_runs_per_s"] > 0
            and c["ort_runs_per_s"] > 0
            and c["lag_samples"] >= 0
            and c["gc_max_ms"] >= 0
            and c["steal_ms"] >= 0
        )
        assert c["ratio"] == pytest.approx(c["aioge_runs_per_s"] / c["ort_runs_per_s"])
    chain = rows["add_chain"]
    assert chain["compiled_nodes"] == 40  # fusion is off for the chain: one node per Add
    assert chain["aioge_us_per_node"] == pytest.approx(chain["aioge"] / 40 * 1e6)
    assert "onnx_reference" not in chain  # micro workloads skip onnx.reference


def test_the_serving_section_measures_batched_unbatched_and_the_pool(small_run: dict) -> None:
    (row,) = small_run["serving"]
    assert row["workload"] == "mlp" and row["clients"] == 8
    for side in ("batched", "unbatched", "ort"):
        assert row[f"{side}_rps"] > 0 and 0 < row[f"{side}_p50_s"] <= row[f"{side}_p99_s"]
    assert row["batched_vs_ort"] == pytest.approx(row["batched_rps"] / row["ort_rps"])
    for side in ("batched", "unbatched"):  # the loop's thread is one of the process's
        assert 0 < row[f"{side}_loop_cpu_us"] <= row[f"{side}_cpu_us"] * 1.01
    assert row["ort_cpu_us"] > 0 and "CPU us/req" in render_markdown(small_run)
    assert 1 <= row["mean_batch_rows"] <= 8 and row["lag_max_ms"] >= row["lag_p99_ms"] >= 0
    assert row["lag_runq_ms"] >= 0 and 0 <= row["lag_own_max_ms"] <= row["lag_max_ms"] + 1e-9
    assert row["gc_max_ms"] >= 0  # a lag the collector caused is told from one the runtime did
    targets = {t["target"]: t for t in small_run["targets"]}
    assert targets["serving mlp: batched req/s aioge/ort"]["bound"] == 2.0
    assert "longest GC pause" in targets["serving mlp: loop lag max ms"]["detail"]
    assert "## Serving: 8 concurrent single-row clients" in render_markdown(small_run)


def test_startup_loads_from_the_graph_cache_in_a_fresh_process(small_run: dict) -> None:
    (st,) = small_run["startup"]
    assert st["cold"]["kernels_compiled"] > 0 and not st["cold"]["graph_cache_hit"]
    assert st["warm_kernel_cache"]["kernels_compiled"] == 0 and st["warm_kernel_cache"]["kernel_cache_hits"] > 0
    assert st["graph_cache_load"]["graph_cache_hit"] and not st["graph_cache_save"]["graph_cache_hit"]
    assert st["checksums_agree"]
    assert st["ort"]["start_s"] > 0
    for k in ("cold", "graph_cache_load", "ort"):  # CPU seconds beside the wall clock's (both threads)
        assert 0 < st[k]["start_cpu_s"] < 10 * st[k]["start_s"] + 1
    assert f"{st['ort']['start_cpu_s']:.3f})" in render_markdown(small_run)


def test_targets_are_judged_from_the_figures(small_run: dict) -> None:
    by_name = {t["target"]: t for t in small_run["targets"]}
    sink = by_name["sink us/node on the Add chain"]
    assert sink["figure"] == pytest.approx(small_run["rows"][1]["aioge_us_per_node"])
    assert sink["status"] == ("PASS" if sink["figure"] <= TARGETS["sink_us_per_node"] else "MISS")
    assert by_name["light/ geomean aioge/ort (BLAS env as set)"]["status"] == "n/a"  # no light/ model ran
    for where in ("in-process", "aioge.exec_devices=2"):
        burst = by_name[f"min 3-concurrent throughput aioge/ort ({where})"]
        assert burst["status"] == ("PASS" if burst["figure"] >= TARGETS["concurrent_vs_ort"] else "MISS")


def test_results_files(small_run: dict, tmp_path) -> None:
    md, js = write_results(small_run, tmp_path / "out")
    text = md.read_text()
    assert "| mlp |" in text and "| add_chain |" in text and "## Targets" in text and "OPENBLAS_CORETYPE=" in text
    assert "graph_cache_load" in text
    data = json.loads(js.read_text())
    assert data["rows"][0]["workload"] == "mlp" and data["machine"]["cpus"] >= 1


def _fake(workload: str, aioge: float, ort: float, **extra: object) -> dict:
    return {"workload": workload, "aioge": aioge, "ort": ort, "aioge_vs_ort": aioge / ort, **extra}


def test_target_checks_pass_and_miss() -> None:
    rows = [
        _fake("resnet50", 2.0, 1.0, reference_vs_aioge=30.0),
        _fake("vgg19", 1.0, 1.0, reference_vs_aioge=10.0),
        _fake(
            "mlp",
            1.0,
            1.0,
            concurrency=[
                {"concurrency": 64, "ratio": 0.5, "lag_max_ms": 25.0, "devices": 0, "steal_ms": 40.0, "gc_max_ms": 0.5},
                {"concurrency": 64, "ratio": 0.9, "lag_max_ms": 5.0, "devices": 2},
            ],
        ),
    ]
    results = {
        "rows": rows,
        "config": {"concurrency": [64]},
        "startup": [{"model": "m", "graph_cache_load": {"start_s": 0.2}, "ort": {"start_s": 0.4}}],
    }
    got = {t["target"]: (t["figure"], t["status"]) for t in evaluate_targets(results)}
    assert got["light/ geomean aioge/ort (BLAS env as set)"] == (pytest.approx(np.sqrt(2.0)), "PASS")
    assert got["min onnx.reference/aioge over light/"] == (10.0, "MISS")
    assert got["min 64-concurrent throughput aioge/ort (in-process)"] == (0.5, "MISS")
    assert got["min 64-concurrent throughput aioge/ort (aioge.exec_devices=2)"] == (0.9, "PASS")
    assert got["max event-loop lag ms"] == (25.0, "MISS")
    lag = next(t for t in evaluate_targets(results) if t["target"] == "max event-loop lag ms")
    assert "mlp, 64 in flight, devices 0, 40 ms steal, longest GC pause 0.5 ms" in lag["detail"]  # whose lag it was
    assert got["fresh-process start m: aioge (graph cache) / ort (create + first run)"] == (0.5, "PASS")
    assert got["sink us/node on the Add chain"] == (None, "n/a")


def test_render_without_optional_sections() -> None:
    from aioge.benchmarks.suite import machine

    row = {
        **_fake("mlp", 0.001, 0.001),
        "compiled_nodes": 4,
        "ort_cores": 0.001,
        "max_abs_err": 0.0,
        "arena_bytes": 1024,
        "rss_peak_bytes": 2**20,
        "compile_s": 0.1,
    }
    text = render_markdown({"machine": machine(), "rows": [row], "targets": [], "seconds": 1.0})
    assert "| mlp | 4 | 1.000 | 1.000 |" in text and "Start-up" not in text


def test_helpers() -> None:
    assert geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert percentile([3.0, 1.0, 2.0], 0.99) == 3.0 and percentile([], 0.5) == 0.0


def test_workload_check_rejects_a_wrong_output() -> None:
    w = add_chain(3)
    assert w.check({"y": np.full((1, 16), 1.5, np.float32)}) == 0.0
    with pytest.raises(AssertionError, match="add_chain: output .y. is off by up to 1"):
        w.check({"y": np.full((1, 16), 2.5, np.float32)})
    assert isinstance(w, Workload) and w.numpy_fn is not None
    np.testing.assert_allclose(w.numpy_fn(w.feeds)["y"], w.expected["y"])


def test_builder_workloads_export_to_onnx_that_onnxruntime_agrees_with() -> None:
    import onnxruntime as ort

    for w in load_workloads(["transformer", "conv_branches"]):
        sess = ort.InferenceSession(w.onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
        got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, w.feeds)))
        assert w.check(got) < 1e-3


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--rounds", "0"], "at least 1"),
        (["--workloads", "mlp,nope"], "unknown workloads ['nope']"),
        (["--devices", "65"], "devices must be from 0 to 64"),
        (["--startup-models", "resnet18,light_resnet50"], "unknown start-up models ['light_resnet50']"),
        (["--startup-models", "/no/such/model.onnx"], "unknown start-up models ['/no/such/model.onnx']"),
    ],
)
def test_cli_rejects_bad_arguments(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", *argv]) == 2
    assert message in capsys.readouterr().err


def _mlp_latency(**kwargs: object) -> dict:
    """``measure.latency`` of the mlp workload in a fresh session (heuristic kernels)."""
    import anyio

    import aioge
    from aioge.benchmarks import measure
    from aioge.benchmarks.workloads import load_workloads

    (w,) = load_workloads(["mlp"])

    async def go() -> dict:
        async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
            await s.add_graph(1, w.graph)
            return await measure.latency(w, s, 1, **kwargs)  # type: ignore[arg-type]

    return anyio.run(go)


def test_a_failing_onnx_reference_is_reported_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The yardstick's own failure (onnx.reference's GatherElements on BERT, say) is a note on
    the row; aioge's and onnxruntime's figures stand."""
    import onnx.reference

    class Broken:
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise ValueError("cannot reshape array of size 1 into shape (1,128)")

    monkeypatch.setattr(onnx.reference, "ReferenceEvaluator", Broken)
    row = _mlp_latency(rounds=1, runs=2, reference=True)
    assert row["aioge"] > 0 and row["ort"] > 0 and "onnx_reference" not in row
    assert row["onnx_reference_error"] == "ValueError: cannot reshape array of size 1 into shape (1,128)"


def test_startup_models_resolve_to_light_real_or_given_files(monkeypatch) -> None:
    from aioge.benchmarks import suite

    monkeypatch.setattr(suite, "real_model_path", lambda name: Path("/exported") / f"{name}.onnx")
    assert suite._startup_path("/models/m.onnx") == "/models/m.onnx"
    assert suite._startup_path("bert_base") == "/exported/bert_base.onnx"
    assert suite._startup_path("squeezenet").endswith(os.path.join("light", "light_squeezenet.onnx"))


def test_the_start_up_child_feeds_token_ids_to_an_int64_input_and_times_each_import_apart(tmp_path) -> None:
    # BERT's input is int64 token ids: the child feeds ids (not floats) to aioge and onnxruntime alike.
    from onnx import TensorProto, helper, numpy_helper

    from aioge.benchmarks import measure

    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((100, 4)).astype(np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"])],
        "embed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4])],
        [table],
    )
    path = tmp_path / "embed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    a = measure.fresh_process("aioge", {"model": str(path), "options": {"ge.op_compiler_cache_dir": str(tmp_path / "k")}})
    o = measure.fresh_process("ort", {"model": str(path)})
    assert a["checksum"] == pytest.approx(o["checksum"], rel=1e-6)
    # Both sides time their own import apart from the start: aioge's is not done before the
    # child starts timing (it was, run with -m, and its lazy modules fell into load and compile).
    assert a["aioge_modules_before_import"] == 0 and a["import_s"] > 0 and o["import_s"] > 0


def test_each_side_of_a_latency_round_starts_settle_seconds_after_the_last_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime's pool threads spin for tens of milliseconds after its last run: a side timed
    right after another would pay for the other's threads. Every side's round (aioge's and each
    yardstick's) starts at least SETTLE_S after the previous side's round ended."""
    import time

    from aioge.benchmarks import measure

    spans: list[tuple[float, float]] = []
    sync, async_ = measure.median_of_runs, measure.median_of_runs_async

    def timed(fn, runs):  # type: ignore[no-untyped-def]
        t = time.monotonic()
        out = sync(fn, runs)
        spans.append((t, time.monotonic()))
        return out

    async def timed_async(fn, runs):  # type: ignore[no-untyped-def]
        t = time.monotonic()
        out = await async_(fn, runs)
        spans.append((t, time.monotonic()))
        return out

    monkeypatch.setattr(measure, "median_of_runs", timed)
    monkeypatch.setattr(measure, "median_of_runs_async", timed_async)
    row = _mlp_latency(rounds=2, runs=2, reference=False)
    assert row["aioge"] > 0 and row["ort"] > 0
    assert len(spans) == 2 * 4  # aioge, ort, ort_cores, numpy; two rounds
    assert all(b[0] - a[1] >= measure.SETTLE_S for a, b in zip(spans, spans[1:]))


def test_a_median_of_runs_follows_untimed_runs_for_warm_seconds() -> None:
    """After a pause the first runs of a small model are slow (idle threads and cores coming
    back): ``median_of_runs`` times its runs only after WARM_S of untimed ones."""
    import time

    import anyio

    from aioge.benchmarks import measure

    for timed in (measure.median_of_runs, None):
        calls: list[float] = []

        def fn() -> None:
            calls.append(time.perf_counter())
            time.sleep(0.001)

        async def afn() -> None:
            fn()

        start = time.perf_counter()
        if timed is not None:
            timed(fn, 3)
        else:
            anyio.run(measure.median_of_runs_async, afn, 3)
        assert len(calls) >= 4 and calls[-3] - start >= measure.WARM_S


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_concurrency_round_runs_bursts_back_to_back_for_round_seconds(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One burst of 64 small runs lasts milliseconds, and single bursts were the figure's noise:
    each side's round repeats whole bursts until ROUND_S has passed, and its rate is all of
    its runs over all of its time."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    import anyio

    from aioge.benchmarks import measure

    monkeypatch.setattr(measure, "ROUND_S", 0.05)
    calls = {"aioge": 0, "ort": 0}

    class Session:
        async def run_graph(self, gid: int, feeds: dict) -> None:
            calls["aioge"] += 1
            await anyio.sleep(0.004)

    class Ort:
        def run(self, names: object, feeds: dict) -> None:
            calls["ort"] += 1
            time.sleep(0.004)

    t = time.perf_counter()
    rate = anyio.run(measure._aioge_round, Session(), 1, {}, 4, backend=backend)
    spent = time.perf_counter() - t
    with ThreadPoolExecutor(4) as pool:
        ort_rate = measure._ort_round(Ort(), {}, pool, 4)
    for side, r in (("aioge", rate), ("ort", ort_rate)):
        # whole bursts, repeated: at least two of them fill ROUND_S (five when each 4 ms sleep
        # takes 4 ms; a loaded machine stretches them, so the test does not count on five)
        assert calls[side] % 4 == 0 and calls[side] >= 4 * 2, calls
        assert r < 4 / 0.004 * 1.01  # no faster than the calls allow
    assert spent >= 0.05 and rate == pytest.approx(calls["aioge"] / spent, rel=0.2)


def test_a_concurrent_round_settles_after_a_full_garbage_collection() -> None:
    """A full collection due from earlier work (the bench's 160K graph objects) stalled a
    round's event loop 39 ms: settle() runs it before the round, outside the timed window."""
    import gc

    import anyio

    from aioge.benchmarks import measure

    seen: list[int] = []

    def watch(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(watch)
    try:
        anyio.run(measure.settle)
    finally:
        gc.callbacks.remove(watch)
    assert 2 in seen


@pytest.mark.skipif(not os.path.isfile(f"/proc/self/task/{os.getpid()}/schedstat"), reason="needs Linux schedstat")
def test_the_lag_monitor_tells_a_wait_for_a_cpu_from_the_loops_own_work() -> None:
    """A lag is the loop's own (a callback's work: here 30 ms of CPU) or the machine's (its thread
    runnable while others hold the CPUs: here a spinning process pinned to the loop's one CPU
    beside that work)."""
    import subprocess
    import sys
    import time

    import anyio

    from aioge.benchmarks.measure import LagMonitor

    async def watch(mon: LagMonitor, block: bool) -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(mon.run)
            await anyio.sleep(0.05)
            if block:
                end = time.thread_time() + 0.03
                while time.thread_time() < end:  # the loop's thread busy for 30 ms of CPU
                    pass
            await anyio.sleep(0.3)
            tg.cancel_scope.cancel()

    busy = LagMonitor()
    anyio.run(watch, busy, True)
    lag, _, own = busy.worst()
    assert own >= 0.025 and lag >= own, (lag, own)  # however long the machine kept it off a CPU too

    # The same 30 ms of work on a CPU shared with a spinning process: the scheduler shares it
    # while both stay runnable (a thread that only sleeps 1 ms ticks is woken ahead of a spinner
    # and rarely waits), so the longest lag is that work plus the spinner's turns, told apart.
    allowed = os.sched_getaffinity(0)
    cpu = min(allowed)
    spin = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
    try:
        time.sleep(0.3)  # the spinner pinned and running
        os.sched_setaffinity(0, {cpu})  # this thread: the loop's
        crowded = LagMonitor()
        anyio.run(watch, crowded, True)
    finally:
        os.sched_setaffinity(0, allowed)
        spin.kill()
        spin.wait()
    lag, runq, own = crowded.worst()
    assert runq >= 0.01 and lag >= runq + 0.025, (lag, runq, own)  # the spinner's turns, beside the loop's 30 ms
    assert 0.025 <= own < lag, (lag, runq, own)  # the loop's own: its work, not the waits


def test_the_serving_section_serves_the_batched_graph_under_bf16_against_the_fp32_pool(tmp_path: Path) -> None:
    import functools

    import anyio

    from aioge.benchmarks.serving import serving

    # issue 39's serving target: the batched graph again under allow_fp32_to_bf16 (its outputs
    # checked by cosine against float32), beside onnxruntime's float32 pool
    run = functools.partial(serving, "mlp", clients=4, requests=3, rounds=1, cache_dir=str(tmp_path / "k"), bf16=True)
    row = anyio.run(run)
    assert row["batched_bf16_rps"] > 0 and 0 < row["batched_bf16_p50_s"] <= row["batched_bf16_p99_s"]
    assert row["batched_bf16_vs_ort"] == pytest.approx(row["batched_bf16_rps"] / row["ort_rps"])
    results = {"rows": [], "config": {"concurrency": []}, "serving": [{**row, "lag_p99_ms": 0.0, "lag_max_ms": 0.0}]}
    target = next(t for t in evaluate_targets(results) if t["target"] == "serving mlp: batched bf16 req/s aioge/ort fp32")
    assert target["figure"] == row["batched_bf16_vs_ort"] and target["bound"] == 2.0
    assert "allow_fp32_to_bf16" in target["detail"]
    plain = anyio.run(functools.partial(serving, "mlp", clients=2, requests=1, rounds=1, bf16=False))
    assert "batched_bf16_rps" not in plain  # the float32 sides alone
