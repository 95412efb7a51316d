"""Quantized models: aioge's int8 kernels against onnxruntime on the same quantized model and
against onnxruntime's float32 run of the original model.

    /work/venv/bin/python bench/bench_quant.py [--reps N] [--models resnet18,bert]

- resnet18: torchvision's ResNet-18 (random weights, seeded), exported to ONNX (opset 17,
  batch 1, 224x224), quantized by ``quantize_static`` in the QDQ format (U8S8, per channel,
  ``reduce_range``) with 8 random calibration images; aioge fuses the QDQ pairs (QdqFusionPass).
- resnet50: the same recipe on torchvision's ResNet-50, its BatchNorms' statistics seeded random
  too (untrained ones fold into all-zero conv biases, which onnxruntime then leaves in float:
  see resnet18).
- bert: a BERT-base-sized encoder (torch ``TransformerEncoder``: 12 layers, hidden 768, 12
  heads, FFN 3072, GELU; seeded random weights; batch 1, 128 tokens), quantized by
  ``quantize_dynamic`` (MatMulInteger, DynamicQuantizeLinear) after onnxruntime's ``quant_pre_process``.

- bert_rr: the same with ``reduce_range`` (7-bit weights), which onnxruntime advises on AVX2
  (its u8 x s8 kernel saturates int16 sums otherwise).
- bert_qdq: the same encoder by ``quantize_static`` in the QDQ format (U8S8, per tensor, 4
  random calibration inputs).

Each row runs the three interleaved in one process (aioge int8, onnxruntime int8, onnxruntime
float32) in blocks of ``BLOCK`` runs, each at its default thread count, and reports medians of wall time and of process
CPU time (every thread's, spinning included) in ms; the output error is aioge's max abs
difference from onnxruntime int8. The machine's load is printed before and after.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import tempfile
import time
from typing import Any, Callable

import anyio
import numpy as np


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _resnet(tmp: str, arch: str = "resnet18") -> tuple[str, str, dict[str, np.ndarray]]:
    import torch
    import torchvision
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    torch.manual_seed(0)
    model = getattr(torchvision.models, arch)(weights=None).eval()
    if arch != "resnet18":  # seeded BatchNorm statistics too: untrained ones fold into all-zero conv biases
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                for t, lo, hi in (
                    (m.weight, 0.5, 1.5),
                    (m.bias, -0.2, 0.2),
                    (m.running_mean, -0.2, 0.2),
                    (m.running_var, 0.5, 2),
                ):
                    t.data.uniform_(lo, hi)
    x = torch.randn(1, 3, 224, 224)
    f32 = os.path.join(tmp, f"{arch}.onnx")
    torch.onnx.export(model, (x,), f32, input_names=["x"], output_names=["y"], opset_version=17, dynamo=False)
    rng = np.random.default_rng(0)

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.it = iter([{"x": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)} for _ in range(8)])

        def get_next(self) -> Any:
            return next(self.it, None)

    q = os.path.join(tmp, f"{arch}_qdq.onnx")
    quantize_static(
        f32, q, Reader(), quant_format=QuantFormat.QDQ, per_channel=True, reduce_range=True,
        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
    )  # fmt: skip
    return f32, q, {"x": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}


def _bert(tmp: str, reduce_range: bool = False, static: bool = False) -> tuple[str, str, dict[str, np.ndarray]]:
    import torch
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    torch.manual_seed(0)
    torch.backends.mha.set_fastpath_enabled(False)  # export the decomposed layers, not the fused kernel
    layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, activation="gelu", batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 12, enable_nested_tensor=False).eval()
    for p in model.parameters():  # the layers are copies of one: give each its own weights (else shared initializers)
        torch.nn.init.normal_(p, std=0.02)
    x = torch.randn(1, 128, 768)
    f32 = os.path.join(tmp, "bert.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (x,), f32, input_names=["x"], output_names=["y"], opset_version=17, dynamo=False)
    pre, q = os.path.join(tmp, "bert_pre.onnx"), os.path.join(tmp, "bert_dyn.onnx")
    quant_pre_process(
        f32, pre, skip_symbolic_shape=True
    )  # onnxruntime's advice: fold the weights' Transposes so MatMuls see initializers
    if not static:
        quantize_dynamic(pre, q, reduce_range=reduce_range)
        return f32, q, {"x": np.random.default_rng(0).standard_normal((1, 128, 768)).astype(np.float32)}
    rng = np.random.default_rng(1)

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.it = iter([{"x": rng.standard_normal((1, 128, 768)).astype(np.float32)} for _ in range(4)])

        def get_next(self) -> Any:
            return next(self.it, None)

    quantize_static(
        pre, q, Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8
    )  # fmt: skip
    return f32, q, {"x": np.random.default_rng(0).standard_normal((1, 128, 768)).astype(np.float32)}


MODELS: dict[str, Callable[[str], tuple[str, str, dict[str, np.ndarray]]]] = {
    "resnet18": _resnet,
    "resnet50": lambda tmp: _resnet(tmp, "resnet50"),
    "bert": _bert,
    "bert_rr": lambda tmp: _bert(tmp, reduce_range=True),
    "bert_qdq": lambda tmp: _bert(tmp, static=True),
}


# Runs an engine makes in a row, the first left out: onnxruntime's pool and aioge's C helpers
# spin for a while after a run, and run by run alternation charged that CPU time to the next
# engine (resnet18: aioge 71 ms CPU alternating run by run, 35 in blocks).
BLOCK = 5


async def _row(name: str, f32: str, q: str, feeds: dict[str, np.ndarray], reps: int) -> dict[str, Any]:
    import onnxruntime as ort

    import aioge

    ort_q = ort.InferenceSession(q, providers=["CPUExecutionProvider"])
    ort_f = ort.InferenceSession(f32, providers=["CPUExecutionProvider"])
    async with aioge.Session({"aioge.tune_mode": "heuristic"}) as s:
        await s.add_graph(1, aioge.load_onnx(q))
        got = (await s.run_graph(1, feeds))["y"]
        ops = collections.Counter(n.op_type for n in s.compiled(1).graph.nodes)
        want = ort_q.run(None, feeds)[0]
        times: dict[str, list[float]] = {"aioge_int8": [], "ort_int8": [], "ort_f32": []}
        cpu: dict[str, list[float]] = {k: [] for k in times}

        async def aioge_run() -> None:
            await s.run_graph(1, feeds)

        async def ort_run(sess: Any) -> None:
            sess.run(None, feeds)

        runs = {"aioge_int8": aioge_run, "ort_int8": lambda: ort_run(ort_q), "ort_f32": lambda: ort_run(ort_f)}
        for _ in range(max(1, reps // (BLOCK - 1))):
            for engine, fn in runs.items():
                for i in range(BLOCK):
                    t, c = time.perf_counter(), time.process_time()
                    await fn()
                    if i:  # a block's first run: the engine before it still spinning, counted as CPU here
                        times[engine].append(time.perf_counter() - t)
                        cpu[engine].append(time.process_time() - c)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    med.update({f"{k}_cpu": statistics.median(v) * 1e3 for k, v in cpu.items()})
    int_ops = {
        k: v
        for k, v in ops.items()
        if k.startswith(("QLinear", "QGemm", "MatMulInteger", "ConvInteger", "DynamicQuantizeMatMul"))
    }
    return {"model": name, **med, "max_abs_vs_ort_int8": float(np.abs(got - want).max()), "int8_ops": int_ops}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--models", default="resnet18,resnet50,bert,bert_rr,bert_qdq")
    args = ap.parse_args()
    print(f"load average before: {_load()}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            f32, q, feeds = MODELS[name](tmp)
            r = anyio.run(_row, name, f32, q, feeds, args.reps)
            print(
                f"{r['model']:9s} wall ms: aioge int8 {r['aioge_int8']:7.1f} | ort int8 {r['ort_int8']:7.1f} | "
                f"ort f32 {r['ort_f32']:7.1f} | aioge/ort int8 {r['aioge_int8'] / r['ort_int8']:.2f}x | "
                f"aioge/ort f32 {r['aioge_int8'] / r['ort_f32']:.2f}x || process CPU ms: aioge int8 {r['aioge_int8_cpu']:7.1f} | "
                f"ort int8 {r['ort_int8_cpu']:7.1f} | ort f32 {r['ort_f32_cpu']:7.1f} || max abs vs ort int8 "
                f"{r['max_abs_vs_ort_int8']:.3g} | {r['int8_ops']}"
            )
    print(f"load average after: {_load()}")


if __name__ == "__main__":
    main()
