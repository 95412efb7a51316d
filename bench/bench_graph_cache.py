"""Graph compile cache: cold build_graph vs warm (cache hit) build_graph, each in a fresh process.

    .venv/bin/python bench/bench_graph_cache.py [--repeat 3] [--model light_resnet50|builder] [--heuristic]
        [--external-weight] [--check fingerprint|key]

Per round, in a new temporary directory holding an empty graph cache and an empty kernel
cache: one fresh process compiles (cold: nothing cached; the build compiles every kernel
and saves the .om), then another fresh process builds the same graph again (warm: a graph
cache hit, no compile at all). Each child times only ``await session.build_graph(...)``
(loading the model file and importing aioge are outside the timing), runs the model once
and reports a digest of its outputs, so the warm model is checked to give the cold one's
answers. Prints every round, the medians and the cold/warm ratio (aim: >= 20x).

``--model light_resnet50`` (default) is the ONNX wheel's light/ ResNet-50 via
``aioge.load_onnx``; ``--model builder`` is a ResNet-50 (25.6M parameters) written with
the builder. Default options are aioge's (tune mode: kernels are tuned, as a user's first
compile would be); ``--heuristic`` picks kernels by rule instead (a cheaper cold build).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

LIGHT = "onnx/backend/test/data/light/light_resnet50.onnx"


def resnet50(batch: int = 1, seed: int = 0):  # type: ignore[no-untyped-def]
    """ResNet-50 v1 (bottleneck blocks 3-4-6-3, 25.6M parameters) with the builder."""
    from aioge import Graph, ops

    rng = np.random.default_rng(seed)
    g = Graph("resnet50_builder")
    count = [0]

    def conv_bn(h, cin, cout, k, stride=1, relu=True):  # type: ignore[no-untyped-def]
        count[0] += 1
        i = count[0]
        w = (rng.standard_normal((cout, cin, k, k), dtype=np.float32) / np.sqrt(cin * k * k)).astype(np.float32)
        p = k // 2
        h = ops.conv2d(h, g.constant(w, f"conv{i}.w"), strides=(stride, stride), pads=(p, p, p, p))
        bn = [(1 + 0.1 * rng.standard_normal(cout)), 0.1 * rng.standard_normal(cout), 0.1 * rng.standard_normal(cout), 1 + 0.1 * rng.random(cout)]
        h = ops.batch_normalization(h, *(g.constant(a.astype(np.float32), f"bn{i}.{n}") for a, n in zip(bn, "sbmv")), epsilon=1e-5)
        return ops.relu(h) if relu else h

    x = g.input("image", (batch, 3, 224, 224), "float32")
    h = ops.max_pool(conv_bn(x, 3, 64, 7, 2), kernel_shape=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    cin = 64
    for stage, (blocks, mid) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        for b in range(blocks):
            stride = 2 if b == 0 and stage > 0 else 1
            y = conv_bn(conv_bn(conv_bn(h, cin, mid, 1), mid, mid, 3, stride), mid, mid * 4, 1, relu=False)
            shortcut = conv_bn(h, cin, mid * 4, 1, stride, relu=False) if b == 0 else h
            h = ops.relu(ops.add(y, shortcut))
            cin = mid * 4
    fc = (rng.standard_normal((cin, 1000), dtype=np.float32) / np.sqrt(cin)).astype(np.float32)
    h = ops.gemm(ops.flatten(ops.global_average_pool(h), axis=1), g.constant(fc, "fc.w"), g.constant(np.zeros(1000, np.float32), "fc.b"))
    g.output(ops.softmax(h, axis=-1), names=["probs"])
    return g


def _load(model: str):  # type: ignore[no-untyped-def]
    import onnx

    import aioge

    if model == "builder":
        return resnet50()
    return aioge.load_onnx(os.path.join(os.path.dirname(onnx.__file__), LIGHT.removeprefix("onnx/")))


def child(args: argparse.Namespace) -> None:
    """One fresh process: build (timed), run once, print a JSON line (cache warnings go to stderr)."""
    import logging

    import anyio

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    import aioge

    graph = _load(args.model)
    options = {"ge.graph_compiler_cache_dir": os.path.join(args.dir, "graphs"), "ge.op_compiler_cache_dir": os.path.join(args.dir, "kernels")}
    if args.heuristic:
        options["aioge.tune_mode"] = "heuristic"
    graph_options = {"ge.graph_key": "bench_resnet50"}
    if args.external_weight:
        graph_options["ge.externalWeight"] = "1"
    graph_options["aioge.graph_cache_check"] = args.check

    async def go() -> dict:
        async with aioge.Session(options) as s:
            await s.add_graph(1, graph, graph_options)
            t0 = time.perf_counter()
            model = await s.build_graph(1)
            build = time.perf_counter() - t0
            x = np.random.default_rng(0).standard_normal(model.signature[0][1]).astype(np.float32)
            out = await s.run_graph(1, {model.signature[0][0]: x})
        digest = hashlib.sha256(b"".join(np.ascontiguousarray(out[k]).tobytes() for k in sorted(out))).hexdigest()
        return {"build_s": build, "hit": model.stats.graph_cache_hit, "kernels_compiled": model.stats.kernels_compiled,
                "nodes": len(model.nodes), "outputs": digest}

    print(json.dumps(anyio.run(go)))


def _spawn(args: argparse.Namespace, directory: str) -> dict:
    # -P: neither this script's dir nor the current one first on sys.path (a stray msgpack.py would be imported).
    cmd = [sys.executable, "-P", os.path.abspath(__file__), "--child", "--dir", directory, "--model", args.model]
    cmd += ["--heuristic"] * args.heuristic + ["--external-weight"] * args.external_weight + ["--check", args.check]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"child failed:\n{r.stderr}")
    result = json.loads(r.stdout.strip().splitlines()[-1])
    result["stderr"] = r.stderr.strip()
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3, help="rounds (each: one cold and one warm process)")
    p.add_argument("--model", choices=["light_resnet50", "builder"], default="light_resnet50")
    p.add_argument("--heuristic", action="store_true", help="aioge.tune_mode=heuristic")
    p.add_argument("--external-weight", action="store_true", help="ge.externalWeight=1")
    p.add_argument("--check", choices=["fingerprint", "key"], default="fingerprint", help="aioge.graph_cache_check")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    print(f"{args.model}, tune_mode={'heuristic' if args.heuristic else 'tune'}, externalWeight={int(args.external_weight)}, graph_cache_check={args.check}; "
          f"{os.cpu_count()} cores, python {sys.version.split()[0]}, numpy {np.__version__}")
    cold, warm = [], []
    for r in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="aioge-bench-gc-") as d:
            os.mkdir(os.path.join(d, "graphs"))
            c = _spawn(args, d)
            w = _spawn(args, d)
            om = sum(os.path.getsize(os.path.join(d, "graphs", f)) for f in os.listdir(os.path.join(d, "graphs")) if f.endswith(".om"))
        if c["hit"] or not w["hit"] or w["kernels_compiled"] or c["outputs"] != w["outputs"]:
            # e.g. aioge's source changed between the two processes (the code digest is part of the match)
            raise SystemExit(f"round {r + 1}: expected a cold compile then a hit with equal outputs, got\n{c}\n{w}")
        cold.append(c["build_s"])
        warm.append(w["build_s"])
        print(f"round {r + 1}: cold {c['build_s'] * 1e3:9.1f} ms ({c['kernels_compiled']} kernels, {c['nodes']} nodes)   "
              f"warm {w['build_s'] * 1e3:7.1f} ms (hit, outputs equal)   .om {om / 1e6:.1f} MB")
    mc, mw = statistics.median(cold), statistics.median(warm)
    print(f"median cold build_graph {mc * 1e3:.1f} ms, warm {mw * 1e3:.1f} ms, ratio {mc / mw:.1f}x (aim >= 20x)")


if __name__ == "__main__":
    main()
