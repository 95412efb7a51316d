"""``aioge run`` and ``aioge info`` as a careless user (or a pipe) drives them.

Before: ``--input wrongname=f.npy`` filled the real input with random data and exited 0;
outputs ``a/b`` and ``a_b`` both went to ``a_b.npy``, the first silently overwritten; and
``aioge info --json X.om | head`` ended in a BrokenPipeError traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pytest

from aioge.cli import main

BUILDER = textwrap.dedent(
    """
    import aioge
    from aioge import ops

    def build():
        g = aioge.Graph("two_outputs")
        x = g.input("x", (2, 3))
        s = g.input("s", (2, 3))
        g.output(ops.relu(x) + s, ops.tanh(x), names=["a/b", "a_b"])
        return g
    """
)
X = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
S = np.full((2, 3), 0.25, np.float32)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    builder = tmp_path / "graph.py"
    builder.write_text(BUILDER)
    om = tmp_path / "m.om"
    assert main(["compile", str(builder), "-o", str(om), "--option", "aioge.tune_mode=heuristic"]) == 0
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "s.npy", S)
    return om


def _aioge(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aioge", *args], capture_output=True, text=True, timeout=120, **kw)  # type: ignore[call-overload]


def test_an_unknown_input_name_is_one_line_error_listing_the_inputs(model: Path, tmp_path: Path) -> None:
    r = _aioge("run", str(model), "--input", f"x={tmp_path / 'x.npy'}", "--input", f"wrongname={tmp_path / 's.npy'}")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "aioge: error: --input wrongname: the model has no such input; its inputs are: x, s (not given: s)"
    ]
    assert "output" not in r.stdout  # nothing ran


def test_a_missing_input_is_an_error_unless_random_inputs(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(model), "--input", f"x={tmp_path / 'x.npy'}"]) == 1
    err = capsys.readouterr().err
    assert "aioge: error: input s not given" in err and "inputs are: x, s" in err and "--random-inputs" in err
    out_dir = tmp_path / "r"
    assert main(["run", str(model), "--input", f"x={tmp_path / 'x.npy'}", "--random-inputs", "--output-dir", str(out_dir)]) == 0
    assert "input s: not given, random float32[2, 3] (seed 0)" in capsys.readouterr().out
    s = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(np.load(out_dir / "a%2Fb.npy"), np.maximum(X, 0) + s, rtol=1e-6)


def test_outputs_get_distinct_reversible_files(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "out"
    args = [
        "run",
        str(model),
        "--input",
        f"x={tmp_path / 'x.npy'}",
        "--input",
        f"s={tmp_path / 's.npy'}",
        "--output-dir",
        str(out_dir),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    files = sorted(os.listdir(out_dir))
    assert files == ["a%2Fb.npy", "a_b.npy"]
    assert {unquote(f.removesuffix(".npy")) for f in files} == {"a/b", "a_b"}
    np.testing.assert_allclose(np.load(out_dir / "a%2Fb.npy"), np.maximum(X, 0) + S, rtol=1e-6)
    np.testing.assert_allclose(np.load(out_dir / "a_b.npy"), np.tanh(X), rtol=1e-6)
    assert f"-> {out_dir / 'a%2Fb.npy'}" in out and "replaced" not in out
    assert main(args) == 0  # again: the files are replaced, and it says so
    assert capsys.readouterr().out.count("(replaced the file there)") == 2


def _broken_pipe_run(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    """Run ``aioge ARGS`` with stdout a real pipe whose reader already exited (as ``| head``
    does once it has read enough; here deterministically before anything is written)."""
    r, w = os.pipe()
    reader = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.buffer.read(1); sys.stdin.close()"], stdin=r)
    os.close(r)
    os.write(w, b"x")  # the reader takes one byte and leaves
    reader.wait(timeout=60)
    try:
        return subprocess.run([sys.executable, "-m", "aioge", *args], stdout=w, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(w)


@pytest.mark.parametrize("command", ["info --json", "info", "run", "passes", "options"])
def test_a_reader_that_closes_early_is_no_traceback(command: str, model: Path, tmp_path: Path) -> None:
    args = {
        "info --json": ["info", "--json", str(model)],
        "info": ["info", str(model)],
        "run": ["run", str(model), "--random-inputs"],
        "passes": ["passes"],
        "options": ["options"],
    }[command]
    r = _broken_pipe_run(args)
    assert r.returncode == 1, r.stderr
    assert r.stderr == b"", r.stderr.decode()  # no BrokenPipeError traceback, no "Exception ignored"


def test_info_into_head_prints_the_first_line_cleanly(model: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "aioge", "info", "--json", str(model)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as aioge:
        head = subprocess.run(["head", "-n", "1"], stdin=aioge.stdout, capture_output=True, timeout=120)
        aioge.stdout.close()  # type: ignore[union-attr]
        err = aioge.stderr.read()  # type: ignore[union-attr]
        assert aioge.wait(timeout=120) in (0, 1)
    assert head.stdout == b"{\n" and b"Traceback" not in err and b"BrokenPipe" not in err
