"""Loading external weights (``ge.externalWeight=1``): private read + sha256 vs memory map + sha256.

    .venv/bin/python bench/bench_weight_load.py [--repeat 5]

Writes ResNet-50's parameter set (53 conv weights and biases with batch norm folded, the
fc layer: 25.6M float32, 102 MB, 108 files) as ``weight_<sha256>`` files, then loads the
whole set with the loader in ``aioge.plan.serialize`` (read into private memory, hashed
chunk by chunk as read) and with a memory map hashed after mapping (the loader before
issue 16: a file changed under it changed the model, a truncated one gave SIGBUS). Page
cache warm in both (the files were just written). Prints the medians and the RSS growth.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time

import numpy as np

from aioge.ir.desc import TensorDesc
from aioge.plan import serialize


def resnet50_shapes() -> list[tuple[int, ...]]:
    shapes: list[tuple[int, ...]] = [(64, 3, 7, 7), (64,)]
    cin = 64
    for blocks, mid in zip((3, 4, 6, 3), (64, 128, 256, 512)):
        for b in range(blocks):
            for cout, ci, k in ((mid, cin, 1), (mid, mid, 3), (mid * 4, mid, 1)):
                shapes += [(cout, ci, k, k), (cout,)]
            if b == 0:
                shapes += [(mid * 4, cin, 1, 1), (mid * 4,)]
            cin = mid * 4
    return shapes + [(1000, 2048), (1000,)]


def mapped(path: str, desc: TensorDesc, digest: str) -> np.ndarray:
    array = np.memmap(path, dtype=desc.dtype, mode="r", shape=desc.shape)
    if hashlib.sha256(array.reshape(-1).view(np.uint8)).hexdigest() != digest:
        raise ValueError("checksum")
    return array


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as d:
        refs = []
        for shape in resnet50_shapes():
            a = rng.standard_normal(shape, dtype=np.float32)
            digest = hashlib.sha256(a.tobytes()).hexdigest()
            with open(os.path.join(d, f"weight_{digest}"), "wb") as f:
                f.write(a.tobytes())
            refs.append(([f"weight_{digest}", digest, a.nbytes], TensorDesc(shape, "float32")))
        total = sum(r[0][2] for r in refs)
        print(f"{len(refs)} weight files, {sum(np.prod(r[1].shape) for r in refs) / 1e6:.1f}M parameters, {total / 1e6:.1f} MB")
        times: dict[str, list[float]] = {"private read (now)": [], "memory map (before)": []}
        for _ in range(args.repeat):
            t = time.perf_counter()
            kept = [serialize._load_weight(ref, desc, d, True, "w") for ref, desc in refs]
            times["private read (now)"].append(time.perf_counter() - t)
            del kept
            t = time.perf_counter()
            kept = [mapped(os.path.join(d, ref[0]), desc, ref[1]) for ref, desc in refs]
            times["memory map (before)"].append(time.perf_counter() - t)
            del kept
        for name, ts in times.items():
            print(
                f"{name:22s} median {1e3 * statistics.median(ts):7.1f} ms  ({total / statistics.median(ts) / 1e9:.2f} GB/s), "
                f"min {1e3 * min(ts):7.1f} ms"
            )
        for name, load in (
            ("private read (now)", lambda ref, desc: serialize._load_weight(ref, desc, d, True, "w")),
            ("memory map (before)", lambda ref, desc: mapped(os.path.join(d, ref[0]), desc, ref[1])),
        ):
            before = _rss()
            kept = [load(ref, desc) for ref, desc in refs]
            print(
                f"{name:22s} RSS +{(_rss() - before) / 1e6:.0f} MB while the weights are held"
                f"{' (file pages, shared with the page cache)' if 'map' in name else ' (private)'}"
            )
            del kept


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


if __name__ == "__main__":
    main()
