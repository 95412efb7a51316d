"""The nine light/ models of the onnx wheel: load, compile and run times, aioge vs onnxruntime.

    .venv/bin/python bench/onnx_light_models.py [--repeat 3] [--only resnet50,vgg19]

Per model: load_onnx time, first run (compile + run), median steady run, onnxruntime's
median run (same input, same machine) and the ratio, and the max error against the stored
expected output. Uses aioge.tune_mode=heuristic unless --tune.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import anyio
import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import machine, median_time, ort_session, print_table  # noqa: E402
from tests.frontends import onnx_suite as S  # noqa: E402

import aioge  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--only", default="")
    p.add_argument("--tune", action="store_true", help="aioge.tune_mode=tune instead of heuristic")
    args = p.parse_args()
    print(machine())
    only = set(filter(None, args.only.split(",")))
    rows = []
    options = {"ge.op_compiler_cache_mode": "disable"}  # every model compiles for real, each run of this script
    if not args.tune:
        options["aioge.tune_mode"] = "heuristic"
    with anyio.from_thread.start_blocking_portal("asyncio") as portal:
        session = aioge.Session(options)
        for gid, case in enumerate(c for c in S.model_cases() if c.suite == "light"):
            if only and case.name not in only:
                continue
            model = onnx.load(case.path)
            inits = {t.name for t in model.graph.initializer}
            vis = [vi for vi in model.graph.input if vi.name not in inits]
            feeds_list = [S.light_input(vi) for vi in vis]
            t0 = time.perf_counter()
            graph = aioge.load_onnx(case.path)
            load_s = time.perf_counter() - t0
            feeds = {v.name: a for v, a in zip(graph.inputs, feeds_list)}
            portal.call(session.add_graph, gid, graph)
            t0 = time.perf_counter()
            out = portal.call(session.run_graph, gid, feeds)
            first_s = time.perf_counter() - t0
            run_s = median_time(lambda: portal.call(session.run_graph, gid, feeds), repeat=args.repeat, warmup=0)
            portal.call(session.remove_graph, gid)
            want = S.read_tensor(case.data_sets[0][1][0])
            got = out[graph.outputs[0].name]
            err = float(np.max(np.abs(got - want)))
            ok = bool(np.allclose(got, want, rtol=case.rtol, atol=case.atol))
            sess = ort_session(case.path)
            ort_feeds = {vi.name: a for vi, a in zip(vis, feeds_list)}
            ort_s = median_time(lambda: sess.run(None, ort_feeds), repeat=args.repeat, warmup=1)
            rows.append({"model": case.name, "nodes": len(graph.nodes), "load s": load_s, "first run s": first_s,
                         "run s (median)": run_s, "ort run s": ort_s, "aioge/ort": run_s / ort_s,
                         "max abs err": err, "match": ok})
            print(rows[-1], flush=True)
        portal.call(session.aclose)
    print_table(rows, ["model", "nodes", "load s", "first run s", "run s (median)", "ort run s", "aioge/ort",
                       "max abs err", "match"])


if __name__ == "__main__":
    main()
