"""The machine-states section (issue 42): what a user with the machine to themselves sees, and
what a service sharing its machine sees.

Each side runs **alone in its own process** (``child.py`` with ``runs``): aioge loads the model
from the graph cache a first process compiled into, onnxruntime creates its session, each warms
up for ``WARM_S`` and times ``runs`` runs and more until ``budget_s`` seconds have passed, back
to back or ``pause_s`` apart (sporadic requests: each run starts with the side's threads asleep).
The processes alternate (aioge, ort, aioge, ...) ``rounds`` times (at least ``ROUNDS``), so drift
on a shared host hits both alike; nothing of one side (onnxruntime's spinning pool threads,
aioge's lanes) is alive while the other runs. A row's median is over all runs of its processes.

States: ``quiet`` (nothing started), ``busy1`` (one CPU-bound process started beside, a core's
worth of load), ``busy4`` (four: load about 4 on top of the 2 cores). The busy processes run
at the benchmark's own priority for the whole state and are killed after it. A row gives each
side's median and best run; ``vs_quiet`` is the row's aioge/ort ratio over the quiet one's.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

from aioge.benchmarks import measure

__all__ = ["STATES", "STATE_MODELS", "states", "states_table"]

STATES = {"quiet": 0, "busy1": 1, "busy4": 4}  # state -> CPU-bound processes started beside
STATE_MODELS = ("resnet18", "mobilenet_v3_small", "efficientnet_b0", "shufflenet_v2_x1_0", "bert_base")
WARM_S = 0.5
# Beside busy processes, where the scheduler puts a process's threads holds for much of its life
# (4 ms ticks: a 250 Hz kernel), so one process's runs go together: mobilenet_v3_small's (1.4 ms)
# per-process medians beside one spinner were 1.8 ms in some processes and 3.9-4.0 in others, both
# sides alike (onnxruntime's 1.7-8.4), and 3 processes of 20 runs (30 ms each) gave aioge/ort
# 1.0-2.8x its quiet ratio from one bench to the next. So each process times runs for at least
# BUDGET_S (some 125 ticks), and there are at least ROUNDS processes per side, state and model.
BUDGET_S = 0.5
ROUNDS = 6
_SPIN = "while True: pass"


def _side(mode: str, model: str, cache: str, runs: int, pause_s: float = 0.0, budget_s: float = 0.0) -> list[float]:
    spec = {
        "model": model,
        "runs": runs,
        "budget_s": budget_s,
        "pause_s": pause_s,
        "warm_s": WARM_S,
        "options": {"ge.graph_compiler_cache_dir": cache},
        "graph_options": {"ge.graph_key": os.path.basename(model).removesuffix(".onnx")},
    }
    return [float(t) for t in measure.fresh_process(mode, spec)["run_s"]]


def _row(model: str, state: str, samples: dict[str, list[float]]) -> dict[str, Any]:
    a, o = statistics.median(samples["aioge"]), statistics.median(samples["ort"])
    return {
        "model": model,
        "state": state,
        "busy_processes": STATES[state],
        "aioge_median_s": a,
        "aioge_best_s": min(samples["aioge"]),
        "ort_median_s": o,
        "ort_best_s": min(samples["ort"]),
        "ratio": a / o,
        "aioge_runs": len(samples["aioge"]),
        "ort_runs": len(samples["ort"]),
    }


def states(
    names: list[str],
    models: dict[str, str],
    *,
    busy_models: set[str] | None = None,
    rounds: int = 3,
    runs: int = 20,
    pause_s: float = 0.0,
    budget_s: float = BUDGET_S,
    progress: Callable[[str], None] = lambda s: None,
) -> dict[str, Any]:
    """Rows per model and state; ``models`` maps a name to its .onnx path (the busy states run
    those in ``busy_models`` only, where given). Each process times ``runs`` runs and on until
    ``budget_s`` seconds have passed; ``rounds`` processes per side."""
    unknown = sorted(set(names) - set(STATES))
    if unknown:
        raise ValueError(f"unknown machine states {unknown}; expected some of {list(STATES)}")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="aioge-states-") as cache:
        for path in models.values():  # compile once: every timed process loads from the graph cache
            _side("aioge", path, cache, 0)
        for state in names:
            busy = [subprocess.Popen([sys.executable, "-P", "-c", _SPIN]) for _ in range(STATES[state])]
            try:
                time.sleep(1.0 if busy else 0.0)  # the scheduler spreads them before the first timing
                for name, path in models.items():
                    if busy and busy_models is not None and name not in busy_models:
                        continue
                    samples: dict[str, list[float]] = {"aioge": [], "ort": []}
                    for _ in range(rounds):
                        for side in samples:
                            samples[side] += _side(side, path, cache, runs, pause_s, budget_s)
                    rows.append(_row(name, state, samples))
                    progress(f"states {name} {state}: aioge/ort {rows[-1]['ratio']:.2f}")
            finally:
                for p in busy:
                    p.kill()
                    p.wait()
    quiet = {r["model"]: r["ratio"] for r in rows if r["state"] == "quiet"}
    for r in rows:
        r["vs_quiet"] = r["ratio"] / quiet[r["model"]] if r["model"] in quiet else None
    return {"rows": rows, "rounds": rounds, "runs": runs, "pause_s": pause_s, "budget_s": budget_s}


def states_table(section: dict[str, Any]) -> list[str]:
    """The section's markdown lines."""
    pause = f" {section['pause_s'] * 1e3:.0f} ms apart" if section.get("pause_s") else " back to back"
    budget = f" (and on for {section['budget_s']:g} s)" if section.get("budget_s") else ""
    out = [
        f"Each side alone in its own process, processes alternating, {section['rounds']} rounds of "
        f"{section['runs']} runs{budget}{pause}, medians over all runs; busyN: N CPU-bound processes beside. Times in ms.",
        "",
        "| model | state | aioge median | aioge best | ort median | ort best | aioge/ort | x quiet ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in section["rows"]:
        vq = "" if r["vs_quiet"] is None else f"{r['vs_quiet']:.2f}"
        figures = [f"{r[k] * 1e3:.2f}" for k in ("aioge_median_s", "aioge_best_s", "ort_median_s", "ort_best_s")]
        out.append(f"| {r['model']} | {r['state']} | {' | '.join(figures)} | {r['ratio']:.2f} | {vq} |")
    return out
