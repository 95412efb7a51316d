"""The KServe v2 gRPC front of ``aioge serve`` (``--grpc-port``): the ``inference.GRPCInferenceService``
that tritonclient.grpc and other KServe v2 gRPC clients call, on ``grpc.aio`` in the REST server's
event loop, over the same models through the server's one request-handling core (``aioge.server.Core``,
passed in: this floor does not import the server).

RPCs: ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelInfer (inputs as
``raw_input_contents`` or typed ``contents``; outputs always as ``raw_output_contents``, as Triton
answers), ModelConfig, ModelStatistics, RepositoryIndex. The messages are ``kserve_pb2``, generated
from ``kserve.proto`` (the protocol's subset). A failure is a gRPC status with the REST answer's
message: INVALID_ARGUMENT for a bad request, NOT_FOUND for an unknown model, UNAVAILABLE for one not
ready, RESOURCE_EXHAUSTED past the size limit, INTERNAL otherwise.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import grpc
import numpy as np
from google.protobuf import json_format

from aioge.errors import AiogeError
from aioge.serving import kserve_pb2 as pb

__all__ = ["check_port", "start"]

log = logging.getLogger(__name__)
_access = logging.getLogger("aioge.access")
SERVICE = "inference.GRPCInferenceService"
_OFF_LOOP_BYTES = 64 << 10  # inputs past this many bytes are decoded in a worker thread
_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    404: grpc.StatusCode.NOT_FOUND,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    503: grpc.StatusCode.UNAVAILABLE,
}
# KServe datatype -> the InferTensorContents field that carries it (FP16 travels only as raw bytes)
_CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
}


class _Invalid(Exception):
    """A request this front refuses before the core sees it (INVALID_ARGUMENT)."""


def _decode(core: Any, m: Any, request: pb.ModelInferRequest) -> tuple[dict[str, np.ndarray], list[str]]:
    """Feeds and the requested output names of a ModelInfer request (``_Invalid`` or the core's
    400 for anything wrong)."""
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise _Invalid(f"{len(raw)} raw_input_contents for {len(request.inputs)} inputs: give one per input, in order")
    specs = {s.name: s for s in m.inputs}
    feeds: dict[str, np.ndarray] = {}
    for i, t in enumerate(request.inputs):
        spec = specs.get(t.name)
        if spec is None:
            raise _Invalid(f"model {m.name!r} has no input {t.name!r}; its inputs are {sorted(specs)}")
        if t.name in feeds:
            raise _Invalid(f"input {t.name!r} is given twice")
        shape = list(t.shape)
        dtype = core.check_input(spec, shape, t.datatype)
        count = math.prod(shape)
        if raw:
            if t.HasField("contents"):
                raise _Invalid(f"input {t.name!r}: contents given with raw_input_contents; use one or the other")
            data = raw[i]
            if len(data) != count * dtype.itemsize:
                raise _Invalid(
                    f"input {t.name!r}: {len(data)} raw bytes for {shape} {t.datatype} ({count * dtype.itemsize} bytes)"
                )
            array = np.frombuffer(data, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)
        else:
            field = _CONTENTS.get(t.datatype)
            if field is None:
                raise _Invalid(f"input {t.name!r}: {t.datatype} travels only in raw_input_contents")
            values = getattr(t.contents, field)
            if len(values) != count:
                raise _Invalid(f"input {t.name!r}: {len(values)} {field} values for shape {shape} ({count})")
            try:
                array = np.array(values, dtype=dtype).reshape(shape)
            except OverflowError as exc:
                raise _Invalid(f"input {t.name!r}: a value out of {t.datatype}'s range: {exc}") from None
        feeds[t.name] = array
    core.check_complete(m, feeds)
    known = [s.name for s in m.outputs]
    wanted = [o.name for o in request.outputs] or known
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        raise _Invalid(f"model {m.name!r} has no output {unknown[0]!r}; its outputs are {sorted(known)}")
    return feeds, wanted


def _encode(core: Any, m: Any, outputs: dict[str, np.ndarray], wanted: list[str], rid: str) -> pb.ModelInferResponse:
    reply = pb.ModelInferResponse(model_name=m.name, model_version=m.version, id=rid)
    for name in wanted:
        a = np.ascontiguousarray(outputs[name])
        datatype = core.datatypes.get(a.dtype.name)
        if datatype is None:
            raise AiogeError(f"output {name!r} is {a.dtype}, which KServe v2 has no datatype for")
        reply.outputs.add(name=name, datatype=datatype, shape=a.shape)
        reply.raw_output_contents.append(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
    return reply


class _Service:
    """The RPC handlers: each answers a message or aborts with a status and a message."""

    def __init__(self, core: Any) -> None:
        self.core = core

    def _model(self, name: str, version: str) -> Any:
        return self.core.find(name, version)

    async def ServerLive(self, request: pb.ServerLiveRequest, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: pb.ServerReadyRequest, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.core.ready())

    async def ModelReady(self, request: pb.ModelReadyRequest, context: Any) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=self._model(request.name, request.version).ready)

    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context: Any) -> pb.ServerMetadataResponse:
        return json_format.ParseDict(self.core.server_metadata(), pb.ServerMetadataResponse())

    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Any) -> pb.ModelMetadataResponse:
        body = self.core.metadata(self._model(request.name, request.version))
        return json_format.ParseDict(body, pb.ModelMetadataResponse(), ignore_unknown_fields=True)

    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Any) -> pb.ModelConfigResponse:
        config = self.core.config(self._model(request.name, request.version))
        return pb.ModelConfigResponse(config=json_format.ParseDict(config, pb.ModelConfig(), ignore_unknown_fields=True))

    async def ModelStatistics(self, request: pb.ModelStatisticsRequest, context: Any) -> pb.ModelStatisticsResponse:
        chosen = self.core.chosen(request.name, request.version)  # "" name: all; "" version: every version
        return json_format.ParseDict(self.core.statistics(chosen), pb.ModelStatisticsResponse(), ignore_unknown_fields=True)

    async def RepositoryIndex(self, request: pb.RepositoryIndexRequest, context: Any) -> pb.RepositoryIndexResponse:
        return json_format.ParseDict({"models": self.core.index(request.ready)}, pb.RepositoryIndexResponse())

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> pb.ModelInferResponse:
        core = self.core

        async def decode(m: Any) -> tuple[dict[str, np.ndarray], list[str]]:
            started = time.perf_counter()
            try:
                if sum(len(b) for b in request.raw_input_contents) > _OFF_LOOP_BYTES:
                    decoded = await anyio.to_thread.run_sync(_decode, core, m, request)
                else:
                    decoded = _decode(core, m, request)
            except _Invalid as exc:  # the core's own error, so its statistics count a failed request
                raise core.error(400, str(exc)) from None
            m.stats.add("compute_input", time.perf_counter() - started)
            return decoded

        def encode(m: Any, outputs: dict[str, np.ndarray], wanted: list[str]) -> pb.ModelInferResponse:
            return _encode(core, m, outputs, wanted, request.id)

        reply: pb.ModelInferResponse = await core.infer(request.model_name, request.model_version, decode, encode)
        return reply


def _guarded(handler: Callable[[Any, Any], Awaitable[Any]], name: str, access_log: bool) -> Callable[[Any, Any], Awaitable[Any]]:
    """``handler`` with every failure turned into a status and message (never a crash), and
    with ``access_log`` one line per RPC on ``aioge.access`` (peer, method, status, ms)."""

    async def run(request: Any, context: Any) -> Any:
        start, code = time.perf_counter(), grpc.StatusCode.OK
        try:
            return await handler(request, context)
        except _Invalid as exc:
            code, message = grpc.StatusCode.INVALID_ARGUMENT, str(exc)
        except json_format.ParseError as exc:  # a bug: an answer the protocol's message does not hold
            log.exception("gRPC answer does not fit its message")
            code, message = grpc.StatusCode.INTERNAL, f"internal error: {exc}"
        except Exception as exc:
            status = getattr(exc, "status", None)  # the core's _BadRequest carries the HTTP status
            if status is None:
                log.exception("gRPC request failed")
            code, message = _CODES.get(status or 500, grpc.StatusCode.INTERNAL), str(exc)
        finally:
            if access_log:
                ms = 1e3 * (time.perf_counter() - start)
                _access.info('%s "GRPC /%s/%s" %s %.2fms', context.peer(), SERVICE, name, code.name, ms)
        await context.abort(code, message)

    return run


_MESSAGES: dict[str, tuple[Any, Any]] = {
    "ServerLive": (pb.ServerLiveRequest, pb.ServerLiveResponse),
    "ServerReady": (pb.ServerReadyRequest, pb.ServerReadyResponse),
    "ModelReady": (pb.ModelReadyRequest, pb.ModelReadyResponse),
    "ServerMetadata": (pb.ServerMetadataRequest, pb.ServerMetadataResponse),
    "ModelMetadata": (pb.ModelMetadataRequest, pb.ModelMetadataResponse),
    "ModelInfer": (pb.ModelInferRequest, pb.ModelInferResponse),
    "ModelConfig": (pb.ModelConfigRequest, pb.ModelConfigResponse),
    "ModelStatistics": (pb.ModelStatisticsRequest, pb.ModelStatisticsResponse),
    "RepositoryIndex": (pb.RepositoryIndexRequest, pb.RepositoryIndexResponse),
}


def check_port(host: str, port: int) -> None:
    """Raise AiogeError naming ``--grpc-port`` when ``host:port`` cannot be listened on (checked
    before the server starts, so a busy port is one clear line, not a failed start-up)."""
    import socket

    try:
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        raise AiogeError(f"--grpc-port {port}: cannot listen on {host}:{port} ({exc.strerror or exc})") from None


async def start(core: Any, host: str, port: int, *, max_message_bytes: int = 64 << 20) -> grpc.aio.Server:
    """The gRPC service on ``host:port``, started in the running asyncio loop (``await
    server.stop(grace)`` drains it). Requests past ``max_message_bytes`` are refused.

    Raises:
        AiogeError: the port cannot be bound.
    """
    service = _Service(core)
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            _guarded(getattr(service, name), name, core.access_log),
            request_deserializer=request.FromString,
            response_serializer=reply.SerializeToString,
        )
        for name, (request, reply) in _MESSAGES.items()
    }
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", 0),  # a second server on a busy port fails, not shares it unseen
        ]
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    try:
        server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as exc:
        raise AiogeError(f"--grpc-port {port}: cannot listen on {host}:{port} ({exc})") from None
    await server.start()
    log.info("gRPC (KServe v2) on %s:%d", host, port)
    return server
