"""A small CNN whose every kernel that has a C form runs it, as an .om an attacker edits, and
the child process that loads and runs edited files (``python -m tests.reliability._om_fuzz DIR``).

The child prints one JSON line per file: ``refused`` (a ``ModelFormatError`` at load),
``error`` (another ``aioge.errors`` exception) or ``ran`` with the output. It must exit 0: a signal or a hang is the
failure the fuzz looks for."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

import aioge
from aioge import ops
from aioge.plan.model import CompiledModel

SHAPE = (1, 4, 12, 12)
X = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)


def graph() -> aioge.Graph:
    rng = np.random.default_rng(0)
    g = aioge.Graph("fuzz")
    x = g.input("x", SHAPE)
    w1 = g.constant(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w1")
    wd = g.constant(rng.standard_normal((8, 1, 3, 3)).astype(np.float32), "wd")
    w2 = g.constant((rng.standard_normal((8 * 3 * 3, 10)) / 20).astype(np.float32), "w2")
    y = ops.relu(ops.conv(x, w1, pads=[1, 1, 1, 1]))
    y = ops.conv(y, wd, pads=[1, 1, 1, 1], strides=[2, 2], group=8)
    y = ops.max_pool(y, kernel_shape=[2, 2], strides=[2, 2])
    g.output(ops.softmax(ops.gemm(ops.flatten(y), w2)), names=["y"])
    return g


def native_model() -> CompiledModel:
    """The graph compiled, each kernel swapped for a C candidate where it has one."""
    from aioge.compiler.graph import compile_graph_sync
    from aioge.compiler.specialize import input_signature
    from aioge.ops.registry import get_schema
    from aioge.options import resolve_options
    from aioge.plan.kernel import candidates_of

    g = graph()
    model = compile_graph_sync(g, input_signature(g, {}), resolve_options({"aioge.tune_mode": "heuristic"}))
    plans = []
    for plan, node in zip(model.nodes, model.graph.nodes):
        descs = [None if v is None else v.desc for v in node.inputs]
        native = [
            (i.name, p) for i, p in candidates_of(get_schema(node.op_type, node.domain), descs, node.attrs) if "native" in i.name
        ]
        if native:
            name, params = native[0]
            cleared = dataclasses.replace(
                plan.kernel.history, runner_up="", runner_up_params={}, native_alt="", native_alt_params={}
            )
            kernel = dataclasses.replace(plan.kernel, impl=name, params=params, history=cleared)
            plan = dataclasses.replace(plan, kernel=kernel)
        plans.append(plan)
    model.nodes = tuple(plans)
    return model


async def _run_all(paths: list[str]) -> None:
    from aioge.errors import AiogeError, ModelFormatError

    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        for path in paths:
            print(json.dumps({"file": path, "start": True}), flush=True)  # names the file a crash happened in
            try:
                gid = await s.load_model(path)
            except ModelFormatError as exc:
                print(json.dumps({"file": path, "outcome": "refused", "why": str(exc)}), flush=True)
                continue
            try:
                y = (await s.run_graph(gid, {"x": X}))["y"]
                print(json.dumps({"file": path, "outcome": "ran", "y": y.tolist()}), flush=True)
            except AiogeError as exc:
                print(json.dumps({"file": path, "outcome": "error", "why": str(exc)}), flush=True)
            await s.remove_graph(gid)


if __name__ == "__main__":
    import anyio

    anyio.run(_run_all, sorted(str(p) for p in Path(sys.argv[1]).glob("*.om")))
