"""torch.compile's compile time, aioge beside inductor, as a user sees it: each compile in a fresh
process of its own, cold and warm caches apart, the sides' order alternating round by round
(``aioge.benchmarks.frontends.fresh_compiles``; the ``aioge bench --frontends torch`` table shows
the same figures). From the repository root:

    python bench/bench_torch_compile.py bert,gpt2,resnet18 3 [other_src ...]

Per model and round: aioge with this checkout's ``src`` (and with each ``other_src``, e.g. main's,
to compare) and inductor, each "cold" (empty caches: aioge's ``ge.graph_compiler_cache_dir`` and
``ASCEND_CACHE_PATH``, inductor's ``TORCHINDUCTOR_CACHE_DIR``) and "warm" (a second process on the
caches the cold one filled). A figure runs from torch and the model loaded to the first output of
``torch.compile(model)`` under ``no_grad`` (aioge: ``import aioge.torch`` and ``backend()``
included; inductor: its lazy imports), wall and CPU seconds (every thread and reaped child
process). Prints the medians over rounds and the load.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
from aioge.benchmarks.frontends import fresh_compiles  # noqa: E402


def main(names: list[str], rounds: int, others: list[str]) -> None:
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    sides = {f"aioge {src}": ("aioge", os.path.abspath(src)) for src in [here, *others]} | {"inductor": ("inductor", here)}
    for name in names:
        load = open("/proc/loadavg").read().split()[:3]
        got = fresh_compiles(name, rounds, sides)
        print(name, "load before", load, "after", open("/proc/loadavg").read().split()[:3], time.strftime("%H:%M:%S"))
        for label in sides:
            if f"{label}_compile_error" in got:
                print(f"   {label:28s} failed: {got[f'{label}_compile_error']}")
                continue
            for state in ("cold", "warm"):
                k = f"{label}_compile_{state}"
                print(f"   {label:28s} {state}  compile wall {got[k + '_s']:6.2f} s cpu {got[k + '_cpu_s']:6.2f} s")


if __name__ == "__main__":
    main(sys.argv[1].split(","), int(sys.argv[2]) if len(sys.argv) > 2 else 3, sys.argv[3:])
