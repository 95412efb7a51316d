"""The front-end bench section (issue 41): one tiny model per framework, measured for real."""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("transformers")
import aioge.torch  # noqa: E402, F401  (before TensorFlow: see aioge.torch._check_import_order)

pytest.importorskip("tensorflow")
pytest.importorskip("keras")

from aioge.benchmarks import frontends as fe  # noqa: E402
from aioge.benchmarks.suite import SuiteConfig, render_markdown  # noqa: E402


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("aioge_cache"))


@pytest.fixture(scope="module")
def section(cache: str) -> dict:
    lines: list[str] = []
    out = fe.frontends(
        ["torch", "tf"],
        tf_models=["cnn"],
        torch_models=["mlp"],
        torch_references=("eager", "inductor"),
        torch_cache=cache,
        rounds=1,
        runs=2,
        progress=lines.append,
    )
    assert len(lines) == 2
    return out


def test_one_tiny_model_per_framework_measured(section: dict) -> None:
    rows = {r["frontend"]: r for r in section["rows"]}
    assert set(rows) == {"tf", "torch"} and len(section["rows"]) == 2 and section["skipped"] == {}
    tf = rows["tf"]
    assert tf["reference"] == "tf.function" and tf["aioge"] > 0 and tf["ref"] > 0 and tf["compile_s"] > 0
    assert tf["ratio"] == pytest.approx(tf["aioge"] / tf["ref"]) and tf["ref_compile_s"] > 0
    assert tf["max_rel_err"] < 1e-4  # aioge's outputs agree with the framework's


def test_torch_row_has_every_column_measured(section: dict) -> None:
    # one row per model: every side's time a call, both compile times, the error against eager,
    # the graphs aioge compiled and the eager fallbacks (none for the tiny MLP)
    row = next(r for r in section["rows"] if r["frontend"] == "torch")
    assert row["model"] == "mlp 4x64" and not any(k.endswith("_error") for k in row)
    compiles = ("compile_s", "inductor_compile_s", "compile_cpu_s", "inductor_compile_cpu_s")
    assert all(row[k] > 0 for k in ("aioge", "eager", "inductor", *compiles))
    assert row["eager_compile_s"] == row["eager_compile_cpu_s"] == 0.0 and row["max_rel_err"] < 1e-5  # eager compiles nothing
    assert row["graphs"] == 1 and row["fallbacks"] == 0
    cells = fe.torch_table([row])[2].strip("| ").split(" | ")
    assert cells[0] == "mlp 4x64" and len(cells) == 13
    assert [float(c) for c in cells[1:]] == pytest.approx(
        [row["aioge"] * 1e3, row["eager"] * 1e3, row["inductor"] * 1e3, row["aioge"] / row["eager"],
         row["aioge"] / row["inductor"], *(row[k] for k in compiles), row["max_rel_err"], 1, 0],
        rel=0.06, abs=6e-3,
    )  # fmt: skip


def test_aioge_compiles_with_its_cache_dir_and_a_second_compile_hits_it(section: dict, cache: str) -> None:
    # as inductor has its /tmp/torchinductor_<user>: the model's graphs and trace are stored under
    # its name, and a second backend in the same process loads both instead of compiling
    import os

    assert {"warm_up_0.idx", "mlp_0.idx"} <= set(os.listdir(cache)) and any(f.startswith("trace_") for f in os.listdir(cache))
    be = aioge.torch.backend({"ge.graph_compiler_cache_dir": cache}, name="mlp")
    try:
        row = fe._torch_rows("mlp", be, ("eager",), 1, 1)[0]
    finally:
        be.close()
    assert row["graphs"] == 1 and row["cache_hits"] == 1 and row["trace_hits"] == 1 and row["max_rel_err"] < 1e-5
    assert fe.torch_cache_dir() == fe.torch_cache_dir() and os.path.isdir(fe.torch_cache_dir())


def test_torch_compiles_are_timed_after_the_same_warm_up(monkeypatch: pytest.MonkeyPatch) -> None:
    # each backend compiles the tiny MLP once before any model (one-time costs), and each model is
    # captured by Dynamo's eager backend before the first timed side (per-model costs): the side
    # timed first pays neither
    import torch

    compile_ = torch.compile
    seen: list[object] = []

    def recording(model: object, backend: object) -> object:
        seen.append(backend)
        return compile_(model, backend=backend) if not isinstance(backend, str) or backend == "eager" else model

    monkeypatch.setattr(torch, "compile", recording)
    be = aioge.torch.backend()
    try:
        fe._warm_up(be, ("eager", "inductor"))
        assert seen == [be, "inductor"] and len(be.graphs) == 1
        seen.clear()
        row = fe._torch_rows("mlp", be, ("eager",), 1, 1)[0]
    finally:
        be.close()
    assert seen == ["eager", be] and row["graphs"] == 1 and row["max_rel_err"] < 1e-5


def test_table_and_report(section: dict) -> None:
    table = fe.frontends_table(section)
    assert table[0].startswith("| front end | model | reference | aioge ms | reference ms | aioge/reference")
    assert "| tf | cnn 64x64 | tf.function |" in table[2] and table[3] == table[5] == ""
    assert "both with their on-disk caches" in table[4]
    assert table[6].startswith("| model | aioge ms | eager ms | inductor ms |") and table[8].startswith("| mlp 4x64 |")
    assert len(table) == 9
    results = {
        "machine": {k: "x" for k in ("date", "cpus", "platform", "python", "aioge", "numpy", "onnx", "onnxruntime")}
        | {"OPENBLAS_CORETYPE": "", "OPENBLAS_L2_SIZE": ""},
        "rows": [],
        "targets": [],
        "seconds": 1.0,
        "frontends": section,
    }
    assert "\n".join(table) in render_markdown(results)


def test_failed_reference_is_a_row_and_missing_framework_a_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    be = aioge.torch.backend()
    try:
        rows = fe._torch_rows("mlp", be, ("no_such_backend",), 1, 1)
    finally:
        be.close()
    assert rows[0]["aioge"] > 0 and "no_such_backend" in rows[0]["no_such_backend_error"] and "no_such_backend" not in rows[0]
    failed = {**rows[0], "inductor_error": "BackendCompilerFailed: boom"}
    assert "| failed |" in fe.torch_table([failed])[2] and "BackendCompilerFailed: boom" in fe.torch_table([failed])[2]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "keras" else real(name, *a))
    out = fe.frontends(["tf"])
    assert out["rows"] == [] and "keras not installed" in out["skipped"]["frontend tf"]


def test_config_checks_front_ends() -> None:
    with pytest.raises(ValueError, match="unknown front ends"):
        SuiteConfig(frontends=["jax"])
    with pytest.raises(ValueError, match=r"unknown torch models \['gpt5'\]"):
        SuiteConfig(frontends=["torch"], torch_models=["bert", "gpt5"])
    with pytest.raises(ValueError, match=r"unknown tf models \['ResNet51'\]"):
        SuiteConfig(frontends=["tf"], tf_models=["ResNet50", "ResNet51"])
    with pytest.raises(ValueError, match="frontends_only needs"):
        SuiteConfig(frontends_only=True)


def test_cli_rejects_unknown_front_ends(capsys: pytest.CaptureFixture[str]) -> None:
    from aioge.cli import main

    assert main(["bench", "--frontends", "jax", "--frontends-only"]) == 2
    assert "unknown front ends ['jax']" in capsys.readouterr().err
    assert main(["bench", "--frontends", "torch", "--frontends-only", "--torch-models", "bert,gpt5"]) == 2
    assert "unknown torch models ['gpt5']" in capsys.readouterr().err
    assert main(["bench", "--frontends", "tf", "--frontends-only", "--tf-models", "cnn,VGG17"]) == 2
    assert "unknown tf models ['VGG17']" in capsys.readouterr().err


def test_every_keras_family_and_the_text_models_are_tf_workloads() -> None:
    import anyio
    import keras  # type: ignore[import-untyped]

    families = "MobileNet MobileNetV2 MobileNetV3Small MobileNetV3Large ResNet50 ResNet50V2 InceptionV3 Xception DenseNet121 EfficientNetB0 EfficientNetV2B0 NASNetMobile ConvNeXtTiny VGG16"  # fmt: skip
    assert set(fe.TF_MODELS) == {"cnn", "lstm", "mha", *families.split()}
    assert all(hasattr(keras.applications, n) for n in families.split())
    assert fe.TF_MODELS["InceptionV3"] >= 75 and fe.TF_MODELS["Xception"] >= 71  # the least each accepts
    # the LSTM text model and the attention block, tiny: every column a number, outputs matching TF
    rows = [r for name, size in (("lstm", 5), ("mha", 4)) for r in anyio.run(fe._tf_model, name, size, 1, 1)]
    assert [r["model"] for r in rows] == ["lstm text 1x5", "mha encoder 1x4x64"]
    for r in rows:
        assert set(r) == {*fe._KEYS, "ratio"} and r["reference"] == "tf.function"
        assert all(isinstance(r[k], float) and r[k] > 0 for k in ("aioge", "compile_s", "ref", "ref_compile_s", "ratio"))
        assert 0 <= r["max_rel_err"] < 1e-4
    table = fe.frontends_table({"rows": rows})
    assert "| tf | lstm text 1x5 | tf.function |" in table[2] and "failed" not in "".join(table)
