"""The machine-states section (issue 42): each side alone in its own process, quiet and beside busy ones."""

from __future__ import annotations

import os
import subprocess
import time

import anyio
import onnx
import pytest

from aioge.benchmarks import child, measure, states
from aioge.benchmarks.suite import SuiteConfig, evaluate_targets, machine, render_markdown
from aioge.benchmarks.workloads import to_onnx
from aioge.cli import main
from aioge.examples import build_mlp


def _spinners() -> int:
    """This process's busy children."""
    out = subprocess.run(["ps", "-o", "args=", "--ppid", str(os.getpid())], capture_output=True, text=True).stdout
    return sum(states._SPIN in line for line in out.splitlines())


def test_each_side_runs_alone_in_its_own_process_quiet_and_beside_a_busy_one(tmp_path, monkeypatch) -> None:
    graph, _, _ = build_mlp(batch=1)
    path = tmp_path / "mlp.onnx"
    onnx.save(to_onnx(graph), str(path))
    calls: list[tuple[str, int, int]] = []
    real = measure.fresh_process

    def spy(mode: str, spec: dict, **kw: object) -> dict:
        calls.append((mode, spec["runs"], _spinners()))  # the state's busy processes run beside
        assert spec["pause_s"] == (0.01 if spec["runs"] else 0.0)
        assert spec["budget_s"] == (0.2 if spec["runs"] else 0.0)
        return real(mode, spec, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(measure, "fresh_process", spy)
    models = {"mlp": str(path), "mlp_quiet_only": str(path)}
    section = states.states(["quiet", "busy1"], models, busy_models={"mlp"}, rounds=1, runs=3, pause_s=0.01, budget_s=0.2)
    # A compiling process per model first, then per state and model: aioge alone, then
    # onnxruntime alone; the busy state runs its busy_models only.
    assert calls == [("aioge", 0, 0)] * 2 + [("aioge", 3, 0), ("ort", 3, 0)] * 2 + [("aioge", 3, 1), ("ort", 3, 1)]
    assert _spinners() == 0  # killed with their state
    assert [(r["model"], r["state"]) for r in section["rows"]] == [
        ("mlp", "quiet"),
        ("mlp_quiet_only", "quiet"),
        ("mlp", "busy1"),
    ]
    quiet, _, busy = section["rows"]
    assert (quiet["state"], busy["state"], busy["busy_processes"]) == ("quiet", "busy1", 1)
    for r in section["rows"]:
        assert 0 < r["aioge_best_s"] <= r["aioge_median_s"] and 0 < r["ort_best_s"] <= r["ort_median_s"]
        assert r["ratio"] == pytest.approx(r["aioge_median_s"] / r["ort_median_s"])
        assert r["aioge_runs"] > 3 and r["ort_runs"] > 3  # on past 3 runs until 0.2 s had passed
    assert quiet["vs_quiet"] == 1.0 and busy["vs_quiet"] == pytest.approx(busy["ratio"] / quiet["ratio"])
    results = {"rows": [], "config": {"concurrency": []}, "states": section}
    checks = {t["target"]: t for t in evaluate_targets(results)}
    assert checks["quiet solo max aioge/ort"]["figure"] == max(r["ratio"] for r in section["rows"] if r["state"] == "quiet")
    assert checks["busy1: max aioge/ort ratio over its quiet one"]["figure"] == busy["vs_quiet"]
    table = "\n".join(states.states_table(section))
    assert "| mlp | busy1 |" in table and f"{busy['ratio']:.2f}" in table and "10 ms apart" in table
    assert "(and on for 0.2 s)" in table


def test_a_process_times_its_runs_and_on_until_its_budget_has_passed() -> None:
    async def call() -> None:
        time.sleep(0.002)

    assert len(anyio.run(child._timed_runs_async, call, {"runs": 3, "warm_s": 0})) == 3
    times = anyio.run(child._timed_runs_async, call, {"runs": 3, "warm_s": 0, "budget_s": 0.05})
    assert len(times) > 3 and sum(times) >= 0.045
    assert len(anyio.run(child._timed_runs_async, call, {"runs": 30, "warm_s": 0, "budget_s": 0.01})) == 30


def test_unknown_states_and_models_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match=r"machine states must be some of \['quiet', 'busy1', 'busy4'\]"):
        SuiteConfig(states=["idle"])
    with pytest.raises(ValueError, match="states_pause_ms must be at least 0"):
        SuiteConfig(states=["quiet"], states_pause_ms=-1)
    with pytest.raises(ValueError, match="machine-states models must be real-weights models"):
        SuiteConfig(states=["quiet"], states_models=["mlp"])
    assert main(["bench", "--states-only"]) == 2
    assert "machine states must be some of" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"unknown machine states \['idle'\]"):
        states.states(["idle"], {})


def test_the_report_has_the_section_only_when_measured() -> None:
    section = {
        "rounds": 1,
        "runs": 2,
        "rows": [
            {"model": "resnet18", "state": "quiet", "busy_processes": 0, "aioge_median_s": 0.02, "aioge_best_s": 0.019,
             "ort_median_s": 0.018, "ort_best_s": 0.017, "ratio": 0.02 / 0.018, "vs_quiet": 1.0},
        ],
    }  # fmt: skip
    base = {"machine": machine(), "rows": [], "targets": [], "seconds": 1.0}
    assert "Machine states" not in render_markdown(base)
    assert "| resnet18 | quiet | 20.00 | 19.00 | 18.00 | 17.00 | 1.11 | 1.00 |" in render_markdown({**base, "states": section})
