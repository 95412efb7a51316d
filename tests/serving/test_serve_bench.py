"""``aioge bench --serve``: both servers answer every request correctly and the figures are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aioge.cli import main


@pytest.mark.timeout(300)  # two server processes start, compile and take 8 clients' requests
def test_bench_serve_runs_both_arms_and_writes_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "bench",
        "--serve",
        "--serve-clients",
        "8",
        "--serve-total",
        "40",
        "--serve-workloads",
        "mlp",
        "--output-dir",
        str(tmp_path),
    ]
    assert main(argv) == 0
    rows = json.loads((tmp_path / "serve.json").read_text())
    assert [r["arm"] for r in rows] == ["aioge serve", "onnxruntime (64 threads)"]
    for r in rows:
        assert r["workload"] == "mlp" and r["clients"] == 8
        assert r["requests"] == 40 and r["errors"] == 0
        assert r["max_abs_err"] < 1e-5  # the softmax of the last response vs the numpy reference
        assert 0 < r["p50_ms"] <= r["p99_ms"] and r["rps"] > 0
    assert "| mlp | aioge serve | 8 | 40 | 0 |" in (tmp_path / "SERVE.md").read_text()
    assert "wrote" in capsys.readouterr().out


def test_bench_serve_rejects_unknown_workloads(tmp_path: Path) -> None:
    from aioge.benchmarks.serve_bench import ServeBenchConfig, run_serve_bench

    with pytest.raises(ValueError, match="unknown serving workloads"):
        run_serve_bench(ServeBenchConfig(workloads=("nope",)))
