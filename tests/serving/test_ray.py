"""``aioge.ray`` on a local Ray cluster started here on 127.0.0.1: Ray Serve's HTTP answers as
``aioge serve`` does for the same model, and a second replica (a kernel cache folder of its
own, as on another machine) loads every kernel from the shared Redis tier, compiling none."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from aioge.cache.remote import read_remote_stats
from aioge.errors import AiogeError
from aioge.server import create_app
from tests.cache.test_remote import RedisServer
from tests.serving.test_server import _free_port, _onnx_model, _reference, _wait_ready, running

ray = pytest.importorskip("ray", reason="the ray extra (pip install 'aioge[ray]')")
serve = pytest.importorskip("ray.serve")
aioge_ray = pytest.importorskip("aioge.ray")
needs_redis = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server (.ci/run installs it)")


@contextlib.contextmanager
def local_ray(port: int) -> Iterator[None]:
    """A one-node Ray cluster of this process and Serve's HTTP proxy on 127.0.0.1:port; shut down after."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield
    finally:
        with contextlib.suppress(Exception):
            serve.shutdown()
        ray.shutdown()


def _replica_stats(root: Path) -> dict[str, dict[str, int]]:
    """The remote tier's counters each replica recorded in its own kernel cache folder."""
    return {d.name: read_remote_stats(d / "kernel_cache").get("AiogeSim", {}) for d in sorted(root.iterdir())}


def test_deployment_checks_its_models_before_deploying(tmp_path: Path) -> None:
    with pytest.raises(AiogeError, match="no such model file"):
        aioge_ray.deployment([str(tmp_path / "missing.onnx")])


@needs_redis
@pytest.mark.timeout(240)  # a Ray cluster, Serve, and three replicas start on 2 shared cores
def test_ray_serve_answers_as_aioge_serve_and_a_second_replica_loads_from_redis(tmp_path: Path) -> None:
    model = _onnx_model(tmp_path / "mlp.onnx")
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 3)).astype(np.float32)
    body = {
        "id": "r1",
        "inputs": [
            {"name": "x", "shape": [3, 4], "datatype": "FP32", "data": x.ravel().tolist()},
            {"name": "y", "shape": [3, 3], "datatype": "FP32", "data": y.ravel().tolist()},
        ],
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASCEND_CACHE_PATH", str(tmp_path / "local"))
        with running(create_app([str(model)])) as (url, _, _):
            _wait_ready(url)
            local = httpx.post(f"http://{url}/v2/models/mlp/infer", json=body).json()
    (tmp_path / "redis").mkdir()
    redis = RedisServer(tmp_path / "redis")
    replicas = tmp_path / "replicas"
    options = {"aioge.remote_cache": redis.url, "aioge.tune_mode": "heuristic"}

    def app(replicas_wanted: int) -> object:
        scaling = {"min_replicas": replicas_wanted, "max_replicas": 2, "initial_replicas": replicas_wanted}
        return aioge_ray.deployment(
            [str(model)],
            session_options=options,
            replica_cache=str(replicas),
            autoscaling_config=scaling,
            ray_actor_options={"num_cpus": 0.5},
        )

    port = _free_port()
    try:
        with local_ray(port):
            serve.run(app(1), name="aioge", route_prefix="/")
            r = httpx.post(f"http://127.0.0.1:{port}/v2/models/mlp/infer", json=body, timeout=60)
            assert r.status_code == 200, r.text
            assert r.json() == local  # the same JSON, value for value
            out = np.array(r.json()["outputs"][0]["data"], np.float32).reshape(3, 3)
            np.testing.assert_allclose(out, _reference(model, x, y)["out"], rtol=1e-5, atol=1e-6)
            (first,) = _replica_stats(replicas).values()
            assert first["misses"] > 0 and first["hits"] == 0  # the first replica compiled every kernel
            deadline = time.monotonic() + 30  # its writes to Redis are sent behind the compile
            while len([k for k in redis.keys() if ":kernel:" in k]) < first["writes"]:
                assert time.monotonic() < deadline, "the first replica's kernels never reached Redis"
                time.sleep(0.05)
            serve.run(app(2), name="aioge", route_prefix="/")  # autoscaling's minimum now 2: one more replica
            later = [s for s in _replica_stats(replicas).values() if s != first]  # Ray may replace the first too
            assert later and all(s["hits"] > 0 and (s["misses"], s["errors"]) == (0, 0) for s in later), later
            status = serve.status().applications["aioge"].deployments["aioge"]
            assert status.status == "HEALTHY" and status.replica_states.get("RUNNING") == 2
            for _ in range(6):  # whichever replica answers, the same answer
                assert httpx.post(f"http://127.0.0.1:{port}/v2/models/mlp/infer", json=body, timeout=60).json() == local
            assert json.loads(httpx.get(f"http://127.0.0.1:{port}/v2/models/mlp").text)["name"] == "mlp"
    finally:
        redis.client.close()
        redis.stop()
    assert not ray.is_initialized()
