"""Cold start: a fresh process until the first inference is done, aioge vs onnxruntime.

    .venv/bin/python bench/bench_cold_start.py [squeezenet resnet50 ...]   (light/ model names)

Each figure is one fresh child process with an empty kernel cache: ``import`` is the import
of the library, ``ready`` the time from then to the first run's outputs. aioge is measured
three ways: from the ONNX file (load, compile with ``aioge.tune_mode`` heuristic or tune,
run) and from an ``.om`` that ``aioge compile`` wrote beforehand (load, bind, run), which is
what a service should start from. onnxruntime: ``InferenceSession`` and one run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import onnx

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
kind, path, mode, cache = sys.argv[1:5]
import numpy as np
if kind == "ort":
    import onnxruntime as ort
else:
    import anyio, aioge
t1 = time.perf_counter()

def zeros(shape):
    return np.zeros([d if isinstance(d, int) else 1 for d in shape], np.float32)

if kind == "ort":
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (i,) = s.get_inputs()
    s.run(None, {i.name: zeros(i.shape)})
else:
    async def go():
        async with aioge.Session({"aioge.tune_mode": mode or "tune", "ge.op_compiler_cache_dir": cache}) as s:
            if kind == "om":
                gid = await s.load_model(path)
            else:
                gid = 1
                await s.add_graph(gid, aioge.load_onnx(path))
            (v,) = s.get_inputs(gid)
            await s.run_graph(gid, {v.name: zeros(v.shape)})
    anyio.run(go)
print(json.dumps({"import_s": round(t1 - t0, 3), "ready_s": round(time.perf_counter() - t1, 3)}))
"""


def _child(kind: str, path: str, mode: str, cache: str) -> dict[str, float]:
    r = subprocess.run(
        [sys.executable, "-P", "-c", CHILD, kind, path, mode, cache], capture_output=True, text=True, timeout=900, check=True
    )
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    names = sys.argv[1:] or ["squeezenet", "resnet50"]
    print("| model | how | import s | ready s |\n|---|---|---|---|")
    for name in names:
        path = os.path.join(LIGHT, f"light_{name}.onnx")
        with tempfile.TemporaryDirectory() as work:
            os.chmod(work, 0o700)
            om = os.path.join(work, "m.om")
            subprocess.run(
                [
                    sys.executable,
                    "-P",
                    "-m",
                    "aioge",
                    "compile",
                    path,
                    "-o",
                    om,
                    "-q",
                    "--option",
                    "aioge.tune_mode=tune",
                    "--option",
                    "ge.op_compiler_cache_mode=disable",
                ],
                check=True,
                capture_output=True,
            )
            runs = [
                ("onnxruntime InferenceSession", "ort", path, ""),
                ("aioge, ONNX, heuristic", "onnx", path, "heuristic"),
                ("aioge, ONNX, tune", "onnx", path, "tune"),
                ("aioge, .om (aioge compile)", "om", om, ""),
            ]
            for label, kind, src, mode in runs:
                with tempfile.TemporaryDirectory() as cache:
                    os.chmod(cache, 0o700)
                    r = _child(kind, src, mode, cache)
                print(f"| {name} | {label} | {r['import_s']:.2f} | {r['ready_s']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
