"""runtime.bind: a compiled model bound for the runtime, as a pure function of the model."""

from __future__ import annotations

import dataclasses

from aioge.compiler.graph import compile_graph_sync
from aioge.options import resolve_options
from aioge.runtime.bind import bind
from tests.runtime.test_executor import OPTIONS, _branches


def _model():  # type: ignore[no-untyped-def]
    g, _ = _branches()
    return compile_graph_sync(g, [("x", (96, 96))], resolve_options({**OPTIONS, "aioge.exec_threads": "auto"}))


def test_bind_lays_out_slots_views_steps_and_the_compilers_thread_groups() -> None:
    model = _model()
    b = bind(model, threads="auto")
    sp = model.streams
    assert sp.num_streams >= 3
    assert b.groups == list(model.threads)
    assert sorted(i for t in b.layout.threads for i in t) == list(range(len(model.nodes)))
    assert [s.index for s in b.layout.steps] == list(range(len(model.nodes)))
    assert b.layout.streams == tuple(s.nodes for s in sp.streams) and b.layout.num_events == len(sp.events)
    assert [name for name, _ in b.inputs] == ["x"] and [name for name, _, _ in b.outputs] == ["y"]
    assert b.layout.arena_bytes == model.memory.arena_bytes and not b.layout.check_finite
    # An event inside one thread is dropped; every other event is kept.
    thread_of = {s: k for k, t in enumerate(b.groups) for s in t}
    local = {e.id for e in sp.events if thread_of[sp.node_stream[e.producer]] == thread_of[sp.node_stream[e.consumer]]}
    assert b.layout.local_events == local
    per_stream = bind(model, threads="streams", check_finite=True)
    assert per_stream.groups == [(s.id,) for s in sp.streams] and per_stream.layout.check_finite
    assert per_stream.layout.local_events == frozenset()
    # Pure: the model is left as it was, and binding again gives the same layout (but fresh kernels).
    again = bind(model, threads="auto")
    strip = [dataclasses.replace(s, run=None) for s in again.layout.steps]  # type: ignore[arg-type]
    assert strip == [dataclasses.replace(s, run=None) for s in b.layout.steps]  # type: ignore[arg-type]
    assert dataclasses.replace(again.layout, steps=(), constants={}) == dataclasses.replace(b.layout, steps=(), constants={})
