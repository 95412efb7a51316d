"""Models the project has not tuned on, as a held-out checker would run them.

    python bench/heldout.py export [--out DIR]          # torch, seeded random weights, opset 17, batch 1
    chrt -f 1 python bench/heldout.py run [-n 40] [--models a,b] [--out DIR]

``export`` writes NAME.onnx and NAME.npz (``feed:input``, ``expected``) per model, the bench cache's
layout (torchvision models through ``real_models.export``, its batch-norm and classifier seeding),
so ``AIOGE_BENCH_MODELS=DIR python bench/ops_vs_ort.py NAME`` profiles them too. ``run`` loads each in
one process and alternates run by run an aioge ``run_graph`` and an onnxruntime (default options)
``run``, after warm-up; it prints the medians, their ratio, the max abs error against onnxruntime and
whether the argmax agrees.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

OUT = Path(tempfile.gettempdir(), "aioge-heldout")
TORCHVISION = {
    "mobilenet_v2": 224,
    "mnasnet1_0": 224,
    "regnet_y_400mf": 224,
    "resnet50": 224,
    "densenet121": 224,
    "googlenet": 224,
    "inception_v3": 299,
    "squeezenet1_1": 224,
    "efficientnet_b1": 240,
}
MODELS = (*TORCHVISION, "inception_blocks")


def _inception_blocks():  # type: ignore[no-untyped-def]
    """A small torch.nn net of Inception-style blocks: 1x1, 3x3, 5x5 and max-pool branches, concat,
    average pools between blocks, global average pool, linear."""
    import torch
    from torch import nn

    def cbr(i: int, o: int, k: int, s: int = 1) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(i, o, k, s, k // 2, bias=False), nn.BatchNorm2d(o), nn.ReLU())

    class Block(nn.Module):
        def __init__(self, i: int, o: int) -> None:
            super().__init__()
            q = o // 4
            self.b = nn.ModuleList(
                [
                    cbr(i, q, 1),
                    nn.Sequential(cbr(i, q, 1), cbr(q, q, 3)),
                    nn.Sequential(cbr(i, q // 2, 1), cbr(q // 2, q, 5)),
                    nn.Sequential(nn.MaxPool2d(3, 1, 1), cbr(i, q, 1)),
                ]
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cat([b(x) for b in self.b], 1)

    return nn.Sequential(
        cbr(3, 32, 3, 2),
        nn.MaxPool2d(3, 2, 1),
        Block(32, 64),
        Block(64, 128),
        nn.AvgPool2d(2),
        Block(128, 192),
        Block(192, 256),
        nn.AvgPool2d(2),
        Block(256, 384),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(384, 100),
    )


def export(out: Path) -> None:
    from aioge.benchmarks import real_models as rm

    out.mkdir(parents=True, exist_ok=True)
    for name, side in TORCHVISION.items():
        rm.REAL_RECIPES[name] = ("torchvision", (1, 3, side, side))
    orig = rm._torch_model

    def model_for(name: str):  # type: ignore[no-untyped-def]
        if name != "inception_blocks":
            return orig(name)
        import torch

        torch.manual_seed(0)
        return _inception_blocks().eval(), torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(2))

    rm._torch_model = model_for
    for name in MODELS:
        if not (out / f"{name}.onnx").exists():
            t = time.perf_counter()
            rm.export(name, str(out / f"{name}.onnx"))
            print(f"exported {name} in {time.perf_counter() - t:.1f} s", flush=True)


async def run(out: Path, names: list[str], n: int, block: int, spin: bool) -> None:
    import aioge
    from aioge.benchmarks.measure import ort_session

    cache = Path(tempfile.gettempdir(), "aioge-heldout-cache")
    for d in ("kc", "gc"):
        (cache / d).mkdir(parents=True, exist_ok=True)
    opts = {"ge.op_compiler_cache_dir": str(cache / "kc"), "ge.graph_compiler_cache_dir": str(cache / "gc")}
    print(f"load {os.getloadavg()[0]:.1f}; {n} runs each in blocks of {block} after 2 s warm-up, ort spin {spin}; ms", flush=True)
    print(f"{'model':18s} {'aioge':>8s} {'ort':>8s} {'ratio':>6s} {'max_abs_err':>11s} {'|ort|max':>8s} argmax")
    ratios = []
    async with aioge.Session(opts) as s:
        for gid, name in enumerate(names, 1):
            path = out / f"{name}.onnx"
            with np.load(path.with_suffix(".npz")) as z:
                feeds = {k[5:]: z[k] for k in z.files if k.startswith("feed:")}
            await s.add_graph(gid, aioge.load_onnx(str(path)), {"ge.graph_key": f"heldout-{name}"})
            sess = ort_session(str(path))
            if not spin:  # onnxruntime's pool threads sleep at once after a run, not spin on the second core
                sess = spinless(str(path))
            ref = sess.run(None, feeds)[0]
            got = np.asarray(next(iter((await s.run_graph(gid, feeds)).values())))
            err = float(np.abs(got.astype(np.float64) - ref).max())
            same = bool(np.argmax(got) == np.argmax(ref))
            end = time.perf_counter() + 2.0
            while time.perf_counter() < end:
                await s.run_graph(gid, feeds)
                sess.run(None, feeds)
            ta: list[float] = []
            to: list[float] = []
            for _ in range(0, n, block):  # block runs of one side, then of the other
                for _ in range(block):
                    t = time.perf_counter()
                    await s.run_graph(gid, feeds)
                    ta.append(time.perf_counter() - t)
                for _ in range(block):
                    t = time.perf_counter()
                    sess.run(None, feeds)
                    to.append(time.perf_counter() - t)
            a, o = statistics.median(ta) * 1e3, statistics.median(to) * 1e3
            ratios.append(a / o)
            print(f"{name:18s} {a:8.2f} {o:8.2f} {a / o:6.2f} {err:11.2e} {np.abs(ref).max():8.2f} {same}", flush=True)
            await s.remove_graph(gid)
    print(f"geomean {float(np.exp(np.mean(np.log(ratios)))):.3f}; load {os.getloadavg()[0]:.1f}")


def spinless(path: str):  # type: ignore[no-untyped-def]
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("export", "run"))
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--models", default=",".join(m for m in MODELS if m != "inception_v3"))
    ap.add_argument("-n", type=int, default=40)
    ap.add_argument("--block", type=int, default=1, help="runs of one side before the other's")
    ap.add_argument("--no-spin", action="store_true", help="onnxruntime with allow_spinning=0")
    a = ap.parse_args()
    if a.what == "export":
        export(a.out)
    else:
        asyncio.run(run(a.out, a.models.split(","), a.n, a.block, not a.no_spin))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
