"""The real-weights suite of ``aioge bench``: group names, the skip without torch, targets, export."""

from __future__ import annotations

import importlib.util

import anyio
import numpy as np
import pytest

from aioge.benchmarks import real_models, suite
from aioge.benchmarks.suite import TARGETS, SuiteConfig, evaluate_targets, render_markdown, run_suite
from aioge.benchmarks.workloads import LIGHT_NODUP, REAL, load_workloads


def test_group_names_expand_to_their_workloads() -> None:
    assert SuiteConfig(workloads=["real", "mlp", "resnet18"]).workloads == [*REAL, "mlp"]
    assert SuiteConfig(workloads=["light-nodup"]).workloads == list(LIGHT_NODUP)
    with pytest.raises(ValueError, match="unknown workloads"):
        SuiteConfig(workloads=["reel"])


def test_light_nodup_turns_the_duplicate_filter_pass_off() -> None:
    (w,) = load_workloads(["squeezenet-nodup"])
    assert w.name == "squeezenet-nodup" and w.group == "light-nodup"
    assert w.options["ge.optimizationSwitch"] == "DuplicateFilterPass:off"


def test_without_torch_the_real_models_are_skipped_and_said_so(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("AIOGE_BENCH_MODELS", str(tmp_path))  # nothing cached
    real_find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real_find(name, *a))
    why = real_models.real_available()
    assert why is not None and "torch" in why and "aioge[torch]" in why
    monkeypatch.setattr(suite, "real_available", lambda: why)
    cfg = SuiteConfig(
        workloads=["real", "add_chain"],
        rounds=1,
        runs=1,
        concurrency_workloads=[],
        startup_models=[],
        blas_variant=False,
        chain=5,
        reference=False,
    )
    results = run_suite(cfg)
    assert [r["workload"] for r in results["rows"]] == ["add_chain"]
    assert set(results["skipped"]) == set(REAL)
    by_name = {t["target"]: t["status"] for t in results["targets"]}
    assert by_name["real-weights geomean aioge/ort"] == "n/a"
    assert "**Real-weights models not measured**: the torch extra is not installed" in render_markdown(results)


def _fake(workload: str, ratio: float) -> dict:
    return {"workload": workload, "aioge": ratio, "ort": 1.0, "aioge_vs_ort": ratio}


def test_real_and_nodup_targets_are_judged() -> None:
    rows = [_fake("resnet18", 1.0), _fake("convnext_tiny", 4.0), _fake("squeezenet-nodup", 1.2), _fake("mlp", 1.5)]
    got = {
        t["target"]: (t["figure"], t["status"], t["detail"])
        for t in evaluate_targets({"rows": rows, "config": {"concurrency": []}})
    }
    assert got["real-weights geomean aioge/ort"] == (pytest.approx(2.0), "MISS", "over 2 models")
    assert got["real-weights max aioge/ort"] == (4.0, "MISS", "convnext_tiny")
    assert got["light/ geomean aioge/ort, DuplicateFilterPass off"] == (pytest.approx(1.2), "PASS", "over 1 models")
    assert got["builder max aioge/ort"] == (1.5, "PASS", "mlp")
    assert TARGETS["real_geomean_vs_ort"] == 1.5


@pytest.mark.timeout(600)  # one torch export (seconds) and one compile of a 100-node model
def test_a_real_model_exports_once_and_aioge_matches_torch(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    pytest.importorskip("torchvision")
    pytest.importorskip("transformers")
    import aioge

    monkeypatch.setenv("AIOGE_BENCH_MODELS", str(tmp_path))
    w = real_models.real_workload("mobilenet_v3_small")
    (model,) = tmp_path.glob("torch*/mobilenet_v3_small.onnx")
    stamp = model.stat().st_mtime_ns
    assert real_models.real_workload("mobilenet_v3_small").feeds.keys() == w.feeds.keys()
    assert model.stat().st_mtime_ns == stamp  # cached: not exported again

    async def run() -> dict[str, np.ndarray]:
        async with aioge.Session({"ge.op_compiler_cache_dir": str(tmp_path / "kernels")}) as s:
            return await s.run(w.graph, w.feeds)

    out = anyio.run(run)
    assert w.check(out) < 1e-3  # torch's outputs, stored at export
    with pytest.raises(AssertionError):
        w.check({k: v + 0.1 for k, v in out.items()})
