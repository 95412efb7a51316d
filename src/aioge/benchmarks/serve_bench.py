"""``aioge bench --serve``: ``aioge serve`` over HTTP under many concurrent clients (one worker
process and more), beside the same HTTP server (``aioge.server``) calling onnxruntime in worker
threads and, given a python with ``mlserver`` (``--mlserver-python``, a venv of its own),
MLServer serving the same ONNX file through onnxruntime in a custom runtime, with its adaptive
batching off and on. MLServer takes JSON tensors only, so an ``aioge serve (JSON)`` arm sends
the same JSON bodies; the other aioge arms send the binary extension, as Triton's client does.
The client's CPU time is measured apart: the load generator shares the cores.

Each arm is a server subprocess on 127.0.0.1 (a free port); the load is ``clients`` keep-alive
connections spread over ``client_procs`` processes (``loadgen``: pre-encoded requests on raw
sockets, ~0.1 ms of client CPU a request where httpx took 2-3 ms), each sending single-row
requests one after another until ``total`` requests were sent or ``seconds`` passed. Loopback
only, bounded in count and time. Figures: requests/s, p50 and p99 latency, client CPU.

    aioge bench --serve [--serve-clients 200] [--serve-total 4000] [--serve-client-procs 4] [--mlserver-python PY]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import numpy as np

__all__ = ["OrtBackend", "ServeBenchConfig", "bench_from_args", "format_rows", "run_serve_bench"]


@dataclass(slots=True)
class ServeBenchConfig:
    """What the serving benchmark runs: workloads, clients, the request bound and time bound."""

    workloads: tuple[str, ...] = ("mlp", "cnn")
    clients: int = 200
    total: int = 4000
    seconds: float = 30.0
    warmup: int = 200
    client_procs: tuple[int, ...] = (4,)  # load generator processes (loadgen.py), a run each: bench/SERVE.md's sweep
    ort_threads: int = 64  # onnxruntime's worker threads in its arm (the 64-thread pool)
    serve_args: tuple[str, ...] = ()  # extra `aioge serve` flags (e.g. --batch-max-rows 64)
    workers: tuple[int, ...] = (1,)  # an `aioge serve --workers N` arm for each
    mlserver_python: str | None = None  # a python with mlserver and onnxruntime: the MLServer arms
    mlserver_batch: tuple[int, float] = (64, 0.002)  # adaptive batching's max_batch_size, max_batch_time (s)


class OrtBackend:
    """The server's Backend with onnxruntime: one InferenceSession per model, each run in a
    worker thread (at most ``threads`` at once)."""

    def __init__(self, threads: int = 64) -> None:
        self._limiter = anyio.CapacityLimiter(threads)
        self._sessions: dict[str, Any] = {}

    async def __aenter__(self) -> OrtBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._sessions.clear()

    async def load(self, model: Any) -> None:
        import onnxruntime as ort

        from aioge.server import DATATYPES, TensorSpec

        sess = await anyio.to_thread.run_sync(lambda: ort.InferenceSession(model.path, providers=["CPUExecutionProvider"]))
        types = {f"tensor({k})": v for k, v in DATATYPES.items()} | {
            "tensor(float)": "FP32",
            "tensor(double)": "FP64",
            "tensor(float16)": "FP16",
        }

        def specs(args: Sequence[Any]) -> list[TensorSpec]:
            return [TensorSpec(a.name, types[a.type], tuple(d if isinstance(d, int) else -1 for d in a.shape)) for a in args]

        model.inputs, model.outputs = specs(sess.get_inputs()), specs(sess.get_outputs())
        self._sessions[model.name] = sess

    async def infer(self, model: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        sess = self._sessions[model.name]
        outs = await anyio.to_thread.run_sync(sess.run, None, feeds, limiter=self._limiter)
        return {o.name: a for o, a in zip(sess.get_outputs(), outs)}

    def metrics(self, models: Sequence[Any]) -> list[Any]:
        return []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _server(
    argv: list[str], port: int, env: Mapping[str, str], python: str = sys.executable, ready: str = "/v2/health/ready"
) -> Iterator[tuple[str, int]]:
    """A server subprocess, ready (GET ``ready`` 200) on 127.0.0.1:port: its URL and pid; stopped on exit."""
    import httpx

    # stderr to a file, not a pipe: a chatty server can never block on a full pipe.
    # -P: the current directory does not come first on sys.path (a stray msgpack.py there must not run).
    with (
        tempfile.TemporaryFile() as log,
        subprocess.Popen([python, "-P", *argv], stdout=subprocess.DEVNULL, stderr=log, env=dict(env)) as proc,
    ):
        url = f"http://127.0.0.1:{port}"
        try:
            deadline, ok = time.monotonic() + 120, 0
            while ok < 10:  # on 10 fresh connections in a row: with --workers N, each lands on any worker
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"server {argv} exited: {log.read().decode(errors='replace')[-2000:]}")
                try:
                    ok = ok + 1 if httpx.get(url + ready).status_code == 200 else 0
                except httpx.TransportError:
                    ok = 0
                if time.monotonic() > deadline:
                    raise RuntimeError(f"server {argv} not ready after 120 s")
                time.sleep(0.05 * (ok == 0))
            yield url, proc.pid
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _request(feeds: Mapping[str, np.ndarray]) -> tuple[bytes, dict[str, str]]:
    """A binary-extension infer body for ``feeds`` and its header."""
    from aioge.server import DATATYPES

    inputs = [
        {"name": k, "shape": list(a.shape), "datatype": DATATYPES[a.dtype.name], "parameters": {"binary_data_size": a.nbytes}}
        for k, a in feeds.items()
    ]
    head = json.dumps({"inputs": inputs, "parameters": {"binary_data_output": True}}).encode()
    return head + b"".join(np.ascontiguousarray(a).tobytes() for a in feeds.values()), {
        "Inference-Header-Content-Length": str(len(head))
    }


def _json_request(feeds: Mapping[str, np.ndarray]) -> tuple[bytes, dict[str, str]]:
    """A JSON infer body for ``feeds`` (what MLServer takes)."""
    from aioge.server import DATATYPES

    inputs = [
        {"name": k, "shape": list(a.shape), "datatype": DATATYPES[a.dtype.name], "data": a.ravel().tolist()}
        for k, a in feeds.items()
    ]
    return json.dumps({"inputs": inputs}).encode(), {"Content-Type": "application/json"}


def _decode(content: bytes, header_length: str | None) -> dict[str, np.ndarray]:
    """The outputs of a response, binary (``header_length``) or JSON."""
    from aioge.server import DATATYPES

    n = len(content) if header_length is None else int(header_length)
    meta, offset, out = json.loads(content[:n]), n, {}
    for o in meta["outputs"]:
        dtype = next(k for k, v in DATATYPES.items() if v == o["datatype"])
        if "data" in o:
            out[o["name"]] = np.asarray(o["data"], dtype).reshape(o["shape"])
            continue
        size = o["parameters"]["binary_data_size"]
        out[o["name"]] = np.frombuffer(content[offset : offset + size], dtype).reshape(o["shape"])
        offset += size
    return out


# MLServer's custom runtime (written into the arm's folder): onnxruntime on the decoded tensors,
# run in predict as MLServer's own runtimes do (in its inference worker process).
_MLSERVER_RUNTIME = """
import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class OrtRuntime(MLModel):
    async def load(self) -> bool:
        self._sess = ort.InferenceSession(self.settings.parameters.uri, providers=["CPUExecutionProvider"])
        self._names = [o.name for o in self._sess.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        outs = self._sess.run(None, {i.name: NumpyCodec.decode_input(i) for i in payload.inputs})
        encoded = [NumpyCodec.encode_output(n, a) for n, a in zip(self._names, outs)]
        return InferenceResponse(model_name=self.name, outputs=encoded)
"""


def mlserver_folder(folder: str, model: str, path: str, port: int, *, batch: tuple[int, float] | None) -> list[str]:
    """Write an MLServer folder serving ``path`` as ``model`` on 127.0.0.1:port (settings.json,
    the runtime, model-settings.json with adaptive batching ``batch`` = (max_batch_size,
    max_batch_time) or off) and return the arguments of ``python -m mlserver.cli.main``."""
    os.makedirs(os.path.join(folder, model), exist_ok=True)
    with open(os.path.join(folder, "ort_runtime.py"), "w") as f:
        f.write(_MLSERVER_RUNTIME)
    settings = {"debug": False, "host": "127.0.0.1", "http_port": port, "grpc_port": _free_port(), "parallel_workers": 1}
    settings |= {"metrics_port": _free_port(), "metrics_dir": os.path.join(folder, "metrics")}
    model_settings: dict[str, Any] = {"name": model, "implementation": "ort_runtime.OrtRuntime", "parameters": {"uri": path}}
    if batch is not None:
        model_settings |= {"max_batch_size": batch[0], "max_batch_time": batch[1]}
    for name, data in (("settings.json", settings), (os.path.join(model, "model-settings.json"), model_settings)):
        with open(os.path.join(folder, name), "w") as f:
            json.dump(data, f)
    return ["-m", "mlserver.cli.main", "start", folder]


def mlserver_usable(python: str | None) -> str | None:
    """Why the MLServer arms cannot run with ``python`` (None when they can)."""
    if not python:
        return "MLServer arms skipped: no --mlserver-python (a python with mlserver and onnxruntime, e.g. a venv of its own)"
    try:
        subprocess.run([python, "-c", "import mlserver, onnxruntime"], capture_output=True, timeout=120, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"MLServer arms skipped: {python} cannot import mlserver and onnxruntime ({type(exc).__name__})"
    return None


def _load(
    url: str, pid: int, model: str, body: bytes, headers: dict[str, str], cfg: ServeBenchConfig, procs: int
) -> dict[str, Any]:
    import httpx

    from aioge.benchmarks.loadgen import http_request, run_load

    host, port = url.removeprefix("http://").split(":")
    path = f"/v2/models/{model}/infer"
    request = http_request(host, int(port), path, body, headers)
    load = run_load(
        host,
        int(port),
        request,
        clients=cfg.clients,
        procs=procs,
        total=cfg.total,
        seconds=cfg.seconds,
        warmup=cfg.warmup,
        server_pid=pid,
    )
    r = httpx.post(url + path, content=body, headers=headers, timeout=120)
    lat, elapsed, cores = np.array(load["latencies"]), load["seconds"], min(load["procs"], os.cpu_count() or 1)
    return {
        "transport_errors": load["transport_errors"],  # of the warm-up too
        "error_statuses": load["error_statuses"],
        "client_procs": load["procs"],
        "client_cpu_pct": 100 * load["client_cpu_s"] / elapsed,  # of one core: the load generator's own share
        "client_us_per_request": 1e6 * load["client_cpu_s"] / max(len(lat), 1),
        "server_cpu_pct": 100 * load["server_cpu_s"] / elapsed,  # the server's processes, of one core
        # the client used > 80% of the cores it can use (a process each): its limit, maybe not the server's
        "client_bound": load["client_cpu_s"] / elapsed > 0.8 * cores or load["client_max_pct"] > 90,
        "requests": load["requests"],
        "errors": load["errors"],
        "seconds": elapsed,
        "rps": len(lat) / elapsed,
        "p50_ms": float(np.percentile(lat, 50) * 1e3),
        "p99_ms": float(np.percentile(lat, 99) * 1e3),
        "outputs": _decode(r.content, r.headers.get("Inference-Header-Content-Length")),
    }


def run_serve_bench(cfg: ServeBenchConfig | None = None) -> list[dict[str, Any]]:
    """Both arms on every workload; one row per (workload, arm) with requests, errors, rps,
    p50_ms, p99_ms, and the max abs error of a response against the workload's reference.

    Raises:
        OptionError: an unknown workload, or fewer than one client, client process or request.
        RuntimeError: a server or a load generator process failed.
    """
    import onnx

    from aioge.benchmarks.workloads import to_onnx
    from aioge.errors import OptionError
    from aioge.examples import EXAMPLES

    cfg = cfg or ServeBenchConfig()
    unknown = sorted(set(cfg.workloads) - set(EXAMPLES))
    if unknown:
        raise OptionError("--serve-workloads", ",".join(unknown), f"unknown serving workloads; known: {sorted(EXAMPLES)}")
    counts = [("--serve-clients", cfg.clients), ("--serve-total", cfg.total)]
    for flag, n in [*counts, *(("--serve-client-procs", p) for p in cfg.client_procs)]:
        if n < 1:
            raise OptionError(flag, n, "expected 1 or more")
    rows = []
    py, mlserver = sys.executable, cfg.mlserver_python
    skipped = mlserver_usable(mlserver)
    if skipped:
        print(skipped, file=sys.stderr)
        mlserver = None
    with tempfile.TemporaryDirectory(prefix="aioge-serve-bench-") as work:
        env = {**os.environ, "ASCEND_CACHE_PATH": os.path.join(work, "atc")}
        for name in cfg.workloads:
            # Single-row clients: the example graph built for batch 1 (its seed fixes the weights);
            # the ONNX file's first input dim is left symbolic, so a batcher may stack rows.
            build: Any = EXAMPLES[name]
            graph, feeds, reference = build(batch=1)
            model = to_onnx(graph)
            model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
            path = os.path.join(work, f"{name}.onnx")
            onnx.save(model, path)
            binary, as_json = _request(feeds), _json_request(feeds)
            want = reference(feeds)
            # no access log: the other servers have none, and a line a request is not what is measured
            serve = ["-m", "aioge", "serve", path, "--no-access-log", *cfg.serve_args]
            ort = ["-m", "aioge.benchmarks.serve_bench", "--ort-server", path, "--ort-threads", str(cfg.ort_threads)]
            # (arm, port -> the server's arguments, request, python, environment)
            arms: list[tuple[str, Callable[[int], list[str]], Any, str, Mapping[str, str]]] = [
                (
                    "aioge serve" + (f" --workers {w}" if w > 1 else ""),
                    lambda port, w=w: [*serve, "--workers", str(w), "--port", str(port)],  # type: ignore[misc]
                    binary,
                    py,
                    env,
                )
                for w in cfg.workers
            ]
            arms.append((f"onnxruntime ({cfg.ort_threads} threads)", lambda port: [*ort, "--port", str(port)], binary, py, env))
            if mlserver is not None:
                arms.append(("aioge serve (JSON)", lambda port: [*serve, "--port", str(port)], as_json, py, env))
                for batch in (None, cfg.mlserver_batch):
                    arm = "MLServer, batching " + (f"on ({batch[0]} rows, {batch[1] * 1e3:g} ms)" if batch else "off")
                    folder = os.path.join(work, f"mlserver-{name}-{'on' if batch else 'off'}")
                    ml_env = {**{k: v for k, v in env.items() if k != "PYTHONPATH"}, "PYTHONPATH": folder}
                    start = partial(mlserver_folder, folder, name, path, batch=batch)
                    arms.append((arm, start, as_json, mlserver, ml_env))
            for arm, argv_for, (body, headers), python, arm_env in arms:
                port = _free_port()
                print(f"serve bench: {name}, {arm}", file=sys.stderr)
                with _server(argv_for(port), port, arm_env, python, f"/v2/models/{name}/ready") as (url, pid):
                    for procs in cfg.client_procs:  # one server, a run each
                        row = _load(url, pid, name, body, headers, cfg, procs)
                        got = row.pop("outputs")
                        row["max_abs_err"] = max(float(np.max(np.abs(got[k] - np.asarray(v)))) for k, v in want.items())
                        label = arm + (f", {procs} client procs" if len(cfg.client_procs) > 1 else "")
                        rows.append({"workload": name, "arm": label, "clients": cfg.clients, **row})
    return rows


def format_rows(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| workload | server | clients | requests | errors | req/s | p50 ms | p99 ms | client CPU % | client µs/req | server CPU % "
        "| max abs err |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r['workload']} | {r['arm']} | {r['clients']} | {r['requests']} | {r['errors']} | {r['rps']:.0f} | "
        f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['client_cpu_pct']:.0f}{' CLIENT-BOUND' * r['client_bound']} | "
        f"{r['client_us_per_request']:.0f} | {r['server_cpu_pct']:.0f} | {r['max_abs_err']:.2g} |"
        for r in rows
    ]
    if any(r["client_bound"] for r in rows):
        lines.append(
            "\nCLIENT-BOUND: the load generator used more than 80% of the cores its processes can use (or one "
            "process more than 90% of a core): that row's req/s is the client's limit, not the server's."
        )
    return "\n".join(lines)


def bench_from_args(args: argparse.Namespace) -> int:
    """``aioge bench --serve``: run, print the table, write SERVE.md and serve.json to --output-dir."""
    cfg = ServeBenchConfig(
        workloads=tuple(w for w in args.serve_workloads.split(",") if w),
        clients=args.serve_clients,
        client_procs=tuple(int(p) for p in args.serve_client_procs.split(",") if p),
        total=args.serve_total,
        seconds=args.serve_seconds,
        serve_args=tuple(args.serve_args.split()),
        workers=tuple(int(w) for w in args.serve_workers.split(",") if w),
        mlserver_python=args.mlserver_python,
    )
    load = os.getloadavg()[0]
    rows = run_serve_bench(cfg)
    table = format_rows(rows)
    print(table)
    skipped = mlserver_usable(cfg.mlserver_python)
    os.makedirs(args.output_dir, exist_ok=True)
    md, js = os.path.join(args.output_dir, "SERVE.md"), os.path.join(args.output_dir, "serve.json")
    with open(md, "w") as f:
        f.write(
            f"# aioge serve over HTTP\n\n{cfg.clients} concurrent single-row clients on 127.0.0.1, "
            f"at most {cfg.total} requests or {cfg.seconds:g} s per server; load average {load:.1f} before, "
            f"{os.getloadavg()[0]:.1f} after (a shared machine: other jobs run beside it). Client CPU %: the load "
            f"generator's CPU time over the run ({'/'.join(map(str, cfg.client_procs))} processes), of one core; server CPU %: the "
            f"server's processes', of one core ({os.cpu_count()} cores).\n\n{table}\n" + (f"\n{skipped}.\n" if skipped else "")
        )
    with open(js, "w") as f:
        json.dump(rows, f, indent=2)
    print(f"wrote {md} and {js}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m aioge.benchmarks.serve_bench --ort-server MODEL.onnx``: the onnxruntime arm's server."""
    p = argparse.ArgumentParser(prog="python -m aioge.benchmarks.serve_bench")
    p.add_argument(
        "--ort-server", metavar="MODEL.onnx", required=True, help="serve MODEL with onnxruntime behind aioge's HTTP code"
    )
    p.add_argument("--ort-threads", type=int, default=64)
    p.add_argument("--port", type=int, default=8000)
    args = p.parse_args(argv)
    from aioge.server import create_app, serve

    serve(create_app([args.ort_server], OrtBackend(args.ort_threads)), "127.0.0.1", args.port)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
