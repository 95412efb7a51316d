"""Per dense-conv layer of an ONNX model: one-thread CPU time of aioge's tuned kernel (and of
every compiled candidate) beside onnxruntime's same node, each in this process's thread.

    AIOGE_SPIN_US=0 OPENBLAS_NUM_THREADS=1 python bench/bench_conv_layers.py MODEL.onnx [--json out.json]

aioge: the model compiled with tuning; each Conv/FusedConv of group 1 rebuilt with the chosen
(implementation, parameters) and each compiled candidate, timed by thread CPU in interleaved rounds (min and median) on the
node's real input shapes. onnxruntime: its optimised model (NCHWc Convs, fused activations and
residuals), each Conv node alone in a model of its own fed the tensors a full run gives it
(with the activation node that follows it, if any: aioge fuses it),
timed by thread CPU of ``run`` with one intra-op thread, minus the run of an empty-ish model.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int = 7) -> dict[str, tuple[float, float]]:
    """(min, median) thread-CPU ms of each function, timed in interleaved rounds (one warm-up call each)."""
    for fn in fns.values():
        fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            fn()  # the timed call follows an untimed one of the same kernel, as a warm cache would
            t = time.thread_time()
            fn()
            samples[k].append((time.thread_time() - t) * 1e3)
    return {k: (min(v), statistics.median(v)) for k, v in samples.items()}


def cpu_ms(fn: Callable[[], Any], n: int = 9, reps: int = 3) -> float:
    fn()
    times = []
    for _ in range(n):
        t = time.thread_time()
        for _ in range(reps):
            fn()
        times.append((time.thread_time() - t) / reps)
    return statistics.median(times) * 1e3


_ACTIVATIONS = ("QuickGelu", "Sigmoid", "Relu", "Clip", "HardSigmoid", "LeakyRelu", "Tanh")


def ort_layers(path: str, feeds: dict[str, np.ndarray]) -> tuple[list[tuple[tuple[int, ...], Any]], float]:
    """(key, run) per onnxruntime Conv, in its optimised graph's order; key (C, H, W, M, kh, kw, sh, group)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    opt = os.path.join(tempfile.mkdtemp(), "opt.onnx")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.optimized_model_filepath = opt
    so.log_severity_level = 3
    ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    m = onnx.load(opt)
    inits = {t.name: t for t in m.graph.initializer}
    convs = [n for n in m.graph.node if n.op_type in ("Conv", "FusedConv")]
    # every Conv's non-constant inputs from one run of the optimised model
    wanted = sorted({i for n in convs for i in n.input if i and i not in inits})
    full = onnx.ModelProto()
    full.CopyFrom(m)
    have = {o.name for o in full.graph.output}
    for name in wanted:
        if name not in have and name not in {i.name for i in full.graph.input}:
            full.graph.output.append(helper.make_empty_tensor_value_info(name))
    so2 = ort.SessionOptions()
    so2.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so2.log_severity_level = 3
    s = ort.InferenceSession(full.SerializeToString(), so2, providers=["CPUExecutionProvider"])
    names = [o.name for o in s.get_outputs()]
    vals = dict(zip(names, s.run(None, feeds)))
    vals.update(feeds)

    def session(nodes: list[Any], ins: list[str], outs: list[str], consts: list[Any]) -> Any:
        g = helper.make_graph(
            nodes,
            "one",
            [helper.make_tensor_value_info(i, onnx.TensorProto.FLOAT, list(vals[i].shape)) for i in ins],
            [helper.make_empty_tensor_value_info(o) for o in outs],
            consts,
        )
        mm = helper.make_model(g, opset_imports=list(m.opset_import), ir_version=m.ir_version)
        o = ort.SessionOptions()
        o.intra_op_num_threads = 1
        o.inter_op_num_threads = 1
        o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        o.log_severity_level = 3
        return ort.InferenceSession(mm.SerializeToString(), o, providers=["CPUExecutionProvider"])

    x0 = next(iter(feeds))
    empty = session([helper.make_node("Identity", [x0], ["o"])], [x0], ["o"], [])
    base = cpu_ms(lambda: empty.run(None, {x0: vals[x0]}), 15, 5)
    out = []
    for n in convs:
        ins = [i for i in n.input if i and i not in inits]
        consts = [inits[i] for i in n.input if i in inits]
        w = onnx.numpy_helper.to_array(inits[n.input[1]])
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        x = vals[n.input[0]]
        c = x.shape[1] * (x.shape[4] if x.ndim == 5 else 1)
        key = (c, x.shape[2], x.shape[3], w.shape[0], w.shape[2], w.shape[3], attrs.get("strides", [1])[0], attrs.get("group", 1))
        # an activation onnxruntime keeps as a node of its own (EfficientNet's SiLU: QuickGelu)
        # is timed with its conv: aioge's FusedConv applies it to each tile
        act = [u for u in m.graph.node if u.op_type in _ACTIVATIONS and list(u.input) == [n.output[0]]]
        outs = [act[0].output[0]] if act else list(n.output)
        s1 = session([n, *act[:1]], ins, outs, consts)
        feed = {i: vals[i] for i in ins}
        out.append((key, lambda s1=s1, feed=feed: s1.run(None, feed)))
    return out, base


def aioge_layers(path: str, feeds: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    import aioge
    from aioge.compiler.graph import compile_graph_sync
    from aioge.compiler.specialize import input_signature
    from aioge.ir.desc import TensorDesc
    from aioge.ops.registry import get_schema
    from aioge.options import resolve_options

    graph = aioge.load_onnx(path)
    opts = {"ge.op_compiler_cache_dir": tempfile.mkdtemp(), "aioge.tune_mode": "tune"}
    model = compile_graph_sync(graph, input_signature(graph, {k: v.shape for k, v in feeds.items()}), resolve_options(opts))
    rng = np.random.default_rng(0)
    rows = []
    for node, plan in zip(model.graph.nodes, model.nodes):
        if node.op_type not in ("Conv", "FusedConv"):
            continue
        xd, wd = node.inputs[0].desc, node.inputs[1].desc
        group = int(node.attrs.get("group", 1) or 1)
        if group != 1 or len(xd.shape) != 4:
            continue
        schema = get_schema(node.op_type, node.domain)
        attrs = schema.normalise_attrs(dict(node.attrs))
        arrays = []
        for v in node.inputs:
            if v is None:
                arrays.append(None)
            elif v.data is not None:
                a = np.asarray(v.data, np.float32)
                a.setflags(write=False)
                arrays.append(a)
            else:
                arrays.append(rng.standard_normal(v.desc.shape).astype(np.float32))
        descs = [None if v is None else TensorDesc(v.desc.shape, "float32") for v in node.inputs]
        outs = [TensorDesc(o.desc.shape, "float32") for o in node.outputs]
        y = [np.empty(o.shape, np.float32) for o in outs]
        sh = (attrs.get("strides") or [1])[0]
        key = (xd.shape[1], xd.shape[2], xd.shape[3], wd.shape[0], wd.shape[2], wd.shape[3], sh, group)
        chosen = (plan.kernel.impl, dict(plan.kernel.params))
        cands = [chosen]
        for impl in ("conv_direct_native", "conv_direct_t_native", "taps", "im2col"):
            k = schema.impl(impl)
            if not k.applies(descs, attrs):
                continue
            for p in k.candidates(descs, attrs) if k.candidates else [{}]:
                if (impl, p) != chosen:
                    cands.append((impl, p))
        runs = {}
        for impl, p in cands:
            run = schema.impl(impl).build(attrs, p, descs, outs)
            runs[f"{impl}{p or ''}"] = lambda run=run, arrays=arrays, y=y: run(arrays, y)
        rows.append({"name": node.name, "key": key, "chosen": f"{chosen[0]}{chosen[1] or ''}", "runs": runs})
    return rows


def main() -> None:
    path = sys.argv[1]
    data = np.load(path[:-5] + ".npz")
    feeds = {k[5:]: data[k] for k in data.files if k.startswith("feed:")}
    print(f"load {os.getloadavg()}")
    mine = aioge_layers(path, feeds)
    theirs, base = ort_layers(path, feeds)
    print(f"onnxruntime run overhead {base * 1e3:.1f} us (subtracted)")
    pool: dict[tuple[int, ...], list[Any]] = {}
    for key, fn in theirs:
        pool.setdefault(key, []).append(fn)
    tot = {"aioge": 0.0, "best": 0.0, "ort": 0.0}
    for r in mine:
        o = pool.get(tuple(r["key"]))
        fns = dict(r.pop("runs"))
        if o:
            fns["ort"] = o.pop(0) if len(o) > 1 else o[0]
        t = interleaved(fns)
        if "ort" in t:
            t["ort"] = tuple(max(v - base, 0.0) for v in t["ort"])  # type: ignore[assignment]
        r["times"] = t
        a = t[r["chosen"]][0]
        best = min((k for k in t if k != "ort"), key=lambda k: t[k][0])
        ort_ms = t.get("ort", (float("nan"),))[0]
        tot["aioge"] += a
        tot["best"] += t[best][0]
        tot["ort"] += ort_ms
        c, h, w, m, kh, kw, s, _ = r["key"]
        print(
            f"{c:4d}x{h:3d}x{w:3d} ->{m:4d} {kh}x{kw}/{s}  aioge {a:7.3f} ({r['chosen'][:30]:30s})  best {t[best][0]:7.3f}"
            f" ({best[:30]:30s})  ort {ort_ms:7.3f}  ratio {a / ort_ms:5.2f}",
            flush=True,
        )
    print(
        f"total (min ms) aioge {tot['aioge']:.2f}  best-candidate {tot['best']:.2f}  ort {tot['ort']:.2f}   load {os.getloadavg()}"
    )
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
            json.dump(mine, f, indent=1)


if __name__ == "__main__":
    main()
