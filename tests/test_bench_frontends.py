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
        compile_rounds=0,  # fresh-process compiles: test_fresh_process_compiles
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
    # one row per model: every side's time a call, the error against eager, the graphs aioge
    # compiled and the eager fallbacks (none for the tiny MLP); compile figures come from fresh processes
    row = next(r for r in section["rows"] if r["frontend"] == "torch")
    assert row["model"] == "mlp 4x64" and not any(k.endswith("_error") or "compile" in k for k in row)
    assert all(row[k] > 0 for k in ("aioge", "eager", "inductor")) and row["max_rel_err"] < 1e-5
    assert row["graphs"] == 1 and row["fallbacks"] == 0
    cells = fe.torch_table([row])[2].strip("| ").split(" | ")
    assert cells[0] == "mlp 4x64" and len(cells) == 13 and cells[6:10] == [""] * 4
    assert [float(c) for c in cells[1:6] + cells[10:]] == pytest.approx(
        [row["aioge"] * 1e3, row["eager"] * 1e3, row["inductor"] * 1e3, row["aioge"] / row["eager"],
         row["aioge"] / row["inductor"], row["max_rel_err"], 1, 0],
        rel=0.06, abs=6e-3,
    )  # fmt: skip


def test_aioge_compiles_with_its_cache_dir_and_a_second_compile_hits_it(section: dict, cache: str) -> None:
    # as inductor has its /tmp/torchinductor_<user>: the model's graphs and trace are stored under
    # its name, and a second backend in the same process loads both instead of compiling
    import os

    assert "mlp_0.idx" in os.listdir(cache) and any(f.startswith("trace_") for f in os.listdir(cache))
    be = aioge.torch.backend({"ge.graph_compiler_cache_dir": cache}, name="mlp")
    try:
        row = fe._torch_rows("mlp", be, ("eager",), 1, 1)[0]
    finally:
        be.close()
    assert row["graphs"] == 1 and row["cache_hits"] == 1 and row["trace_hits"] == 1 and row["max_rel_err"] < 1e-5
    assert fe.torch_cache_dir() == fe.torch_cache_dir() and os.path.isdir(fe.torch_cache_dir())


def test_fresh_process_compiles_give_cold_and_warm_figures() -> None:
    # aioge's compile in a fresh process (import and backend() inside its clock), cold then warm on
    # the caches the cold one filled, wall and CPU seconds in the table (a reference's cells beside)
    import os

    src = os.path.dirname(os.path.dirname(os.path.dirname(fe.__file__)))
    got = fe.fresh_compiles("mlp", 1, {"aioge": ("aioge", src)})
    keys = [f"aioge_compile_{s}{u}" for s in ("cold", "warm") for u in ("_s", "_cpu_s")]
    assert sorted(got) == sorted(keys) and all(got[k] > 0 for k in keys)
    row = {"model": "mlp", "aioge": 1e-3, "max_rel_err": 0.0, "graphs": 1, "fallbacks": 0, **got}
    cells = fe.torch_table([row | {"inductor_compile_cold_s": 1.0, "inductor_compile_cold_cpu_s": 0.5}])[2].split(" | ")
    assert cells[6:10] == [
        f"{got['aioge_compile_cold_s']:.2f} ({got['aioge_compile_cold_cpu_s']:.2f})", "1.00 (0.50)",
        f"{got['aioge_compile_warm_s']:.2f} ({got['aioge_compile_warm_cpu_s']:.2f})", "",
    ]  # fmt: skip
    assert fe.torch_table([row | {"inductor_compile_error": "boom"}])[2].split(" | ")[6:10] == [
        cells[6],
        "boom",
        cells[8],
        "boom",
    ]


def test_fresh_compiles_alternate_the_sides_and_take_medians(monkeypatch: pytest.MonkeyPatch) -> None:
    # cold then warm in one cache dir per side and round; the side first in one round is last in
    # the next (no side always pays the machine's state first); medians over the rounds
    calls: list[tuple[str, str]] = []

    def fake(name: str, backend: str, src: str, caches: str) -> tuple[float, float]:
        calls.append((backend, caches))
        return float(len(calls)), len(calls) / 10

    monkeypatch.setattr(fe, "_fresh", fake)
    got = fe.fresh_compiles("bert", 3, {"a": ("aioge", "/nowhere"), "b": ("inductor", "/nowhere")})
    assert [b for b, _ in calls] == ["aioge"] * 2 + ["inductor"] * 4 + ["aioge"] * 4 + ["inductor"] * 2
    assert all(calls[i][1] == calls[i + 1][1] for i in range(0, 12, 2)) and len({c for _, c in calls}) == 6
    assert got["a_compile_cold_s"] == 7.0 and got["a_compile_warm_cpu_s"] == pytest.approx(0.8)
    assert got["b_compile_cold_s"] == 5.0 and got["b_compile_warm_s"] == 6.0 and len(got) == 8

    def failing(name: str, backend: str, src: str, caches: str) -> tuple[float, float]:
        if backend == "inductor":
            raise RuntimeError(f"the {backend} compile of {name} failed: boom")
        return fake(name, backend, src, caches)

    calls.clear()
    monkeypatch.setattr(fe, "_fresh", failing)
    got = fe.fresh_compiles("bert", 3, {"a": ("aioge", "/nowhere"), "b": ("inductor", "/nowhere")})
    assert got["b_compile_error"].endswith("boom") and "b_compile_cold_s" not in got and len(calls) == 6  # not run again


def test_table_and_report(section: dict) -> None:
    table = fe.frontends_table(section)
    assert table[0].startswith("| front end | model | reference | aioge ms | reference ms | aioge/reference")
    assert "| tf | cnn 64x64 | tf.function |" in table[2] and table[3] == table[5] == ""
    assert "each in a fresh process, cold and warm caches" in table[4]
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
