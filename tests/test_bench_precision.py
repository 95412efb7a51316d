"""``aioge bench --precision``: each mode's accuracy against onnxruntime float32 and its latency
beside it, a mode below the cosine floor named under the table."""

from __future__ import annotations

import numpy as np
import pytest

from aioge.benchmarks.precision import COSINE_FLOOR, accuracy, precision_section, precision_table
from aioge.benchmarks.suite import SuiteConfig
from aioge.benchmarks.workloads import load_workloads
from aioge.cli import main

pytest.importorskip("onnxruntime")


def test_the_section_measures_each_mode_against_onnxruntime_float32(tmp_path) -> None:
    (w,) = load_workloads(["mlp"])
    w.options = {**w.options, "aioge.tune_mode": "heuristic"}
    lines: list[str] = []
    section = precision_section(
        [w], ["must_keep_origin_dtype", "allow_fp32_to_bf16"], rounds=1, runs=1, cache_dir=str(tmp_path), progress=lines.append
    )
    keep, bf16 = section["rows"]
    assert (keep["mode"], bf16["mode"]) == ("must_keep_origin_dtype", "allow_fp32_to_bf16")
    assert keep["cosine"] > 0.9999999 and keep["max_abs_err"] < 1e-4 and keep["top1"] == 1.0
    assert "bf16" not in keep["lowered"] and bf16["lowered"]["bf16"] >= 2, "the MLP's layers run in bf16"
    assert 0.99 < bf16["cosine"] < 1.0 and bf16["max_abs_err"] > keep["max_abs_err"]
    assert all(
        r["aioge"] > 0 and r["ort_fp32"] > 0 and r["vs_ort"] == pytest.approx(r["aioge"] / r["ort_fp32"]) for r in section["rows"]
    )
    assert len(lines) == 2 and "allow_fp32_to_bf16" in lines[1]
    table = "\n".join(precision_table(section))
    assert "| mlp | allow_fp32_to_bf16 |" in table


def test_a_mode_below_the_cosine_floor_is_named_under_the_table() -> None:
    want = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    got = np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    acc = accuracy(got, want)
    assert acc["top1"] == 0.5 and acc["max_abs_err"] == 2.0 and acc["cosine"] == pytest.approx(24 / 28)
    row = {"model": "m", "mode": "force_fp16", "lowered": {"fp16": 3}, "aioge": 1e-3, "ort_fp32": 2e-3, "vs_ort": 0.5, **acc}
    table = precision_table({"rows": [row], "below_floor": [f"m force_fp16 (cosine {acc['cosine']:.6f})"], "skipped": {}})
    assert f"Below cosine {COSINE_FLOOR}: m force_fp16 (cosine 0.857143)." in table


def test_bad_precision_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="unknown precision modes"):
        SuiteConfig(precision=["fp8"])
    assert main(["bench", "--precision-only"]) == 2
    assert "precision_only needs modes" in capsys.readouterr().err
