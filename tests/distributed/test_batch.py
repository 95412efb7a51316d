"""compile_many on a real Dask LocalCluster (worker processes): 8+ models, one compile per
kernel key across workers with separate disks, a worker killed mid-batch, outputs identical to
a local compile, per-model failures."""

from __future__ import annotations

import os
import signal
import textwrap
from pathlib import Path
from typing import Any, Iterator

import anyio
import numpy as np
import pytest

import aioge
from aioge.distributed import BatchResult, LocalExecutor, compile_many

distributed = pytest.importorskip("distributed", reason="the distributed extra (pip install 'aioge[distributed]')")

MODELS = textwrap.dedent("""
    import os, time
    import numpy as np
    import aioge
    from aioge import ops

    def _mlp(n, width):
        if os.environ.get("AIOGE_TEST_SLOW_LOAD"):
            time.sleep(float(os.environ["AIOGE_TEST_SLOW_LOAD"]))
        g = aioge.Graph(f"m{n}")
        x = g.input("x", (4, 16), "float32")
        w = np.random.default_rng(n).standard_normal((16, width)).astype(np.float32)
        h = ops.relu(ops.apply("MatMul", [x, g.constant(w, "w")])[0])
        g.output(ops.tanh(ops.mul(h, float(n + 1))), names=["y"])
        return g

    for i in range(10):
        globals()[f"b{i}"] = (lambda i=i: _mlp(i, 8 * (1 + i % 3)))

    def broken():
        raise ValueError("this model does not build")
""")

OPTS = {"aioge.tune_mode": "heuristic"}


@pytest.fixture
def models(tmp_path: Path) -> list[str]:
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    return [f"{path}:b{i}" for i in range(10)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    import dask

    # A killed worker's scheduler locks are let go after this long (default 30 s).
    with dask.config.set(
        {"distributed.scheduler.locks.lease-timeout": "2s", "distributed.scheduler.locks.lease-validation-interval": "0.5s"}
    ):
        c = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        client = distributed.Client(c)
        try:
            yield client
        finally:
            client.close()
            c.close()


def _worker_disks(client: Any, root: Path) -> None:
    """Every worker process gets a kernel cache of its own (as on separate machines)."""

    def setup(dask_worker: Any, root: str = str(root)) -> int:
        os.environ["ASCEND_CACHE_PATH"] = os.path.join(root, str(os.getpid()))
        os.makedirs(os.environ["ASCEND_CACHE_PATH"], exist_ok=True)
        return os.getpid()

    client.run(setup)


async def _outputs(om: Path) -> np.ndarray:
    async with aioge.Session() as s:
        gid = await s.load_model(om)
        return (await s.run_graph(gid, {"x": np.linspace(-1, 1, 64, dtype=np.float32).reshape(4, 16)}))["y"]


@pytest.mark.timeout(180)
def test_compile_many_on_a_cluster_compiles_each_kernel_once_and_matches_a_local_compile(
    cluster: Any, models: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _worker_disks(cluster, tmp_path / "disks")
    models = [*models, f"{Path(models[0]).parent / 'models.py'}:broken"]
    results = anyio.run(lambda: compile_many(models, OPTS, cluster, out_dir=tmp_path / "dask"))
    assert [r.model for r in results] == models
    assert not results[-1].ok and "this model does not build" in (results[-1].error or "")
    ok = results[:-1]
    assert all(r.ok for r in ok), [r.error for r in ok]
    assert len({r.worker for r in ok}) == 2  # both workers compiled
    keys = [k for r in ok for k in r.compiled_keys]
    assert len(keys) == len(set(keys))  # one compile per kernel key across the cluster, though the disks are separate
    # The same batch on local threads, with a cache of its own: the same kernels, the same outputs.
    monkeypatch.setenv("ASCEND_CACHE_PATH", str(tmp_path / "local"))
    local = anyio.run(lambda: compile_many(models[:-1], OPTS, executor=LocalExecutor(2), out_dir=tmp_path / "local_om"))
    assert set(keys) == {k for r in local for k in r.compiled_keys}
    assert sum(r.kernels_compiled for r in ok) == len(keys)
    for d, lc in zip(ok, local):
        assert d.path is not None and lc.path is not None and Path(d.path).name == Path(lc.path).name
        np.testing.assert_array_equal(anyio.run(_outputs, Path(d.path)), anyio.run(_outputs, Path(lc.path)))


@pytest.mark.timeout(180)
def test_a_worker_killed_mid_batch_has_its_models_compiled_elsewhere(cluster: Any, models: list[str], tmp_path: Path) -> None:
    _worker_disks(cluster, tmp_path / "disks")
    cluster.run(lambda: os.environ.__setitem__("AIOGE_TEST_SLOW_LOAD", "0.6"))
    pids = list(cluster.run(os.getpid).values())
    killed: list[int] = []

    def progress(res: BatchResult) -> None:
        if not killed:  # the first result is in: the other worker is busy with its next model
            victim = next(p for p in pids if not res.worker or p != _pid_of(cluster, res.worker))
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)

    try:
        results = anyio.run(lambda: compile_many(models, OPTS, cluster, progress=progress))
    finally:
        cluster.run(lambda: os.environ.pop("AIOGE_TEST_SLOW_LOAD", None))
    assert killed
    assert all(r.ok for r in results), [r.error for r in results]
    assert len(results) == len(models)
    for r in results:
        assert r.om is not None
        path = tmp_path / f"{Path(r.model).name}.om"
        path.write_bytes(r.om)
    ref = anyio.run(lambda: compile_many(models[:2], OPTS, executor=LocalExecutor(1)))
    for r, lc in zip(results[:2], ref):
        assert lc.om is not None
        (tmp_path / "ref.om").write_bytes(lc.om)
        np.testing.assert_array_equal(
            anyio.run(_outputs, tmp_path / f"{Path(r.model).name}.om"), anyio.run(_outputs, tmp_path / "ref.om")
        )


def _pid_of(client: Any, address: str) -> int:
    return int(client.run(os.getpid, workers=[address])[address])


@pytest.mark.anyio
async def test_compile_many_on_local_threads_reports_failures_per_model(models: list[str], tmp_path: Path) -> None:
    bad = [models[0], str(tmp_path / "missing.onnx"), models[1]]
    results = await compile_many(bad, OPTS, out_dir=tmp_path / "out")
    assert [r.ok for r in results] == [True, False, True]
    assert "missing.onnx" in (results[1].error or "")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["models_b0.om", "models_b1.om"]
    with pytest.raises(aioge.errors.OptionError):
        await compile_many(models, {"aioge.tune_mode": "fast"})


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scheduler", [None, "local:2"])
def test_aioge_compile_takes_several_models_and_a_scheduler(
    models: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    scheduler: str | None,
) -> None:
    from aioge.cli import main

    argv = [
        "compile",
        *models[:3],
        f"{Path(models[0]).parent / 'models.py'}:broken",
        "-o",
        str(tmp_path / "out"),
        "--option",
        "aioge.tune_mode=heuristic",
    ]
    assert main(argv + (["--scheduler", scheduler] if scheduler else [])) == 1  # one model failed
    out = capsys.readouterr()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["models_b0.om", "models_b1.om", "models_b2.om"]
    assert "compiled 3 of 4 models" in out.out and "broken FAILED: ValueError: this model does not build" in out.err
    assert ("dask dashboard:" in out.err) == (scheduler is not None)
    # Dask's INFO lines (about 20 a batch) stay out of the progress without -v (issue 43).
    assert [r.getMessage() for r in caplog.records if r.name.startswith("distributed") and r.levelno < 30] == []
    np.testing.assert_array_equal(anyio.run(_outputs, tmp_path / "out" / "models_b0.om").shape, (4, 8))


@pytest.mark.timeout(120)
def test_a_batch_reports_progress_lines_and_quiet_silences_them(
    models: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 22: the batch's progress is _util.progress's (plain lines off a terminal, as under
    capsys), and --quiet leaves stderr to the failures alone."""
    from aioge.cli import main

    broken = f"{Path(models[0]).parent / 'models.py'}:broken"
    argv = ["compile", *models[:2], broken, "-o", str(tmp_path / "out"), "--option", "aioge.tune_mode=heuristic"]
    assert main(argv) == 1
    out = capsys.readouterr()
    err = out.err.splitlines()
    assert err[0] == "compile 3 models ..." and err[-1].startswith("compile 3 models: done in"), err
    steps = sorted(line.split(": ", 1)[1] for line in err[1:-1])
    assert [s.split(" ", 1)[0] for s in steps] == ["1/3", "2/3", "3/3"], err
    for m in models[:2]:
        om = tmp_path / "out" / f"models_{m.rsplit(':', 1)[1]}.om"
        assert any(f"{m} -> {om} (" in line for line in steps), (m, err)
    assert any(f"{broken} FAILED: ValueError: this model does not build" in line for line in steps)
    assert "compiled 2 of 3 models" in out.out

    assert main([*argv, "--quiet"]) == 1
    out = capsys.readouterr()
    assert out.err.splitlines() == [f"{broken} FAILED: ValueError: this model does not build"]
    assert "compiled 2 of 3 models" in out.out
    assert main(["compile", *models[:2], "-o", str(tmp_path / "ok"), "--option", "aioge.tune_mode=heuristic", "-q"]) == 0
    out = capsys.readouterr()
    assert out.err == "" and "compiled 2 of 2 models" in out.out


def test_a_bad_scheduler_is_a_clear_error(models: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from aioge.cli import main

    assert main(["compile", models[0], "-o", str(tmp_path), "--scheduler", "local:x"]) != 0
    assert "local:N" in capsys.readouterr().err


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # an asynchronous Dask client lives on an asyncio loop
@pytest.mark.timeout(120)
async def test_compile_many_with_an_asynchronous_client(cluster: Any, models: list[str], tmp_path: Path) -> None:
    async with distributed.Client(cluster.scheduler.address, asynchronous=True) as client:
        results = await compile_many(models[:3], OPTS, client)
    assert all(r.ok and r.om for r in results) and len({r.worker for r in results}) >= 1
    assert all(r.worker.startswith("tcp://") for r in results)
