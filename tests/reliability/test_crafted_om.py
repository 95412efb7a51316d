""".om files crafted by an attacker: a valid envelope and checksum around plans the compiler
would never make.

Each file is made the way an attacker would: a real compiled model decoded, one plan edited,
and re-encoded with aioge's own codec (so the envelope, the checksum and every type check
pass). Before, a cycle of events between streams loaded and then hung the run, a block
size outside the tuner's candidates loaded and ran orders of magnitude slower, and two
tensors live at once could be given the same arena bytes (a silently wrong result). Decoding must refuse
each with a ``ModelFormatError`` naming what is wrong; in the graph cache that is one warning
and a recompile.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.compiler import ops as op_compiler
from aioge.compiler.graph import compile_graph_sync
from aioge.compiler.memory import Buffer
from aioge.compiler.specialize import input_signature
from aioge.compiler.streams import Event, Stream
from aioge.errors import ModelFormatError
from aioge.options import resolve_options
from aioge.plan import io, serialize
from aioge.plan.model import CompiledModel
from tests.reliability._faults import rewrite_cache_entry

X = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
W1 = np.cos(np.arange(256 * 256, dtype=np.float32)).reshape(256, 256) / 16
W2 = np.sin(np.arange(256 * 256, dtype=np.float32)).reshape(256, 256) / 16


def _graph() -> aioge.Graph:
    """Two independent matmuls (two streams, one event) and an elementwise tail (fused)."""
    g = aioge.Graph("crafted")
    x = g.input("x", (64, 256))
    a = ops.tanh(ops.matmul(x, g.constant(W1, "w1")))
    b = ops.sigmoid(ops.matmul(x, g.constant(W2, "w2")))
    g.output(ops.relu(a + b) * 2.0 - 0.5, names=["y"])
    return g


def _ref(x: np.ndarray) -> np.ndarray:
    return np.maximum(np.tanh(x @ W1) + 1 / (1 + np.exp(-(x @ W2))), 0) * 2.0 - 0.5


def _model() -> CompiledModel:
    g = _graph()
    model = compile_graph_sync(g, input_signature(g, {"x": X.shape}), resolve_options({"aioge.tune_mode": "heuristic"}))
    # The shape the crafted files rely on: two streams, an event joining them, a fused tail.
    assert model.streams.num_streams == 2 and len(model.streams.events) == 1
    assert any(p.op_type == "FusedElementwise" for p in model.nodes)
    return model


def _craft(edit: Callable[[CompiledModel], None]) -> bytes:
    """A real model through encode and decode, one plan edited, encoded again by aioge's codec."""
    model = serialize.decode_model(serialize.encode_model(_model())[0])
    edit(model)
    return serialize.encode_model(model)[0]


def _event_cycle(m: CompiledModel) -> None:
    sp = m.streams
    e = sp.events[0]  # consumer waits for producer on the other stream: add the way back
    m.streams = dataclasses.replace(sp, events=(*sp.events, Event(1, e.consumer, e.producer)))


def _missing_event(m: CompiledModel) -> None:
    m.streams = dataclasses.replace(m.streams, events=())


def _stream_out_of_order(m: CompiledModel) -> None:
    sp = m.streams
    s0 = sp.streams[0]
    m.streams = dataclasses.replace(sp, streams=(Stream(0, s0.engine, tuple(reversed(s0.nodes))), *sp.streams[1:]))


def _fused(m: CompiledModel) -> int:
    return next(i for i, p in enumerate(m.nodes) if p.op_type == "FusedElementwise")


def _tiny_block(m: CompiledModel) -> None:
    i = _fused(m)
    plan = m.nodes[i]
    kernel = dataclasses.replace(plan.kernel, params={"block_bytes": 64})
    m.nodes = (*m.nodes[:i], dataclasses.replace(plan, kernel=kernel), *m.nodes[i + 1 :])


def _other_engine(m: CompiledModel) -> None:
    i = _fused(m)
    plan = m.nodes[i]
    engine = "AiCpu" if plan.engine != "AiCpu" else "AiCore"
    m.nodes = (*m.nodes[:i], dataclasses.replace(plan, engine=engine), *m.nodes[i + 1 :])


def _buffer_twice(m: CompiledModel) -> None:
    mem = m.memory
    m.memory = dataclasses.replace(mem, buffers=(*mem.buffers, mem.buffers[0]))


def _buffer_for_an_output(m: CompiledModel) -> None:
    mem = m.memory
    out = m.graph.outputs[0]
    last = len(m.nodes) - 1
    nbytes = out.desc.nbytes
    buffers = (*mem.buffers, Buffer(out.name, mem.arena_bytes, nbytes, last, last))
    m.memory = dataclasses.replace(mem, buffers=buffers, arena_bytes=mem.arena_bytes + nbytes)


def _live_buffers_overlap(m: CompiledModel) -> None:
    """Both matmul results are live until the fused tail reads them: put them on one range."""
    mem = m.memory
    first, *rest = mem.buffers
    moved = tuple(dataclasses.replace(b, offset=first.offset) for b in rest)
    m.memory = dataclasses.replace(mem, buffers=(first, *moved))


def _output_as_a_view(m: CompiledModel) -> None:
    m.memory = dataclasses.replace(m.memory, views=(("y", m.memory.buffers[0].value),))


CRAFTED = {
    "event cycle": (_event_cycle, r"invalid stream plan: event 1 .* \(a cycle between streams"),
    "missing event": (
        _missing_event,
        r"invalid stream plan: node \d+ \(stream \d\) reads the output of node \d+ .* with no event",
    ),
    "stream out of order": (_stream_out_of_order, r"invalid stream plan: stream 0 runs node \d+ after node \d+"),
    "tiny block size": (
        _tiny_block,
        r"kernel 'blocked' is not one the compiler could choose: .*'block_bytes': 64.* not a candidate",
    ),
    "engine and kernel differ": (_other_engine, r"is not one the compiler could choose: it is a FusedElementwise kernel for"),
    "buffer listed twice": (_buffer_twice, r"buffer of .* listed twice"),
    "buffer for a graph output": (_buffer_for_an_output, r"buffer of 'y' is not a planned intermediate"),
    "graph output as a view": (_output_as_a_view, r"view 'y' is not a planned view op's output over the buffer of"),
    "live buffers overlap": (
        _live_buffers_overlap,
        r"invalid memory plan: buffers of .* share arena bytes, but node \d+ .* does not end before",
    ),
}


@pytest.mark.parametrize("name", list(CRAFTED))
def test_crafted_plans_are_refused_at_decode(name: str, tmp_path: Path) -> None:
    edit, message = CRAFTED[name]
    data = _craft(edit)
    io.open_envelope(data, "om")  # the envelope and checksum are valid: only the plan is wrong
    path = tmp_path / "crafted.om"
    path.write_bytes(data)
    with pytest.raises(ModelFormatError, match=message) as info:
        serialize.load_model_sync(path)
    assert info.value.path == str(path)


@pytest.mark.anyio
async def test_session_load_model_refuses_an_event_cycle_instead_of_hanging(tmp_path: Path) -> None:
    path = tmp_path / "cycle.om"
    path.write_bytes(_craft(_event_cycle))
    async with aioge.Session() as s:
        with pytest.raises(ModelFormatError, match="cycle between streams"):
            await s.load_model(path)


def test_an_unedited_model_still_loads_and_runs(tmp_path: Path) -> None:
    import anyio

    path = tmp_path / "real.om"
    path.write_bytes(_craft(lambda m: None))

    async def go() -> np.ndarray:
        async with aioge.Session() as s:
            return (await s.run_graph(await s.load_model(path), {"x": X}))["y"]

    np.testing.assert_allclose(anyio.run(go), _ref(X), rtol=1e-4, atol=1e-4)


def test_om_and_kernel_cache_entries_share_one_kernel_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a second copy of the rule: the .om decoder and the kernel cache call one function."""
    data = _craft(lambda m: None)
    node = serialize.decode_model(data).graph.nodes[0]
    monkeypatch.setattr(aioge.plan.kernel, "check_kernel", lambda desc, node, engine: "sentinel reason")
    with pytest.raises(ModelFormatError, match="sentinel reason"):
        serialize.decode_model(data)
    job = op_compiler.KernelJob(node, aioge.engines.Engine.AICORE, "k")
    assert op_compiler.check_loaded(None, job) == "sentinel reason"  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["event cycle", "tiny block size"])
def test_graph_cache_warns_and_recompiles_a_crafted_entry(name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import anyio

    opts = {"ge.graph_compiler_cache_dir": str(tmp_path / "gc"), "aioge.tune_mode": "heuristic"}
    (tmp_path / "gc").mkdir(mode=0o700)

    async def run() -> tuple[np.ndarray, bool]:
        async with aioge.Session(opts) as s:
            await s.add_graph(1, _graph(), {"ge.graph_key": "crafted"})
            y = (await s.run_graph(1, {"x": X}))["y"]
            return y, s.compiled(1).stats.graph_cache_hit

    assert anyio.run(run)[1] is False
    assert anyio.run(run)[1] is True  # the real entry hits
    # The attacker rewrites the .om and the index entry's sha256 to match it.
    # The entry references the graph's weights: it decodes with them, as a hit does.
    rewrite_cache_entry(tmp_path / "gc", "crafted", _graph(), CRAFTED[name][0])

    with caplog.at_level(logging.WARNING, logger="aioge"):
        y, hit = anyio.run(run)
    assert hit is False
    np.testing.assert_allclose(y, _ref(X), rtol=1e-4, atol=1e-4)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("aioge")]
    assert len(warnings) == 1, warnings
    assert ("cycle between streams" if name == "event cycle" else "not a candidate") in warnings[0]
