"""What a CLI or API user tripped on (issue 43): ``cache stats -z``, ``run --json`` on a
failure, symbolic shapes, ``--input-shape`` named where a shape is missing, the example files
under ``aioge run``, ``BatchResult``'s repr, the batch CLI's shapes and external weights, Dask's
loggers, the remote tier's line, and what the README promises."""

from __future__ import annotations

import json
import logging
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pytest

from aioge.cli import main

ROOT = Path(__file__).resolve().parents[1]

SYMBOLIC = textwrap.dedent("""
    import numpy as np
    import aioge
    from aioge import ops

    W = np.arange(64, dtype=np.float32).reshape(16, 4) / 64

    def build():
        g = aioge.Graph("sym")
        x = g.input("x", ("batch", 16), "float32")
        g.output(ops.relu(ops.matmul(x, g.constant(W, "w"))), names=["y"])
        return g

    def other():
        g = aioge.Graph("other")
        x = g.input("x", ("n", 16), "float32")
        g.output(ops.tanh(x), names=["y"])
        return g
""")


@pytest.fixture
def symbolic(tmp_path: Path) -> Path:
    path = tmp_path / "sym.py"
    path.write_text(SYMBOLIC)
    return path


def test_symbolic_shapes_print_as_a_list_of_dims() -> None:
    from aioge.ir.desc import TensorDesc

    assert str(TensorDesc.of(("batch", 64), "float32")) == "float32[batch, 64]"
    assert str(TensorDesc.of((2, 3), "int64")) == "int64[2, 3]"
    assert str(TensorDesc.of((), "float32")) == "float32[scalar]"


def test_a_missing_shape_names_input_shape(symbolic: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(symbolic), "--random-inputs"]) == 1
    err = capsys.readouterr().err
    assert "input 'x' is float32[batch, 16]" in err and "--input-shape x:" in err and "Traceback" not in err
    assert main(["compile", str(symbolic), "-o", str(tmp_path / "m.om")]) == 1
    err = capsys.readouterr().err
    assert "--input-shape x:" in err and not (tmp_path / "m.om").exists()
    assert main(["run", str(symbolic), "--random-inputs", "--input-shape", "x:3,16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outputs"]["y"]["shape"] == [3, 4]


def test_run_json_prints_an_error_object_and_exits_non_zero(
    symbolic: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(tmp_path / "nope.onnx"), "--json"]) == 1
    out = capsys.readouterr()
    report = json.loads(out.out)
    assert report["model"] == str(tmp_path / "nope.onnx") and report["error"]["type"] == "GraphError"
    assert "nope.onnx" in report["error"]["message"] and "aioge: error:" in out.err
    assert main(["run", str(symbolic), "--json", "--input", f"z={tmp_path / 'z.npy'}"]) == 1
    assert "z.npy" in json.loads(capsys.readouterr().out)["error"]["message"]


def test_run_takes_the_example_files(capsys: pytest.CaptureFixture[str]) -> None:
    for example in ("mlp", "cnn"):
        assert main(["run", str(ROOT / "examples" / f"{example}.py"), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["max_abs_error"] < 1e-4, example


def test_a_script_without_a_builder_says_what_it_has_and_what_run_expects(
    symbolic: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two = symbolic.with_name("two.py")
    two.write_text(SYMBOLIC.replace("def build():", "def build_a():").replace("def other():", "def build_b():"))
    assert main(["run", str(two), "--random-inputs"]) == 1
    err = capsys.readouterr().err
    assert "has no function build()" in err and "build_a, build_b" in err and f"{two}:FUNCTION" in err


def test_options_lists_every_alias_and_the_stage_that_reads_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["options"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if not line.startswith(" ")}
    assert "OP_DEBUG_LEVEL,op_debug_level" in lines["ge.opDebugLevel"] and "read by compiler" in lines["ge.opDebugLevel"]
    assert "read by runtime" in lines["aioge.exec_devices"] and "read by compiler" in lines["aioge.exec_mode"]


def test_batch_result_repr_leaves_out_the_om_bytes() -> None:
    from aioge.distributed import BatchResult

    text = repr(BatchResult("m.onnx", om=b"\x01" * 1_000_000, path="out/m.om"))
    assert "om=<1000000 bytes>" in text and "m.onnx" in text and "out/m.om" in text and len(text) < 400
    assert "om=None" in repr(BatchResult("m.onnx", error="boom"))


def test_the_batch_cli_takes_input_shapes_per_model_and_external_weights(
    symbolic: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from aioge.plan.serialize import load_model_sync

    a, b = f"{symbolic}:build", f"{symbolic}:other"
    out = tmp_path / "out"
    argv = ["compile", a, b, "-o", str(out), "--option", "aioge.tune_mode=heuristic", "-q"]
    assert main([*argv, "--input-shape", "x:2,16", "--input-shape", f"{b}:x:5,16", "--external-weight"]) == 0
    capsys.readouterr()
    assert [list(s) for _, s in load_model_sync(out / "sym_build.om").signature] == [[2, 16]]
    assert [list(s) for _, s in load_model_sync(out / "sym_other.om").signature] == [[5, 16]]
    assert len(list((out / "weight").iterdir())) == 1  # build's constant, beside the .om files
    assert main(["info", str(out / "sym_build.om"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["weights"] == "external"
    assert main([*argv[:-1], "-o", str(tmp_path / "none")]) == 1  # no shapes: each model says which flag
    err = capsys.readouterr().err
    assert err.count("--input-shape x:") == 2


def test_dask_loggers_are_quiet_unless_verbose(
    symbolic: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("distributed")
    from aioge.distributed import batch

    def no_cluster(scheduler: str) -> None:
        raise OSError("no cluster in this test")

    monkeypatch.setattr(batch.DaskExecutor, "start", staticmethod(no_cluster))
    dask_log = logging.getLogger("distributed")
    monkeypatch.setattr(dask_log, "level", logging.INFO)
    argv = ["compile", str(symbolic), "-o", str(tmp_path), "--scheduler", "local:1"]
    assert main(argv) == 1 and "no cluster in this test" in capsys.readouterr().err
    assert dask_log.level == logging.WARNING
    dask_log.setLevel(logging.INFO)
    assert main(["-v", *argv]) == 1
    assert dask_log.level == logging.INFO


def _counters(root: Path, remote_hits: int) -> None:
    from aioge.cache.kernel_cache import KernelCache
    from aioge.cache.remote import STATS_FILE, STATS_KIND
    from aioge.cache.stats_file import update_stats_file

    cache = KernelCache(root, "AiogeSim", env={})
    cache.record_stats_sync(hits=0, misses=3, compiles=0)
    kdir = root / "kernel_cache"
    update_stats_file(
        kdir / STATS_FILE,
        STATS_KIND,
        kdir / ".remote_stats.lock",
        lambda: {"AiogeSim": {"hits": remote_hits, "misses": 0, "errors": 0, "invalid": 0, "writes": 0, "dropped": 0}},
    )


def test_cache_stats_says_what_the_remote_served_and_no_remote_counts_when_it_is_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("AIOGE_REMOTE_CACHE", raising=False)
    _counters(tmp_path, 3)
    assert main(["cache", "stats", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "hits 0, misses 3, hit ratio 0.0%" in out and "served by remote: 3" in out
    assert "remote cache: off" in out and "AiogeSim: hits 3" not in out
    monkeypatch.setenv("AIOGE_REMOTE_CACHE", "redis://127.0.0.1:1/0")
    assert main(["cache", "stats", "--dir", str(tmp_path)]) == 0
    assert "AiogeSim: hits 3, misses 0" in capsys.readouterr().out  # on: its own counts too


def test_cache_stats_z_zeroes_the_counters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from aioge.cache.kernel_cache import KernelCache

    _counters(tmp_path, 0)
    assert main(["cache", "stats", "-z", "--dir", str(tmp_path), "--json"]) == 0
    (soc,) = json.loads(capsys.readouterr().out)["kernel"]["socs"]
    assert (soc["hits"], soc["misses"]) == (0, 0)
    assert KernelCache(tmp_path, "AiogeSim", env={}).read_stats_sync()["misses"] == 0


def test_the_readme_says_how_to_get_trio_and_documents_progress() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.startswith("trio") for d in extras["trio"])
    readme = (ROOT / "README.md").read_text()
    assert "pip install 'aioge[trio]'" in readme
    assert "progress=" in readme and "shapes=" in readme and "external_weight=" in readme
    np.testing.assert_equal(readme.count('backend="trio"') >= 1, True)
