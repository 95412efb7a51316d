"""``aioge serve``: models over the Open Inference Protocol (KServe v2 REST), one Session.

Routes: ``GET /v2/health/live``, ``/v2/health/ready``, ``/v2``, ``/v2/models/{name}``,
``/v2/models/{name}/ready``, ``POST /v2/models/{name}/infer`` (JSON tensors and the binary
tensor extension: an ``Inference-Header-Content-Length`` header, ``binary_data_size`` input
parameters, ``binary_data`` output parameters), each model route also under
``/v2/models/{name}/versions/{v}``, and ``GET /metrics`` (Prometheus text). The models are
files or a Triton-style repository folder (``served_models``, ``aioge.serving.repository``).

Starlette (ASGI on anyio, the concurrency layer aioge itself uses) under uvicorn (the
reference ASGI server; on SIGTERM it stops accepting, lets in-flight requests finish, then
runs the lifespan exit that closes the Session). Models load and compile in the background
after start-up: the server is live at once and ready when every model has compiled. The
model runner is a small ``Backend``, so the benchmark can put onnxruntime behind the same HTTP
code; the default is ``SessionBackend``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import anyio
import numpy as np

from aioge.errors import AiogeError, ConfigError, FeedError, GraphError, OptionError

__all__ = [
    "Backend",
    "ServedModel",
    "SessionBackend",
    "TensorSpec",
    "create_app",
    "find_version",
    "model_names",
    "serve",
    "served_models",
]

log = logging.getLogger(__name__)
_access = logging.getLogger("aioge.access")

# numpy dtype name <-> KServe v2 datatype (the protocol has no complex type; str is BYTES, not served).
DATATYPES = {
    "bool": "BOOL",
    "uint8": "UINT8",
    "uint16": "UINT16",
    "uint32": "UINT32",
    "uint64": "UINT64",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "float16": "FP16",
    "float32": "FP32",
    "float64": "FP64",
}
MAX_BODY_BYTES = 64 << 20
KEEP_ALIVE_SECONDS = 5.0  # an idle keep-alive connection is closed after this long
READ_TIMEOUT_SECONDS = 30.0  # a request's line and headers, and then its body, must arrive within this long each
HEADER_LENGTH = "inference-header-content-length"
# Bodies and outputs past this many bytes are decoded and encoded in a worker thread (~1 ms of work).
_OFF_LOOP_BYTES = 64 << 10
_CONTROL_BYTES = 64 << 10  # the most a repository request's body may hold


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One input or output as the protocol shows it: ``shape`` has -1 for a dynamic dim."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def metadata(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


_PHASES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")


@dataclass(slots=True)
class ModelStats:
    """A model's inference statistics as Triton reports them (``GET .../stats``): a count and
    nanoseconds per phase (input = decoding, infer = the backend, output = encoding)."""

    inference_count: int = 0  # rows (dim 0 of the first input) inferred
    execution_count: int = 0  # requests run
    last_inference: int = 0  # ms since the epoch
    phases: dict[str, list[int]] = field(default_factory=lambda: {k: [0, 0] for k in _PHASES})

    def add(self, phase: str, seconds: float) -> None:
        entry = self.phases[phase]
        entry[0] += 1
        entry[1] += int(seconds * 1e9)

    def triton(self, name: str, version: str = "1") -> dict[str, Any]:
        return {
            "name": name,
            "version": version,
            "last_inference": self.last_inference,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {k: {"count": c, "ns": ns} for k, (c, ns) in self.phases.items()},
            "batch_stats": [],
        }


@dataclass(slots=True)
class ServedModel:
    """A model version the server offers: its name (the file's stem, or its repository folder),
    file, specs and readiness; ``config`` is its repository config (``serving.repository``)."""

    name: str
    path: str
    version: str = "1"
    config: Any = None  # a ModelConfig: per-model graph options, shapes and gears built at load
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)
    ready: bool = False
    error: str | None = None  # why loading or compiling failed (the model then stays not ready)
    handle: Any = None  # the backend's own reference (a graph id for SessionBackend)
    unloaded: bool = False  # unloaded through the repository API (POST .../load loads it again)
    stats: ModelStats = field(default_factory=ModelStats)
    lock: anyio.Lock = field(default_factory=anyio.Lock)  # one load or unload at a time

    @property
    def state(self) -> str:
        """Triton's repository state of the model."""
        if self.ready:
            return "READY"
        return "UNAVAILABLE" if self.unloaded or self.error else "LOADING"


class Backend(Protocol):
    """What runs the models behind the HTTP code."""

    async def __aenter__(self) -> Backend: ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def load(self, model: ServedModel) -> None:
        """Load and compile ``model``, filling its specs and ``handle`` (raises on failure)."""

    async def infer(self, model: ServedModel, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run ``model``; FeedError for feeds it refuses."""

    def metrics(self, models: Sequence[ServedModel]) -> Iterable[Any]:
        """Extra Prometheus metric families (called in a worker thread at scrape time)."""

    # and optionally ``async def unload(self, model: ServedModel) -> None``: free what ``load`` made


def model_names(paths: Sequence[str], suffixes: tuple[str, ...] = (".onnx", ".om")) -> dict[str, ServedModel]:
    """The served models by name (the file stem), checked before the server starts.

    Raises:
        AiogeError: a missing file, a file of another kind, or two files with one stem.
    """
    models: dict[str, ServedModel] = {}
    for p in paths:
        path = Path(p)
        if path.suffix not in suffixes:
            raise AiogeError(f"{p}: aioge serve takes {' or '.join(suffixes)} files")
        if not path.is_file():
            raise AiogeError(f"{p}: no such model file")
        if path.stem in models:
            raise AiogeError(f"{p}: two models named {path.stem!r} ({models[path.stem].path} too); rename one")
        models[path.stem] = ServedModel(path.stem, str(path))
    if not models:
        raise AiogeError("aioge serve: give at least one MODEL.onnx or MODEL.om")
    return models


def served_models(paths: Sequence[str] = (), repository: str | None = None) -> list[ServedModel]:
    """The served model versions: of the files ``paths`` (version 1 each), or of a model
    repository folder (``aioge.serving.repository``), by name then version.

    Raises:
        AiogeError: a bad path (``model_names``); ConfigError: a bad repository or config.
    """
    if repository is None:
        return list(model_names(paths).values())
    if paths:
        raise AiogeError("aioge serve: give model files or --model-repository, not both")
    from aioge.serving.repository import read_repository

    return [ServedModel(v.name, v.path, str(v.version), v.config) for v in read_repository(repository)]


def find_version(versions: Mapping[str, Mapping[str, ServedModel]], name: str, version: str | None) -> ServedModel | None:
    """The served version ``version`` of ``name`` (``versions``: name -> version -> model), or
    for no version the latest ready one (the latest if none is ready); None when not served."""
    found = versions.get(name, {})
    if version is None and found:
        return max([m for m in found.values() if m.ready] or found.values(), key=lambda m: int(m.version))
    return found.get(version) if version is not None else None


def _specs(values: Iterable[Any], model: str, geared: Mapping[str, tuple[int, ...]]) -> list[TensorSpec]:
    out = []
    for v in values:
        desc = v.desc
        if desc.dtype not in DATATYPES:
            raise AiogeError(f"model {model!r}: {v.name!r} is {desc.dtype}, which KServe v2 has no datatype for")
        shape = (-1,) if desc.shape is None else tuple(d if isinstance(d, int) else -1 for d in desc.shape)
        out.append(TensorSpec(v.name, DATATYPES[desc.dtype], geared.get(v.name, shape)))
    return out


class SessionBackend:
    """One aioge Session for every model: .onnx files are added with the graph options (and a
    model's own: ``model_options`` by name, a repository model's config) and built ahead
    (dynamic dims as 1, or every gear when the options give gears), .om files are loaded as
    compiled (with all their gears). A geared model's metadata shows -1 for each
    geared dim, and a request no gear fits is a 400 naming the gears: it never compiles."""

    def __init__(
        self,
        session_options: Mapping[str, str] | None = None,
        graph_options: Mapping[str, str] | None = None,
        model_options: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        from aioge.options import check_options

        # Checked now, so a bad --option fails before the server binds its port.
        self._session_options = check_options(session_options, "session")
        self._graph_options = check_options(graph_options, "graph")
        # model name -> graph options for that model alone (over graph_options)
        self._model_options = {n: check_options(o, "graph") for n, o in (model_options or {}).items()}
        self.session: Any = None
        self._next_id = 1

    async def __aenter__(self) -> SessionBackend:
        from aioge.session import Session

        self.session = await Session(self._session_options).__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.aclose()

    async def load(self, model: ServedModel) -> None:
        """Register and compile one model (ModelFormatError, CompileError, ... on failure)."""
        import aioge
        from aioge.serving.gears import gear_shapes

        gid, self._next_id = self._next_id, self._next_id + 1
        options = {**self._graph_options, **self._model_options.get(model.name, {})}  # its own, for it alone
        if model.config is not None:
            options = {**options, **model.config.graph_options(model.path)}
        if model.path.endswith(".om"):
            batching = {k: v for k, v in options.items() if k.startswith("aioge.batch_")}
            if len(batching) != len(options):
                raise AiogeError(
                    f"{model.path}: graph options other than aioge.batch_* apply to .onnx models; "
                    "an .om carries its compile options"
                )
            await self.session.load_model(model.path, gid, options=batching)  # batching pads to its batch gears
            graph = self.session.compiled(gid).graph
        else:
            graph = await anyio.to_thread.run_sync(aioge.load_onnx, model.path)
            try:
                await self.session.add_graph(gid, graph, options)  # builds every gear, if it has gears
            except OptionError as exc:
                if model.config is None or not model.config.path:
                    raise
                from aioge.serving.repository import config_field

                raise ConfigError(model.config.path, config_field(exc.key), f"{model.path}: {exc}") from None
            try:
                self.session.compiled(gid)
            except GraphError:  # no gears: built once ahead, dynamic dims as 1
                shapes = {v.name: tuple(d if isinstance(d, int) else 1 for d in v.desc.shape or ()) for v in graph.inputs}
                await self.session.build_graph(gid, {**shapes, **(model.config.static_shapes() if model.config else {})})
        compiled = self.session.compiled(gid)
        geared = gear_shapes(compiled) if compiled.gears else {}
        if model.config is not None and not compiled.gears:  # a repository model serves what it built, nothing else
            built = (*compiled.graph.inputs, *compiled.graph.outputs)
            geared = {
                v.name: tuple(v.desc.shape)
                for v in built
                if v.desc.shape is not None and all(isinstance(d, int) for d in v.desc.shape)
            }
        model.inputs, model.outputs = _specs(graph.inputs, model.name, geared), _specs(graph.outputs, model.name, geared)
        model.handle = gid

    async def infer(self, model: ServedModel, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = await self.session.run_graph(model.handle, feeds)
        return out

    async def unload(self, model: ServedModel) -> None:
        """Forget the model's graph and its builds (a load adds it again, under a new id)."""
        await self.session.remove_graph(model.handle)

    def metrics(self, models: Sequence[ServedModel]) -> Iterable[Any]:
        """Compile and cache counters per model, the kernel cache's counters, batch statistics."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        try:
            stats = [(m.name, self.session.compiled(m.handle).stats) for m in models if m.ready]
        except AiogeError:  # the session closed under a scrape (shutdown): nothing left to report
            return
        fams: dict[str, Any] = {
            "kernels_compiled": CounterMetricFamily(
                "aioge_model_kernels_compiled", "kernels compiled for the model's build", labels=["model"]
            ),
            "kernel_cache_hits": CounterMetricFamily(
                "aioge_model_kernel_cache_hits", "kernels the kernel cache served", labels=["model"]
            ),
            "compile_seconds": GaugeMetricFamily(
                "aioge_model_compile_seconds", "seconds the model's build took", labels=["model"]
            ),
            "graph_cache_hit": GaugeMetricFamily(
                "aioge_model_graph_cache_hit", "1 when the graph cache served the build", labels=["model"]
            ),
        }
        for name, s in stats:
            for key, fam in fams.items():
                fam.add_metric([name], float(getattr(s, key)))
        yield from fams.values()
        counts = self.session.kernel_cache.read_stats_sync()  # one small file read: scrapes run in a worker thread
        for key in ("hits", "misses", "compiles"):
            yield CounterMetricFamily(
                f"aioge_kernel_cache_{key}", f"kernel cache {key} (whole cache folder, all processes)", value=counts.get(key, 0)
            )
        batch = GaugeMetricFamily(
            "aioge_batch", "dynamic batching statistics per model (aioge.batch_* options)", labels=["model", "stat"]
        )
        for m in models:
            for stat, value in batch_stats(self.session, m.handle).items():
                batch.add_metric([m.name, stat], value)
        yield batch


def batch_stats(session: Any, graph_id: int) -> dict[str, float]:
    """The session's dynamic batching statistics for a graph (batches, mean size, queue delay
    quantiles, ...) as numbers; empty when the session has no batching or the graph none."""
    getter = getattr(session, "batch_stats", None)
    if getter is None:
        return {}
    try:
        raw = getter(graph_id)
    except AiogeError:
        return {}
    as_dict = getattr(raw, "as_dict", None)  # BatchStats (a slotted dataclass: no __dict__)
    items = (raw if isinstance(raw, Mapping) else as_dict() if callable(as_dict) else {}).items()
    return {str(k): float(v) for k, v in items if isinstance(v, (int, float)) and not isinstance(v, bool)}


@dataclass(frozen=True, slots=True)
class Core:
    """One request-handling core for both fronts (KServe v2 REST here, gRPC in
    ``aioge.serving.kserve_grpc``): lookup by name and version ("": the latest ready one; a 404
    _BadRequest), ``chosen`` (name, version) -> the versions a statistics request means ("" name:
    every served version; "" version: every version of the model), the answers as the protocol's
    JSON objects, and ``infer`` (see create_app's ``infer_with``)."""

    find: Callable[[str, str], ServedModel]
    ready: Callable[[], bool]
    server_metadata: Callable[[], dict[str, Any]]
    metadata: Callable[[ServedModel], dict[str, Any]]
    config: Callable[[ServedModel], dict[str, Any]]
    statistics: Callable[[Iterable[ServedModel]], dict[str, Any]]
    index: Callable[[bool], list[dict[str, Any]]]
    infer: Callable[[str, str, Any, Any], Awaitable[Any]]
    chosen: Callable[[str, str], list[ServedModel]]
    datatypes: Mapping[str, str] = field(default_factory=lambda: DATATYPES)
    check_input: Callable[[TensorSpec, Any, Any], np.dtype[Any]] = field(default_factory=lambda: check_input)
    check_complete: Callable[[ServedModel, Mapping[str, np.ndarray]], None] = field(default_factory=lambda: check_complete)
    error: Callable[[int, str], Exception] = field(default_factory=lambda: _BadRequest)  # (HTTP status, message)
    access_log: bool = False  # one INFO line per request on ``aioge.access``


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


_SHAPE = re.compile(rb'"shape"\s*:\s*\[\s*([0-9]+(?:\s*,\s*[0-9]+)*)?\s*\]')
_SLACK_ITEMS = 4096  # JSON items (values and containers) allowed past those of the declared values: names, parameters, ...


def _declared_values(model: ServedModel) -> float:
    """The most tensor values a request to ``model`` can hold (inf when an input has a dynamic dim)."""
    total = 0.0
    for spec in model.inputs:
        if any(d < 0 for d in spec.shape):
            return math.inf
        total += math.prod(spec.shape)
    return total


def body_limit(model: ServedModel, max_body_bytes: int) -> int:
    """The largest body ``model`` takes: ``max_body_bytes``, or less when its inputs are static
    (64 KiB plus 40 bytes a value: room for any value's JSON text or binary bytes)."""
    values = _declared_values(model)
    return max_body_bytes if math.isinf(values) else min(max_body_bytes, (64 << 10) + 40 * int(values))


def _check_json_size(head: bytes | bytearray, model: ServedModel) -> None:
    """Refuse, before decoding, a JSON part with far more items than its tensors need.

    Python's JSON objects take 8 to 20 times their text (a float 32 bytes, a list 56), so the
    items (commas and brackets, counted at C speed) may be at most rank + 1 a value (a value
    nested in one list per dim) for the values the request's ``shape`` fields declare (capped
    by the model's static shapes), plus some slack.
    """
    declared, rank = 0, 1
    for m in _SHAPE.finditer(head):
        dims = [int(d) for d in (m.group(1) or b"").split(b",") if d.strip()]
        declared, rank = declared + math.prod(dims), max(rank, len(dims))
    allowed = (rank + 1) * min(declared, _declared_values(model)) + _SLACK_ITEMS
    items = head.count(b",") + head.count(b"[") + head.count(b"{")
    if items > allowed:
        raise _BadRequest(
            413,
            f"the request's JSON holds about {items} items, more than its shapes' {declared} values need; "
            "send large tensors as binary data (binary_data_size)",
        )


def _params(item: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    params = item.get("parameters")
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise _BadRequest(400, f'{where}: "parameters" must be a JSON object, got {type(params).__name__}')
    return params


def check_input(spec: TensorSpec, shape: Any, datatype: Any) -> np.dtype[Any]:
    """The numpy dtype of an input given as ``shape`` and ``datatype`` (KServe's name), checked
    against its spec (REST and gRPC alike). Raises _BadRequest 400 naming what is wrong."""
    name = spec.name
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise _BadRequest(400, f"input {name!r}: shape must be a list of non-negative ints, got {shape!r}")
    if datatype != spec.datatype:
        raise _BadRequest(400, f"input {name!r} is {spec.datatype}, got datatype {datatype!r}")
    if len(shape) != len(spec.shape) or any(w not in (-1, d) for w, d in zip(spec.shape, shape)):
        raise _BadRequest(400, f"input {name!r} expects shape {list(spec.shape)} (-1: any), got {shape}")
    return np.dtype([k for k, v in DATATYPES.items() if v == spec.datatype][0])


def check_complete(model: ServedModel, feeds: Mapping[str, np.ndarray]) -> None:
    """Every input of ``model`` is fed (400 naming the missing ones otherwise)."""
    missing = sorted({s.name for s in model.inputs} - set(feeds))
    if missing:
        raise _BadRequest(400, f"model {model.name!r}: missing inputs {missing}")


def _decode_request(
    body: bytes | bytearray, header_length: str | None, model: ServedModel
) -> tuple[dict[str, np.ndarray], list[tuple[str, bool]], Any]:
    """Feeds, the requested outputs (name, binary) and the request id from an infer body.

    Raises:
        _BadRequest: 400 for anything malformed (never another exception), 413 for a JSON
            part far larger than its tensors.
    """
    try:
        n = len(body) if header_length is None else int(header_length)
        if not 0 <= n <= len(body):
            raise ValueError
    except ValueError:
        raise _BadRequest(
            400, f"Inference-Header-Content-Length {header_length!r} is not a length within the body ({len(body)} bytes)"
        ) from None
    head = body if n == len(body) else bytes(memoryview(body)[:n])
    if n > _OFF_LOOP_BYTES:  # a smaller one decodes to a few MB at most: not worth the scan
        _check_json_size(head, model)
    try:
        request = json.loads(head)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _BadRequest(400, f"malformed JSON in the request: {exc}") from None
    except RecursionError:
        raise _BadRequest(400, "malformed JSON in the request: nested too deeply") from None
    if not isinstance(request, dict) or not isinstance(request.get("inputs"), list):
        raise _BadRequest(400, 'the request must be a JSON object with an "inputs" list')
    request_params = _params(request, "the request")
    if not isinstance(request.get("id", ""), str):
        raise _BadRequest(400, f'the request "id" must be a string, got {type(request["id"]).__name__}')
    specs = {s.name: s for s in model.inputs}
    binary, offset = memoryview(body)[n:], 0
    feeds: dict[str, np.ndarray] = {}
    for item in request["inputs"]:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise _BadRequest(400, 'every input must be an object with a "name" string')
        name = item["name"]
        spec = specs.get(name)
        if spec is None:
            raise _BadRequest(400, f"model {model.name!r} has no input {name!r}; its inputs are {sorted(specs)}")
        if name in feeds:
            raise _BadRequest(400, f"input {name!r} is given twice")
        shape: Any = item.get("shape")
        dtype = check_input(spec, shape, item.get("datatype"))
        count = math.prod(shape)
        size = _params(item, f"input {name!r}").get("binary_data_size")
        if size is not None:
            if (
                not isinstance(size, int)
                or isinstance(size, bool)
                or size != count * dtype.itemsize
                or offset + size > len(binary)
            ):
                raise _BadRequest(
                    400,
                    f"input {name!r}: binary_data_size {size!r} does not match {shape} {spec.datatype} "
                    f"({count * dtype.itemsize} bytes) or the {len(binary) - offset} binary bytes left",
                )
            array = np.frombuffer(binary[offset : offset + size], dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)
            offset += size
        else:
            data = item.get("data")
            if not isinstance(data, list):
                raise _BadRequest(
                    400, f"input {name!r}: data must be a list of {spec.datatype} values, got {type(data).__name__}"
                )
            try:
                flat = np.asarray(data, dtype=dtype).reshape(-1)
            except (TypeError, ValueError, OverflowError, RecursionError) as exc:
                raise _BadRequest(400, f"input {name!r}: data is not {spec.datatype} values: {exc}") from None
            if flat.size != count:
                raise _BadRequest(400, f"input {name!r}: {flat.size} data values for shape {shape} ({count})")
            array = flat.reshape(shape)
        feeds[name] = array
    check_complete(model, feeds)
    if offset != len(binary):
        raise _BadRequest(400, f"{len(binary) - offset} binary bytes after the last binary input")
    default_binary = bool(request_params.get("binary_data_output", False))
    known = {s.name for s in model.outputs}
    outputs = request.get("outputs")
    if outputs is None:
        outputs = [{"name": s.name} for s in model.outputs]
    if not isinstance(outputs, list):
        raise _BadRequest(400, f'"outputs" must be a list of objects with a "name", got {type(outputs).__name__}')
    wanted: list[tuple[str, bool]] = []
    for item in outputs:
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or name not in known:
            raise _BadRequest(
                400,
                f"model {model.name!r} has no output {name if isinstance(item, dict) else item!r}; its outputs are {sorted(known)}",
            )
        wanted.append((name, bool(_params(item, f"output {name!r}").get("binary_data", default_binary))))
    return feeds, wanted, request.get("id")


def _encode_response(
    model: ServedModel, outputs: Mapping[str, np.ndarray], wanted: list[tuple[str, bool]], request_id: Any
) -> tuple[bytes, int | None]:
    """The response body and, when binary outputs follow the JSON, the JSON's length."""
    entries, blobs = [], []
    for name, binary in wanted:
        a = np.ascontiguousarray(outputs[name])
        datatype = DATATYPES.get(a.dtype.name)
        if datatype is None:
            raise AiogeError(f"output {name!r} is {a.dtype}, which KServe v2 has no datatype for")
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(a.shape)}
        if binary:
            raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            entry["data"] = a.reshape(-1).tolist()
        entries.append(entry)
    response: dict[str, Any] = {"model_name": model.name, "model_version": model.version, "outputs": entries}
    if request_id is not None:
        response["id"] = request_id
    head = json.dumps(response, allow_nan=True).encode()
    return (head + b"".join(blobs), len(head)) if blobs else (head, None)


def create_app(
    paths: Sequence[str],
    backend: Backend | None = None,
    *,
    repository: str | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_inflight: int = 1024,
    max_decoding: int = 2,
    access_log: bool = False,
    load: Sequence[str] | None = None,
    grpc: tuple[str, int] | None = None,
    grpc_grace: float = 30.0,
    wait_loaded: bool = False,
) -> Any:
    """The Starlette app serving ``paths`` (.onnx and .om files) through ``backend``
    (default: ``SessionBackend()``).

    A body is refused (413) past ``max_body_bytes`` (less for a model with static inputs, see
    ``body_limit``) from its Content-Length before it is read, and while it streams; its JSON
    is refused before decoding when it holds far more items than its tensors need; at most
    ``max_decoding`` bodies past 64 KiB decode at once (in worker threads) and ``max_inflight`` inferences run at once (the
    read timeouts are the protocol's: ``uvicorn_config``). Every error is a JSON object
    ``{"error": ...}``. With ``access_log``, one INFO line per request on the
    ``aioge.access`` logger. ``load`` names the models loaded at start (Triton's explicit
    model control; default: all); the others wait, unloaded, for ``POST .../load``.
    ``repository`` serves a model repository folder instead of ``paths`` (``served_models``):
    every version its configs choose, the unversioned routes at the latest ready version.
    ``/v2/health/ready`` answers 200 once no model is loading and one loaded (or none failed);
    ``app.state.load_failures`` lists the models that failed their first load. With
    ``grpc`` (host, port), the KServe v2 gRPC service (``aioge.serving.kserve_grpc``) runs in
    the same event loop on the same model versions, from start-up until shutdown, when in-flight
    RPCs get ``grpc_grace`` seconds to finish. With ``wait_loaded``, start-up returns once the
    models loaded and fails (AiogeError) if one did not (a Ray Serve replica: ``aioge.ray``).

    Raises:
        AiogeError: a bad model path (see ``model_names``), or ``load`` names no served model;
            ConfigError: a bad repository or config.
    """
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    entries = served_models(paths, repository)
    versions: dict[str, dict[str, ServedModel]] = {}
    for m in entries:
        versions.setdefault(m.name, {})[m.version] = m
    models = {name: found[max(found, key=int)] for name, found in versions.items()}  # the latest version of each
    failures: list[ServedModel] = []
    unknown = sorted(set(load or ()) - set(models))
    if unknown:
        raise AiogeError(f"--load-model {', '.join(unknown)}: no such model; served: {sorted(models)}")
    for m in entries:
        m.unloaded = load is not None and m.name not in load
    runner: Backend = backend if backend is not None else SessionBackend()
    from aioge.serving.metrics import ServerMetrics

    served = list(models.values())
    metrics = ServerMetrics(partial(runner.metrics, served), {m.name: partial(getattr, m, "ready") for m in served})
    inflight = anyio.CapacityLimiter(max_inflight)
    decoding = anyio.CapacityLimiter(max_decoding)

    async def load_one(m: ServedModel) -> None:
        async with m.lock:
            if m.ready:
                return
            m.error, m.unloaded = None, False
            try:
                await runner.load(m)
            except (AiogeError, OSError, ValueError) as exc:
                m.error = str(exc)
                log.error("model %s version %s (%s) did not load: %s", m.name, m.version, m.path, exc)
            except Exception as exc:  # a bug: logged with its traceback, and the other models still load
                m.error = f"internal error: {type(exc).__name__}: {exc}"
                log.exception("model %s version %s (%s) did not load", m.name, m.version, m.path)
            else:
                m.ready = True
                log.info("model %s ready", m.name)

    async def load_all() -> None:
        for m in entries:  # one at a time: compiles already use every core
            if not m.unloaded:
                await load_one(m)
                if m.error:
                    failures.append(m)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with runner, anyio.create_task_group() as tg:
            grpc_server = None
            if grpc is not None:
                from aioge.serving.kserve_grpc import start

                grpc_server = await start(core, *grpc, max_message_bytes=max_body_bytes)
            if wait_loaded:
                await load_all()
            else:
                tg.start_soon(load_all)
            if wait_loaded and failures:
                tg.cancel_scope.cancel()
            else:
                yield
            if grpc_server is not None:
                await grpc_server.stop(grpc_grace)  # refuses new RPCs, lets running ones finish
            tg.cancel_scope.cancel()
        if wait_loaded and failures:  # raised out here, not as a group from inside the task group
            raise AiogeError("; ".join(f"model {m.name} version {m.version}: {m.error}" for m in failures))
        log.info("requests drained, models closed")

    def error(status: int, message: str) -> Response:
        # a body left unread (413) is not worth reading on: the connection closes after the answer
        headers = {"connection": "close"} if status == 413 else None
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    def find(name: str, version: str = "", status: int = 404) -> ServedModel:
        """Version ``version`` of ``name``, or for "" (no version route, gRPC's empty
        ``model_version``) the model's latest ready version (its latest if none is)."""
        m = find_version(versions, name, version or None)
        if m is not None:
            return m
        served = {n: sorted(f, key=int) for n, f in versions.items()}
        raise _BadRequest(status, f"no model {name!r} version {version!r}; served (name: versions): {served}")

    def chosen(name: str, version: str = "", status: int = 404) -> list[ServedModel]:
        """Version ``version`` of ``name``, or for "" every version of the model; for no
        ``name``, every served version of every model."""
        if not name:
            return list(entries)
        m = find(name, version, status)
        return [m] if version else sorted(versions[m.name].values(), key=lambda v: int(v.version))

    def lookup(request: Request, status: int = 404) -> ServedModel:
        return find(request.path_params["name"], request.path_params.get("version", ""), status)

    def chosen_by(request: Request, status: int = 404) -> list[ServedModel]:
        return chosen(request.path_params.get("name", ""), request.path_params.get("version", ""), status)

    def not_ready(m: ServedModel) -> _BadRequest:
        if m.unloaded:
            return _BadRequest(503, f"model {m.name!r} is unloaded (POST /v2/repository/models/{m.name}/load loads it)")
        return _BadRequest(503, f"model {m.name!r} is not ready" + (f": {m.error}" if m.error else " (still compiling)"))

    async def live(request: Request) -> Response:
        return JSONResponse({"live": True})

    def all_ready() -> bool:
        # ready once none is loading (unloaded on purpose counts as done, as Triton) and one loaded or none failed
        loading = any(not (m.ready or m.unloaded or m.error) for m in entries)
        return not loading and (any(m.ready for m in entries) or not any(m.error for m in entries))

    async def ready(request: Request) -> Response:
        ok = all_ready()
        return JSONResponse({"ready": ok}, status_code=200 if ok else 503)

    def server_info() -> dict[str, Any]:
        from aioge import __version__

        extensions = ["binary_tensor_data", "model_repository", "model_configuration", "statistics"]
        return {"name": "aioge", "version": __version__, "extensions": extensions}

    async def server_metadata(request: Request) -> Response:
        return JSONResponse(server_info())

    def index(ready_only: bool) -> list[dict[str, Any]]:
        listed = [m for m in entries if m.ready or not ready_only]  # every version
        return [
            {"name": m.name, "version": m.version, "state": m.state, "reason": m.error or ("unloaded" if m.unloaded else "")}
            for m in listed
        ]

    async def repository_index(request: Request) -> Response:
        body = await read_body(request, _CONTROL_BYTES, "a control request")
        ready_only = False
        if body.strip():
            try:
                params = json.loads(body)
            except (ValueError, RecursionError):
                raise _BadRequest(400, 'the repository index request must be JSON, e.g. {"ready": true}') from None
            ready_only = isinstance(params, dict) and params.get("ready") is True
        return JSONResponse(index(ready_only))

    async def repository_load(request: Request) -> Response:
        ms = chosen_by(request, 400)
        m = ms[-1]
        body = await read_body(request, _CONTROL_BYTES, "a control request")
        try:
            params = _params(json.loads(body), "the load request") if body.strip() else {}
        except (ValueError, RecursionError, AttributeError):
            raise _BadRequest(400, 'the load request must be a JSON object, e.g. {"parameters": {}}') from None
        if params:
            raise _BadRequest(400, f"model {m.name!r}: aioge serve loads the model's own file; it takes no {sorted(params)}")
        for m in ms:
            await load_one(m)
            if not m.ready:
                raise _BadRequest(400, f"model {m.name!r} version {m.version} did not load: {m.error}")
        return JSONResponse({})

    async def repository_unload(request: Request) -> Response:
        for m in chosen_by(request, 400):
            async with m.lock:
                if m.ready:
                    m.ready = False
                    unload = getattr(runner, "unload", None)
                    if unload is not None:
                        await unload(m)
                m.unloaded = True
                log.info("model %s version %s unloaded", m.name, m.version)
        return JSONResponse({})

    def config_of(m: ServedModel) -> dict[str, Any]:
        def tensors(specs: list[TensorSpec]) -> list[dict[str, Any]]:
            return [{"name": s.name, "data_type": "TYPE_" + s.datatype, "dims": list(s.shape)} for s in specs]

        if not m.ready:
            raise not_ready(m)
        config: dict[str, Any] = {
            "name": m.name,
            "platform": "aioge_" + Path(m.path).suffix[1:],
            "backend": "aioge",
            "max_batch_size": 0,  # dim 0 is part of each shape (-1 where it varies), as Triton's 0 means
            "input": tensors(m.inputs),
            "output": tensors(m.outputs),
            "version_policy": {"specific": {"versions": [int(v) for v in versions[m.name]]}},
            "default_model_filename": Path(m.path).name,
        }
        if m.config is not None:
            config["version_policy"] = m.config.triton_policy()
            if m.config.max_batch_size:  # Triton's dims leave the batch dim out when max_batch_size > 0
                config["max_batch_size"] = m.config.max_batch_size
                for t in (*config["input"], *config["output"]):
                    t["dims"] = t["dims"][1:] if t["dims"][:1] in ([-1], [m.config.max_batch_size]) else t["dims"]
            if m.config.batching:
                b = m.config.batching  # Triton's fields (its max rows is max_batch_size)
                config["dynamic_batching"] = {
                    "max_queue_delay_microseconds": int(b.get("aioge.batch_max_delay_us", "1000")),
                    "preferred_batch_size": [int(v) for v in b.get("aioge.batch_preferred_sizes", "").split(",") if v],
                }
            config["parameters"] = {k: {"string_value": v} for k, v in m.config.options.items()}
        return config

    async def model_config(request: Request) -> Response:
        return JSONResponse(config_of(lookup(request)))

    def statistics_of(listed: Iterable[ServedModel]) -> dict[str, Any]:
        return {"model_stats": [m.stats.triton(m.name, m.version) for m in listed]}

    async def statistics(request: Request) -> Response:
        return JSONResponse(statistics_of(chosen_by(request)))

    def metadata_of(m: ServedModel) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": m.name,
            "versions": sorted(versions[m.name], key=int),
            "platform": "aioge_" + Path(m.path).suffix[1:],
            "inputs": [s.metadata() for s in m.inputs],
            "outputs": [s.metadata() for s in m.outputs],
        }
        if m.error:
            body["error"] = m.error
        return body

    async def model_metadata(request: Request) -> Response:
        return JSONResponse(metadata_of(lookup(request)))

    async def model_ready(request: Request) -> Response:
        m = lookup(request)
        return JSONResponse({"name": m.name, "ready": m.ready}, status_code=200 if m.ready else 503)

    async def read_body(request: Request, limit: int, why: str) -> bytearray:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _BadRequest(413, f"request body of {declared} bytes is over the limit of {limit} ({why})")
        body = bytearray()
        try:
            async for chunk in request.stream():
                if len(body) + len(chunk) > limit:
                    raise _BadRequest(413, f"request body is over the limit of {limit} bytes ({why})")
                body += chunk
        except ClientDisconnect:  # gone (or cut off by --read-timeout): the answer goes nowhere
            raise _BadRequest(400, "the client disconnected before the whole body arrived") from None
        return body

    async def infer_with(name: str, version: str, decode: Any, encode: Any) -> Any:
        """The inference path both fronts share: the model's lookup and readiness, the front's
        ``await decode(m)`` -> (feeds, extra) (which adds its own compute_input time), the run,
        ``encode(m, outputs, extra)`` (in a worker thread past 64 KiB of outputs), the
        statistics and metrics. Raises _BadRequest with the HTTP status of any failure."""
        start = time.perf_counter()
        label = name if name in models else "unknown"
        status, m = 500, None
        try:
            m = find(name, version)
            if not m.ready:
                raise not_ready(m)
            feeds, extra = await decode(m)
            first = next(iter(feeds.values()), None)
            rows = first.shape[0] if first is not None and first.ndim else 1
            metrics.rows.labels(m.name, m.version).observe(rows)
            queued = time.perf_counter()
            async with inflight:
                waited = time.perf_counter() - queued
                metrics.queue.labels(m.name, m.version).observe(waited)
                m.stats.add("queue", waited)
                try:
                    outputs = await runner.infer(m, feeds)
                except FeedError as exc:
                    raise _BadRequest(400, str(exc)) from None
                m.stats.add("compute_infer", time.perf_counter() - queued - waited)
            del feeds
            encoded = time.perf_counter()
            if sum(a.nbytes for a in outputs.values()) > _OFF_LOOP_BYTES:
                result = await anyio.to_thread.run_sync(encode, m, outputs, extra)
            else:
                result = encode(m, outputs, extra)
            m.stats.add("compute_output", time.perf_counter() - encoded)
            m.stats.inference_count += rows
            m.stats.execution_count += 1
            m.stats.last_inference = time.time_ns() // 1_000_000
            status = 200
            return result
        except _BadRequest as exc:
            status = exc.status
            raise
        except AiogeError as exc:
            log.error("model %s: inference failed: %s", name, exc)
            raise _BadRequest(500, str(exc)) from None
        except Exception as exc:  # a bug: logged with its traceback, answered as an error
            log.exception("model %s: inference failed", name)
            raise _BadRequest(500, f"internal error: {type(exc).__name__}: {exc}") from None
        finally:
            metrics.request(label, m.version if m is not None else "", status, time.perf_counter() - start)
            if m is not None:
                m.stats.add("success" if status == 200 else "fail", time.perf_counter() - start)

    async def infer(request: Request) -> Response:
        async def decode(m: ServedModel) -> tuple[dict[str, np.ndarray], Any]:
            limit = body_limit(m, max_body_bytes)
            why = "--max-body-bytes" if limit == max_body_bytes else f"model {m.name!r} takes at most {limit} bytes"
            body = await read_body(request, limit, why)
            header_length = request.headers.get(HEADER_LENGTH)
            if len(body) > _OFF_LOOP_BYTES:  # a worker thread, at most max_decoding at once
                async with decoding:
                    decoded = time.perf_counter()
                    feeds, wanted, rid = await anyio.to_thread.run_sync(_decode_request, body, header_length, m)
            else:  # small: on the loop, one at a time anyway
                decoded = time.perf_counter()
                feeds, wanted, rid = _decode_request(body, header_length, m)
            m.stats.add("compute_input", time.perf_counter() - decoded)
            return feeds, (wanted, rid)

        def encode(m: ServedModel, outputs: Mapping[str, np.ndarray], extra: Any) -> tuple[bytes, int | None]:
            return _encode_response(m, outputs, *extra)

        try:
            payload, json_length = await infer_with(
                request.path_params["name"], request.path_params.get("version", ""), decode, encode
            )
        except _BadRequest as exc:
            return error(exc.status, str(exc))
        if json_length is None:
            return Response(payload, media_type="application/json")
        return Response(
            payload, media_type="application/octet-stream", headers={"Inference-Header-Content-Length": str(json_length)}
        )

    core = Core(
        find, all_ready, server_info, metadata_of, config_of, statistics_of, index, infer_with, chosen, access_log=access_log
    )

    async def prometheus(request: Request) -> Response:
        text = await anyio.to_thread.run_sync(generate_latest, metrics.registry)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    def guarded(handler: Any) -> Any:
        async def run(request: Request) -> Response:
            try:
                response: Response = await handler(request)
                return response
            except _BadRequest as exc:
                return error(exc.status, str(exc))

        return run

    routes = [
        Route("/v2/health/live", live),
        Route("/v2/health/ready", ready),
        Route("/v2", server_metadata),
        Route("/metrics", prometheus),
        # Triton's extensions (model repository, configuration, statistics) that tritonclient calls
        Route("/v2/repository/index", guarded(repository_index), methods=["POST"]),
        Route("/v2/repository/models/{name}/load", guarded(repository_load), methods=["POST"]),
        Route("/v2/repository/models/{name}/unload", guarded(repository_unload), methods=["POST"]),
        Route("/v2/models/stats", guarded(statistics)),
    ]
    for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        routes += [
            Route(prefix, guarded(model_metadata)),
            Route(prefix + "/ready", guarded(model_ready)),
            Route(prefix + "/config", guarded(model_config)),
            Route(prefix + "/stats", guarded(statistics)),
            Route(prefix + "/infer", infer, methods=["POST"]),
        ]

    async def http_error(request: Request, exc: Exception) -> Response:
        from starlette.exceptions import HTTPException

        if isinstance(exc, HTTPException):  # no such route (404), a wrong method (405), ...
            return JSONResponse({"error": f"{request.method} {request.url.path}: {exc.detail}"}, exc.status_code, exc.headers)
        log.error("%s %s failed: %r", request.method, request.url.path, exc)
        return error(500, f"internal error: {type(exc).__name__}: {exc}")

    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error, Exception: http_error},
        middleware=[Middleware(_AccessLog)] if access_log else [],
    )
    app.state.models = models  # the latest version of each model
    app.state.entries = entries  # every served version
    app.state.versions = versions  # name -> version -> model (find_version)
    app.state.load_failures = failures
    app.state.backend = runner
    app.state.core = core
    return app


def uvicorn_config(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    graceful_seconds: float = 30.0,
    keep_alive: float = KEEP_ALIVE_SECONDS,
    read_timeout: float = READ_TIMEOUT_SECONDS,
) -> Any:
    """uvicorn's configuration for ``app``: a connection idle for ``keep_alive`` seconds (before
    its first request or between requests) is closed, and so is one whose request line and
    headers have not all arrived ``read_timeout`` seconds after their first byte, or whose body
    stops arriving for ``read_timeout`` seconds."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="on",
        log_level="warning",
        timeout_graceful_shutdown=max(1, round(graceful_seconds)),
        timeout_keep_alive=keep_alive,  # type: ignore[arg-type]  # a float works: it goes to call_later
        access_log=False,  # aioge's own access log (create_app's access_log) has the latency too
        http=_timed_protocol(read_timeout),
    )


class OneWrite:
    """A transport that sends a response's head with its body in one write: uvicorn writes
    the head at ``http.response.start`` and the body next, two sends (two TCP segments on
    loopback, two client wake-ups) a response; the head's send alone was 19% of the loop
    thread's busy samples serving the MLP example under 50 clients. A final head is held
    until the next write, or any other call on the transport, or the loop's next turn."""

    __slots__ = ("_t", "_held")

    def __init__(self, transport: Any) -> None:
        self._t, self._held = transport, b""

    def write(self, data: bytes) -> None:
        held, self._held = self._held, b""
        if held:
            self._t.write(held + data)
        elif data.startswith(b"HTTP/1.1 ") and data[9:10] != b"1" and data.endswith(b"\r\n\r\n"):
            self._held = data  # a final status's head alone (not a 1xx, not a head with its body)
            asyncio.get_running_loop().call_soon(self.flush)
        else:
            self._t.write(data)

    def flush(self) -> None:
        held, self._held = self._held, b""
        if held and not self._t.is_closing():
            self._t.write(held)

    def __getattr__(self, name: str) -> Any:  # close, is_closing, pause_reading, ...: what was held goes first
        self.flush()
        return getattr(self._t, name)


def _timed_protocol(read_timeout: float) -> Any:
    """uvicorn's httptools protocol with the timeouts it lacks: it arms its keep-alive timer
    only after a response and drops it at the first byte of the next request, so a connection
    that sends nothing, half a request line or part of a body was held for ever."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # uvicorn without its [standard] extra
        log.warning("httptools is not installed: no --read-timeout (pip install 'uvicorn[standard]')")
        return "auto"

    class TimedProtocol(HttpToolsProtocol):
        _read_timer: asyncio.TimerHandle | None = None
        _last_read = 0.0  # loop time of the last body bytes (0: reading the head, whose time is not reset)

        def _timed_out(self) -> None:
            self._read_timer = None
            if self._last_read and (left := self._last_read + read_timeout - self.loop.time()) > 0:
                self._read_timer = self.loop.call_later(left, self._timed_out)  # the body is still coming
            elif not self.transport.is_closing():
                self.transport.close()

        def _stop_read_timer(self) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(OneWrite(transport))  # type: ignore[arg-type]
            # idle before the first request counts as keep-alive idle
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._stop_read_timer()
            self._last_read = 0.0
            self._read_timer = self.loop.call_later(read_timeout, self._timed_out)

        def on_headers_complete(self) -> None:
            self._last_read = self.loop.time()
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            self._last_read = self.loop.time()
            super().on_body(body)

        def on_message_complete(self) -> None:
            self._stop_read_timer()
            super().on_message_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_read_timer()
            super().connection_lost(exc)

        def send_400_response(self, msg: str) -> None:  # a request the parser refuses: JSON too, then close
            body = json.dumps({"error": msg}).encode()
            head = f"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            self.transport.write(head.encode() + b"connection: close\r\n\r\n" + body)
            self.transport.close()

    return TimedProtocol


class _AccessLog:
    """ASGI middleware: one INFO line per request on the ``aioge.access`` logger (client,
    request line, status, response bytes, milliseconds)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status, size = time.perf_counter(), [0], [0]

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            elif message["type"] == "http.response.body":
                size[0] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            client = scope.get("client")
            _access.info(
                '%s "%s %s HTTP/%s" %d %d %.2fms',
                f"{client[0]}:{client[1]}" if client else "-",
                scope["method"],
                scope["path"],
                scope["http_version"],
                status[0],
                size[0],
                1e3 * (time.perf_counter() - start),
            )


def serve(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    graceful_seconds: float = 30.0,
    keep_alive: float = KEEP_ALIVE_SECONDS,
    read_timeout: float = READ_TIMEOUT_SECONDS,
    stop_when: Callable[[], bool] | None = None,
    sock: Any = None,
) -> None:
    """Run ``app`` under uvicorn (on the listening socket ``sock`` when given, else it binds
    ``host``:``port``) until SIGINT (Ctrl-C) or SIGTERM: either stops accepting,
    gives in-flight requests up to ``graceful_seconds`` to finish, closes the models and
    returns (a second Ctrl-C stops at once). ``stop_when`` (checked ten times a second) true
    stops it the same way (``--strict``: a model failed to load). Timeouts as ``uvicorn_config``."""
    import signal

    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.should_exit and sig == signal.SIGTERM:
                return  # already draining: a SIGTERM asks for that again (a --workers parent passes Ctrl-C on)
            super().handle_exit(sig, frame)
            self._captured_signals.clear()  # drained and closed: a clean exit, not the signal raised again

        async def on_tick(self, counter: int) -> bool:
            return await super().on_tick(counter) or (stop_when is not None and stop_when())

    config = uvicorn_config(app, host, port, graceful_seconds=graceful_seconds, keep_alive=keep_alive, read_timeout=read_timeout)
    Server(config).run(sockets=None if sock is None else [sock])


def serve_workers(argv: Sequence[str], host: str, port: int, workers: int, *, graceful_seconds: float = 30.0) -> None:
    """``aioge serve --workers N``: bind ``host``:``port`` once, run ``workers`` processes of
    ``python -m aioge ARGV --worker-fd FD`` that all accept on that socket (each with its own
    Session; the kernel and graph caches lock across processes, so one compiles and the others
    load its result), and supervise them. SIGTERM or SIGINT here is passed on as SIGTERM: each
    drains and exits, then this returns. A worker that exits non-zero (crash, ``--strict``)
    stops the others and raises: no restart, the supervisor above (systemd, Kubernetes) decides.

    Raises:
        AiogeError: the port cannot be bound, or a worker exited non-zero.
    """
    import os
    import signal
    import socket
    import subprocess
    import sys

    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        raise AiogeError(f"--port {port}: cannot listen on {host}:{port} ({exc})") from None
    sock.set_inheritable(True)
    stopping: list[int] = []
    procs: list[subprocess.Popen[bytes]] = []

    def stop(sig: int = signal.SIGTERM, frame: Any = None) -> None:
        stopping.append(sig)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    failed: list[str] = []
    try:
        # Its parent by pid, not by what getppid() says once it has loaded its models: a parent
        # killed meanwhile had left a worker orphaned before it looked, serving on for good.
        cmd = [sys.executable, "-P", "-m", "aioge", *argv, "--worker-fd", str(sock.fileno()), "--worker-parent", str(os.getpid())]
        procs.extend(subprocess.Popen(cmd, pass_fds=(sock.fileno(),)) for _ in range(workers))
        deadline = math.inf
        while any(p.poll() is None for p in procs):
            for i, p in enumerate(procs):
                if p.returncode is None or (p.returncode == 0 and stopping) or any(str(p.pid) in f for f in failed):
                    continue
                if p.returncode:
                    failed.append(f"worker {i + 1} (pid {p.pid}) exited with status {p.returncode}")
                    log.error("%s: stopping the others", failed[-1])
                stop()  # status 0: it was signalled itself (Ctrl-C reaches the whole group), so stop them all
            if stopping and deadline == math.inf:
                deadline = time.monotonic() + graceful_seconds + 10
            if time.monotonic() > deadline:  # past the drain: stop them now
                for p in procs:
                    if p.poll() is None:
                        log.error("worker pid %d still running %.0f s after SIGTERM: killed", p.pid, graceful_seconds + 10)
                        p.kill()
            time.sleep(0.1)
        failed += [
            f"worker {i + 1} (pid {p.pid}) exited with status {p.returncode}"
            for i, p in enumerate(procs)
            if p.returncode != 0 and not any(str(p.pid) in f for f in failed)
        ]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for s, handler in old.items():
            signal.signal(s, handler)
        sock.close()
    if failed:
        raise AiogeError("aioge serve --workers: " + "; ".join(failed))
