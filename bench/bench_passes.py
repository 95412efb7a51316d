"""Graph passes: node count and median run time with every pass on vs every pass off.

    .venv/bin/python bench/bench_passes.py [--repeat 15] [--only mlp,cnn,resnet50] [--no-onnx] [--single-stream]

Models: the builder examples (mlp, cnn), two elementwise-heavy graphs that show the
blocked FusedElementwise kernel (a 6-op chain over a 4M-element tensor and a bias+GELU
block, with onnxruntime on the same ONNX graph as a yardstick), and the onnx wheel's
light/ models when ``aioge.load_onnx`` can load them (skipped with a note otherwise).

On and off sessions run interleaved (on, off, on, off, ...) so that load from other
processes on a shared machine hits both alike; the figures are medians. Kernels are chosen
by rule (aioge.tune_mode=heuristic) so the comparison is about the passes alone.
``--single-stream`` sets ge.enableSingleStream=true for both: on a 2-core machine several
streams of BLAS-heavy kernels oversubscribe the cores, and a graph whose convolutions the
passes have made independent of small nodes suffers more from that than the passes gain.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any, Callable

import anyio
import anyio.from_thread
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import aioge
from aioge.benchmarks.measure import ort_session
from aioge.benchmarks.suite import machine
from aioge.benchmarks.workloads import light_dir
from aioge.examples import EXAMPLES
from aioge.passes import pass_names

ALL_OFF = ";".join(f"{n}:off" for n in pass_names())
BASE = {"aioge.tune_mode": "heuristic", "ge.op_compiler_cache_mode": "disable"}
LIGHT = light_dir()


def _chain_model(shape: tuple[int, ...]) -> onnx.ModelProto:
    """y = relu(tanh(x * 0.5 + b) * x - 0.1) * 2: six elementwise ops over a big tensor."""
    n = helper.make_node
    consts = {
        "half": np.float32(0.5),
        "b": np.linspace(-1, 1, shape[-1], dtype=np.float32),
        "tenth": np.float32(0.1),
        "two": np.float32(2.0),
    }
    nodes = [
        n("Mul", ["x", "half"], ["a"]),
        n("Add", ["a", "b"], ["c"]),
        n("Tanh", ["c"], ["d"]),
        n("Mul", ["d", "x"], ["e"]),
        n("Sub", ["e", "tenth"], ["f"]),
        n("Relu", ["f"], ["g"]),
        n("Mul", ["g", "two"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "ew_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _bias_gelu_model(rows: int, cols: int) -> onnx.ModelProto:
    """x @ W + b, then GELU exactly as torch exports it (Div, Erf, Add, Mul, Mul)."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    consts = {
        "w": (rng.standard_normal((cols, cols)) / np.sqrt(cols)).astype(np.float32),
        "bias": rng.standard_normal(cols).astype(np.float32),
        "sqrt2": np.float32(np.sqrt(2.0)),
        "one": np.float32(1.0),
        "half": np.float32(0.5),
    }
    nodes = [
        n("MatMul", ["x", "w"], ["mm"]),
        n("Add", ["mm", "bias"], ["h"]),
        n("Div", ["h", "sqrt2"], ["g1"]),
        n("Erf", ["g1"], ["g2"]),
        n("Add", ["g2", "one"], ["g3"]),
        n("Mul", ["h", "g3"], ["g4"]),
        n("Mul", ["g4", "half"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "bias_gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, cols])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _cases(
    args: argparse.Namespace,
) -> list[tuple[str, Callable[[], tuple[aioge.Graph, dict[str, np.ndarray], onnx.ModelProto | None]]]]:
    cases: list[tuple[str, Callable[[], Any]]] = []
    for name in sorted(EXAMPLES):
        cases.append((name, lambda name=name: (*EXAMPLES[name]()[:2], None)))
    rng = np.random.default_rng(0)
    chain = _chain_model((16, 64, 64, 64))
    cases.append(
        (
            "ew_chain",
            lambda: (
                aioge.load_onnx(chain.SerializeToString()),
                {"x": rng.standard_normal((16, 64, 64, 64)).astype(np.float32)},
                chain,
            ),
        )
    )
    gelu = _bias_gelu_model(512, 1024)
    cases.append(
        (
            "bias_gelu",
            lambda: (aioge.load_onnx(gelu.SerializeToString()), {"x": rng.standard_normal((512, 1024)).astype(np.float32)}, gelu),
        )
    )
    if not args.no_onnx:
        for fname in sorted(os.listdir(LIGHT)) if os.path.isdir(LIGHT) else []:
            if fname.startswith("light_") and fname.endswith(".onnx") and "_output_" not in fname:
                cases.append((fname[len("light_") : -len(".onnx")], lambda f=fname: _light(os.path.join(LIGHT, f))))
    only = set(filter(None, args.only.split(",")))
    return [c for c in cases if not only or c[0] in only]


def _light(path: str) -> tuple[aioge.Graph, dict[str, np.ndarray], onnx.ModelProto]:
    """A light/ model with the input onnx's backend runner feeds it (arange / n)."""
    model = onnx.load(path)
    inits = {t.name for t in model.graph.initializer}
    graph = aioge.load_onnx(path)
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
        feeds[vi.name] = (np.arange(int(np.prod(shape))).reshape(shape) / np.prod(shape)).astype(np.float32)
    return graph, feeds, model


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=15, help="timed runs per setting (light/ models: a third of it, at least 3)")
    p.add_argument("--only", default="", help="comma-separated case names")
    p.add_argument("--no-onnx", action="store_true", help="skip the light/ models")
    p.add_argument("--ort", action="store_true", help="also time onnxruntime on the ONNX cases (light/ models too)")
    p.add_argument("--single-stream", action="store_true", help="ge.enableSingleStream=true for both settings")
    args = p.parse_args()
    options = {**BASE, **({"ge.enableSingleStream": "true"} if args.single_stream else {})}
    print(machine(), "single stream" if args.single_stream else "default streams")
    print(f"{'model':<14} {'nodes on':>8} {'off':>5} {'on ms':>9} {'off ms':>9} {'off/on':>7}  {'ort ms':>8}  max|on-off|")
    with anyio.from_thread.start_blocking_portal("asyncio") as portal:
        for name, make in _cases(args):
            try:
                graph, feeds, model = make()
            except Exception as exc:  # the ONNX frontend may not cover every model yet
                print(f"{name:<14} skipped: {type(exc).__name__}: {str(exc)[:100]}")
                continue
            light = name not in EXAMPLES and name not in ("ew_chain", "bias_gelu")
            repeat = max(3, args.repeat // 3) if light else args.repeat
            try:
                row = portal.call(_measure, graph, feeds, repeat, options)
            except Exception as exc:
                print(f"{name:<14} failed: {type(exc).__name__}: {str(exc)[:100]}")
                continue
            ort_ms = "-"
            if model is not None and (args.ort or not light):
                sess = ort_session(model)
                ort_feeds = {k: v for k, v in feeds.items() if k in {i.name for i in sess.get_inputs()}}
                sess.run(None, ort_feeds)
                samples = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    sess.run(None, ort_feeds)
                    samples.append(time.perf_counter() - t0)
                ort_ms = f"{statistics.median(samples) * 1e3:.2f}"
            n_on, n_off, t_on, t_off, diff = row
            print(
                f"{name:<14} {n_on:>8} {n_off:>5} {t_on * 1e3:>9.2f} {t_off * 1e3:>9.2f} {t_off / t_on:>7.2f}  {ort_ms:>8}  {diff:.1e}",
                flush=True,
            )


async def _measure(
    graph: aioge.Graph, feeds: dict[str, np.ndarray], repeat: int, options: dict[str, str]
) -> tuple[int, int, float, float, float]:
    async with aioge.Session(options) as s:
        await s.add_graph(1, graph)
        await s.add_graph(2, graph, {"ge.optimizationSwitch": ALL_OFF})
        out_on = await s.run_graph(1, feeds)  # compile + warm up
        out_off = await s.run_graph(2, feeds)
        on: list[float] = []
        off: list[float] = []
        for _ in range(repeat):
            for gid, samples in ((1, on), (2, off)):
                t0 = time.perf_counter()
                await s.run_graph(gid, feeds)
                samples.append(time.perf_counter() - t0)
        diff = max(float(np.max(np.abs(out_on[k].astype(np.float64) - out_off[k]))) for k in out_on)
        return len(s.compiled(1).nodes), len(s.compiled(2).nodes), statistics.median(on), statistics.median(off), diff


if __name__ == "__main__":
    main()
