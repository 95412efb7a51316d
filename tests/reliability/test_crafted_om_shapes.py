"""A crafted .om whose stored descs disagree with the kernels that run them (issue 37, item 1).

Loading re-infers every node's output descs from the graph, as a compile made them, and
refuses a file whose stored descs (and the kernel descs' signatures updated to match) differ:
the C kernels size their calls from those descs, so a Conv stored as 1x8x1x1 while its kernel
computes 1x8x32x32 wrote past its heap buffer and killed the process. The fuzz test loads and
runs edited files in a child process: it must end cleanly (a refusal, an ``aioge.errors``
exception or the right result), never by a signal or a hang."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import anyio
import numpy as np
import pytest

import aioge
from aioge import ops
from aioge.errors import ModelFormatError
from aioge.ir.desc import TensorDesc
from aioge.kernels import native
from aioge.keys import signature_of
from aioge.ops.registry import get_schema
from aioge.plan import io, serialize
from aioge.plan.kernel import candidates_of
from aioge.plan.model import CompiledModel
from tests.reliability import _om_fuzz
from tests.reliability._faults import rewrite_cache_entry

ROOT = Path(__file__).resolve().parents[2]
needs_native = pytest.mark.skipif(not native.available(), reason="the compiled tier is not built")
W = np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32)


def _conv_graph() -> aioge.Graph:
    g = aioge.Graph("attack")
    x = g.input("x", (1, 3, 32, 32))
    g.output(ops.conv(x, g.constant(W, "w"), pads=[1, 1, 1, 1]), names=["y"])
    return g


def _resign(m: CompiledModel) -> None:
    """What the attacker does after editing descs: every kernel desc's signature made the node's."""
    plans = []
    for plan, node in zip(m.nodes, m.graph.nodes):
        ins, outs = signature_of(node)
        plans.append(dataclasses.replace(plan, kernel=dataclasses.replace(plan.kernel, inputs=ins, outputs=outs)))
    m.nodes = tuple(plans)


def _shrunk_conv(m: CompiledModel) -> None:
    """The issue's attack: the Conv's output stored as 1x8x1x1, conv_direct_native chosen."""
    (node,) = [n for n in m.graph.nodes if n.op_type == "Conv"]
    node.outputs[0].desc = TensorDesc((1, 8, 1, 1), "float32")
    i = m.graph.nodes.index(node)
    cleared = dataclasses.replace(
        m.nodes[i].kernel.history, runner_up="", runner_up_params={}, native_alt="", native_alt_params={}
    )
    kernel = dataclasses.replace(m.nodes[i].kernel, impl="conv_direct_native", params={}, history=cleared)
    m.nodes = tuple(dataclasses.replace(p, kernel=kernel) if j == i else p for j, p in enumerate(m.nodes))
    _resign(m)


def _compiled(g: aioge.Graph) -> CompiledModel:
    from aioge.compiler.graph import compile_graph_sync
    from aioge.compiler.specialize import input_signature
    from aioge.options import resolve_options

    return compile_graph_sync(g, input_signature(g, {}), resolve_options({"aioge.tune_mode": "heuristic"}))


@needs_native
def test_a_conv_stored_smaller_than_its_kernel_writes_is_refused_not_run(tmp_path: Path) -> None:
    model = serialize.decode_model(serialize.encode_model(_compiled(_conv_graph()))[0])
    _shrunk_conv(model)
    data = serialize.encode_model(model)[0]
    io.open_envelope(data, "om")  # envelope and checksum are valid
    path = tmp_path / "attack.om"
    path.write_bytes(data)
    message = r"node 'conv_\d+' \(Conv\): output 0 'y' is stored as float32\[1, 8, 1, 1\], shape inference gives float32\[1, 8, 32, 32\] \(dim 2\)"
    with pytest.raises(ModelFormatError, match=message):
        serialize.load_model_sync(path)

    async def load() -> None:
        async with aioge.Session() as s:
            await s.load_model(path)

    with pytest.raises(ModelFormatError, match=message):
        anyio.run(load)


@needs_native
def test_the_graph_cache_warns_and_recompiles_an_entry_with_a_shrunk_desc(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    opts = {"ge.graph_compiler_cache_dir": str(tmp_path / "gc"), "aioge.tune_mode": "heuristic"}
    (tmp_path / "gc").mkdir(mode=0o700)
    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)

    async def run() -> tuple[np.ndarray, bool]:
        async with aioge.Session(opts) as s:
            await s.add_graph(1, _conv_graph(), {"ge.graph_key": "attack"})
            y = (await s.run_graph(1, {"x": x}))["y"]
            return y, s.compiled(1).stats.graph_cache_hit

    want, hit = anyio.run(run)
    assert not hit and anyio.run(run)[1]
    rewrite_cache_entry(tmp_path / "gc", "attack", _conv_graph(), _shrunk_conv)  # the index names the new file's sha256

    with caplog.at_level(logging.WARNING, logger="aioge"):
        y, hit = anyio.run(run)
    assert hit is False and y.shape == (1, 8, 32, 32)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("aioge")]
    assert len(warnings) == 1 and "shape inference gives float32[1, 8, 32, 32]" in warnings[0], warnings


# -- fuzz ------------------------------------------------------------------------------

Edit = Callable[[CompiledModel], None]


def _set_dim(node: int, out: int, axis: int, size: int) -> Edit:
    def edit(m: CompiledModel) -> None:
        v = m.graph.nodes[node].outputs[out]
        shape = list(v.desc.shape)  # type: ignore[arg-type]
        shape[axis] = size
        v.desc = TensorDesc(tuple(shape), v.desc.dtype)
        _resign(m)

    return edit


def _set_dtype(node: int, dtype: str) -> Edit:
    def edit(m: CompiledModel) -> None:
        v = m.graph.nodes[node].outputs[0]
        v.desc = TensorDesc(v.desc.shape, dtype)
        _resign(m)

    return edit


def _set_kernel(node: int, impl: str, params: dict[str, object]) -> Edit:
    def edit(m: CompiledModel) -> None:
        cleared = dataclasses.replace(
            m.nodes[node].kernel.history, runner_up="", runner_up_params={}, native_alt="", native_alt_params={}
        )
        k = dataclasses.replace(m.nodes[node].kernel, impl=impl, params=params, history=cleared)
        m.nodes = tuple(dataclasses.replace(p, kernel=k) if i == node else p for i, p in enumerate(m.nodes))

    return edit


def _edits(model: CompiledModel) -> Iterator[tuple[str, Edit, bool]]:
    """(name, edit, whether the file is one a compile could make): every output dim of every
    node set to 0, 1, one more and twice, every output's dtype, every stored candidate kernel
    of every node, and every kernel parameter set out of its candidates."""
    yield "base", lambda m: None, True
    for i, node in enumerate(model.graph.nodes):
        for o, v in enumerate(node.outputs):
            for axis, d in enumerate(v.desc.shape):  # type: ignore[union-attr]
                for size in sorted({0, 1, d + 1, 2 * d} - {d}):
                    yield f"n{i}o{o}d{axis}={size}", _set_dim(i, o, axis, size), False
        yield f"n{i}f16", _set_dtype(i, "float16"), False
        descs = [None if v is None else v.desc for v in node.inputs]
        for j, (impl, params) in enumerate(candidates_of(get_schema(node.op_type, node.domain), descs, node.attrs, stored=True)):
            yield f"n{i}k{j}", _set_kernel(i, impl.name, params), True
            for key, value in params.items():
                if isinstance(value, int):
                    for bad in (-1, value + 3, 1 << 20):
                        yield f"n{i}k{j}{key}={bad}", _set_kernel(i, impl.name, {**params, key: bad}), False
        yield f"n{i}rows", _set_kernel(i, model.nodes[i].kernel.impl, {"rows": 3, "mr": 5}), False


@needs_native
def test_edited_om_files_load_and_run_in_a_child_without_a_crash(tmp_path: Path) -> None:
    base = serialize.encode_model(_om_fuzz.native_model())[0]
    expect: dict[str, bool] = {}
    for n, (name, edit, valid) in enumerate(_edits(serialize.decode_model(base))):
        m = serialize.decode_model(base)
        edit(m)
        path = tmp_path / f"{n:03d}_{name}.om"
        path.write_bytes(serialize.encode_model(m)[0])
        expect[str(path)] = valid
    assert 100 <= len(expect) <= 400  # 115 without the AVX-512 tile's mr 8 candidates (AVX2 and baseline tiers)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.reliability._om_fuzz", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    last = lines[-1]["file"] if lines else None
    assert proc.returncode == 0, f"the child died ({proc.returncode}) in {last}: {proc.stderr[-2000:]}"
    done = {r["file"]: r for r in lines if "outcome" in r}
    assert set(done) == set(expect)
    want = np.array(done[min(expect)]["y"])  # the unedited file
    assert want.shape == (1, 10)
    for path, valid in expect.items():
        r = done[path]
        if valid:  # a file a compile could make runs, with the unedited model's result
            assert r["outcome"] == "ran", r
            np.testing.assert_allclose(np.array(r["y"]), want, rtol=1e-4, atol=1e-5, err_msg=path)
        else:
            assert r["outcome"] in ("refused", "error") or np.allclose(np.array(r["y"]), want, rtol=1e-4, atol=1e-5), r
    refused = sum(r["outcome"] == "refused" for r in done.values())
    assert refused >= sum(not v for v in expect.values()) * 0.9
