"""The model server's own Prometheus metrics (``/metrics`` of ``aioge serve``), per model and
version as Triton's ``nv_inference_request_*`` and MLServer's ``model_infer_request_*``: a
success counter, a failure counter by HTTP status, and histograms of the request duration
(body read to response, REST and gRPC alike), rows and queue wait. A registry of its own
(several servers may share a process); the backend adds its families at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["ServerMetrics"]

_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class ServerMetrics:
    """The server's metrics; ``backend`` () -> metric families, collected at every scrape."""

    def __init__(self, backend: Callable[[], Iterable[Any]], ready: Mapping[str, Callable[[], float]]) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = r = CollectorRegistry()
        mv = ["model", "version"]
        self.success = Counter("aioge_request_success", "inference requests answered 200", mv, registry=r)
        self.failure = Counter("aioge_request_failure", "inference requests failed, by HTTP status", [*mv, "code"], registry=r)
        self.latency = Histogram(
            "aioge_request_duration_seconds", "inference request time, body read to response", mv, buckets=_SECONDS, registry=r
        )
        self.rows = Histogram(
            "aioge_request_batch_rows",
            "rows (first dim of the first input) per request",
            mv,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 1024),
            registry=r,
        )
        self.queue = Histogram(
            "aioge_request_queue_seconds",
            "time a request waited for an inference slot (--max-inflight)",
            mv,
            buckets=(0.0001, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
            registry=r,
        )
        gauge = Gauge("aioge_model_ready", "1 when the model is loaded and compiled", ["model"], registry=r)
        for name, is_ready in ready.items():
            gauge.labels(name).set_function(is_ready)

        class _FromBackend:
            def collect(self) -> Iterable[Any]:
                return backend()

        r.register(_FromBackend())

    def request(self, model: str, version: str, status: int, seconds: float) -> None:
        """Count one inference request (``model`` "unknown" when no served model was named)."""
        if status == 200:
            self.success.labels(model, version).inc()
        else:
            self.failure.labels(model, version, str(status)).inc()
        self.latency.labels(model, version).observe(seconds)
