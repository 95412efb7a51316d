"""run_graph(..., trace=PATH) writes Chrome trace-event JSON that Perfetto opens: lanes per stream,
X spans in microseconds that nest per lane, and a flow arrow per cross-stream event."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import aioge
from tests.runtime.test_executor import OPTIONS, _branches

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", ["sink", "host"])
async def test_trace_file_structure(mode: str, tmp_path: Path) -> None:
    g, _ = _branches(n=48)
    path = tmp_path / "run.json"
    async with aioge.Session({**OPTIONS, "aioge.exec_mode": mode}) as s:
        await s.add_graph(1, g)
        await s.run_graph(1, {"x": np.ones((48, 48), np.float32)}, trace=path)
        model = s.compiled(1)
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"], "written in place atomically, no temp file left"
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    assert doc["displayTimeUnit"] == "ms" and doc["otherData"]["streams"] == model.streams.num_streams > 1
    meta = [e for e in events if e["ph"] == "M"]
    assert any(e["name"] == "process_name" for e in meta)
    lanes = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert lanes == {st.id: f"{st.engine} stream {st.id}" for st in model.streams.streams}

    spans = [e for e in events if e["ph"] == "X"]
    assert sorted(e["name"] for e in spans) == sorted(n.name for n in model.nodes), "one span per node"
    by_name = {e["name"]: e for e in spans}
    for node in model.nodes:
        span = by_name[node.name]
        assert span["tid"] == node.stream and span["args"]["engine"] == node.engine and span["cat"] == node.op_type
        assert isinstance(span["ts"], (int, float)) and span["ts"] >= 0 and span["dur"] > 0
    for tid in lanes:  # slices on one lane must not overlap (Perfetto requires nesting)
        lane = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans if e["tid"] == tid)
        assert all(a_end <= b_start + 1e-3 for (_, a_end), (b_start, _) in zip(lane, lane[1:]))

    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    assert set(starts) == set(finishes) == {e.id for e in model.streams.events}
    for ev in model.streams.events:
        s_, f_ = starts[ev.id], finishes[ev.id]
        producer, consumer = by_name[model.nodes[ev.producer].name], by_name[model.nodes[ev.consumer].name]
        assert s_["tid"] == producer["tid"] and f_["tid"] == consumer["tid"] and f_["bp"] == "e"
        assert producer["ts"] < s_["ts"] < producer["ts"] + producer["dur"], "the arrow leaves from inside the recording span"
        assert consumer["ts"] < f_["ts"] < consumer["ts"] + consumer["dur"], "and lands inside the waiting span"
        assert f_["ts"] >= s_["ts"] - 1e-3, "the waiter starts after the recorder ends"
        assert s_["cat"] == f_["cat"] and s_["name"] == f_["name"]


async def test_write_trace_is_usable_directly(tmp_path: Path) -> None:
    from aioge.runtime.trace import trace_events, write_trace

    g, _ = _branches(n=16)
    async with aioge.Session(OPTIONS) as s:
        await s.add_graph(1, g)
        model = await s.build_graph(1)
    assert [e["ph"] for e in trace_events(model, [])] == ["M"] * (1 + 2 * model.streams.num_streams)
    write_trace(tmp_path / "empty.json", model, [])
    assert json.loads((tmp_path / "empty.json").read_text())["traceEvents"][0]["name"] == "process_name"
