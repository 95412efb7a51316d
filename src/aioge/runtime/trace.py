"""Chrome trace-event JSON of a run (Perfetto and chrome://tracing open it).

One process, one lane (``tid``) per engine stream named by ``thread_name`` metadata, one
``ph: "X"`` span per node in microseconds, and a flow arrow (``s`` inside the recording
node's span, ``f`` bound to the waiting node's span) for every cross-stream event.
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

from aioge.plan.model import CompiledModel
from aioge.runtime.blas import blas_info
from aioge.runtime.executor import TraceSpan

__all__ = ["trace_events", "write_trace"]

# Flow ends sit this far (us) inside their spans, so each binds to the slice it belongs to.
_INSIDE_US = 0.0005


def trace_events(model: CompiledModel, spans: Sequence[TraceSpan]) -> list[dict[str, Any]]:
    """The trace events of one run: metadata, ``X`` spans in microseconds, and ``s``/``f`` flows."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": f"aioge {model.graph.name}"}}
    ]
    for st in model.streams.streams:
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": st.id, "args": {"name": f"{st.engine} stream {st.id}"}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": st.id, "args": {"sort_index": st.id}})
    if not spans:
        return events
    t0 = min(s.start for s in spans)

    def us(t: float) -> float:
        return round((t - t0) * 1e6, 4)

    by_node: dict[int, TraceSpan] = {}
    precisions = model.precisions()
    for s in sorted(spans, key=lambda s: s.start):
        by_node[s.node] = s
        plan = model.nodes[s.node]
        events.append(
            {
                "ph": "X",
                "name": plan.name,
                "cat": plan.op_type,
                "pid": 1,
                "tid": s.stream,
                "ts": us(s.start),
                "dur": max(round((s.end - s.start) * 1e6, 4), 2 * _INSIDE_US + 0.001),
                "args": {
                    "op_type": plan.op_type,
                    "engine": plan.engine,
                    "impl": plan.kernel.impl,
                    "node": s.node,
                    "precision": precisions[s.node],
                },
            }
        )
    for e in model.streams.events:
        p, c = by_node.get(e.producer), by_node.get(e.consumer)
        if p is None or c is None:
            continue
        start_p = us(p.start)
        end_p = max(us(p.end), start_p + 2 * _INSIDE_US + 0.001)
        common = {"id": e.id, "name": f"event {e.id}", "cat": "event", "pid": 1}
        events.append({**common, "ph": "s", "tid": p.stream, "ts": end_p - _INSIDE_US})
        events.append({**common, "ph": "f", "bp": "e", "tid": c.stream, "ts": us(c.start) + _INSIDE_US})
    return events


def write_trace(path: str | os.PathLike[str], model: CompiledModel, spans: Sequence[TraceSpan], start: float = 0.0) -> None:
    """Write the trace of one run to ``path`` (whole file replaced atomically; blocking).

    ``start`` is the run's start on the caller's clock, kept in the metadata.
    """
    path = os.fspath(path)
    doc = {
        "traceEvents": trace_events(model, spans),
        "displayTimeUnit": "ms",
        "otherData": {
            "graph": model.graph.name,
            "streams": model.streams.num_streams,
            "events": len(model.streams.events),
            "arena_bytes": model.memory.arena_bytes,
            "run_start": start,
            "blas": [{k: p.get(k) for k in ("internal_api", "version", "num_threads", "threading_layer")} for p in blas_info()],
        },
    }
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    os.replace(tmp, path)
