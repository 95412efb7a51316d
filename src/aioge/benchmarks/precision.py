"""The precision section of ``aioge bench`` (issue 39): each of GE's precision modes over the
real-weights models, against the float32 result of onnxruntime.

Per model and mode: the max abs error, the cosine similarity and the top-1 agreement (argmax
over the last axis, per row) of the first output against onnxruntime's float32 output on the
same feeds, and the median latency beside onnxruntime float32's, the modes and onnxruntime
timed in alternating rounds in one process. A mode whose cosine is below ``COSINE_FLOOR`` on a
model is listed under the table: reported, not hidden.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable, Sequence

import anyio
import numpy as np

import aioge
from aioge.benchmarks import measure
from aioge.benchmarks.workloads import Workload

__all__ = ["COSINE_FLOOR", "MODELS", "MODES", "accuracy", "precision_section", "precision_table"]

MODES = ("must_keep_origin_dtype", "allow_fp32_to_bf16", "allow_fp32_to_fp16", "allow_mix_precision_bf16")
MODELS = ("resnet18", "vit_b_16", "bert_base")
COSINE_FLOOR = 0.999


def accuracy(got: np.ndarray, want: np.ndarray) -> dict[str, float]:
    """max abs error, cosine similarity (flattened, float64) and top-1 agreement over the last axis."""
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    denom = float(np.linalg.norm(g) * np.linalg.norm(w))
    cosine = float(np.dot(g.ravel(), w.ravel()) / denom) if denom else float(np.array_equal(g, w))
    top1 = float(np.mean(g.reshape(-1, g.shape[-1]).argmax(-1) == w.reshape(-1, w.shape[-1]).argmax(-1))) if g.ndim else 1.0
    return {"max_abs_err": float(np.abs(g - w).max()) if g.size else 0.0, "cosine": cosine, "top1": top1}


async def _model(w: Workload, modes: Sequence[str], rounds: int, runs: int, cache_dir: str) -> list[dict[str, Any]]:
    ort = measure.ort_session(w.onnx_model)
    first = ort.get_outputs()[0].name
    want = (await anyio.to_thread.run_sync(ort.run, None, w.feeds))[0]
    rows: list[dict[str, Any]] = []
    async with aioge.Session({"ge.op_compiler_cache_dir": cache_dir, **w.options}) as session:
        for i, mode in enumerate(modes):
            await session.add_graph(i + 1, w.graph, {"ge.exec.precision_mode": mode})
            model = await session.build_graph(i + 1)
            got = (await session.run_graph(i + 1, w.feeds))[first]
            lowered = model.summary()["precision"]
            rows.append({"model": w.name, "mode": mode, **accuracy(got, want), "lowered": lowered, "samples": []})
        ort_samples = []
        for _ in range(rounds):  # the modes and onnxruntime alternate, round by round
            for i, row in enumerate(rows):
                await anyio.sleep(measure.SETTLE_S)
                row["samples"].append(await measure.median_of_runs_async(lambda: session.run_graph(i + 1, w.feeds), runs))
            await anyio.sleep(measure.SETTLE_S)
            ort_samples.append(await anyio.to_thread.run_sync(measure.median_of_runs, lambda: ort.run(None, w.feeds), runs))
    ort_s = statistics.median(ort_samples)
    for row in rows:
        row["aioge"] = statistics.median(row.pop("samples"))
        row["ort_fp32"] = ort_s
        row["vs_ort"] = row["aioge"] / ort_s
    return rows


def precision_section(
    workloads: Sequence[Workload] | Sequence[str],
    modes: Sequence[str] = MODES,
    *,
    rounds: int = 3,
    runs: int = 5,
    cache_dir: str,
    progress: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Run the section (blocking) over workloads or real-weights model names; a model that
    cannot be exported is listed in ``skipped``."""
    from aioge.benchmarks.real_models import real_available, real_workload

    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for item in workloads:
        if isinstance(item, str):
            why = real_available()
            if why:
                skipped[f"precision {item}"] = why
                continue
            item = real_workload(item)
        got = anyio.run(_model, item, list(modes), rounds, runs, cache_dir)
        for r in got:
            progress(
                f"precision {r['model']} {r['mode']}: {r['aioge'] * 1e3:.2f} ms ({r['vs_ort']:.2f}x ort fp32), cosine {r['cosine']:.6f}"
            )
        rows += got
    low = [f"{r['model']} {r['mode']} (cosine {r['cosine']:.6f})" for r in rows if r["cosine"] < COSINE_FLOOR]
    return {"rows": rows, "skipped": skipped, "below_floor": low}


def precision_table(section: dict[str, Any]) -> list[str]:
    """The section as markdown lines."""
    head = ["model", "mode", "lowered nodes", "aioge ms", "ort fp32 ms", "aioge/ort", "max abs err", "cosine", "top-1"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in section["rows"]:
        low = sum(n for p, n in r["lowered"].items() if p in ("bf16", "fp16"))
        cells = [
            r["model"], r["mode"], str(low), f"{r['aioge'] * 1e3:.2f}", f"{r['ort_fp32'] * 1e3:.2f}", f"{r['vs_ort']:.2f}",
            f"{r['max_abs_err']:.2e}", f"{r['cosine']:.6f}", f"{r['top1']:.3f}",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    below = section.get("below_floor") or []
    lines.append("")
    lines.append(
        f"Below cosine {COSINE_FLOOR}: {', '.join(below)}."
        if below
        else f"Every mode kept cosine >= {COSINE_FLOOR} on every model."
    )
    lines += [f"\nSkipped {k}: {v}." for k, v in section.get("skipped", {}).items()]
    return lines
