"""The benchmark suite: every workload beside its yardsticks, the targets, RESULTS.md + results.json.

``run_suite(config)`` measures and returns the raw figures; ``write_results`` writes them.
``aioge bench`` (``python -m aioge bench``) does both; the command lives in ``aioge.cli``, above this
package, which never imports the CLI.
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import anyio
import numpy as np

import aioge
from aioge.benchmarks import measure
from aioge.benchmarks.frontends import FRONTENDS, TF_MODELS, TORCH_MODELS, frontends, frontends_table
from aioge.benchmarks.precision import MODELS as PRECISION_MODELS
from aioge.benchmarks.precision import MODES as PRECISION_MODES
from aioge.benchmarks.precision import precision_section, precision_table
from aioge.benchmarks.real_models import real_available, real_model_path
from aioge.benchmarks.serving import SERVING_WORKLOADS, serving
from aioge.benchmarks.states import ROUNDS, STATE_MODELS, STATES, states, states_table
from aioge.benchmarks.workloads import ALL, BUILDER, LIGHT, LIGHT_NODUP, REAL, Workload, expand_names, light_dir, load_workloads

__all__ = ["SERVING_BATCHED_VS_ORT", "SuiteConfig", "TARGETS", "evaluate_targets", "run_suite", "write_results"]

BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
# The targets of this round (issue 8), checked on every run of the suite.
TARGETS = {
    "light_geomean_vs_ort": 2.0,  # aioge / onnxruntime latency, geometric mean over light/
    "min_speedup_vs_reference": 20.0,  # onnx.reference / aioge on every light/ model
    "sink_us_per_node": 1.5,  # the Add chain in sink mode
    "concurrent_vs_ort": 0.8,  # 64 concurrent calls, runs/s vs onnxruntime in a pool
    "loop_lag_ms": 20.0,  # event-loop lag during the concurrent runs
    # issue 18, the serving section: 64 single-row clients, aioge batching vs onnxruntime in a 64-thread pool
    "serving_unbatched_vs_ort": 0.8,
    "serving_lag_p99_ms": 5.0,
    "serving_lag_max_ms": 20.0,
    # issue 17
    "real_geomean_vs_ort": 1.5,  # aioge / onnxruntime over the real-weights models
    "real_max_vs_ort": 2.5,  # ... and on each of them
    "light_nodup_geomean_vs_ort": 1.3,  # light/ with DuplicateFilterPass off
    "builder_max_vs_ort": 2.0,  # mlp, cnn, transformer, each
    # issue 42, the machine-states section: each side alone in its process
    "quiet_solo_geomean_vs_ort": 0.95,
    "quiet_solo_max_vs_ort": 1.3,
    "busy_vs_quiet_ratio": 1.2,  # a model's aioge/ort ratio on a busy machine over its quiet one
}
SERVING_BATCHED_VS_ORT = {"mlp": 2.0, "transformer": 2.0, "cnn": 1.0}  # req/s with batching on, per model


@dataclass
class SuiteConfig:
    """What to run. The defaults are the full suite (about 4 minutes on 2 cores, plus the
    real-weights models: a few more, and about a minute per model for the first export)."""

    workloads: list[str] = field(default_factory=list)  # empty: every workload
    rounds: int = 5  # alternating aioge / yardstick rounds
    runs: int = 5  # timed runs per round (median)
    concurrency: tuple[int, ...] = (1, 4, 64)
    concurrency_workloads: list[str] = field(default_factory=lambda: ["mlp", "cnn", "transformer", "squeezenet", "resnet50"])
    concurrency_rounds: int = 3
    devices: int = field(default_factory=lambda: os.cpu_count() or 1)  # aioge.exec_devices for a second top-level burst; 0: none
    reference: bool = True  # time onnx.reference too
    # Fresh-process start-up per model: a light/ name, a real-weights name or an .onnx path; empty: skip.
    startup_models: list[str] = field(default_factory=lambda: ["resnet50", "resnet18", "bert_base"])
    blas_variant: bool = True  # light/ latency again with BLAS_ENV unset
    chain: int = 1000
    serving_workloads: list[str] = field(default_factory=lambda: list(SERVING_WORKLOADS))  # empty: no serving section
    serving_clients: int = 64
    serving_requests: int = 20  # one-row requests per client per round
    serving_rounds: int = 3
    frontends: list[str] = field(default_factory=list)  # issue 41: "tf", "torch"; empty: no front-end section
    frontends_only: bool = False  # the front-end section alone
    torch_models: list[str] = field(
        default_factory=list
    )  # the torch front end's models (frontends.TORCH_MODELS); empty: all but mlp
    tf_models: list[str] = field(default_factory=list)  # the tf front end's (frontends.TF_MODELS); empty: all
    states: list[str] = field(default_factory=list)  # issue 42: "quiet", "busy1", "busy4"; empty: no such section
    # real-weights names for every state; empty: the quiet state runs the whole real set (issue
    # 42's solo geomean) and the busy states the five of states.STATE_MODELS
    states_models: list[str] = field(default_factory=list)
    states_only: bool = False  # the machine-states section alone
    states_pause_ms: float = 0.0  # between the timed runs of a machine-states process (0: back to back)
    precision: list[str] = field(default_factory=list)  # issue 39: GE precision modes; empty: no precision section
    precision_models: list[str] = field(default_factory=lambda: list(PRECISION_MODELS))
    precision_only: bool = False  # the precision section alone

    def __post_init__(self) -> None:
        self.concurrency = tuple(int(c) for c in self.concurrency)
        self.workloads = expand_names(self.workloads)
        if self.rounds < 1 or self.runs < 1 or self.concurrency_rounds < 1 or any(c < 1 for c in self.concurrency):
            raise ValueError("rounds, runs, concurrency_rounds and every concurrency level must be at least 1")
        if not 0 <= self.devices <= 64:
            raise ValueError(f"devices must be from 0 to 64, not {self.devices}")
        if self.serving_clients < 1 or self.serving_requests < 1 or self.serving_rounds < 1:
            raise ValueError("serving clients, requests and rounds must be at least 1")
        if sorted(set(self.serving_workloads) - set(SERVING_WORKLOADS)):
            raise ValueError(f"unknown serving workloads {self.serving_workloads}; expected some of {list(SERVING_WORKLOADS)}")
        if sorted(set(self.frontends) - set(FRONTENDS)):
            raise ValueError(f"unknown front ends {self.frontends}; expected some of {list(FRONTENDS)}")
        for side, names, known in (("torch", self.torch_models, TORCH_MODELS), ("tf", self.tf_models, TF_MODELS)):
            if unknown := [m for m in names if m not in known]:
                raise ValueError(f"unknown {side} models {unknown}; expected some of {list(known)}")
        if self.frontends_only and not self.frontends:
            raise ValueError("frontends_only needs front ends to run (--frontends tf,torch)")
        if sorted(set(self.precision) - set(PRECISION_MODES)):
            raise ValueError(f"unknown precision modes {self.precision}; expected some of {list(PRECISION_MODES)}")
        if self.precision_only and not self.precision:
            raise ValueError("precision_only needs modes to run (--precision all)")
        unknown = sorted(set(self.workloads) - set(ALL))
        if unknown:
            raise ValueError(f"unknown workloads {unknown}; expected some of {list(ALL)}")
        if sorted(set(self.states) - set(STATES)) or (self.states_only and not self.states):
            raise ValueError(f"machine states must be some of {list(STATES)}, not {self.states}")
        if self.states_pause_ms < 0:
            raise ValueError(f"states_pause_ms must be at least 0, not {self.states_pause_ms}")
        if sorted(set(self.states_models) - set(REAL)):
            raise ValueError(f"machine-states models must be real-weights models {sorted(REAL)}, not {self.states_models}")
        missing = [m for m in self.startup_models if m not in REAL and not os.path.isfile(_startup_path(m))]
        if missing:
            raise ValueError(
                f"unknown start-up models {missing}; expected .onnx paths that exist, real-weights models "
                f"{sorted(REAL)} or light/ models {sorted(LIGHT)}"
            )


def machine() -> dict[str, Any]:
    """Machine, versions and BLAS facts for the results header."""
    import onnx

    info: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "platform": platform.platform(),
        "processor": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "aioge": aioge.__version__,
        "numpy": np.__version__,
        "onnx": onnx.__version__,
        **{k: os.environ.get(k, "(unset)") for k in BLAS_ENV},
    }
    try:
        import onnxruntime

        info["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        info["onnxruntime"] = "(missing)"
    try:
        from threadpoolctl import threadpool_info

        blas = [p for p in threadpool_info() if p.get("user_api") == "blas"]
        if blas:
            b = blas[0]
            info["blas"] = f"{b.get('internal_api')} {b.get('version')}"
            info["blas_core_type"] = b.get("architecture") or "(unknown)"
    except ImportError:
        info["blas"] = "(threadpoolctl missing)"
    return info


async def _workload(w: Workload, cfg: SuiteConfig, cache_dir: str, gid: int) -> dict[str, Any]:
    options = {"ge.op_compiler_cache_dir": cache_dir, **w.options}
    row: dict[str, Any] = {"workload": w.name, "group": w.group}
    # The last workload's onnxruntime threads spin on for a while after its burst: a compile
    # right after it tuned the builder transformer's split GEMMs with the other core taken
    # (rows_numpy at 74 us chosen over rows_gemm_native's usual 45-47): settle first, as
    # every measured round does.
    await anyio.sleep(measure.SETTLE_S)
    async with aioge.Session(options) as session:
        with measure.RssSampler() as rss:
            t = time.perf_counter()
            await session.add_graph(gid, w.graph)
            model = await session.build_graph(gid)
            row["compile_s"] = time.perf_counter() - t
            row.update(
                await measure.latency(
                    w,
                    session,
                    gid,
                    rounds=cfg.rounds,
                    runs=cfg.runs,
                    reference=cfg.reference and w.group not in ("micro", "real"),
                )
            )
            if w.name in cfg.concurrency_workloads:
                row["concurrency"] = [
                    {**await measure.concurrency(w, session, gid, c, rounds=cfg.concurrency_rounds), "devices": 0}
                    for c in cfg.concurrency
                ]
        summary = model.summary()
        # what tuning chose, for reading a surprising figure: node, kernel, its time, runner-up, margin
        row["tuned"] = [
            [n.name, n.kernel.impl, n.kernel.history.tuned_ms, n.kernel.history.runner_up, n.kernel.history.margin]
            for n in model.nodes
            if n.kernel.tuned
        ]
    if w.name in cfg.concurrency_workloads and cfg.devices and cfg.concurrency:
        # The same burst with the runs on device processes (aioge.exec_devices), past the GIL.
        async with aioge.Session({**options, "aioge.exec_devices": str(cfg.devices)}) as session:
            await session.add_graph(gid, w.graph)
            w.check(await session.run_graph(gid, w.feeds))  # starts the devices; their outputs checked too
            top = max(cfg.concurrency)
            row["concurrency"].append(
                {**await measure.concurrency(w, session, gid, top, rounds=cfg.concurrency_rounds), "devices": cfg.devices}
            )
    row["nodes"] = len(w.graph.nodes)
    row["compiled_nodes"] = summary["nodes"]
    row["streams"] = len(summary["streams"])
    row["arena_bytes"] = summary["arena_bytes"]
    row["rss_start_bytes"] = rss.start
    row["rss_peak_bytes"] = rss.peak
    row["aioge_vs_ort"] = row["aioge"] / row["ort"]
    if "onnx_reference" in row:
        row["reference_vs_aioge"] = row["onnx_reference"] / row["aioge"]
    if w.name == "add_chain":
        row["aioge_us_per_node"] = row["aioge"] / row["compiled_nodes"] * 1e6
        row["ort_us_per_node"] = row["ort"] / row["nodes"] * 1e6
    return row


def _startup_path(model: str) -> str:
    """The .onnx file of a start-up model: a path as given, a real-weights model (exported on
    first use), or a light/ model."""
    if model.endswith(".onnx"):
        return model
    if model in REAL:
        return str(real_model_path(model))
    return os.path.join(light_dir(), f"light_{model}.onnx")


def _startup(model: str, work: str) -> dict[str, Any]:
    """Fresh-process figures for one model: cold compile, warm compile (kernel cache), graph-cache
    load + first run, and onnxruntime's session creation + first run."""
    path = _startup_path(model)
    kernels = os.path.join(work, "kernels")
    graphs = os.path.join(work, "graphs")
    os.makedirs(graphs, exist_ok=True)
    base: dict[str, Any] = {"model": path, "options": {"ge.op_compiler_cache_dir": kernels}}
    out: dict[str, Any] = {"model": os.path.basename(path)}
    out["cold"] = measure.fresh_process("aioge", base)
    out["warm_kernel_cache"] = measure.fresh_process("aioge", base)
    cached = {
        "model": path,
        "options": {**base["options"], "ge.graph_compiler_cache_dir": graphs},
        "graph_options": {"ge.graph_key": "bench_startup"},
    }
    out["graph_cache_save"] = measure.fresh_process("aioge", cached)
    out["graph_cache_load"] = measure.fresh_process("aioge", cached)
    out["ort"] = measure.fresh_process("ort", {"model": path})
    checks = {k: v["checksum"] for k, v in out.items() if isinstance(v, dict)}
    ref = checks["ort"]
    out["checksums_agree"] = all(abs(c - ref) <= 1e-3 * max(1.0, abs(ref)) for c in checks.values())
    if not out["graph_cache_load"]["graph_cache_hit"]:
        raise RuntimeError("startup: the second graph-cache process compiled instead of loading")
    return out


def _blas_variant(cfg: SuiteConfig, names: list[str]) -> dict[str, Any] | None:
    """The light/ latency rows again in a child process with both BLAS_ENV variables unset."""
    if not any(k in os.environ for k in BLAS_ENV) or not names:
        return None
    env = {k: v for k, v in os.environ.items() if k not in BLAS_ENV}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "results.json")
        # -P: not the current directory first on sys.path (a stray msgpack.py there would be imported).
        cmd = [
            sys.executable,
            "-P",
            "-m",
            "aioge",
            "bench",
            "--json-only",
            out,
            "--workloads",
            ",".join(names),
            "--rounds",
            str(cfg.rounds),
            "--runs",
            str(cfg.runs),
            "--no-reference",
            "--no-concurrency",
            "--no-startup",
            "--no-blas-variant",
        ]
        import subprocess

        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
        if proc.returncode != 0:
            raise RuntimeError(f"BLAS variant run failed: {proc.stderr[-2000:]}")
        with open(out) as f:
            data = json.load(f)
    return {"machine": data["machine"], "rows": data["rows"]}


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target: its figure, the bound and PASS / MISS (or n/a when not measured)."""
    rows = {r["workload"]: r for r in results["rows"]}
    light = [rows[n] for n in LIGHT if n in rows]
    checks: list[dict[str, Any]] = []

    def add(name: str, figure: float | None, bound: float, higher_is_better: bool, detail: str) -> None:
        if figure is None:
            status = "n/a"
        else:
            status = "PASS" if (figure >= bound if higher_is_better else figure <= bound) else "MISS"
        checks.append({"target": name, "figure": figure, "bound": bound, "status": status, "detail": detail})

    add(
        "light/ geomean aioge/ort (BLAS env as set)",
        measure.geomean([r["aioge_vs_ort"] for r in light]) if light else None,
        TARGETS["light_geomean_vs_ort"],
        False,
        f"over {len(light)} models",
    )
    variant = results.get("blas_variant")
    if variant:
        v = [r["aioge_vs_ort"] for r in variant["rows"] if r["workload"] in LIGHT]
        add(
            "light/ geomean aioge/ort (BLAS env unset)",
            measure.geomean(v) if v else None,
            TARGETS["light_geomean_vs_ort"],
            False,
            f"core type {variant['machine'].get('blas_core_type')}",
        )
    refs = [r["reference_vs_aioge"] for r in light if "reference_vs_aioge" in r]
    real = [rows[n] for n in REAL if n in rows]
    add(
        "real-weights geomean aioge/ort",
        measure.geomean([r["aioge_vs_ort"] for r in real]) if real else None,
        TARGETS["real_geomean_vs_ort"],
        False,
        f"over {len(real)} models",
    )
    add(
        "real-weights max aioge/ort",
        max(r["aioge_vs_ort"] for r in real) if real else None,
        TARGETS["real_max_vs_ort"],
        False,
        max(real, key=lambda r: r["aioge_vs_ort"])["workload"] if real else "",
    )
    nodup = [rows[n] for n in LIGHT_NODUP if n in rows]
    add(
        "light/ geomean aioge/ort, DuplicateFilterPass off",
        measure.geomean([r["aioge_vs_ort"] for r in nodup]) if nodup else None,
        TARGETS["light_nodup_geomean_vs_ort"],
        False,
        f"over {len(nodup)} models",
    )
    builder = [rows[n] for n in BUILDER if n in rows]
    add(
        "builder max aioge/ort",
        max(r["aioge_vs_ort"] for r in builder) if builder else None,
        TARGETS["builder_max_vs_ort"],
        False,
        max(builder, key=lambda r: r["aioge_vs_ort"])["workload"] if builder else "",
    )
    add(
        "min onnx.reference/aioge over light/",
        min(refs) if refs else None,
        TARGETS["min_speedup_vs_reference"],
        True,
        f"{len(refs)} models",
    )
    chain = rows.get("add_chain")
    add(
        "sink us/node on the Add chain",
        chain["aioge_us_per_node"] if chain else None,
        TARGETS["sink_us_per_node"],
        False,
        f"{chain['compiled_nodes']} nodes" if chain else "",
    )
    top = max(results["config"]["concurrency"], default=0)
    for devices in sorted({c.get("devices", 0) for r in results["rows"] for c in r.get("concurrency", [])}):
        burst = [
            c
            for r in results["rows"]
            for c in r.get("concurrency", [])
            if c["concurrency"] == top and c.get("devices", 0) == devices
        ]
        where = f"aioge.exec_devices={devices}" if devices else "in-process"
        add(
            f"min {top}-concurrent throughput aioge/ort ({where})",
            min(c["ratio"] for c in burst) if burst else None,
            TARGETS["concurrent_vs_ort"],
            True,
            f"{len(burst)} workloads",
        )
    lags = [(c["lag_max_ms"], r["workload"], c) for r in results["rows"] for c in r.get("concurrency", [])]
    worst = max(lags, key=lambda x: x[0], default=None)
    where = ""
    if worst is not None:  # which burst, and what the hypervisor took meanwhile (a lag with steal is the host's)
        c = worst[2]
        where = f"; the worst: {worst[1]}, {c['concurrency']} in flight, devices {c.get('devices', 0)}"
        where += f", {c.get('steal_ms', 0):.0f} ms steal, longest GC pause {c.get('gc_max_ms', 0):.1f} ms"
        where += (
            f", {c.get('lag_runq_ms', 0):.1f} ms of it waiting for a CPU (loop's own worst {c.get('lag_own_max_ms', 0):.1f} ms)"
        )
    add(
        "max event-loop lag ms",
        worst[0] if worst else None,
        TARGETS["loop_lag_ms"],
        False,
        "every concurrent burst" + where,
    )
    for r in results.get("serving", []):
        w = r["workload"]
        add(
            f"serving {w}: batched req/s aioge/ort",
            r["batched_vs_ort"],
            SERVING_BATCHED_VS_ORT.get(w, 1.0),
            True,
            f"{r['clients']} single-row clients, mean batch {r['mean_batch_rows']:.1f} rows",
        )
        if "batched_bf16_vs_ort" in r:  # issue 39: the float32 pool's rate doubled under allow_fp32_to_bf16
            bf16 = f"allow_fp32_to_bf16, CPU {r['batched_bf16_cpu_us']:.1f} us/req (float32 {r['batched_cpu_us']:.1f})"
            add(
                f"serving {w}: batched bf16 req/s aioge/ort fp32",
                r["batched_bf16_vs_ort"],
                SERVING_BATCHED_VS_ORT.get(w, 1.0),
                True,
                bf16,
            )
        add(f"serving {w}: p99 aioge batched / ort", r["batched_p99_s"] / r["ort_p99_s"], 1.0, False, "below the pool's")
        add(f"serving {w}: unbatched req/s aioge/ort", r["unbatched_vs_ort"], TARGETS["serving_unbatched_vs_ort"], True, "")
        add(f"serving {w}: loop lag p99 ms", r["lag_p99_ms"], TARGETS["serving_lag_p99_ms"], False, "batched bursts")
        gc = f"batched bursts; longest GC pause {r.get('gc_max_ms', 0.0):.1f} ms"
        add(f"serving {w}: loop lag max ms", r["lag_max_ms"], TARGETS["serving_lag_max_ms"], False, gc)
    section = results.get("states") or {"rows": []}
    quiet = [r for r in section["rows"] if r["state"] == "quiet"]
    worst = max(quiet, key=lambda r: r["ratio"], default=None)
    add("quiet solo geomean aioge/ort", measure.geomean([r["ratio"] for r in quiet]) if quiet else None,
        TARGETS["quiet_solo_geomean_vs_ort"], False, f"over {len(quiet)} models, each side alone in its process")  # fmt: skip
    add("quiet solo max aioge/ort", worst["ratio"] if worst else None, TARGETS["quiet_solo_max_vs_ort"], False,
        worst["model"] if worst else "")  # fmt: skip
    for state in sorted({r["state"] for r in section["rows"]} - {"quiet"}):
        busy = [r for r in section["rows"] if r["state"] == state and r["vs_quiet"] is not None]
        top = max(busy, key=lambda r: r["vs_quiet"], default=None)
        add(f"{state}: max aioge/ort ratio over its quiet one", top["vs_quiet"] if top else None,
            TARGETS["busy_vs_quiet_ratio"], False, top["model"] if top else "")  # fmt: skip
    for st in results.get("startup") or []:
        add(
            f"fresh-process start {st['model']}: aioge (graph cache) / ort (create + first run)",
            st["graph_cache_load"]["start_s"] / st["ort"]["start_s"],
            1.0,
            False,
            "",
        )
    return checks


def _frontends(cfg: SuiteConfig, progress: Callable[[str], None]) -> dict[str, Any]:
    """The front-end section for ``cfg``'s front ends and models."""
    return frontends(
        cfg.frontends, torch_models=cfg.torch_models, tf_models=cfg.tf_models, rounds=cfg.rounds, runs=cfg.runs, progress=progress
    )


def _states(cfg: SuiteConfig, progress: Callable[[str], None]) -> dict[str, Any]:
    why = real_available()
    if why:
        raise RuntimeError(f"the machine-states section runs the real-weights models: {why}")
    models = {m: str(real_model_path(m)) for m in cfg.states_models or REAL}
    busy = set(cfg.states_models or STATE_MODELS)
    pause = cfg.states_pause_ms / 1e3
    return states(
        cfg.states, models, busy_models=busy, rounds=max(cfg.rounds, ROUNDS), runs=4 * cfg.runs, pause_s=pause, progress=progress
    )


def _print_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def _run(cfg: SuiteConfig, work: str, on_workload: Callable[[str], None] = _print_progress) -> list[dict[str, Any]]:
    rows = []
    for gid, name in enumerate(cfg.workloads or ALL, start=1):
        # One workload in memory at a time, and a collection before it: a heap of every model's
        # graph would make the collector's pauses part of the event-loop lag measured below.
        (w,) = load_workloads([name], chain=cfg.chain)
        gc.collect()
        row = await _workload(w, cfg, os.path.join(work, "kernels"), gid)
        del w
        on_workload(_progress(row))
        rows.append(row)
    return rows


async def _serving(cfg: SuiteConfig, cache_dir: str) -> list[dict[str, Any]]:
    rows = []
    for name in cfg.serving_workloads:
        gc.collect()
        row = await serving(
            name, clients=cfg.serving_clients, requests=cfg.serving_requests, rounds=cfg.serving_rounds, cache_dir=cache_dir
        )
        print(
            f"serving {name:11s} batched {row['batched_rps']:8.0f} req/s, unbatched {row['unbatched_rps']:8.0f}, "
            f"ort {row['ort_rps']:8.0f} (x{row['batched_vs_ort']:.2f}); lag p99 {row['lag_p99_ms']:.1f} ms",
            file=sys.stderr,
            flush=True,
        )
        rows.append(row)
    return rows


def _progress(row: dict[str, Any]) -> str:
    s = f"{row['workload']:14s} aioge {row['aioge'] * 1e3:9.3f} ms  ort {row['ort'] * 1e3:9.3f} ms  ratio {row['aioge_vs_ort']:5.2f}"
    if "reference_vs_aioge" in row:
        s += f"  x{row['reference_vs_aioge']:.1f} vs onnx.reference"
    for c in row.get("concurrency", []):
        s += f"  [{c['concurrency']}{'/dev' + str(c['devices']) if c.get('devices') else ''}: {c['ratio']:.2f}, lag {c['lag_max_ms']:.1f} ms]"
    return s


def _precision(cfg: SuiteConfig, work: str, progress: Callable[[str], None]) -> dict[str, Any]:
    models = cfg.precision_models
    cache = os.path.join(work, "precision-kernels")
    return precision_section(models, cfg.precision, rounds=cfg.rounds, runs=cfg.runs, cache_dir=cache, progress=progress)


def run_suite(cfg: SuiteConfig | None = None, on_workload: Callable[[str], None] = _print_progress) -> dict[str, Any]:
    """Run the suite (blocking: call it from a script or a worker thread) and return the figures;
    ``on_workload`` gets a one-line summary as each workload is done (default: to stderr)."""
    cfg = cfg or SuiteConfig()
    work = tempfile.mkdtemp(prefix="aioge-bench-")
    try:
        t0 = time.perf_counter()
        skipped: dict[str, str] = {}
        if cfg.frontends_only or cfg.states_only or cfg.precision_only:
            alone: dict[str, Any] = {"machine": machine(), "config": asdict(cfg), "rows": [], "skipped": {}}
            if cfg.frontends_only:
                alone["frontends"] = _frontends(cfg, on_workload)
                alone["skipped"].update(alone["frontends"]["skipped"])
            if cfg.states_only:
                alone["states"] = _states(cfg, on_workload)
            if cfg.precision_only:
                alone["precision"] = _precision(cfg, work, on_workload)
                alone["skipped"].update(alone["precision"]["skipped"])
            alone["targets"] = evaluate_targets(alone)
            alone["seconds"] = time.perf_counter() - t0
            return alone
        why = real_available() if set(cfg.workloads or ALL) & set(REAL) else None
        if why:  # the real-weights models need the torch extra to export them: say so, run the rest
            skipped = {n: why for n in REAL if n in (cfg.workloads or ALL)}
            cfg.workloads = [n for n in (cfg.workloads or ALL) if n not in skipped]
            print(f"skipping the real-weights models: {why}", file=sys.stderr, flush=True)
        rows = anyio.run(_run, cfg, work, on_workload)
        results: dict[str, Any] = {"machine": machine(), "config": asdict(cfg), "rows": rows, "skipped": skipped}
        if cfg.serving_workloads:
            results["serving"] = anyio.run(_serving, cfg, os.path.join(work, "kernels"))
        startups = [m for m in cfg.startup_models if m not in REAL or not real_available()]
        skipped.update({f"start-up {m}": real_available() or "" for m in cfg.startup_models if m not in startups})
        results["startup"] = [_startup(m, os.path.join(work, "startup", str(i))) for i, m in enumerate(startups)]
        if cfg.frontends:
            results["frontends"] = _frontends(cfg, on_workload)
            skipped.update(results["frontends"]["skipped"])
        if cfg.states:
            results["states"] = _states(cfg, on_workload)
        if cfg.precision:
            results["precision"] = _precision(cfg, work, on_workload)
            skipped.update(results["precision"]["skipped"])
        if cfg.blas_variant:
            results["blas_variant"] = _blas_variant(cfg, [r["workload"] for r in rows if r["workload"] in LIGHT])
        results["targets"] = evaluate_targets(results)
        results["seconds"] = time.perf_counter() - t0
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- the report ---------------------------------------------------------------------------


def _ms(x: float | None) -> str:
    return "" if x is None else f"{x * 1e3:.3f}"


def _mib(x: float | None) -> str:
    return "" if x is None else f"{x / 2**20:.1f}"


def _table(header: list[str], lines: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(x) + " |" for x in lines)]


def _lead(results: dict[str, Any]) -> list[str]:
    """The headline: the real-weights geomean (or why it is missing)."""
    real = [r for r in results["rows"] if r["workload"] in REAL]
    if real:
        worst = max(real, key=lambda r: r["aioge_vs_ort"])
        return [
            f"**Real-weights models: aioge / onnxruntime geomean {measure.geomean([r['aioge_vs_ort'] for r in real]):.2f}** "
            f"over {len(real)} models (worst {worst['workload']} {worst['aioge_vs_ort']:.2f}).",
            "",
        ]
    skipped = results.get("skipped") or {}
    if skipped:
        return [f"**Real-weights models not measured**: {next(iter(skipped.values()))}.", ""]
    return []


def render_markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    out = [
        "# aioge benchmark results",
        "",
        f"{m['date']}: {m['cpus']} CPUs, {m['platform']}; Python {m['python']}, aioge {m['aioge']}, numpy {m['numpy']}, "
        f"onnx {m['onnx']}, onnxruntime {m['onnxruntime']}; BLAS {m.get('blas')} (core type {m.get('blas_core_type')}); "
        f"OPENBLAS_CORETYPE={m['OPENBLAS_CORETYPE']}, OPENBLAS_L2_SIZE={m['OPENBLAS_L2_SIZE']}.",
        "",
        "Medians over alternating rounds (aioge on the event loop, yardsticks in a worker thread). "
        "`ort`: onnxruntime CPU with default options; `ort cores`: intra_op_num_threads = cores.",
        "",
        *_lead(results),
        "## Targets",
        "",
    ]
    out += _table(
        ["target", "figure", "bound", "status", "detail"],
        [
            [t["target"], "" if t["figure"] is None else f"{t['figure']:.3f}", f"{t['bound']}", f"**{t['status']}**", t["detail"]]
            for t in results["targets"]
        ],
    )
    out += ["", "## Latency (ms)", ""]
    lines = []
    for r in results["rows"]:
        lines.append(
            [
                r["workload"],
                str(r["compiled_nodes"]),
                _ms(r["aioge"]),
                _ms(r["ort"]),
                _ms(r["ort_cores"]),
                _ms(r.get("onnx_reference")),
                _ms(r.get("numpy")),
                f"{r['aioge_vs_ort']:.2f}",
                f"{r['reference_vs_aioge']:.1f}" if "reference_vs_aioge" in r else "",
                f"{r['max_abs_err']:.1e}",
                _mib(r["arena_bytes"]),
                _mib(r["rss_peak_bytes"]),
                f"{r['compile_s']:.2f}",
            ]
        )
    out += _table(
        [
            "workload",
            "nodes",
            "aioge",
            "ort",
            "ort cores",
            "onnx.reference",
            "numpy",
            "aioge/ort",
            "reference/aioge",
            "max err",
            "arena MiB",
            "peak RSS MiB",
            "compile s",
        ],
        lines,
    )
    chain = next((r for r in results["rows"] if r["workload"] == "add_chain"), None)
    if chain:
        out += [
            "",
            f"Add chain: {chain['aioge_us_per_node']:.2f} us/node in sink mode, onnxruntime {chain['ort_us_per_node']:.2f} us/node.",
        ]
    variant = results.get("blas_variant")
    if variant:
        vm = variant["machine"]
        out += ["", f"## Latency with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (core type {vm.get('blas_core_type')})", ""]
        out += _table(
            ["workload", "aioge", "ort", "aioge/ort"],
            [[r["workload"], _ms(r["aioge"]), _ms(r["ort"]), f"{r['aioge_vs_ort']:.2f}"] for r in variant["rows"]],
        )
    conc = [(r["workload"], c) for r in results["rows"] for c in r.get("concurrency", [])]
    if conc:
        out += ["", "## Concurrent run_graph calls from one event loop (onnxruntime: a thread pool of the same size)", ""]
        out += [
            "`devices`: aioge.exec_devices (0: runs in this process, on the engine lanes; N: on N device processes). "
            "`gc pause max`: the longest garbage collection during the aioge bursts; `steal`: CPU time the hypervisor "
            "gave to others meanwhile (/proc/stat), so a lag that comes with steal is the host's; `run queue`: of the "
            "longest lag, the loop's thread runnable but off every CPU (other processes or threads had them); "
            "`own`: the longest lag less its run-queue wait (the loop's callbacks' work and GIL waits).",
            "",
        ]
        out += _table(
            [
                "workload",
                "devices",
                "in flight",
                "aioge runs/s",
                "ort runs/s",
                "aioge/ort",
                "lag max ms",
                "lag p99 ms",
                "run queue ms",
                "own lag max ms",
                "gc pause max ms",
                "steal ms",
            ],
            [
                [
                    w,
                    str(c.get("devices", 0)),
                    str(c["concurrency"]),
                    f"{c['aioge_runs_per_s']:.1f}",
                    f"{c['ort_runs_per_s']:.1f}",
                    f"{c['ratio']:.2f}",
                    f"{c['lag_max_ms']:.2f}",
                    f"{c['lag_p99_ms']:.2f}",
                    f"{c.get('lag_runq_ms', 0.0):.2f}",
                    f"{c.get('lag_own_max_ms', 0.0):.2f}",
                    f"{c.get('gc_max_ms', 0.0):.2f}",
                    f"{c.get('steal_ms', 0.0):.0f}",
                ]
                for w, c in conc
            ],
        )
    serve = results.get("serving")
    if serve:
        out += [
            "",
            f"## Serving: {serve[0]['clients']} concurrent single-row clients (issue 18)",
            "",
            "Each client sends one-row requests one after another. `batched`: aioge with batch gears and "
            "aioge.batch_max_rows (concurrent calls stacked into one run); `unbatched`: the same graph without; "
            "`ort`: onnxruntime, one pool thread per client. Requests/s and latency in ms; medians over rounds. "
            "CPU per request: all threads (aioge's event-loop thread alone in parentheses), steadier than "
            "wall-clock figures on a shared machine.",
            "",
        ]
        out += _table(
            [
                "workload",
                "batched req/s",
                "unbatched req/s",
                "ort req/s",
                "batched/ort",
                "unbatched/ort",
                "p50 batched / unbatched / ort",
                "p99 batched / unbatched / ort",
                "CPU us/req batched / unbatched / ort",
                "mean batch",
                "queue delay p50/p99 ms",
                "lag p99 / max ms",
            ],
            [
                [
                    r["workload"],
                    f"{r['batched_rps']:.0f}",
                    f"{r['unbatched_rps']:.0f}",
                    f"{r['ort_rps']:.0f}",
                    f"{r['batched_vs_ort']:.2f}",
                    f"{r['unbatched_vs_ort']:.2f}",
                    " / ".join(_ms(r[f"{k}_p50_s"]) for k in ("batched", "unbatched", "ort")),
                    " / ".join(_ms(r[f"{k}_p99_s"]) for k in ("batched", "unbatched", "ort")),
                    f"{r['batched_cpu_us']:.1f} ({r['batched_loop_cpu_us']:.1f}) / "
                    f"{r['unbatched_cpu_us']:.1f} ({r['unbatched_loop_cpu_us']:.1f}) / {r['ort_cpu_us']:.1f}",
                    f"{r['mean_batch_rows']:.1f}",
                    f"{r['queue_delay_p50_ms']:.2f} / {r['queue_delay_p99_ms']:.2f}",
                    f"{r['lag_p99_ms']:.2f} / {r['lag_max_ms']:.2f}",
                ]
                for r in serve
            ],
        )
    for st in results.get("startup") or []:
        out += [
            "",
            f"## Start-up of {st['model']}, each in a fresh process (seconds; `start total` is everything "
            "after the import, which is shown apart: aioge's with every module a run needs)",
            "",
        ]
        rows = []
        for k in ("cold", "warm_kernel_cache", "graph_cache_save", "graph_cache_load"):
            s = st[k]
            rows.append(
                [
                    k,
                    f"{s['import_s']:.2f}" if "import_s" in s else "",
                    f"{s['load_s']:.3f}",
                    f"{s['compile_s']:.3f}",
                    f"{s['first_run_s']:.3f}",
                    f"{s['start_s']:.3f} ({s['start_cpu_s']:.3f})",
                    f"{s['kernels_compiled']} / {s['kernel_cache_hits']}",
                ]
            )
        o = st["ort"]
        rows.append(
            [
                "onnxruntime",
                f"{o['import_s']:.2f}",
                "",
                f"{o['create_s']:.3f}",
                f"{o['first_run_s']:.3f}",
                f"{o['start_s']:.3f} ({o['start_cpu_s']:.3f})",
                "",
            ]
        )
        out += _table(
            [
                "process",
                "import",
                "load_onnx",
                "compile / load / create",
                "first run",
                "start total (CPU)",
                "kernels compiled / cache hits",
            ],
            rows,
        )
        out += ["", f"Outputs agree across processes: {st['checksums_agree']}."]
    if results.get("states"):
        out += ["", "## Machine states (issue 42): each side alone, quiet and beside busy processes", ""]
        out += states_table(results["states"])
    if results.get("frontends"):
        out += ["", "## Front ends (issue 41): aioge.load_tf and aioge.torch.backend() beside TensorFlow and PyTorch", ""]
        out += frontends_table(results["frontends"])
    if results.get("precision"):
        out += ["", "## Precision modes (issue 39): GE's precision modes against onnxruntime float32", ""]
        out += precision_table(results["precision"])
    out += ["", f"Suite time: {results['seconds']:.0f} s.", ""]
    return "\n".join(out)


def write_results(results: dict[str, Any], out_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``RESULTS.md`` and ``results.json`` into ``out_dir`` (created if missing)."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    md, js = d / "RESULTS.md", d / "results.json"
    md.write_text(render_markdown(results))
    js.write_text(json.dumps(results, indent=1, default=float) + "\n")
    return md, js
