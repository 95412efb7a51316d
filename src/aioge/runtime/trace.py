"""Chrome trace-event JSON of a run: one lane per engine stream, event waits as flow arrows."""

from __future__ import annotations

import json
import os
from typing import Sequence

from aioge.compiler.model import CompiledModel
from aioge.runtime.executor import TraceSpan

__all__ = ["trace_events", "write_trace"]


def trace_events(model: CompiledModel, spans: Sequence[TraceSpan]) -> list[dict[str, object]]:
    """The trace events of one run: metadata, ``X`` spans in microseconds, and ``s``/``f`` flows."""
    if not spans:
        return []
    t0 = min(s.start for s in spans)
    events: list[dict[str, object]] = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": model.graph.name}}]
    for st in model.streams.streams:
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": st.id, "args": {"name": f"{st.engine} stream {st.id}"}})
    by_node = {s.node: s for s in spans}
    for s in spans:
        plan = model.nodes[s.node]
        events.append({
            "ph": "X", "name": plan.name, "cat": plan.op_type, "pid": 1, "tid": s.stream,
            "ts": (s.start - t0) * 1e6, "dur": max((s.end - s.start) * 1e6, 0.001),
            "args": {"op_type": plan.op_type, "engine": plan.engine, "impl": plan.kernel.impl},
        })
    for e in model.streams.events:
        p, c = by_node.get(e.producer), by_node.get(e.consumer)
        if p is None or c is None:
            continue
        events.append({"ph": "s", "id": e.id, "name": "event", "cat": "event", "pid": 1, "tid": p.stream, "ts": (p.end - t0) * 1e6})
        events.append({"ph": "f", "bp": "e", "id": e.id, "name": "event", "cat": "event", "pid": 1, "tid": c.stream, "ts": (c.start - t0) * 1e6})
    return events


def write_trace(path: str, model: CompiledModel, spans: Sequence[TraceSpan], start: float = 0.0) -> None:
    """Write the trace of one run to ``path`` (atomically)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"traceEvents": trace_events(model, spans), "displayTimeUnit": "ms"}, f)
    os.replace(tmp, path)
