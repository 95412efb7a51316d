"""Progress of long CLI work (issue 23): bars on a terminal, plain lines otherwise, --quiet silences."""

from __future__ import annotations

import io
import textwrap

import pytest

from aioge._util.progress import Progress
from aioge.cli import main

BUILDER = textwrap.dedent(
    """
    import aioge
    from aioge import ops

    def build():
        g = aioge.Graph("p")
        g.output(ops.relu(g.input("x", (2, 3))), names=["y"])
        return g
    """
)


def test_plain_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    p = Progress(out)
    assert not p.rich  # a StringIO is no terminal
    with p.task("compile m", total=2) as step:
        step("loaded")
        step("compiled")
    lines = out.getvalue().splitlines()
    assert lines[:3] == ["compile m ...", "compile m: 1/2 loaded", "compile m: 2/2 compiled"]
    assert lines[3].startswith("compile m: done in ") and len(lines) == 4


def test_a_failing_task_says_so_and_quiet_says_nothing() -> None:
    out = io.StringIO()
    with pytest.raises(KeyError), Progress(out).task("bench", total=None) as step:
        step("one")
        raise KeyError("x")
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["bench ...", "bench: 1/? one"] and len(lines) == 3 and lines[2].startswith("bench: failed after ")
    quiet = io.StringIO()
    with Progress(quiet, quiet=True).task("x", total=1) as step:
        step("done")
    assert quiet.getvalue() == ""


def test_rich_bars() -> None:
    pytest.importorskip("rich")
    out = io.StringIO()
    with Progress(out, rich=True).task("compile m", total=3) as step:
        for note in ("loaded", "compiled", "saved"):
            step(note)
    text = out.getvalue()
    assert "compile m" in text and "3/3" in text and "saved" in text


def test_compile_reports_progress_on_stderr_unless_quiet(tmp_path, capsys) -> None:
    src = tmp_path / "g.py"
    src.write_text(BUILDER)
    args = ["compile", str(src), "-o", str(tmp_path / "m.om"), "--option", "aioge.tune_mode=heuristic"]
    assert main(args) == 0
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert err[0] == f"compile {src} ..." and err[1] == f"compile {src}: 1/3 loaded (1 nodes)"
    assert err[3] == f"compile {src}: 3/3 saved {tmp_path / 'm.om'}" and err[4].startswith(f"compile {src}: done in")
    assert "compiled" in captured.out  # the result stays on stdout
    assert main([*args, "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "compiled" in captured.out


def test_the_suite_reports_each_workload() -> None:
    pytest.importorskip("onnxruntime")
    from aioge.benchmarks.suite import SuiteConfig, run_suite

    lines: list[str] = []
    cfg = SuiteConfig(
        workloads=["add_chain"],
        rounds=1,
        runs=1,
        concurrency=(),
        concurrency_workloads=[],
        startup_models=[],
        blas_variant=False,
        chain=10,
    )
    results = run_suite(cfg, on_workload=lines.append)
    assert len(lines) == 1 and lines[0].startswith("add_chain") and "ratio" in lines[0]
    assert [r["workload"] for r in results["rows"]] == ["add_chain"]
